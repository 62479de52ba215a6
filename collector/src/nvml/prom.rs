//! Prometheus text for the GPUs (dcgm-exporter-like fields, `faultline_gpu_` prefix).
use std::{collections::BTreeMap, fmt::Write as _};

use super::{GpuInfo, GpuSample, THROTTLE_FLAGS};
use crate::prom_text::escape as esc;

/// Prometheus text (dcgm-exporter-like fields, `faultline_gpu_` prefix).
pub fn render_prometheus(
    gpus: &[GpuInfo],
    samples: &[GpuSample],
    xids: &BTreeMap<(u32, u64), u64>,
) -> String {
    let mut fams: BTreeMap<&str, (&str, &str, Vec<String>)> = BTreeMap::new();
    let mut add =
        |name: &'static str, help: &'static str, kind: &'static str, labels: String, v: String| {
            fams.entry(name)
                .or_insert((help, kind, Vec::new()))
                .2
                .push(format!("{name}{{{labels}}} {v}"));
        };
    for s in samples {
        let Some(g) = gpus.iter().find(|g| g.index == s.index) else {
            continue;
        };
        let l = format!(
            "gpu=\"{}\",uuid=\"{}\",pci_bus_id=\"{}\"",
            g.index,
            esc(&g.uuid),
            esc(&g.pci_bus_id)
        );
        add(
            "faultline_gpu_lost",
            "1 when NVML reports the GPU fell off the bus",
            "gauge",
            l.clone(),
            u8::from(s.lost).to_string(),
        );
        let f = |v: Option<f64>| v.map(|x| format!("{x}"));
        let u = |v: Option<u32>| v.map(|x| x.to_string());
        let q = |v: Option<u64>| v.map(|x| x.to_string());
        for (name, help, kind, v) in [
            (
                "faultline_gpu_power_watts",
                "Power draw",
                "gauge",
                f(s.power_w),
            ),
            (
                "faultline_gpu_power_limit_watts",
                "Enforced power limit",
                "gauge",
                f(s.power_limit_w),
            ),
            (
                "faultline_gpu_temperature_celsius",
                "GPU temperature",
                "gauge",
                u(s.temp_c),
            ),
            (
                "faultline_gpu_sm_clock_mhz",
                "SM clock",
                "gauge",
                u(s.sm_clock_mhz),
            ),
            (
                "faultline_gpu_sm_clock_max_mhz",
                "Maximum SM clock",
                "gauge",
                u(s.sm_clock_max_mhz),
            ),
            (
                "faultline_gpu_memory_clock_mhz",
                "Memory clock",
                "gauge",
                u(s.mem_clock_mhz),
            ),
            (
                "faultline_gpu_memory_clock_max_mhz",
                "Maximum memory clock",
                "gauge",
                u(s.mem_clock_max_mhz),
            ),
            (
                "faultline_gpu_utilization_percent",
                "GPU utilisation",
                "gauge",
                u(s.util_gpu_pct),
            ),
            (
                "faultline_gpu_memory_utilization_percent",
                "Memory controller utilisation",
                "gauge",
                u(s.util_mem_pct),
            ),
            (
                "faultline_gpu_memory_used_bytes",
                "Framebuffer memory used",
                "gauge",
                q(s.mem_used_bytes),
            ),
            (
                "faultline_gpu_memory_total_bytes",
                "Framebuffer memory total",
                "gauge",
                q(s.mem_total_bytes),
            ),
            (
                "faultline_gpu_ecc_sbe_volatile_total",
                "Volatile single-bit (corrected) ECC errors",
                "counter",
                q(s.ecc_sbe_volatile),
            ),
            (
                "faultline_gpu_ecc_dbe_volatile_total",
                "Volatile double-bit (uncorrected) ECC errors",
                "counter",
                q(s.ecc_dbe_volatile),
            ),
            (
                "faultline_gpu_pcie_replay_total",
                "PCIe replay counter",
                "counter",
                q(s.pcie_replay),
            ),
            (
                "faultline_gpu_pcie_tx_bytes_per_second",
                "PCIe transmit throughput",
                "gauge",
                q(s.pcie_tx_bytes_per_sec),
            ),
            (
                "faultline_gpu_pcie_rx_bytes_per_second",
                "PCIe receive throughput",
                "gauge",
                q(s.pcie_rx_bytes_per_sec),
            ),
            (
                "faultline_gpu_nvlink_replay_errors_total",
                "NVLink data-link replay errors (link 0)",
                "counter",
                q(s.nvlink_errors),
            ),
            (
                "faultline_gpu_energy_joules_total",
                "Energy consumed since driver load",
                "counter",
                s.energy_mj.map(|m| format!("{}", m as f64 / 1000.0)),
            ),
        ] {
            if let Some(v) = v {
                add(name, help, kind, l.clone(), v);
            }
        }
        if let Some(mask) = s.throttle {
            for (bit, reason) in THROTTLE_FLAGS {
                add(
                    "faultline_gpu_throttle_reason",
                    "1 when this clock event (throttle) reason is active",
                    "gauge",
                    format!("{l},reason=\"{reason}\""),
                    u8::from(mask & bit != 0).to_string(),
                );
            }
        }
    }
    for ((gpu, code), n) in xids {
        let g = gpus.iter().find(|g| g.index == *gpu);
        let l = format!(
            "gpu=\"{gpu}\",uuid=\"{}\",pci_bus_id=\"{}\",xid=\"{code}\"",
            esc(g.map_or("", |g| g.uuid.as_str())),
            esc(g.map_or("", |g| g.pci_bus_id.as_str()))
        );
        add(
            "faultline_gpu_xid_errors_total",
            "XID errors reported by NVML events",
            "counter",
            l,
            n.to_string(),
        );
    }
    let mut out = String::new();
    for (name, (help, kind, samples)) in fams {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for s in samples {
            out.push_str(&s);
            out.push('\n');
        }
    }
    out
}
