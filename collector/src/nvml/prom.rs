//! Prometheus text for the GPUs: faultline's families (`faultline_gpu_`
//! prefix, base units) and, in compatibility mode, dcgm-exporter's
//! (`DCGM_FI_DEV_*`, its names, labels and units: [`super::dcgm`]).
use std::collections::BTreeMap;

use super::{export::Export, GpuInfo, GpuSample, THROTTLE_FLAGS};
use crate::prom_text::{Kind, Text};

use proto::metric::Family;

// The GPU families' labels: the GPU, then its workload's (optional;
// `WorkloadLabels::pairs`), then the family's own.

pub const GPU_WORKLOADS: Family = Family::gauge(
    "faultline_gpu_workloads",
    &["gpu", "uuid", "pci_bus_id", "container", "namespace", "pod", "hpc_job", "rank"],
    "Distinct workloads (job/rank/pod) seen using the GPU in the last window; the series' workload labels name the first",
);
pub const GPU_LOST: Family = Family::gauge(
    "faultline_gpu_lost",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
    ],
    "1 when NVML reports the GPU fell off the bus",
);
pub const GPU_NVLINK_DATA_BYTES: Family = Family::counter(
    "faultline_gpu_nvlink_data_bytes_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
    ],
    "NVLink data transmitted plus received over all links since driver load",
);
pub const GPU_ENGINE_ACTIVE_RATIO: Family = Family::gauge(
    "faultline_gpu_engine_active_ratio",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "engine",
    ],
    "Ratio of the last window the engine was active (NVML GPM, Hopper and later)",
);
pub const GPU_ROW_REMAP_FAILURE: Family = Family::gauge(
    "faultline_gpu_row_remap_failure",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
    ],
    "1 when a row remapping has failed on the GPU",
);
pub const GPU_ROW_REMAP_PENDING: Family = Family::gauge(
    "faultline_gpu_row_remap_pending",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
    ],
    "1 when a row remapping waits for the next GPU reset",
);
pub const GPU_THROTTLE_REASON: Family = Family::gauge(
    "faultline_gpu_throttle_reason",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "reason",
    ],
    "1 when this clock event (throttle) reason is active",
);
pub const GPU_XID_EVENTS: Family = Family::counter(
    "faultline_gpu_xid_events_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
    ],
    "XID events of the GPU, all codes (present from the start, at 0)",
);
pub const GPU_XID_ERRORS: Family = Family::counter(
    "faultline_gpu_xid_errors_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "xid",
    ],
    "XID errors reported by NVML events",
);

/// The families above, for `crate::metrics_catalog`.
pub const FAMILIES: &[&Family] = &[
    &GPU_WORKLOADS,
    &GPU_LOST,
    &GPU_NVLINK_DATA_BYTES,
    &GPU_ENGINE_ACTIVE_RATIO,
    &GPU_ROW_REMAP_FAILURE,
    &GPU_ROW_REMAP_PENDING,
    &GPU_THROTTLE_REASON,
    &GPU_XID_EVENTS,
    &GPU_XID_ERRORS,
];

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
    for (name, help, kind, v) in [
        (
            "faultline_gpu_power_watts",
            "Power draw",
            Kind::Gauge,
            f(s.power_w),
        ),
        (
            "faultline_gpu_power_limit_watts",
            "Enforced power limit",
            Kind::Gauge,
            f(s.power_limit_w),
        ),
        (
            "faultline_gpu_temperature_celsius",
            "GPU temperature",
            Kind::Gauge,
            u(s.temp_c),
        ),
        (
            "faultline_gpu_sm_clock_hertz",
            "SM clock (hertz)",
            Kind::Gauge,
            hz(s.sm_clock_mhz),
        ),
        (
            "faultline_gpu_sm_clock_max_hertz",
            "Maximum SM clock (hertz)",
            Kind::Gauge,
            hz(s.sm_clock_max_mhz),
        ),
        (
            "faultline_gpu_memory_clock_hertz",
            "Memory clock (hertz)",
            Kind::Gauge,
            hz(s.mem_clock_mhz),
        ),
        (
            "faultline_gpu_memory_clock_max_hertz",
            "Maximum memory clock (hertz)",
            Kind::Gauge,
            hz(s.mem_clock_max_mhz),
        ),
        (
            "faultline_gpu_utilization_ratio",
            "Ratio of the sample period a kernel was running on the GPU (0-1)",
            Kind::Gauge,
            ratio(s.util_gpu_pct),
        ),
        (
            "faultline_gpu_memory_utilization_ratio",
            "Ratio of the sample period device memory was read or written (0-1)",
            Kind::Gauge,
            ratio(s.util_mem_pct),
        ),
    ] {
        if let Some(v) = v {
            t.sample(name, help, kind, l, v);
        }
    }
    memory_and_errors(t, s, l);
}

