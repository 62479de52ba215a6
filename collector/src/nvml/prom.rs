//! Prometheus text for the GPUs (dcgm-exporter-like fields, `faultline_gpu_` prefix).
use std::collections::BTreeMap;

use super::{GpuInfo, GpuSample, THROTTLE_FLAGS};
use crate::prom_text::{Kind, Text};

/// Prometheus text (dcgm-exporter-like fields, `faultline_gpu_` prefix),
/// through the one text writer (`prom_text`).
pub fn render_prometheus(
    gpus: &[GpuInfo],
    samples: &[GpuSample],
    xids: &BTreeMap<(u32, u64), u64>,
) -> String {
    let mut t = Text::new();
    for s in samples {
        let Some(g) = gpus.iter().find(|g| g.index == s.index) else {
            continue;
        };
        let index = g.index.to_string();
        let l = [
            ("gpu", index.as_str()),
            ("uuid", g.uuid.as_str()),
            ("pci_bus_id", g.pci_bus_id.as_str()),
        ];
        t.sample(
            "faultline_gpu_lost",
            "1 when NVML reports the GPU fell off the bus",
            Kind::Gauge,
            &l,
            u8::from(s.lost),
        );
        let f = |v: Option<f64>| v.map(|x| format!("{x}"));
        let u = |v: Option<u32>| v.map(|x| x.to_string());
        let q = |v: Option<u64>| v.map(|x| x.to_string());
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
                "faultline_gpu_sm_clock_mhz",
                "SM clock",
                Kind::Gauge,
                u(s.sm_clock_mhz),
            ),
            (
                "faultline_gpu_sm_clock_max_mhz",
                "Maximum SM clock",
                Kind::Gauge,
                u(s.sm_clock_max_mhz),
            ),
            (
                "faultline_gpu_memory_clock_mhz",
                "Memory clock",
                Kind::Gauge,
                u(s.mem_clock_mhz),
            ),
            (
                "faultline_gpu_memory_clock_max_mhz",
                "Maximum memory clock",
                Kind::Gauge,
                u(s.mem_clock_max_mhz),
            ),
            (
                "faultline_gpu_utilization_percent",
                "GPU utilisation",
                Kind::Gauge,
                u(s.util_gpu_pct),
            ),
            (
                "faultline_gpu_memory_utilization_percent",
                "Memory controller utilisation",
                Kind::Gauge,
                u(s.util_mem_pct),
            ),
            (
                "faultline_gpu_memory_used_bytes",
                "Framebuffer memory used",
                Kind::Gauge,
                q(s.mem_used_bytes),
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
                "faultline_gpu_nvlink_replay_errors_total",
                "NVLink data-link replay errors (link 0)",
                Kind::Counter,
                q(s.nvlink_errors),
            ),
            (
                "faultline_gpu_energy_joules_total",
                "Energy consumed since driver load",
                Kind::Counter,
                s.energy_mj.map(|m| format!("{}", m as f64 / 1000.0)),
            ),
        ] {
            if let Some(v) = v {
                t.sample(name, help, kind, &l, v);
            }
        }
        if let Some(mask) = s.throttle {
            for (bit, reason) in THROTTLE_FLAGS {
                t.sample(
                    "faultline_gpu_throttle_reason",
                    "1 when this clock event (throttle) reason is active",
                    Kind::Gauge,
                    &[l[0], l[1], l[2], ("reason", reason)],
                    u8::from(mask & bit != 0),
                );
            }
        }
    }
    for ((gpu, code), n) in xids {
        let g = gpus.iter().find(|g| g.index == *gpu);
        t.sample(
            "faultline_gpu_xid_errors_total",
            "XID errors reported by NVML events",
            Kind::Counter,
            &[
                ("gpu", &gpu.to_string()),
                ("uuid", g.map_or("", |g| g.uuid.as_str())),
                ("pci_bus_id", g.map_or("", |g| g.pci_bus_id.as_str())),
                ("xid", &code.to_string()),
            ],
            n,
        );
    }
    t.render()
}
