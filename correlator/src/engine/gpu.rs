//! GPU detectors: `gpu_thermal_throttle` and `gpu_power_throttle` (throttle
//! flags with a real clock drop, for consecutive windows; thermal throttles
//! of several GPUs of one host at once are one host incident, [`shared`]),
//! `gpu_xid` and `app_xid` (XID events judged application or hardware,
//! [`xid`]; a GPU that fell off the bus), `nvswitch_sxid` (NVSwitch
//! errors on the switch tray), `gpu_ecc`
//! (double-bit errors, single-bit errors rising fast, row remapping pending
//! or failed, [`ecc`]), `gpu_nvlink_errors` (NVLink data-link errors
//! against the fleet, [`nvlink`]).
use std::collections::HashMap;
use vocab::kind::IncidentKind;

use proto::v1::{GpuSample, Window};

use super::incidents::Finding;

mod config;
mod ecc;
mod nvlink;
mod shared;
#[cfg(test)]
mod tests;
mod xid;
mod xid_finding;
#[cfg(test)]
mod xid_tests;

pub use config::GpuConfig;

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
    /// Rows remapped for uncorrectable errors at the previous window.
    remapped_unc: Option<u64>,
}

#[derive(Debug, Default)]
pub struct GpuDetector {
    cfg: GpuConfig,
    gpus: HashMap<String, GpuState>,
    /// Entities throttling now: used to explain stragglers.
    pub throttling: HashMap<String, String>,
    nvlink: nvlink::NvLinkDetector,
    shared: shared::SharedCooling,
    xid: xid::XidJudge,
}

/// A GPU's thermal throttle this window: its finding, and its line in a
/// host incident's evidence.
struct Thermal {
    finding: Finding,
    line: String,
}

impl GpuDetector {
    pub fn new(cfg: GpuConfig) -> Self {
        Self {
            nvlink: nvlink::NvLinkDetector::new(cfg.clone()),
            cfg,
            ..Self::default()
        }
    }

    /// The entities besides `host/…` whose open incidents a window of
    /// `host` answers for: the host itself (a shared-cooling incident), so
    /// it resolves once its GPUs cool.
    pub fn evaluated(&self, host: &str) -> Vec<String> {
        vec![host.to_string()]
    }

    /// Links with state in the NVLink detector (all hosts).
    pub fn nvlinks_tracked(&self) -> usize {
        self.nvlink.tracked()
    }

    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        let mut out = Vec::new();
        let mut thermal = Vec::new();
        // GPUs reporting, and with a thermal throttle this window (for the
        // fleet's share: one window is enough to count there).
        let (mut reporting, mut hot) = (0u32, 0u32);
        for g in &w.gpus {
            reporting += u32::from(!g.lost);
            hot += u32::from(self.observe_gpu(host, g, jobs, &mut out, &mut thermal));
        }
        out.extend(self.group_thermal(host, (reporting, hot), thermal, jobs));
        out.extend(self.nvlink.observe(host, w, jobs));
        out.extend(self.xid.observe(&self.cfg, host, w, jobs));
        out
    }

    /// One GPU's sample: lost, throttles (thermal ones into `thermal`, to
    /// be grouped by host), ECC and row remapping. Whether it throttles
    /// thermally this window.
    fn observe_gpu(
        &mut self,
        host: &str,
        g: &GpuSample,
        jobs: &[String],
        out: &mut Vec<Finding>,
        thermal: &mut Vec<Thermal>,
    ) -> bool {
        // Runbooks name the host as one shell word.
        let shown = crate::shell::quote(host);
        let entity = vocab::entity::gpu(host, g.index);
        let st = self.gpus.entry(entity.clone()).or_default();
        if g.lost {
            out.push(
                Finding::new(IncidentKind::GpuXid, &entity, 0.95)
                    .with_evidence(format!("{} fell off the bus (NVML GPU_IS_LOST)", g.uuid))
                    .with_jobs(jobs)
                    .with_runbook(format!("drain {shown}; `nvidia-smi -q -i {}`, check PCIe/power; a reset or node reboot is usually needed", g.index)),
            );
            return false;
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
            let what = format!(
                "thermal slowdown ({}), temperature {temp} C",
                if mask & 0x40 != 0 { "HW" } else { "SW" }
            );
            thermal.push(Thermal {
                line: format!("{entity}: {} {what}; {clock_ev}", g.uuid),
                finding: Finding::new(IncidentKind::GpuThermalThrottle, &entity, (0.75 + 0.05 * f64::from(st.thermal_streak.min(4))).min(0.95))
                    .with_evidence(format!("{} {what}", g.uuid))
                    .with_evidence(clock_ev.clone())
                    .with_jobs(jobs)
                    .with_runbook(format!("check cooling of {shown} GPU {}: `nvidia-smi -q -d TEMPERATURE,PERFORMANCE -i {}`, fans/airflow, inlet temperature", g.index, g.index)),
            });
            self.throttling
                .insert(entity.clone(), "gpu_thermal_throttle".into());
        } else if st.power_streak >= 2 {
            let p = g.power_w.map_or_else(|| "?".into(), |p| format!("{p:.0}"));
            let l = g
                .power_limit_w
                .map_or_else(|| "?".into(), |p| format!("{p:.0}"));
            out.push(
                Finding::new(
                    IncidentKind::GpuPowerThrottle,
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
        let hot = st.thermal_streak > 0;
        out.extend(ecc::judge(st, g, &entity, &shown, jobs));
        hot
    }

    /// The window's thermal throttles of one host: one host incident when
    /// they are too many to be independent ([`shared`]), else one per GPU.
    fn group_thermal(
        &mut self,
        host: &str,
        (reporting, hot): (u32, u32),
        thermal: Vec<Thermal>,
        jobs: &[String],
    ) -> Vec<Finding> {
        let k = thermal.len() as u32;
        let Some(test) = self.shared.judge(&self.cfg, host, (reporting, hot), k) else {
            return thermal.into_iter().map(|t| t.finding).collect();
        };
        let members: Vec<&Finding> = thermal.iter().map(|t| &t.finding).collect();
        let lines: Vec<String> = thermal.iter().map(|t| t.line.clone()).collect();
        vec![shared::host_finding(host, &test, &members, lines, jobs)]
    }

    /// Forgets the GPUs (and their links) of these hosts.
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.gpus
            .retain(|e, _| !gone.contains(vocab::entity::host_of(e)));
        self.throttling
            .retain(|e, _| !gone.contains(vocab::entity::host_of(e)));
        self.nvlink.forget_hosts(gone);
        self.shared.forget_hosts(gone);
        self.xid.forget_hosts(gone);
    }
}