/// Memory, ECC, PCIe, energy.
fn memory_and_errors(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    let q = |v: Option<u64>| v.map(|x| x.to_string());
    for (name, help, kind, v) in [
        (
            "faultline_gpu_memory_used_bytes",
            "Framebuffer memory allocated, without the driver's reserved memory",
            Kind::Gauge,
            q(s.mem_used_bytes),
        ),
        (
            "faultline_gpu_memory_reserved_bytes",
            "Framebuffer memory reserved by the driver and firmware",
            Kind::Gauge,
            q(s.mem_reserved_bytes),
        ),
        (
            "faultline_gpu_memory_total_bytes",
            "Framebuffer memory total",
            Kind::Gauge,
            q(s.mem_total_bytes),
        ),
        (
            "faultline_gpu_ecc_sbe_volatile_total",
            "Volatile single-bit (corrected) ECC errors",
            Kind::Counter,
            q(s.ecc_sbe_volatile),
        ),
        (
            "faultline_gpu_ecc_dbe_volatile_total",
            "Volatile double-bit (uncorrected) ECC errors",
            Kind::Counter,
            q(s.ecc_dbe_volatile),
        ),
        (
            "faultline_gpu_pcie_replay_total",
            "PCIe replay counter",
            Kind::Counter,
            q(s.pcie_replay),
        ),
        (
            "faultline_gpu_pcie_tx_bytes_per_second",
            "PCIe transmit throughput",
            Kind::Gauge,
            q(s.pcie_tx_bytes_per_sec),
        ),
        (
            "faultline_gpu_pcie_rx_bytes_per_second",
            "PCIe receive throughput",
            Kind::Gauge,
            q(s.pcie_rx_bytes_per_sec),
        ),
        (
            "faultline_gpu_energy_joules_total",
            "Energy consumed since driver load",
            Kind::Counter,
            s.energy_mj.map(|m| format!("{}", m as f64 / 1000.0)),
        ),
    ] {
        if let Some(v) = v {
            t.sample(name, help, kind, l, v);
        }
    }
}

/// NVLink error counters per link and data over all links.
fn nvlink(t: &mut Text, s: &GpuSample, l: &[(&str, &str)]) {
    for e in &s.nvlink {
        let link = e.link.to_string();
        let mut ll = l.to_vec();
        ll.push(("link", link.as_str()));
        for (name, help, v) in [
            (
                "faultline_gpu_nvlink_replay_errors_total",
                "NVLink data-link replay errors, per link",
                e.replay,
            ),
            (
                "faultline_gpu_nvlink_recovery_errors_total",
                "NVLink data-link recovery errors, per link",
                e.recovery,
            ),
            (
                "faultline_gpu_nvlink_crc_flit_errors_total",
                "NVLink flow-control (flit) CRC errors, per link",
                e.crc_flit,
            ),
            (
                "faultline_gpu_nvlink_crc_data_errors_total",
                "NVLink data CRC errors, per link",
                e.crc_data,
            ),
        ] {
            if let Some(v) = v {
                t.sample(name, help, Kind::Counter, &ll, v);
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
    for (name, help, v) in [
        (
            "faultline_gpu_remapped_rows_correctable_total",
            "Rows remapped for correctable ECC errors",
            s.remapped_rows_corr,
        ),
        (
            "faultline_gpu_remapped_rows_uncorrectable_total",
            "Rows remapped for uncorrectable ECC errors",
            s.remapped_rows_unc,
        ),
    ] {
        if let Some(v) = v {
            t.sample(name, help, Kind::Counter, l, v);
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
    for (name, help, v) in [
        (
            "faultline_gpu_encoder_utilization_ratio",
            "Video encoder utilisation (0-1)",
            s.enc_util_pct,
        ),
        (
            "faultline_gpu_decoder_utilization_ratio",
            "Video decoder utilisation (0-1)",
            s.dec_util_pct,
        ),
    ] {
        if let Some(v) = v {
            t.sample(name, help, Kind::Gauge, l, f64::from(v) / 100.0);
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
