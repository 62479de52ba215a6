//! GPU detectors: `gpu_thermal_throttle` and `gpu_power_throttle` (throttle
//! flags with a real clock drop, for consecutive windows), `gpu_xid` (XID
//! events, and a GPU that fell off the bus), `gpu_ecc` (double-bit errors, or
//! single-bit errors rising fast).
use std::collections::HashMap;

use proto::v1::Window;

use super::incidents::Finding;

const THERMAL: u64 = 0x20 | 0x40;
const POWER: u64 = 0x4 | 0x80;
/// Clock below this share of its maximum counts as a real slowdown.
pub const CLOCK_DROP: f64 = 0.9;
/// Single-bit ECC errors per window that count as "rising".
pub const SBE_PER_WINDOW: u64 = 10;

#[derive(Debug, Default)]
struct GpuState {
    thermal_streak: u32,
    power_streak: u32,
    sbe: Option<u64>,
    dbe: Option<u64>,
    sbe_streak: u32,
}

#[derive(Debug, Default)]
pub struct GpuDetector {
    gpus: HashMap<String, GpuState>,
    /// Entities throttling now: used to explain stragglers.
    pub throttling: HashMap<String, String>,
}

impl GpuDetector {
    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        let mut out = Vec::new();
        // Runbooks name the host as one shell word.
        let shown = crate::shell::quote(host);
        for g in &w.gpus {
            let entity = format!("{host}/gpu{}", g.index);
            let st = self.gpus.entry(entity.clone()).or_default();
            if g.lost {
                out.push(
                    Finding::new("gpu_xid", &entity, 0.95)
                        .with_evidence(format!("{} fell off the bus (NVML GPU_IS_LOST)", g.uuid))
                        .with_jobs(jobs)
                        .with_runbook(format!("drain {shown}; `nvidia-smi -q -i {}`, check PCIe/power; a reset or node reboot is usually needed", g.index)),
                );
                continue;
            }
            let mask = g.throttle_reasons.unwrap_or(0);
            let slowed = match (g.sm_clock_mhz, g.sm_clock_max_mhz) {
                (Some(c), Some(m)) if m > 0 => f64::from(c) < CLOCK_DROP * f64::from(m),
                _ => false,
            };
            let clock_ev = match (g.sm_clock_mhz, g.sm_clock_max_mhz) {
                (Some(c), Some(m)) if m > 0 => format!(
                    "SM clock {c}/{m} MHz ({:.0}% of max)",
                    100.0 * f64::from(c) / f64::from(m)
                ),
                _ => "SM clock unknown".into(),
            };
            st.thermal_streak = if mask & THERMAL != 0 && slowed {
                st.thermal_streak + 1
            } else {
                0
            };
            st.power_streak = if mask & POWER != 0 && slowed {
                st.power_streak + 1
            } else {
                0
            };
            self.throttling.remove(&entity);
            if st.thermal_streak >= 2 {
                let temp = g.temp_c.map_or_else(|| "?".into(), |t| t.to_string());
                out.push(
                    Finding::new("gpu_thermal_throttle", &entity, (0.75 + 0.05 * f64::from(st.thermal_streak.min(4))).min(0.95))
                        .with_evidence(format!("{} thermal slowdown ({}), temperature {temp} C", g.uuid, if mask & 0x40 != 0 { "HW" } else { "SW" }))
                        .with_evidence(clock_ev.clone())
                        .with_jobs(jobs)
                        .with_runbook(format!("check cooling of {shown} GPU {}: `nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i {}`, fans/airflow, inlet temperature", g.index, g.index)),
                );
                self.throttling
                    .insert(entity.clone(), "gpu_thermal_throttle".into());
            } else if st.power_streak >= 2 {
                let p = g.power_w.map_or_else(|| "?".into(), |p| format!("{p:.0}"));
                let l = g
                    .power_limit_w
                    .map_or_else(|| "?".into(), |p| format!("{p:.0}"));
                out.push(
                    Finding::new(
                        "gpu_power_throttle",
                        &entity,
                        (0.7 + 0.05 * f64::from(st.power_streak.min(4))).min(0.9),
                    )
                    .with_evidence(format!(
                        "{} power cap/brake active, {p} W of {l} W limit",
                        g.uuid
                    ))
                    .with_evidence(clock_ev)
                    .with_jobs(jobs)
                    .with_runbook(format!(
                        "check power limits and PSU of {shown}: `nvidia-smi -q -d POWER -i {}`",
                        g.index
                    )),
                );
                self.throttling
                    .insert(entity.clone(), "gpu_power_throttle".into());
            }
            // ECC: cumulative volatile counters; a decrease is a driver reload (reset).
            if let Some(d) = g.ecc_dbe_volatile {
                if st.dbe.is_some_and(|p| d > p) {
                    out.push(
                        Finding::new("gpu_ecc", &entity, 0.9)
                            .with_evidence(format!("{} double-bit ECC errors +{}", g.uuid, d - st.dbe.unwrap_or(d)))
                            .with_jobs(jobs)
                            .with_runbook(format!("uncorrectable memory errors: drain {shown}, `nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER -i {}`", g.index)),
                    );
                }
                st.dbe = Some(d);
            }
            if let Some(s) = g.ecc_sbe_volatile {
                let delta = st.sbe.map_or(0, |p| s.saturating_sub(p));
                st.sbe_streak = if delta >= SBE_PER_WINDOW {
                    st.sbe_streak + 1
                } else {
                    0
                };
                if st.sbe_streak >= 2 {
                    out.push(
                        Finding::new("gpu_ecc", &entity, 0.7)
                            .with_evidence(format!("{} single-bit ECC errors rising: +{delta} this window", g.uuid))
                            .with_jobs(jobs)
                            .with_runbook(format!("correctable errors rising on {shown} GPU {}: watch for row remapping, plan a replacement", g.index)),
                    );
                }
                st.sbe = Some(s);
            }
        }
        for e in &w.events {
            if e.kind == vocab::EventKind::GpuXid.as_str() {
                out.push(
                    Finding::new("gpu_xid", &e.entity, if matches!(e.code, 48 | 63 | 64 | 74 | 79 | 92 | 94 | 95) { 0.9 } else { 0.75 })
                        .with_evidence(format!("XID {} ({})", e.code, e.detail))
                        .with_jobs(jobs)
                        .with_runbook(format!("XID {} on {}: `nvidia-smi -q`, `dmesg | grep -i xid`; see NVIDIA's XID catalogue for the action", e.code, crate::shell::quote(&e.entity))),
                );
            }
        }
        out
    }
}

impl GpuDetector {
    /// Forgets the GPUs of these hosts.
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.gpus.retain(|e, _| !gone.contains(super::host_of(e)));
    }
}
