//! Reading the NCCL probes' maps (ops, each communicator's collectives with
//! their sequence ring, communicators) and pruning the entries of
//! processes that exited.
use aya::maps::{Array, HashMap, MapData};
use collector_common::{
    cuda::HandleKey,
    nccl::{fast, CommInfo, CommStats, FastSlot, OpKey, OpStats},
};

use super::NcclMaps;
use crate::probes::{ProbeError, Probes};

impl Probes {
    /// The NCCL maps as they are now (cumulative). Read in the order a
    /// rank writes them backwards: its ops and collectives (each
    /// communicator's per-op counts and sequence ring in one value, in the
    /// `NCCL_FAST` table or the `NCCL_COLL` map), then the communicators.
    /// A rank writes its communicator at init, before any op on it, so
    /// every op read here has its communicator in the later read (reading
    /// communicators first, a rank that initialised and issued ops between
    /// the two reads showed up for one window under a handle id,
    /// `h:<pid>:<handle>`, beside its real communicator).
    pub fn nccl_maps(&self) -> Result<NcclMaps, ProbeError> {
        let err = |name| move |source| ProbeError::Map { name, source };
        let mut out = NcclMaps::default();
        let m = self
            .ebpf()
            .map("NCCL_OPS")
            .ok_or(ProbeError::MissingMap("NCCL_OPS"))?;
        let h = HashMap::<&MapData, OpKey, OpStats>::try_from(m).map_err(err("NCCL_OPS"))?;
        for e in h.iter() {
            let (k, v) = e.map_err(err("NCCL_OPS"))?;
            out.ops.insert(k, v);
        }
        let m = self
            .ebpf()
            .map("NCCL_FAST")
            .ok_or(ProbeError::MissingMap("NCCL_FAST"))?;
        let a = Array::<&MapData, FastSlot>::try_from(m).map_err(err("NCCL_FAST"))?;
        for e in a.iter() {
            let s = e.map_err(err("NCCL_FAST"))?;
            if s.state == fast::HELD {
                out.add_comm_stats(s.pid, s.comm, &s.stats);
            }
        }
        let m = self
            .ebpf()
            .map("NCCL_COLL")
            .ok_or(ProbeError::MissingMap("NCCL_COLL"))?;
        let h = HashMap::<&MapData, HandleKey, CommStats>::try_from(m).map_err(err("NCCL_COLL"))?;
        for e in h.iter() {
            let (k, v) = e.map_err(err("NCCL_COLL"))?;
            out.add_comm_stats(k.pid, k.handle, &v);
        }
        let m = self
            .ebpf()
            .map("NCCL_COMMS")
            .ok_or(ProbeError::MissingMap("NCCL_COMMS"))?;
        let h = HashMap::<&MapData, HandleKey, CommInfo>::try_from(m).map_err(err("NCCL_COMMS"))?;
        for e in h.iter() {
            let (k, v) = e.map_err(err("NCCL_COMMS"))?;
            out.comms.insert((k.pid, k.handle), v);
        }
        Ok(out)
    }

    /// Removes the NCCL entries of processes that exited; returns how many.
    pub fn nccl_prune(
        &mut self,
        dead: &std::collections::BTreeSet<u32>,
    ) -> Result<u64, ProbeError> {
        if dead.is_empty() {
            return Ok(0);
        }
        Ok(
            crate::probes::prune_hash::<HandleKey, CommInfo>(self, "NCCL_COMMS", dead, |k| k.pid)?
                + crate::probes::prune_hash::<OpKey, OpStats>(self, "NCCL_OPS", dead, |k| k.pid)?
                + crate::probes::prune_hash::<HandleKey, CommStats>(
                    self,
                    "NCCL_COLL",
                    dead,
                    |k| k.pid,
                )?
                + self.nccl_free_slots(dead)?,
        )
    }

    /// Frees the `NCCL_FAST` slots held by processes that exited (zeroed:
    /// the next claim starts from empty stats).
    fn nccl_free_slots(
        &mut self,
        dead: &std::collections::BTreeSet<u32>,
    ) -> Result<u64, ProbeError> {
        let name = "NCCL_FAST";
        let err = |source| ProbeError::Map { name, source };
        let m = self
            .ebpf_mut()
            .map_mut(name)
            .ok_or(ProbeError::MissingMap(name))?;
        let mut a = Array::<&mut MapData, FastSlot>::try_from(m).map_err(err)?;
        let held: Vec<u32> = (0..fast::SLOTS)
            .filter(|&i| {
                a.get(&i, 0)
                    .is_ok_and(|s| s.state == fast::HELD && dead.contains(&s.pid))
            })
            .collect();
        for &i in &held {
            a.set(i, FastSlot::default(), 0).map_err(err)?;
        }
        Ok(held.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use collector_common::nccl::{layout, op};

    use crate::probes::nccl::NCCL_APIS;

    /// Each collective, point-to-point, group and lifecycle API is attached
    /// to its op's own program, whose built-in layout is the one its
    /// cookie states.
    #[test]
    fn every_call_api_has_its_ops_program_and_layout() {
        let mut calls = 0;
        for api in NCCL_APIS
            .iter()
            .filter(|a| a.ret.is_none() && a.entry != "nccl_comm_end")
        {
            let (o, l) = (
                (api.cookie & 0xff) as u32,
                ((api.cookie >> 8) & 0xff) as u32,
            );
            assert_eq!(api.entry, op::program(o), "{}", api.status);
            assert_ne!(api.entry, "nccl_call", "{}", api.status);
            assert_eq!(layout::of_op(o), l, "{}", api.status);
            calls += 1;
        }
        assert!(calls >= 20, "{calls} call APIs");
    }
}
