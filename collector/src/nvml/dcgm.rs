//! dcgm-exporter compatibility: the GPU fields faultline samples, under
//! dcgm-exporter's metric names, types, units and labels (`gpu`, `UUID`,
//! `pci_bus_id`, `device`, `modelName`, `Hostname`,
//! `DCGM_FI_DRIVER_VERSION`, then `container`, `namespace`, `pod` and
//! `hpc_job` where the workload is known), so dashboards and PromQL written
//! for dcgm-exporter work unchanged. Units are dcgm-exporter's, not base
//! units: MHz, °C, W, mJ, KB, MiB, %, ratios, bytes/s. Every series of
//! dcgm-exporter's default counters that NVML can supply is here (the test
//! reads dcgm-exporter's own `etc/default-counters.csv`); the `DCGM_FI_PROF_*`
//! ones only on GPUs with GPM (Hopper and later).
use super::{export::Export, nvlink::NvLinkCounter, GpuInfo, GpuSample};
use crate::{
    prom_text::{Kind, Text},
    workload::WorkloadLabels,
};

/// (name, type, unit as dcgm-exporter documents it) of every compatibility
/// family; `docs/metrics.md` lists them and the tests compare the output
/// against this table.
pub const FAMILIES: &[(&str, Kind, &str)] = &[
    // dcgm-exporter's default counters (etc/default-counters.csv).
    ("DCGM_FI_DEV_SM_CLOCK", Kind::Gauge, "MHz"),
    ("DCGM_FI_DEV_MEM_CLOCK", Kind::Gauge, "MHz"),
    ("DCGM_FI_DEV_MEMORY_TEMP", Kind::Gauge, "C"),
    ("DCGM_FI_DEV_GPU_TEMP", Kind::Gauge, "C"),
    ("DCGM_FI_DEV_POWER_USAGE", Kind::Gauge, "W"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Kind::Counter, "mJ"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", Kind::Counter, ""),
    ("DCGM_FI_DEV_GPU_UTIL", Kind::Gauge, "%"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", Kind::Gauge, "%"),
    ("DCGM_FI_DEV_ENC_UTIL", Kind::Gauge, "%"),
    ("DCGM_FI_DEV_DEC_UTIL", Kind::Gauge, "%"),
    ("DCGM_FI_DEV_XID_ERRORS", Kind::Gauge, ""),
    ("DCGM_FI_DEV_FB_FREE", Kind::Gauge, "MiB"),
    ("DCGM_FI_DEV_FB_USED", Kind::Gauge, "MiB"),
    ("DCGM_FI_DEV_FB_RESERVED", Kind::Gauge, "MiB"),
    // DCGM's "MiB/s" of NVLink data (KiB/s ÷ 1000), typed as
    // dcgm-exporter types it.
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", Kind::Counter, ""),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", Kind::Counter, ""),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", Kind::Counter, ""),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", Kind::Gauge, ""),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", Kind::Gauge, "ratio"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", Kind::Gauge, "ratio"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", Kind::Gauge, "ratio"),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        Kind::Gauge,
        "bytes per second",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        Kind::Gauge,
        "bytes per second",
    ),
    // Fields dcgm-exporter's default list leaves commented out (or, for the
    // PCIe throughput, used to list); the same names when a site turns
    // them on.
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", Kind::Counter, "KB"),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", Kind::Counter, "KB"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Kind::Gauge, ""),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", Kind::Counter, ""),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", Kind::Counter, ""),
    (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "",
    ),
    (
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "",
    ),
    (
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "",
    ),
    (
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        Kind::Counter,
        "",
    ),
];

const MIB: u64 = 1 << 20;

