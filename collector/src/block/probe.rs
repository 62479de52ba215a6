//! Reading the block probes' in-kernel aggregates.
use std::collections::BTreeMap;

use aya::maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap};

use collector_common::block::{
    AggSlot, BlockKey, BlockStats, InflightKey, InflightVal, RqInflight, RqSlot, AGG_SLOTS,
};

use super::window::BlockSnapshot;
use crate::probes::{mmap_array::MmapArray, BlockAttach, ProbeError, Probes};

impl Probes {
    /// Cumulative block totals per (dev, op, cgroup) and in-flight requests
    /// per device, as the kernel holds them now.
    pub fn block_snapshot(&self) -> Result<BlockSnapshot, ProbeError> {
        let agg_map = self
            .ebpf()
            .map("BLOCK_AGG")
            .ok_or(ProbeError::MissingMap("BLOCK_AGG"))?;
        let agg = PerCpuHashMap::<&MapData, BlockKey, BlockStats>::try_from(agg_map).map_err(
            |source| ProbeError::Map {
                name: "BLOCK_AGG",
                source,
            },
        )?;
        let mut stats = BTreeMap::new();
        for entry in agg.iter() {
            // An entry deleted between key and value lookup is skipped by the
            // iterator; other errors are real.
            let (k, per_cpu) = entry.map_err(|source| ProbeError::Map {
                name: "BLOCK_AGG",
                source,
            })?;
            let t = stats.entry(k).or_insert(BlockStats::ZERO);
            for c in per_cpu.iter() {
                t.merge(c);
            }
        }
        // The keys that own a slot on some CPU: summed over the CPUs.
        let name = "BLOCK_AGG_SLOTS";
        let slots_map = self.ebpf().map(name).ok_or(ProbeError::MissingMap(name))?;
        let slots = PerCpuArray::<&MapData, AggSlot>::try_from(slots_map)
            .map_err(|source| ProbeError::Map { name, source })?;
        for i in 0..AGG_SLOTS {
            let per_cpu = slots
                .get(&i, 0)
                .map_err(|source| ProbeError::Map { name, source })?;
            for s in per_cpu.iter().filter(|s| s.used != 0) {
                stats
                    .entry(s.key)
                    .or_insert(BlockStats::ZERO)
                    .merge(&s.stats);
            }
        }
        // In-flight depth per device: the requests between start and done.
        let mut inflight: BTreeMap<u32, u64> = BTreeMap::new();
        if self.block_attach() == BlockAttach::Btf {
            count_slots(&self.rq_slots, &mut inflight);
            let map = self
                .ebpf()
                .map("BLOCK_INFLIGHT_RQ")
                .ok_or(ProbeError::MissingMap("BLOCK_INFLIGHT_RQ"))?;
            let inf = HashMap::<&MapData, u64, RqInflight>::try_from(map).map_err(|source| {
                ProbeError::Map {
                    name: "BLOCK_INFLIGHT_RQ",
                    source,
                }
            })?;
            for entry in inf.iter() {
                let (_, v) = entry.map_err(|source| ProbeError::Map {
                    name: "BLOCK_INFLIGHT_RQ",
                    source,
                })?;
                *inflight.entry(v.dev).or_default() += 1;
            }
            return Ok(BlockSnapshot {
                taken: std::time::Instant::now(),
                stats,
                inflight,
            });
        }
        let inf_map = self
            .ebpf()
            .map("BLOCK_INFLIGHT")
            .ok_or(ProbeError::MissingMap("BLOCK_INFLIGHT"))?;
        let inf =
            HashMap::<&MapData, InflightKey, InflightVal>::try_from(inf_map).map_err(|source| {
                ProbeError::Map {
                    name: "BLOCK_INFLIGHT",
                    source,
                }
            })?;
        for key in inf.keys() {
            let k = key.map_err(|source| ProbeError::Map {
                name: "BLOCK_INFLIGHT",
                source,
            })?;
            *inflight.entry(k.dev).or_default() += 1;
        }
        Ok(BlockSnapshot {
            taken: std::time::Instant::now(),
            stats,
            inflight,
        })
    }
}

/// Adds the occupied slots of the BTF probes' in-flight table to
/// `inflight` per device. The array is `BPF_F_MMAPABLE`: mapped once at
/// load, read-only, and read with a pass over memory, not a lookup syscall per slot (65,536 of
/// them each window). A slot being rewritten while it is read may count
/// under its previous device: a gauge, off by one for that instant.
fn count_slots(slots: &MmapArray<RqSlot>, inflight: &mut BTreeMap<u32, u64>) {
    for i in 0..slots.len() {
        if let Some(s) = slots.get(i) {
            if s.rq != 0 {
                *inflight.entry(s.rec.dev).or_default() += 1;
            }
        }
    }
}

/// One sampled block request from the `BLOCK_EVENTS` ring (written only
/// when `[block] sample_every` > 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSample {
    pub ts_ns: u64,
    pub pid: u32,
    pub cgroup_id: u64,
    pub data: collector_common::block::BlockRequestData,
}

impl crate::probes::ring::Decode for BlockSample {
    const RING: &'static str = "BLOCK_EVENTS";
    const LABEL: &'static str = "block";
    fn decode(bytes: &[u8]) -> Option<Self> {
        let ev = crate::probes::ring::read_event::<collector_common::block::BlockRequestData>(
            bytes,
            collector_common::EventKind::BlockRequest,
        )?;
        Some(Self {
            ts_ns: ev.header.ts_ns,
            pid: ev.header.pid,
            cgroup_id: ev.header.cgroup_id,
            data: ev.data,
        })
    }
}

impl std::fmt::Display for BlockSample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.data;
        write!(
            f,
            "block sample dev={}:{} op={} sector={} bytes={} latency_us={:.1} pid={} cgroup={}",
            d.dev >> 20,
            d.dev & 0xfffff,
            d.op,
            d.sector,
            d.bytes,
            d.latency_ns as f64 / 1e3,
            self.pid,
            self.cgroup_id
        )
    }
}
