//! The per-hit cost the controller budgets and scales with: measured again
//! while a process is launch-heavy, the median of the recent measurements.
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::{CostSource, LaunchController};
use crate::launch_budget;

/// While a process is over budget the hit cost is measured again at most
/// this often (at each completed check with the default 4 s period), with
/// this many calls per side and pairs (about 3 ms of the agent's CPU at
/// 10 µs traps), and the cost used is the median of the last
/// [`RECALIBRATE_KEEP`] measurements. A VM's trap cost moved between 9 and
/// 17 µs within minutes here, and single measurements spiked above what the
/// launching process paid: a spike moved a running mean (weight 0.5) and
/// with it a whole period's scaled count (+21 % in one benchmark round on
/// single-stepped entries); the median of five ignores up to two.
const RECALIBRATE_EVERY: Duration = Duration::from_secs(2);
const RECALIBRATE_CALLS: u32 = 100;
const RECALIBRATE_PAIRS: u32 = 3;
pub const RECALIBRATE_KEEP: usize = 5;
/// Measurements taken at once the first time a process is launch-heavy.
const FRESH_MEASUREMENTS: usize = 3;

/// The per-hit cost from the recent measurements: their median (the upper
/// one of an even count), `None` when there are none.
pub fn recent_cost(recent: &VecDeque<f64>) -> Option<f64> {
    let mut v: Vec<f64> = recent.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

impl LaunchController {
    /// The relative uncertainty of the per-hit cost in use: the largest
    /// deviation from it of any measurement taken while processes were
    /// launch-heavy, i.e. its drift while the mode runs (at least
    /// [`launch_budget::HIT_COST_UNCERTAINTY_MIN`],
    /// [`super::bound::cost_drift`]); the floor for a configured cost; 1 for
    /// an assumed one.
    pub fn hit_cost_uncertainty(&self) -> f64 {
        match self.cost_source {
            CostSource::Measured => {
                let v: Vec<f64> = self.run_hit_s.iter().copied().collect();
                super::bound::cost_drift(&v, self.hit_cost_s)
            }
            CostSource::Configured => launch_budget::HIT_COST_UNCERTAINTY_MIN,
            CostSource::Assumed => 1.0,
        }
    }

    /// While a process is launch-heavy (bounded, or on its way to it):
    /// measures the hit cost again when due, and uses the median of the
    /// recent measurements.
    pub(super) fn recalibrate(&mut self, now: Instant) {
        // A launch-heavy process is being (or about to be) bounded: its
        // scaling rests on the per-hit cost, which drifts with the machine.
        let heavy = self.fraction < 1.0 || !self.strikes.is_empty();
        if !heavy {
            self.under_load = false;
        }
        // The first time under a launch-heavy process the cost is measured
        // at once and the start-up measurement dropped: taken on a quieter
        // machine it read 11.0–12.9 µs a single-stepped hit against
        // 9.4–9.7 µs under the storm and 9.8 µs paid in it, and it set the
        // first period's scaling (+15 % in that period).
        let fresh = heavy && !self.under_load;
        let due = fresh || now.saturating_duration_since(self.calibrated) >= RECALIBRATE_EVERY;
        if !(due && heavy) {
            return;
        }
        self.calibrated = now;
        let Some(c) = self.calibrator.as_mut() else {
            return;
        };
        let mut got = Vec::new();
        for _ in 0..if fresh { FRESH_MEASUREMENTS } else { 1 } {
            match c.measure(RECALIBRATE_CALLS, RECALIBRATE_PAIRS) {
                Ok(ns) if ns > 0.0 => got.push(ns * 1e-9),
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "re-measuring the uprobe hit cost"),
            }
        }
        if got.is_empty() {
            return;
        }
        if fresh {
            self.recent_hit_s.clear();
            self.run_hit_s.clear();
            self.under_load = true;
        }
        for &g in &got {
            if self.run_hit_s.len() >= 4 * super::bound::KEPT {
                self.run_hit_s.pop_front();
            }
            self.run_hit_s.push_back(g);
        }
        for g in got {
            if self.recent_hit_s.len() >= RECALIBRATE_KEEP {
                self.recent_hit_s.pop_front();
            }
            self.recent_hit_s.push_back(g);
        }
        if let Some(c) = recent_cost(&self.recent_hit_s) {
            self.hit_cost_s = c;
        }
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_HIT_COST_SECONDS.name)
            .set(self.hit_cost_s);
    }
}
