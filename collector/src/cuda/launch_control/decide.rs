//! What a check decides from its measurement (the attached share of each
//! period, each process's trap share, the estimate's error), how it applies
//! that to the probes, and the console line it reports.
use super::{bound, measure::Measured, BoundTerms, LaunchController, SUSTAIN_CHECKS};
use crate::{
    launch_budget::{self, Decision, ProcWindow},
    probes::{ProbeError, Probes},
};

impl LaunchController {
    /// The next fraction: only processes over budget for [`SUSTAIN_CHECKS`]
    /// checks in a row set it; every process's trap share is kept (it still
    /// corrects its scaling). Updates the estimate's error bound.
    pub(super) fn decide(&mut self, m: &Measured, counting: bool) -> Decision {
        let all =
            launch_budget::decide(self.budget, self.hit_cost_s, m.attached_s, m.secs, &m.procs);
        for p in &m.procs {
            tracing::debug!(
                pid = p.pid,
                launches = p.launches,
                cpu_s = p.cpu_s,
                attached_s = m.attached_s,
                secs = m.secs,
                hit_cost_ns = self.hit_cost_s * 1e9,
                share = all.shares.get(&p.pid).copied().unwrap_or(0.0),
                "launch budget check"
            );
        }
        self.strikes
            .retain(|pid, _| all.shares.get(pid).is_some_and(|s| *s > self.budget));
        for (pid, share) in &all.shares {
            if *share > self.budget {
                *self.strikes.entry(*pid).or_default() += 1;
            }
        }
        let sustained: Vec<ProcWindow> = m
            .procs
            .iter()
            .filter(|p| {
                self.strikes
                    .get(&p.pid)
                    .is_some_and(|n| *n >= SUSTAIN_CHECKS)
            })
            .copied()
            .collect();
        let mut d = launch_budget::decide(
            self.budget,
            self.hit_cost_s,
            m.attached_s,
            m.secs,
            &sustained,
        );
        d.worst = d.worst.or(all.worst);
        self.track(m, counting, &all.shares, d.fraction);
        // The scaling's trap share: each process's median of its recent
        // checks (one check's share reads ±15 % around it under load).
        d.shares = all
            .shares
            .iter()
            .map(|(pid, s)| {
                let m = self.tracks.get(pid).and_then(|t| t.share());
                (*pid, m.unwrap_or(*s))
            })
            .collect();
        let was_approximate = self.approximate();
        self.fraction = d.fraction;
        self.update_error_bound(&d, was_approximate);
        d
    }

    /// Keeps each launching process's readings and trap share while
    /// processes are launch-heavy ([`super::bound::RateTrack`]): a check
    /// while the probes count reads inside the window (opening one for a
    /// process not yet read); none are kept once all are exact again.
    fn track(
        &mut self,
        m: &Measured,
        counting: bool,
        shares: &std::collections::BTreeMap<u32, f64>,
        fraction: f64,
    ) {
        if fraction >= 1.0 && self.strikes.is_empty() {
            self.tracks.clear();
            return;
        }
        let alive: std::collections::HashSet<u32> = m.readings.iter().map(|r| r.0).collect();
        self.tracks.retain(|pid, _| alive.contains(pid));
        for &(pid, raw, cpu) in &m.readings {
            if !shares.contains_key(&pid) && !self.tracks.contains_key(&pid) {
                continue;
            }
            let t = self.tracks.entry(pid).or_default();
            if let Some(&s) = shares.get(&pid) {
                t.note_share(s);
            }
            if counting {
                if t.is_open() {
                    t.read(raw, cpu);
                } else {
                    t.open(raw, cpu);
                }
            }
        }
    }

