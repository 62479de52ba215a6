//! Prometheus text for the GPUs: faultline's families (`faultline_gpu_`
//! prefix, base units) and, in compatibility mode, dcgm-exporter's
//! (`DCGM_FI_DEV_*`, its names, labels and units: [`super::dcgm`]).
use std::collections::BTreeMap;

use super::{export::Export, GpuInfo, GpuSample, THROTTLE_FLAGS};
use crate::prom_text::Text;

mod families;
pub use families::*;

/// faultline's GPU families only, without workload labels.
pub fn render_prometheus(
    gpus: &[GpuInfo],
    samples: &[GpuSample],
    xids: &BTreeMap<(u32, u64), u64>,
) -> String {
    render_with(gpus, samples, xids, &Export::default())
}

/// faultline's GPU families with the workload labels, and dcgm-exporter's
/// when `ex.dcgm_compat`, through the one text writer (`prom_text`).
pub fn render_with(
    gpus: &[GpuInfo],
    samples: &[GpuSample],
    xids: &BTreeMap<(u32, u64), u64>,
    ex: &Export<'_>,
) -> String {
    let mut t = Text::new();
    for s in samples {
        let Some(g) = gpus.iter().find(|g| g.index == s.index) else {
            continue;
        };
        gpu_families(&mut t, g, s, ex);
    }
    xid_families(&mut t, gpus, samples, xids, ex);
    t.render()
}

/// One GPU's families: workloads, dcgm-exporter's, lost, the sampled
/// values, NVLink, profiling, row remapping, video, throttle reasons.
fn gpu_families(t: &mut Text, g: &GpuInfo, s: &GpuSample, ex: &Export<'_>) {
    let index = g.index.to_string();
    let wl = ex.workloads.get(&g.index);
    let mut l = vec![
        ("gpu", index.as_str()),
        ("uuid", g.uuid.as_str()),
        ("pci_bus_id", g.pci_bus_id.as_str()),
    ];
    if let Some((w, _)) = wl {
        l.extend(w.pairs());
    }
    if let Some((_, n)) = wl {
        t.add(&GPU_WORKLOADS, &l, n);
    }
    if ex.dcgm_compat {
        super::dcgm::write(t, g, s, ex, wl.map(|(w, _)| w));
    }
    t.add(&GPU_LOST, &l, u8::from(s.lost));
    sampled(t, s, &l);
    nvlink(t, s, &l);
    profiling(t, s, &l);
    row_remapping(t, s, &l);
    video(t, s, &l);
    throttle(t, s, &l);
}

/// Power, temperature, clocks, utilisation, then [`memory_and_errors`].
fn sampled(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    let f = |v: Option<f64>| v.map(|x| format!("{x}"));
    let u = |v: Option<u32>| v.map(|x| x.to_string());
    // NVML's MHz and percentages in base units: hertz, ratios 0–1.
    let hz = |v: Option<u32>| v.map(|x| (u64::from(x) * 1_000_000).to_string());
    let ratio = |v: Option<u32>| v.map(|x| format!("{}", f64::from(x) / 100.0));
    for (f, v) in [
        (&GPU_POWER_WATTS, f(s.power_w)),
        (&GPU_POWER_LIMIT_WATTS, f(s.power_limit_w)),
        (&GPU_TEMPERATURE_CELSIUS, u(s.temp_c)),
        (&GPU_MEMORY_TEMPERATURE_CELSIUS, u(s.memory_temp_c)),
        (&GPU_SM_CLOCK_HERTZ, hz(s.sm_clock_mhz)),
        (&GPU_SM_CLOCK_MAX_HERTZ, hz(s.sm_clock_max_mhz)),
        (&GPU_MEMORY_CLOCK_HERTZ, hz(s.mem_clock_mhz)),
        (&GPU_MEMORY_CLOCK_MAX_HERTZ, hz(s.mem_clock_max_mhz)),
        (&GPU_UTILIZATION_RATIO, ratio(s.util_gpu_pct)),
        (&GPU_MEMORY_UTILIZATION_RATIO, ratio(s.util_mem_pct)),
    ] {
        if let Some(v) = v {
            t.add(f, l, v);
        }
    }
    memory_and_errors(t, s, l);
}

/// Memory, ECC, PCIe, energy.
fn memory_and_errors(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    let q = |v: Option<u64>| v.map(|x| x.to_string());
    for (f, v) in [
        (&GPU_MEMORY_USED_BYTES, q(s.mem_used_bytes)),
        (&GPU_MEMORY_RESERVED_BYTES, q(s.mem_reserved_bytes)),
        (&GPU_MEMORY_TOTAL_BYTES, q(s.mem_total_bytes)),
        (&GPU_ECC_SBE_VOLATILE, q(s.ecc_sbe_volatile)),
        (&GPU_ECC_DBE_VOLATILE, q(s.ecc_dbe_volatile)),
        (&GPU_PCIE_REPLAY, q(s.pcie_replay)),
        (&GPU_PCIE_TX_BYTES_PER_SECOND, q(s.pcie_tx_bytes_per_sec)),
        (&GPU_PCIE_RX_BYTES_PER_SECOND, q(s.pcie_rx_bytes_per_sec)),
        (
            &GPU_ENERGY_JOULES,
            s.energy_mj.map(|m| format!("{}", m as f64 / 1000.0)),
        ),
    ] {
        if let Some(v) = v {
            t.add(f, l, v);
        }
    }
}

