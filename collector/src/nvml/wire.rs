//! The window's `GpuSample` rows from NVML's samples, each with its GPU's
//! identity.
use proto::v1 as pb;

use super::{GpuInfo, GpuSample};

/// One row per sample (lost GPUs included).
pub fn gpus(info: &[GpuInfo], samples: &[GpuSample]) -> Vec<pb::GpuSample> {
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
