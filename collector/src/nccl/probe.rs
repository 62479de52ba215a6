//! Reading the NCCL probes' maps (ops, sequence rings, communicators) and
//! pruning the entries of processes that exited.
use aya::maps::{HashMap, MapData};
use collector_common::{
    cuda::HandleKey,
    nccl::{CommInfo, OpKey, OpStats, SeqRing},
};

use super::NcclMaps;
use crate::probes::{ProbeError, Probes};

impl Probes {
    /// The NCCL maps as they are now (cumulative). Read in the order a
    /// rank writes them backwards: its ops and sequence rings, then the
    /// communicators. A rank writes its communicator at init, before any
    /// op on it, so every op read here has its communicator in the later
    /// read (reading communicators first, a rank that initialised and
    /// issued ops between the two reads showed up for one window under a
    /// handle id, `h:<pid>:<handle>`, beside its real communicator).
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
            .map("NCCL_SEQ")
            .ok_or(ProbeError::MissingMap("NCCL_SEQ"))?;
        let h = HashMap::<&MapData, HandleKey, SeqRing>::try_from(m).map_err(err("NCCL_SEQ"))?;
        for e in h.iter() {
            let (k, v) = e.map_err(err("NCCL_SEQ"))?;
            out.seqs.insert((k.pid, k.handle), v);
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
                + crate::probes::prune_hash::<HandleKey, SeqRing>(self, "NCCL_SEQ", dead, |k| {
                    k.pid
                })?,
        )
    }
}
