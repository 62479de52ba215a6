//! Reading the CUDA probes' in-kernel aggregates and kernel names.
use std::collections::BTreeMap;

use aya::maps::{HashMap, MapData, PerCpuHashMap};
use collector_common::cuda::{
    CallKey, CallStats, HandleKey, KernelName, LaunchKey, LaunchSlot, LaunchStats,
};

use super::CudaSnapshot;
use crate::probes::{ProbeError, Probes};

fn map<'a, K: aya::Pod, V: aya::Pod>(
    p: &'a Probes,
    name: &'static str,
) -> Result<HashMap<&'a MapData, K, V>, ProbeError> {
    let m = p.ebpf().map(name).ok_or(ProbeError::MissingMap(name))?;
    HashMap::try_from(m).map_err(|source| ProbeError::Map { name, source })
}

/// One key's launch totals summed over its per-CPU values and slots.
/// `last_*` come from the value with the most launches (the latest launch is
/// not ordered across CPUs).
#[derive(Default)]
struct LaunchSum {
    total: LaunchStats,
    best: u64,
}

impl LaunchSum {
    fn add(&mut self, v: &LaunchStats) {
        super::add_launches(&mut self.total, v);
        if v.launches > self.best {
            self.best = v.launches;
            self.total.last_grid = v.last_grid;
            self.total.last_block = v.last_block;
        }
    }
}

impl Probes {
    /// The claimed launch slots of every CPU, copied out of the mapping. A
    /// slot the kernel is updating while it is read may show a launch's
    /// counts partly (they are cumulative: the next read has all of it).
    pub(crate) fn launch_slot_values(&self) -> impl Iterator<Item = LaunchSlot> + '_ {
        (0..self.launch_slots.len())
            .filter_map(|i| self.launch_slots.get(i))
            .filter(|s| s.key.pid != 0)
    }

    /// The keys holding a launch slot now, one entry per slot (a key that
    /// launched on several CPUs holds one on each).
    pub fn launch_slot_keys(&self) -> Vec<LaunchKey> {
        self.launch_slot_values().map(|s| s.key).collect()
    }

    /// Raw cumulative launch counters per key, as the kernel counted them
    /// (not scaled): the per-CPU hash values and the slots, summed.
    pub(crate) fn raw_launches(&self) -> Result<BTreeMap<LaunchKey, LaunchStats>, ProbeError> {
        let name = "CUDA_LAUNCH_AGG";
        let m = self.ebpf().map(name).ok_or(ProbeError::MissingMap(name))?;
        let h = PerCpuHashMap::<&MapData, LaunchKey, LaunchStats>::try_from(m)
            .map_err(|source| ProbeError::Map { name, source })?;
        let mut sums: BTreeMap<LaunchKey, LaunchSum> = BTreeMap::new();
        for e in h.iter() {
            let (k, per_cpu) = e.map_err(|source| ProbeError::Map { name, source })?;
            let sum = sums.entry(k).or_default();
            for v in per_cpu.iter() {
                sum.add(v);
            }
        }
        for s in self.launch_slot_values() {
            sums.entry(s.key).or_default().add(&s.stats);
        }
        Ok(sums.into_iter().map(|(k, s)| (k, s.total)).collect())
    }

    /// Cumulative CUDA aggregates, with each launched function's name joined
    /// from the name map (`None` when its `cuModuleGetFunction` was not seen).
    pub fn cuda_snapshot(&self) -> Result<CudaSnapshot, ProbeError> {
        let mut launches = self.raw_launches()?;
        let calls_map = map::<CallKey, CallStats>(self, "CUDA_CALL_AGG")?;
        let names_map = map::<HandleKey, KernelName>(self, "CUDA_FUNC_NAMES")?;
        let err = |name| move |source| ProbeError::Map { name, source };
        let mut names = BTreeMap::new();
        for k in launches.keys() {
            let hk = HandleKey {
                pid: k.pid,
                _pad: 0,
                handle: k.func,
            };
            if let Ok(n) = names_map.get(&hk, 0) {
                names.insert((k.pid, k.func), super::name_str(&n.name));
            }
        }
        let mut calls = BTreeMap::new();
        for e in calls_map.iter() {
            let (k, v) = e.map_err(err("CUDA_CALL_AGG"))?;
            calls.insert(k, v);
        }
        let taken = std::time::Instant::now();
        let launch_fraction = self.scale_launches(&mut launches);
        Ok(CudaSnapshot {
            taken,
            launches,
            calls,
            names,
            launch_fraction,
        })
    }
}

/// One record of the optional CUDA per-event stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaEvent {
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub cgroup_id: u64,
    pub data: collector_common::cuda::CudaEventData,
}

impl crate::probes::ring::Decode for CudaEvent {
    const RING: &'static str = "CUDA_EVENTS";
    const LABEL: &'static str = "cuda";
    fn decode(bytes: &[u8]) -> Option<Self> {
        let ev = crate::probes::ring::read_event::<collector_common::cuda::CudaEventData>(
            bytes,
            collector_common::EventKind::Cuda,
        )?;
        Some(Self {
            ts_ns: ev.header.ts_ns,
            pid: ev.header.pid,
            tid: ev.header.tid,
            cgroup_id: ev.header.cgroup_id,
            data: ev.data,
        })
    }
}