/// Writes one GPU's compatibility families.
pub fn write(
    t: &mut Text,
    g: &GpuInfo,
    s: &GpuSample,
    ex: &Export<'_>,
    workload: Option<&WorkloadLabels>,
) {
    if s.lost {
        return;
    }
    let index = g.index.to_string();
    let device = format!("nvidia{}", g.minor.unwrap_or(g.index));
    let mut l = vec![
        ("gpu", index.as_str()),
        ("UUID", g.uuid.as_str()),
        ("pci_bus_id", g.pci_bus_id.as_str()),
        ("device", device.as_str()),
        ("modelName", g.name.as_str()),
        ("Hostname", ex.hostname),
        ("DCGM_FI_DRIVER_VERSION", ex.driver_version),
    ];
    if let Some(w) = workload {
        l.extend(
            [
                ("container", w.container.as_str()),
                ("namespace", w.namespace.as_str()),
                ("pod", w.pod.as_str()),
                ("hpc_job", w.hpc_job.as_str()),
            ]
            .into_iter()
            .filter(|(_, v)| !v.is_empty()),
        );
    }
    for (name, v) in values(g, s, ex) {
        let Some(v) = v else { continue };
        let Some((_, kind, unit)) = FAMILIES.iter().find(|(n, _, _)| *n == name) else {
            continue;
        };
        t.sample(name, &help(name, unit), *kind, &l, v);
    }
}

/// Each field's value in dcgm-exporter's unit; `None` where unsampled.
fn values(g: &GpuInfo, s: &GpuSample, ex: &Export<'_>) -> [(&'static str, Option<String>); 33] {
    let int = |v: Option<u64>| v.map(|x| x.to_string());
    let u = |v: Option<u32>| v.map(|x| x.to_string());
    let mib = |v: Option<u64>| v.map(|b| (b / MIB).to_string());
    let ratio = |v: Option<f64>| v.map(|x| x.to_string());
    let prof = s.prof.unwrap_or_default();
    let nvl = |c: NvLinkCounter| int(c.total(&s.nvlink));
    [
        ("DCGM_FI_DEV_SM_CLOCK", u(s.sm_clock_mhz)),
        ("DCGM_FI_DEV_MEM_CLOCK", u(s.mem_clock_mhz)),
        ("DCGM_FI_DEV_MEMORY_TEMP", u(s.memory_temp_c)),
        ("DCGM_FI_DEV_GPU_TEMP", u(s.temp_c)),
        (
            "DCGM_FI_DEV_POWER_USAGE",
            s.power_w.map(|w| format!("{w:.3}")),
        ),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", int(s.energy_mj)),
        // NVML reports KB/s over its sampling interval; dcgm-exporter
        // exports that value as is under these names.
        (
            "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
            int(s.pcie_tx_bytes_per_sec.map(|b| b / 1024)),
        ),
        (
            "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
            int(s.pcie_rx_bytes_per_sec.map(|b| b / 1024)),
        ),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", int(s.pcie_replay)),
        ("DCGM_FI_DEV_GPU_UTIL", u(s.util_gpu_pct)),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", u(s.util_mem_pct)),
        ("DCGM_FI_DEV_ENC_UTIL", u(s.enc_util_pct)),
        ("DCGM_FI_DEV_DEC_UTIL", u(s.dec_util_pct)),
        (
            "DCGM_FI_DEV_XID_ERRORS",
            Some(ex.last_xid.get(&g.index).copied().unwrap_or(0).to_string()),
        ),
        ("DCGM_FI_DEV_FB_FREE", mib(s.mem_free_bytes)),
        ("DCGM_FI_DEV_FB_USED", mib(s.mem_used_bytes)),
        ("DCGM_FI_DEV_FB_RESERVED", mib(s.mem_reserved_bytes)),
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            int(s.nvlink_bandwidth),
        ),
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            int(s.remapped_rows_unc),
        ),
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            int(s.remapped_rows_corr),
        ),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", int(s.remap_failure)),
        (
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            ratio(prof.gr_engine_active),
        ),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", ratio(prof.tensor_active)),
        ("DCGM_FI_PROF_DRAM_ACTIVE", ratio(prof.dram_active)),
        (
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            int(prof.pcie_tx_bytes_per_sec),
        ),
        (
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            int(prof.pcie_rx_bytes_per_sec),
        ),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", int(s.throttle)),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", int(s.ecc_sbe_volatile)),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", int(s.ecc_dbe_volatile)),
        (
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            nvl(NvLinkCounter::CrcFlit),
        ),
        (
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            nvl(NvLinkCounter::CrcData),
        ),
        (
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            nvl(NvLinkCounter::Replay),
        ),
        (
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
            nvl(NvLinkCounter::Recovery),
        ),
    ]
}