/// NVLink error counters per link and data over all links.
fn nvlink(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    for e in &s.nvlink {
        let link = e.link.to_string();
        let mut ll = l.to_vec();
        ll.push(("link", link.as_str()));
        for (f, v) in [
            (&GPU_NVLINK_REPLAY_ERRORS, e.replay),
            (&GPU_NVLINK_RECOVERY_ERRORS, e.recovery),
            (&GPU_NVLINK_CRC_FLIT_ERRORS, e.crc_flit),
            (&GPU_NVLINK_CRC_DATA_ERRORS, e.crc_data),
        ] {
            if let Some(v) = v {
                t.add(f, &ll, v);
            }
        }
    }
    if let Some(kib) = s.nvlink_data_kib {
        t.add(&GPU_NVLINK_DATA_BYTES, l, kib.saturating_mul(1024));
    }
}

/// NVML GPM engine activity (Hopper and later).
fn profiling(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    if let Some(p) = &s.prof {
        for (engine, v) in [
            ("graphics", p.gr_engine_active),
            ("tensor", p.tensor_active),
            ("dram", p.dram_active),
        ] {
            let Some(v) = v else { continue };
            let mut ll = l.to_vec();
            ll.push(("engine", engine));
            t.add(&GPU_ENGINE_ACTIVE_RATIO, &ll, v);
        }
    }
}

/// Rows remapped for ECC errors, pending remaps and remapping failures.
fn row_remapping(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    for (f, v) in [
        (&GPU_REMAPPED_ROWS_CORRECTABLE, s.remapped_rows_corr),
        (&GPU_REMAPPED_ROWS_UNCORRECTABLE, s.remapped_rows_unc),
    ] {
        if let Some(v) = v {
            t.add(f, l, v);
        }
    }
    if let Some(v) = s.remap_failure {
        t.add(&GPU_ROW_REMAP_FAILURE, l, v);
    }
    if let Some(v) = s.remap_pending {
        t.add(&GPU_ROW_REMAP_PENDING, l, u64::from(v));
    }
}

/// Video encoder and decoder utilisation.
fn video(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    for (f, v) in [
        (&GPU_ENCODER_UTILIZATION_RATIO, s.enc_util_pct),
        (&GPU_DECODER_UTILIZATION_RATIO, s.dec_util_pct),
    ] {
        if let Some(v) = v {
            t.add(f, l, f64::from(v) / 100.0);
        }
    }
}

/// One series per throttle (clock event) reason, 1 while active.
fn throttle(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    if let Some(mask) = s.throttle {
        for (bit, reason) in THROTTLE_FLAGS {
            let mut ll = l.to_vec();
            ll.push(("reason", reason));
            t.add(&GPU_THROTTLE_REASON, &ll, u8::from(mask & bit != 0));
        }
    }
}

/// XID counts per GPU (every GPU, from zero) and per (GPU, code).
fn xid_families(
    t: &mut Text,
    gpus: &[GpuInfo],
    samples: &[GpuSample],
    xids: &BTreeMap<(u32, u64), u64>,
    ex: &Export<'_>,
) {
    // Every GPU's XID count, from zero: `increase()` sees the first XID
    // (a per-code series appears at 1, which `increase()` cannot tell
    // from an old count).
    for s in samples {
        let Some(g) = gpus.iter().find(|g| g.index == s.index) else {
            continue;
        };
        let index = g.index.to_string();
        let n: u64 = xids
            .iter()
            .filter(|((gpu, _), _)| *gpu == g.index)
            .map(|(_, n)| n)
            .sum();
        let mut l = vec![
            ("gpu", index.as_str()),
            ("uuid", g.uuid.as_str()),
            ("pci_bus_id", g.pci_bus_id.as_str()),
        ];
        if let Some((w, _)) = ex.workloads.get(&g.index) {
            l.extend(w.pairs());
        }
        t.add(&GPU_XID_EVENTS, &l, n);
    }
    for ((gpu, code), n) in xids {
        let g = gpus.iter().find(|g| g.index == *gpu);
        let index = gpu.to_string();
        let code = code.to_string();
        let mut l = vec![
            ("gpu", index.as_str()),
            ("uuid", g.map_or("", |g| g.uuid.as_str())),
            ("pci_bus_id", g.map_or("", |g| g.pci_bus_id.as_str())),
        ];
        if let Some((w, _)) = ex.workloads.get(gpu) {
            l.extend(w.pairs());
        }
        l.push(("xid", code.as_str()));
        t.add(&GPU_XID_ERRORS, &l, n);
    }
}