impl Probes {
    /// Removes the CUDA aggregates and kernel names of processes that
    /// exited (the maps are not LRU: entries of dead pids would fill them).
    /// Returns the entries removed.
    pub fn cuda_prune(
        &mut self,
        dead: &std::collections::BTreeSet<u32>,
    ) -> Result<u64, ProbeError> {
        if dead.is_empty() {
            return Ok(0);
        }
        let mut removed = 0u64;
        let err = |name| move |source| ProbeError::Map { name, source };
        {
            let m = self
                .ebpf_mut()
                .map_mut("CUDA_LAUNCH_AGG")
                .ok_or(ProbeError::MissingMap("CUDA_LAUNCH_AGG"))?;
            let mut h = PerCpuHashMap::<&mut MapData, LaunchKey, LaunchStats>::try_from(m)
                .map_err(err("CUDA_LAUNCH_AGG"))?;
            let keys: Vec<LaunchKey> = h
                .keys()
                .flatten()
                .filter(|k| dead.contains(&k.pid))
                .collect();
            for k in keys {
                removed += u64::from(h.remove(&k).is_ok());
            }
        }
        removed += self.free_launch_slots(dead);
        removed +=
            crate::probes::prune_hash::<CallKey, CallStats>(self, "CUDA_CALL_AGG", dead, |k| {
                k.pid
            })?;
        removed += crate::probes::prune_hash::<HandleKey, KernelName>(
            self,
            "CUDA_FUNC_NAMES",
            dead,
            |k| k.pid,
        )?;
        Ok(removed)
    }
}

impl Probes {
    /// Frees the launch slots of processes in `dead`: counters zeroed
    /// first, then the key, so a launch that claims the slot once it is free
    /// starts from zero. No program writes a dead process's slot, and none
    /// claims it before its key is cleared. Returns the slots freed.
    fn free_launch_slots(&self, dead: &std::collections::BTreeSet<u32>) -> u64 {
        let mut freed = 0;
        for i in 0..self.launch_slots.len() {
            let Some(s) = self.launch_slots.get(i) else {
                continue;
            };
            if s.key.pid == 0 || !dead.contains(&s.key.pid) {
                continue;
            }
            if let Some(p) = self.launch_slots.ptr(i) {
                // SAFETY: a pointer into the writable mapping; fields written
                // volatile, in order (x86-64 keeps store order; the fence keeps
                // the compiler from reordering them).
                unsafe {
                    std::ptr::write_volatile(&raw mut (*p).stats, LaunchStats::default());
                    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
                    std::ptr::write_volatile(&raw mut (*p).key, LaunchKey::default());
                }
                freed += 1;
            }
        }
        freed
    }
}

impl std::fmt::Display for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.data;
        write!(
            f,
            "cuda event pid={} tid={} call={} device={} func={:#x} bytes={} dur_us={:.1} result={}",
            self.pid,
            self.tid,
            d.kind,
            d.device,
            d.func,
            d.bytes,
            d.dur_ns as f64 / 1e3,
            d.result
        )
    }
}

/// A CUDA driver call between its entry and return (the probes'
/// `CUDA_IN_CALL` map, timed calls only): which thread, which call kind
/// (`collector_common::cuda::call`), and since when (`bpf_ktime_get_ns`,
/// `CLOCK_MONOTONIC`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    pub pid: u32,
    pub tid: u32,
    pub kind: u32,
    pub start_ns: u64,
}

/// The slot of timed driver calls in `CUDA_IN_CALL`'s `[pid_tgid, slot]`
/// keys (the eBPF crate's `SLOT_CALL`); the other slots hold the probes'
/// own helper calls (names, contexts), which are not the application's.
const IN_CALL_SLOT_CALL: u64 = 0;

impl Probes {
    /// The driver calls threads are inside now, at most `max` map entries
    /// read; `true` when the map held more (the rest unread this time).
    pub fn cuda_in_flight(&self, max: usize) -> Result<(Vec<InFlight>, bool), ProbeError> {
        let m = map::<[u64; 2], collector_common::cuda::InCall>(self, "CUDA_IN_CALL")?;
        let mut out = Vec::new();
        for (i, e) in m.iter().enumerate() {
            if i >= max {
                return Ok((out, true));
            }
            // An entry removed between its key and its value: that call returned.
            let Ok((k, v)) = e else { continue };
            if k[1] != IN_CALL_SLOT_CALL {
                continue;
            }
            out.push(InFlight {
                pid: (k[0] >> 32) as u32,
                tid: k[0] as u32,
                kind: v.kind,
                start_ns: v.start_ns,
            });
        }
        Ok((out, false))
    }

    /// Removes the in-flight call records of processes that exited (killed
    /// inside a call, their return never came); returns how many.
    pub fn cuda_in_flight_prune(
        &mut self,
        dead: &std::collections::BTreeSet<u32>,
    ) -> Result<u64, ProbeError> {
        if dead.is_empty() {
            return Ok(0);
        }
        crate::probes::prune_hash::<[u64; 2], collector_common::cuda::InCall>(
            self,
            "CUDA_IN_CALL",
            dead,
            |k| (k[0] >> 32) as u32,
        )
    }
}
