//! Thermal throttles that share a host: GPUs of one chassis share its fans,
//! air path and inlet temperature, so several throttling at once is one
//! cooling fault, not several GPU faults. The rule is a binomial test: with
//! `n` GPUs of the host reporting and `k` of them throttling thermally, how
//! likely are `k` or more were each GPU throttling independently at the
//! share of the rest of the fleet (floored at `shared_fleet_floor`)? Below
//! `shared_significance` (and `k ≥ shared_min_gpus`) the host gets one
//! incident listing its GPUs; a fleet-wide heat problem (a large share
//! throttling everywhere) is not pinned on one host. Once grouped, a host
//! stays grouped while `shared_min_gpus` of its GPUs still throttle.
use std::collections::{HashMap, HashSet};
use vocab::kind::IncidentKind;

use super::GpuConfig;
use crate::engine::{incidents::Finding, stats};

/// GPUs reporting and throttling thermally, per host and over the fleet.
#[derive(Debug, Default)]
pub(super) struct SharedCooling {
    by_host: HashMap<String, (u32, u32)>,
    /// Sums of `by_host`, kept as hosts change (O(1) per window).
    fleet: (u64, u64),
    /// Hosts whose throttles are one host incident now (hysteresis).
    grouped: HashSet<String>,
}

/// Why a host's throttles are one incident.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SharedTest {
    pub k: u32,
    pub n: u32,
    /// Share of the rest of the fleet's GPUs throttling thermally, and
    /// the share the test used (that, floored).
    pub fleet_share: f64,
    pub used_share: f64,
    /// Binomial tail of `k` or more of `n`.
    pub tail: f64,
    /// Held by hysteresis rather than significant this window.
    pub held: bool,
}

impl SharedCooling {
    /// Records that `n` GPUs of `host` report and `hot` throttle thermally
    /// this window, `k` of them long enough to be findings; `Some` when
    /// those `k` are one host incident. The fleet's share counts a GPU
    /// from its first throttling window, so hosts that all heat up at once
    /// see each other whatever order their windows arrive in.
    pub fn judge(
        &mut self,
        cfg: &GpuConfig,
        host: &str,
        (n, hot): (u32, u32),
        k: u32,
    ) -> Option<SharedTest> {
        let old = self.by_host.insert(host.to_string(), (n, hot));
        let (on, ohot) = old.unwrap_or((0, 0));
        self.fleet.0 = self.fleet.0 + u64::from(n) - u64::from(on);
        self.fleet.1 = self.fleet.1 + u64::from(hot) - u64::from(ohot);
        let others_n = self.fleet.0 - u64::from(n);
        let others_k = self.fleet.1 - u64::from(hot);
        let fleet_share = if others_n > 0 {
            others_k as f64 / others_n as f64
        } else {
            0.0
        };
        let used_share = fleet_share.max(cfg.shared_fleet_floor);
        let tail = stats::binomial_upper_sf(u64::from(k), u64::from(n), used_share);
        let enough = k as usize >= cfg.shared_min_gpus;
        let significant = enough && tail < cfg.shared_significance;
        let held = !significant && enough && self.grouped.contains(host);
        if !(significant || held) {
            self.grouped.remove(host);
            return None;
        }
        self.grouped.insert(host.to_string());
        Some(SharedTest {
            k,
            n,
            fleet_share,
            used_share,
            tail,
            held,
        })
    }

    pub fn forget_hosts(&mut self, gone: &HashSet<String>) {
        for h in gone {
            if let Some((n, k)) = self.by_host.remove(h) {
                self.fleet.0 -= u64::from(n);
                self.fleet.1 -= u64::from(k);
            }
            self.grouped.remove(h);
        }
    }
}

/// The host incident: the members' GPUs named, the test that grouped them,
/// one line per member; it absorbs the members' own incidents.
pub(super) fn host_finding(
    host: &str,
    t: &SharedTest,
    members: &[&Finding],
    lines: Vec<String>,
    jobs: &[String],
) -> Finding {
    let names: Vec<&str> = members
        .iter()
        .map(|m| m.entity.rsplit('/').next().unwrap_or(&m.entity))
        .collect();
    let indices: Vec<&str> = names.iter().map(|n| n.trim_start_matches("gpu")).collect();
    let confidence = members
        .iter()
        .map(|m| m.confidence)
        .fold(0.0, f64::max)
        .clamp(0.8, 0.95);
    let basis = if t.used_share > t.fleet_share {
        format!(
            "{:.1}% of the rest of the fleet's GPUs throttle thermally, floored at {:.0}%",
            100.0 * t.fleet_share,
            100.0 * t.used_share
        )
    } else {
        format!(
            "{:.1}% of the rest of the fleet's GPUs throttle thermally",
            100.0 * t.fleet_share
        )
    };
    let test = if t.held {
        format!("still {} of {} GPUs throttling: kept as one host incident (binomial tail {:.1e}; {basis})", t.k, t.n, t.tail)
    } else {
        format!(
            "{} or more of {} GPUs throttling at once by chance: binomial tail {:.1e} ({basis})",
            t.k, t.n, t.tail
        )
    };
    let shown = crate::shell::quote(host);
    let mut f = Finding::new(IncidentKind::GpuThermalThrottle, host, confidence)
        .with_evidence(format!(
            "{} of {} GPUs of {host} throttling thermally at once ({}): shared cooling (fans, air path, inlet temperature), not one GPU",
            t.k,
            t.n,
            names.join(", ")
        ))
        .with_evidence(test)
        .with_evidence_list(lines)
        .with_jobs(jobs)
        .with_runbook(format!(
            "check the cooling {shown}'s GPUs {} share: `ipmitool sdr type Fan`, `ipmitool sdr type Temperature` (inlet), `nvidia-smi -q -d TEMPERATURE,PERFORMANCE`; the rack's airflow and the room's supply temperature",
            indices.join(", ")
        ));
    for m in members {
        f = f.with_mark(format!("member:{}", m.entity));
    }
    f.absorbs = members.iter().map(|m| m.entity.clone()).collect();
    f
}