/// HELP text: what the field is and its unit.
fn help(name: &str, unit: &str) -> String {
    let what = name
        .trim_start_matches("DCGM_FI_DEV_")
        .trim_start_matches("DCGM_FI_")
        .to_lowercase()
        .replace('_', " ");
    if unit.is_empty() {
        format!("dcgm-exporter field {what} (faultline, from NVML).")
    } else {
        format!("dcgm-exporter field {what} (in {unit}; faultline, from NVML).")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn names_labels_and_units_follow_dcgm_exporter() {
        let g = GpuInfo {
            index: 1,
            uuid: "GPU-1".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: "00000000:19:00.0".into(),
            minor: Some(3),
        };
        let s = GpuSample {
            index: 1,
            power_w: Some(312.25),
            temp_c: Some(61),
            sm_clock_mhz: Some(1755),
            mem_total_bytes: Some(80 << 30),
            mem_used_bytes: Some(1 << 30),
            mem_reserved_bytes: Some(512 << 20),
            mem_free_bytes: Some((80 << 30) - (1 << 30) - (512 << 20)),
            pcie_tx_bytes_per_sec: Some(2048 * 1024),
            energy_mj: Some(123_456),
            throttle: Some(0x44),
            ..GpuSample::default()
        };
        let w = BTreeMap::from([(
            1,
            (
                WorkloadLabels {
                    hpc_job: "4711".into(),
                    job: "4711".into(),
                    ..WorkloadLabels::default()
                },
                1,
            ),
        )]);
        let xid = BTreeMap::from([(1, 79)]);
        let ex = Export {
            hostname: "n17",
            driver_version: "550.54.15",
            dcgm_compat: true,
            workloads: &w,
            last_xid: &xid,
        };
        let text = super::super::prom::render_with(&[g], &[s], &BTreeMap::new(), &ex);
        let base = "gpu=\"1\",UUID=\"GPU-1\",pci_bus_id=\"00000000:19:00.0\",device=\"nvidia3\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"n17\",DCGM_FI_DRIVER_VERSION=\"550.54.15\",hpc_job=\"4711\"";
        for line in [
            format!("DCGM_FI_DEV_POWER_USAGE{{{base}}} 312.250"),
            format!("DCGM_FI_DEV_GPU_TEMP{{{base}}} 61"),
            format!("DCGM_FI_DEV_SM_CLOCK{{{base}}} 1755"),
            format!("DCGM_FI_DEV_FB_USED{{{base}}} 1024"),
            format!("DCGM_FI_DEV_FB_FREE{{{base}}} 80384"),
            format!("DCGM_FI_DEV_FB_RESERVED{{{base}}} 512"),
            format!("DCGM_FI_DEV_PCIE_TX_THROUGHPUT{{{base}}} 2048"),
            format!("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{base}}} 123456"),
            format!("DCGM_FI_DEV_XID_ERRORS{{{base}}} 79"),
            format!("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{{base}}} 68"),
            "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter".to_string(),
            "# TYPE DCGM_FI_DEV_XID_ERRORS gauge".to_string(),
            "faultline_gpu_power_watts{gpu=\"1\",uuid=\"GPU-1\",pci_bus_id=\"00000000:19:00.0\",hpc_job=\"4711\"} 312.25".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        assert!(
            !text.contains("DCGM_FI_DEV_MEMORY_TEMP"),
            "unsampled fields are left out"
        );
        let off = super::super::prom::render_with(
            &[GpuInfo {
                index: 1,
                uuid: "GPU-1".into(),
                name: String::new(),
                pci_bus_id: String::new(),
                minor: None,
            }],
            &[GpuSample {
                index: 1,
                temp_c: Some(50),
                ..GpuSample::default()
            }],
            &BTreeMap::new(),
            &Export::default(),
        );
        assert!(!off.contains("DCGM_"), "{off}");
        assert!(off.contains("faultline_gpu_temperature_celsius"));
    }
}
