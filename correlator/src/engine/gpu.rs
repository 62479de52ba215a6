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
    /// Recent XIDs (ms, code), at most [`XID_KEPT`].
    xids: std::collections::VecDeque<(i64, i64)>,
}

/// XIDs of one code on one GPU within this long count as repeated ...
pub const XID_REPEAT_MS: i64 = 3_600_000;
/// ... from this many on: NVIDIA's catalog asks to escalate an XID that
/// recurs (an application fault on one GPU again and again is the GPU's);
/// three in an hour is our reading of "recurs", not NVIDIA's number.
pub const XID_REPEATS: usize = 3;
/// Recent XIDs kept per GPU (memory bound).
const XID_KEPT: usize = 64;

/// The incident of one XID: NVIDIA's action for its code (escalated when
/// it recurs), the meaning, and a runbook for that action.
fn xid_finding(e: &proto::v1::Event, repeats: usize, jobs: &[String]) -> Finding {
    use vocab::xid::{self, Action};
    let entry = u32::try_from(e.code).ok().and_then(xid::lookup);
    let meaning = entry.map_or("not in NVIDIA's Xid catalog", |x| x.1);
    let base = entry.map_or(Action::Unknown, |x| x.2);
    let action = if repeats >= XID_REPEATS {
        base.escalated()
    } else {
        base
    };
    let confidence = match action {
        Action::RebootNode | Action::EccWorkflow | Action::NvlinkWorkflow => 0.95,
        a if a.is_hardware() => 0.9,
        Action::Unknown => 0.75,
        _ => 0.6,
    };
    let gpu = crate::shell::quote(&e.entity);
    let mut f = Finding::new("gpu_xid", &e.entity, confidence)
        .with_evidence(format!("XID {} ({meaning}; {})", e.code, e.detail))
        .with_evidence(format!(
            "NVIDIA's action for XID {}: {} ({})",
            e.code,
            base.bucket(),
            base.what_to_do()
        ))
        .with_jobs(jobs);
    if action != base {
        f = f.with_evidence(format!(
            "XID {} {repeats} times on this GPU within an hour: escalated to {} ({})",
            e.code,
            action.bucket(),
            action.what_to_do()
        ));
    }
    f.with_mark(format!("xid_action:{}", action.bucket()))
        .with_runbook(format!(
            "XID {} on {gpu}: {}; `dmesg -T | grep -i xid` for its message and neighbours, `nvidia-smi -q` (NVIDIA's Xid catalog: docs.nvidia.com/deploy/xid-errors)",
            e.code,
            action.what_to_do()
        ))
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
            let entity = vocab::entity::gpu(host, g.index);
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
                let repeats = self.note_xid(&e.entity, e.code, e.unix_ms);
                out.push(xid_finding(e, repeats, jobs));
            }
        }
        out
    }

    /// Records an XID of `entity` at `ms`; returns how many of that code the
    /// GPU had within [`XID_REPEAT_MS`] (this one included).
    fn note_xid(&mut self, entity: &str, code: i64, ms: i64) -> usize {
        let st = self.gpus.entry(entity.to_string()).or_default();
        st.xids.retain(|&(t, _)| ms - t < XID_REPEAT_MS);
        st.xids.push_back((ms, code));
        while st.xids.len() > XID_KEPT {
            st.xids.pop_front();
        }
        st.xids.iter().filter(|&&(_, c)| c == code).count()
    }
}

impl GpuDetector {
    /// Forgets the GPUs of these hosts.
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.gpus.retain(|e, _| !gone.contains(super::host_of(e)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::v1::Event;

    fn xid(ms: i64, gpu: u32, code: i64) -> Window {
        Window {
            start_unix_ms: ms - 1000,
            end_unix_ms: ms,
            events: vec![Event {
                unix_ms: ms,
                kind: vocab::EventKind::GpuXid.to_string(),
                entity: format!("h1/gpu{gpu}"),
                detail: "GPU-0000".into(),
                code,
            }],
            ..Window::default()
        }
    }

    #[test]
    fn a_gpu_off_the_bus_and_an_application_fault_get_different_actions() {
        let mut d = GpuDetector::default();
        let bus = d.observe("h1", &xid(1000, 0, 79), &[]).remove(0);
        let app = d.observe("h1", &xid(1000, 1, 13), &[]).remove(0);
        assert!(bus
            .evidence
            .iter()
            .any(|e| e.starts_with("XID 79 (GPU has fallen off the bus")));
        assert!(bus
            .evidence
            .iter()
            .any(|e| e.contains("RESTART_BM (drain the node and reboot it")));
        assert!(
            bus.runbook.contains("drain the node and reboot it"),
            "{}",
            bus.runbook
        );
        assert!(app
            .evidence
            .iter()
            .any(|e| e.contains("RESTART_APP (restart the application; the GPU is healthy")));
        assert!(
            app.runbook.contains("restart the application"),
            "{}",
            app.runbook
        );
        assert!(bus.confidence > app.confidence);
        assert_eq!(bus.marks, vec!["xid_action:RESTART_BM".to_string()]);
    }

    #[test]
    fn an_application_xid_that_recurs_on_one_gpu_escalates_to_a_reset() {
        let mut d = GpuDetector::default();
        let mut f = Vec::new();
        for k in 0..3 {
            f = d.observe("h1", &xid(1000 + k * 600_000, 2, 31), &[]);
        }
        let f = &f[0];
        assert_eq!(f.marks, vec!["xid_action:RESET_GPU".to_string()]);
        assert!(
            f.evidence.iter().any(|e| e
                .starts_with("XID 31 3 times on this GPU within an hour: escalated to RESET_GPU")),
            "{f:?}"
        );
        // Two hours later the count starts again.
        let later = d.observe("h1", &xid(1000 + 3 * 3_600_000, 2, 31), &[]);
        assert_eq!(later[0].marks, vec!["xid_action:RESTART_APP".to_string()]);
        // An uncatalogued code says so.
        let odd = d.observe("h1", &xid(5000, 3, 1), &[]);
        assert!(
            odd[0].evidence[0].contains("not in NVIDIA's Xid catalog"),
            "{:?}",
            odd[0]
        );
    }
}
