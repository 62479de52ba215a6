//! Building the wire `Window` from one window of every source.
use std::collections::BTreeMap;

use collector_common::cuda::call;
use proto::v1 as pb;

#[cfg(feature = "nvml")]
use crate::nvml;
use crate::{cuda::CudaSnapshot, identity::IdentityCache};

#[cfg(feature = "nvml")]
pub fn gpus(info: &[nvml::GpuInfo], samples: &[nvml::GpuSample]) -> Vec<pb::GpuSample> {
    samples
        .iter()
        .map(|s| {
            let g = info.iter().find(|g| g.index == s.index);
            pb::GpuSample {
                index: s.index,
                uuid: g.map(|g| g.uuid.clone()).unwrap_or_default(),
                pci_bus_id: g.map(|g| g.pci_bus_id.clone()).unwrap_or_default(),
                lost: s.lost,
                power_w: s.power_w,
                power_limit_w: s.power_limit_w,
                temp_c: s.temp_c,
                sm_clock_mhz: s.sm_clock_mhz,
                sm_clock_max_mhz: s.sm_clock_max_mhz,
                throttle_reasons: s.throttle,
                ecc_sbe_volatile: s.ecc_sbe_volatile,
                ecc_dbe_volatile: s.ecc_dbe_volatile,
                util_gpu_pct: s.util_gpu_pct,
                nvlink: s
                    .nvlink
                    .iter()
                    .map(|l| pb::NvLinkCounters {
                        link: l.link,
                        replay: l.replay,
                        recovery: l.recovery,
                        crc_flit: l.crc_flit,
                        crc_data: l.crc_data,
                    })
                    .collect(),
                remapped_rows_corr: s.remapped_rows_corr,
                remapped_rows_unc: s.remapped_rows_unc,
                remap_pending: s.remap_pending,
                remap_failure: s.remap_failure.map(|f| f != 0),
            }
        })
        .collect()
}

/// Per (pid, device) CUDA activity between two snapshots.
pub fn cuda(prev: &CudaSnapshot, cur: &CudaSnapshot, ids: &mut IdentityCache) -> Vec<pb::CudaProc> {
    let mut by: BTreeMap<(u32, i32), pb::CudaProc> = BTreeMap::new();
    for (k, v) in &cur.launches {
        let n = v
            .launches
            .saturating_sub(prev.launches.get(k).map_or(0, |p| p.launches));
        if n > 0 {
            by.entry((k.pid, k.device)).or_default().launches += n;
        }
    }
    for (k, v) in &cur.calls {
        let p = prev.calls.get(k);
        let calls = v.calls.saturating_sub(p.map_or(0, |p| p.calls));
        if calls == 0 {
            continue;
        }
        let e = by.entry((k.pid, k.device)).or_default();
        e.errors += v.errors.saturating_sub(p.map_or(0, |p| p.errors));
        match k.kind {
            call::STREAM_SYNC | call::CTX_SYNC | call::EVENT_SYNC => {
                e.sync_calls += calls;
                e.sync_wait_ns += v.dur_sum_ns.saturating_sub(p.map_or(0, |p| p.dur_sum_ns));
            }
            kind if call::is_copy(kind) => {
                e.copy_bytes += v.bytes.saturating_sub(p.map_or(0, |p| p.bytes));
            }
            _ => {}
        }
    }
    by.into_iter()
        .map(|((pid, device), mut c)| {
            c.pid = pid;
            c.device = device;
            if cur.launch_fraction < 1.0 && c.launches > 0 {
                c.launches_sampled_fraction = cur.launch_fraction;
            }
            if let Some(id) = ids.get(pid) {
                c.job = id.job().unwrap_or_default();
                c.rank = id.rank();
            }
            c
        })
        .collect()
}

pub use vocab::time::unix_ms;