    /// The estimated error of the sampled counts at the new fraction: the
    /// largest over the launching processes of [`bound::error_bound`] with
    /// the hit cost's in-run drift and the process's share spread, rate
    /// variation and tick truncation.
    fn update_error_bound(&mut self, d: &Decision, was_approximate: bool) {
        let u = self.hit_cost_uncertainty();
        let tick = 1.0 / self.ticks;
        let mut worst = (0.0, BoundTerms::default());
        if self.fraction < 1.0 {
            for (pid, &s) in &d.shares {
                let t = self.tracks.get(pid);
                let share_u = t.map_or(0.0, |t| t.share_spread());
                let changes = t.map_or(0, |t| t.changes().len());
                let rate = match t.and_then(|t| t.variation()) {
                    Some(v) => v + bound::quantization(tick, t.map_or(0.0, |t| t.uncounted_cpu_s)),
                    None => bound::UNMEASURED,
                };
                let b = bound::error_bound(self.fraction, s, u + share_u, rate);
                if b >= worst.0 {
                    worst = (
                        b,
                        BoundTerms {
                            share: s,
                            cost_uncertainty: u + share_u,
                            rate_variation: rate,
                            changes,
                        },
                    );
                }
            }
        }
        self.error_bound = worst.0;
        self.bound_terms = worst.1;
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_ESTIMATE_ERROR_BOUND.name)
            .set(self.error_bound);
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_COUNTS_APPROXIMATE.name)
            .set(if self.approximate() { 1.0 } else { 0.0 });
        if self.approximate() && !was_approximate {
            tracing::warn!(
                error_bound = self.error_bound,
                hit_cost_ns = self.hit_cost_s * 1e9,
                cost_uncertainty = self.bound_terms.cost_uncertainty,
                rate_variation = self.bound_terms.rate_variation,
                trap_share = self.bound_terms.share,
                "sampled CUDA launch counts are approximate: the per-hit cost's uncertainty at the traps' share of the process's CPU, or its launch rate's variation between windows (unmeasured before its first window), moves the estimate by more than 5 % (set cuda.launch_budget = 0 for exact counts at full trap cost)"
            );
        }
    }

    /// Hands the decision to the probes: the trap shares and duty that
    /// scale the counts; exact mode attaches without a window.
    pub(super) fn apply(&mut self, probes: &mut Probes, d: &Decision) -> Result<(), ProbeError> {
        probes.set_launch_proc_root(&self.proc_root);
        probes.set_launch_trap_share(d.shares.clone());
        probes.set_launch_duty(self.fraction);
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_ATTACHED_FRACTION.name)
            .set(self.fraction);
        if self.fraction >= 1.0 {
            // Exact: attached, counting without a window.
            probes.set_launch_attached(true, None)?;
            self.gate_close = None;
        }
        Ok(())
    }

    /// The console line: when the mode changed from `was`, or while sampled.
    pub(super) fn report(&self, was: f64, d: &Decision) -> Option<String> {
        let approx = if self.approximate() {
            format!(
                "; APPROXIMATE: estimated error up to {:.0}% (per-hit cost {:.0} ns ± {:.0}%, launch rate ± {:.0}% between windows)",
                self.error_bound * 100.0,
                self.hit_cost_s * 1e9,
                self.bound_terms.cost_uncertainty * 100.0,
                self.bound_terms.rate_variation * 100.0
            )
        } else {
            String::new()
        };
        let worst = d
            .worst
            .map(|(pid, s)| {
                format!(
                    "pid {pid}'s launch traps would take {:.1}% of its CPU",
                    s * 100.0
                )
            })
            .unwrap_or_default();
        if (was >= 1.0) != (self.fraction >= 1.0) {
            Some(if self.fraction < 1.0 {
                format!(
                    "cuda launch probes: sampled — attached {:.1}% of each {:.1} s ({worst} > budget {:.2}%); launch counts are scaled estimates, blocking calls stay exact{approx}",
                    self.fraction * 100.0,
                    self.period.as_secs_f64(),
                    self.budget * 100.0
                )
            } else {
                format!("cuda launch probes: exact again ({worst})")
            })
        } else {
            (self.fraction < 1.0).then(|| {
                format!(
                    "cuda launches sampled: probes attached {:.1}% of each period ({worst}){approx}",
                    self.fraction * 100.0
                )
            })
        }
    }
}
