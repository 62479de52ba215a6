//! Bounded-overhead mode's controller (see [`crate::launch_budget`]): each
//! window it compares every launching process's trap cost with the budget
//! and sets the share of each period the launch probes stay attached; between
//! windows it attaches and detaches them on that schedule.
use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    time::{Duration, Instant},
};

pub mod bound;
mod cost;
mod decide;
mod measure;
#[cfg(test)]
mod tests;

use super::CudaSection;
use crate::{
    launch_budget,
    probes::{entry::EntryKind, ProbeError, Probes},
};
pub use cost::{recent_cost, RECALIBRATE_KEEP};
pub use measure::{cpu_rate, CPU_HORIZON, OVERFLOW_MAX_AGE};

/// How often the controller compares launch cost with the budget: often
/// enough that a launch-heavy process is bounded within a fraction of a second.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Counted (attached) time a check needs before it decides.
const MIN_ATTACHED_S: f64 = 0.02;

/// While a process is over budget but not yet for [`SUSTAIN_CHECKS`] checks,
/// the checks come this often: every check at full trap cost is paid by the
/// process, so the decision is quick once launching is seen.
pub const CHECK_SOON: Duration = Duration::from_millis(25);

/// Consecutive checks a process must be over budget before the probes are
/// duty-cycled for it: launch-heavy means sustained launching (≥ 200
/// launches in each of 3 checks, the last two [`CHECK_SOON`] apart). A
/// burst (a few hundred launches, then waiting) costs well under a
/// millisecond of traps, and scaling a burst seen through a duty cycle
/// would turn exact counts into wrong estimates.
pub const SUSTAIN_CHECKS: u32 = 3;

pub struct LaunchController {
    budget: f64,
    period: Duration,
    hit_cost_s: f64,
    fraction: f64,
    /// Start of the current period (attached from here for `fraction × period`).
    phase: Instant,
    /// pid → (when, CPU seconds) at recent checks, back to
    /// [`CPU_HORIZON`] ago: the CPU rate is taken over that span.
    cpu_hist: HashMap<u32, VecDeque<(Instant, f64)>>,
    /// At the previous check: when, the launch probes' total attached time,
    /// raw launches per pid, and whether they were an idle read
    /// ([`Probes::raw_launch_totals_idle`]).
    prev: Option<(
        Instant,
        Duration,
        std::collections::BTreeMap<u32, u64>,
        bool,
    )>,
    next_check: Instant,
    started: Instant,
    proc_root: PathBuf,
    ticks: f64,
    /// pid → consecutive checks over budget.
    strikes: HashMap<u32, u32>,
    /// Measures the per-hit cost again at each check while a process is
    /// over budget (`None` when `launch_hit_cost_ns` is configured).
    calibrator: Option<super::calibrate::HitCalibrator>,
    /// When the hit cost was last measured.
    calibrated: Instant,
    /// The last [`RECALIBRATE_KEEP`] measurements of the hit cost, seconds.
    recent_hit_s: VecDeque<f64>,
    /// Whether those were taken while a process was launch-heavy (else the
    /// next check with one over budget measures afresh).
    under_load: bool,
    /// Where the per-hit cost comes from (how far it can be trusted).
    cost_source: CostSource,
    /// Every hit-cost measurement taken while processes were launch-heavy
    /// (the last [`bound::KEPT`] × 4): the cost's drift while the mode runs.
    run_hit_s: VecDeque<f64>,
    /// Per launching process: its windows' rates and trap shares ([`bound`]).
    tracks: HashMap<u32, bound::RateTrack>,
    /// When the open window's gate closes (`None`: exact, no end).
    gate_close: Option<Instant>,
    /// The estimated relative error of the sampled launch counts (0 while
    /// exact): see [`bound::error_bound`].
    error_bound: f64,
    /// The terms of it, for the process that set it.
    bound_terms: BoundTerms,
}

/// What the error bound is made of, for the process with the largest bound.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BoundTerms {
    /// Its trap share (the median of its recent checks').
    pub share: f64,
    /// The per-hit cost's relative uncertainty: its in-run drift (at least
    /// the floor) plus the share's own spread.
    pub cost_uncertainty: f64,
    /// How much the rate may differ between counted and uncounted time
    /// (measured between windows and within them; [`bound::UNMEASURED`]
    /// before a change was measured) plus the CPU ticks' truncation.
    pub rate_variation: f64,
    /// Rate changes measured so far.
    pub changes: usize,
}

/// Where the per-hit cost the controller budgets and scales with comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostSource {
    /// Measured on an entry of the launch probe's kind (and again under load).
    Measured,
    /// `cuda.launch_hit_cost_ns`, or given to [`LaunchController::with`].
    Configured,
    /// Neither: a typical bare-metal trap, assumed.
    Assumed,
}

impl LaunchController {
    /// `None` when the mode is off (`launch_budget = 0`) or nothing is
    /// probed; `say` gets the line for the console.
    pub fn new(
        cfg: &CudaSection,
        proc_root: &std::path::Path,
        probes: &Probes,
        say: impl Fn(String),
    ) -> Option<Self> {
        if cfg.launch_budget <= 0.0 || !probes.has_launch_probes() {
            return None;
        }
        let mut calibrator = None;
        let mut source = CostSource::Configured;
        let hit_cost_ns = if cfg.launch_hit_cost_ns > 0 {
            cfg.launch_hit_cost_ns as f64
        } else {
            // The empty trap alone: in a launching process the program's
            // own work adds little (measured: a launch storm's cost per
            // launch is within 5 % of this).
            // Calibrated on an entry of the launch probe's own kind.
            let kind = probes.launch_entry_kind().unwrap_or(EntryKind::Stepped);
            match super::calibrate::HitCalibrator::new(kind).and_then(|mut c| {
                let ns = c.measure(500, 7)?;
                Ok((c, ns))
            }) {
                Ok((c, ns)) => {
                    calibrator = Some(c);
                    source = CostSource::Measured;
                    ns
                }
                Err(e) => {
                    // Without a measurement, a typical bare-metal int3 trap.
                    tracing::warn!(error = %e, "cannot measure the uprobe hit cost; assuming 2 µs (set cuda.launch_hit_cost_ns); sampled launch counts will be marked approximate");
                    source = CostSource::Assumed;
                    2000.0
                }
            }
        };
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_HIT_COST_SECONDS.name)
            .set(hit_cost_ns * 1e-9);
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_ATTACHED_FRACTION.name).set(1.0);
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_ESTIMATE_ERROR_BOUND.name).set(0.0);
        metrics::gauge!(crate::metrics_catalog::CUDA_LAUNCH_COUNTS_APPROXIMATE.name).set(0.0);
        say(format!(
            "cuda launch probes: bounded-overhead mode on (budget {:.2}% of a process's CPU, hit cost {:.0} ns{})",
            cfg.launch_budget * 100.0,
            hit_cost_ns,
            match &calibrator {
                Some(c) => format!(" measured on a {} entry, the launch probe's kind", c.kind().name()),
                None if cfg.launch_hit_cost_ns > 0 => " as configured".to_string(),
                None => " assumed".to_string(),
            }
        ));
        let mut ctl = Self::with(
            cfg.launch_budget,
            Duration::from_millis(cfg.launch_period_ms.max(10)),
            hit_cost_ns * 1e-9,
            proc_root,
        );
        ctl.calibrator = calibrator;
        ctl.cost_source = source;
        Some(ctl)
    }

    /// A controller that measures the per-hit cost itself on an entry of
    /// `kind` (the launch probe's, [`Probes::launch_entry_kind`]), at start
    /// and again at each check while a process is over budget (what the
    /// collector does unless `cuda.launch_hit_cost_ns` is set).
    pub fn calibrating(
        budget: f64,
        period: Duration,
        proc_root: &std::path::Path,
        kind: EntryKind,
    ) -> Result<Self, ProbeError> {
        let mut c = super::calibrate::HitCalibrator::new(kind)?;
        let ns = c.measure(500, 7)?;
        let mut ctl = Self::with(budget, period, ns * 1e-9, proc_root);
        ctl.calibrator = Some(c);
        ctl.cost_source = CostSource::Measured;
        Ok(ctl)
    }

    /// The per-hit cost the controller budgets with now, seconds.
    pub fn hit_cost_s(&self) -> f64 {
        self.hit_cost_s
    }

    /// A controller with explicit budget, period and per-hit cost (seconds).
    pub fn with(
        budget: f64,
        period: Duration,
        hit_cost_s: f64,
        proc_root: &std::path::Path,
    ) -> Self {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self {
            budget,
            period,
            hit_cost_s,
            fraction: 1.0,
            phase: Instant::now(),
            cpu_hist: HashMap::new(),
            prev: None,
            started: Instant::now(),
            next_check: Instant::now() + CHECK_EVERY,
            proc_root: proc_root.to_path_buf(),
            ticks: if ticks > 0 { ticks as f64 } else { 100.0 },
            strikes: HashMap::new(),
            calibrator: None,
            calibrated: Instant::now(),
            recent_hit_s: VecDeque::from([hit_cost_s]),
            under_load: false,
            cost_source: CostSource::Configured,
            run_hit_s: VecDeque::new(),
            tracks: HashMap::new(),
            gate_close: None,
            error_bound: 0.0,
            bound_terms: BoundTerms::default(),
        }
    }

    /// The estimated relative error of the sampled launch counts now (0
    /// while exact).
    pub fn error_bound(&self) -> f64 {
        self.error_bound
    }

    /// What [`Self::error_bound`] is made of.
    pub fn bound_terms(&self) -> BoundTerms {
        self.bound_terms
    }

    /// Whether the sampled launch counts are approximate: their estimated
    /// error is above [`launch_budget::APPROXIMATE_ABOVE`] (the traps take
    /// so much of a process's CPU that the per-hit cost's uncertainty moves
    /// the estimate that much, or its launch rate moves that much between
    /// windows, or it has not been measured yet).
    pub fn approximate(&self) -> bool {
        self.error_bound > launch_budget::APPROXIMATE_ABOVE
    }

    /// The attached share of each period now (1 = exact).
    pub fn fraction(&self) -> f64 {
        self.fraction
    }

    /// When the launch probes should next be attached or detached (`None`
    /// while exact).
    pub fn next_toggle(&self, attached: bool) -> Option<Instant> {
        if self.fraction >= 1.0 {
            return None;
        }
        Some(if attached {
            self.phase + self.period.mul_f64(self.fraction)
        } else {
            self.phase + self.period
        })
    }

    /// Attaches or detaches on schedule.
    pub fn toggle(&mut self, probes: &mut Probes) -> Result<(), ProbeError> {
        let attached = probes.launch_probes_attached();
        // Attached, launches count for exactly the attached share of the
        // period (the gate's window), however late this runs.
        let window = self.period.mul_f64(self.fraction);
        // Detached, the raw counts stand still: read before attaching.
        let before = (!attached).then(|| self.read_now(probes));
        // An open window closes at its scheduled end, or now (leaving exact mode).
        let closes = self.gate_close.take().unwrap_or_else(Instant::now);
        probes.set_launch_attached(!attached, Some(window))?;
        if !attached {
            // The period starts when counting does (attaching takes ms).
            self.phase = Instant::now();
            self.gate_close = Some(self.phase + window);
        }
        match before {
            Some(r) => self.open_tracks(r, self.phase),
            None => {
                let r = self.read_now(probes);
                self.close_tracks(r, closes);
            }
        }
        metrics::counter!(crate::metrics_catalog::CUDA_LAUNCH_TOGGLES.name).increment(1);
        Ok(())
    }

    /// When [`Self::on_event`] should next run: the next toggle or check.
    pub fn next_event(&self, attached: bool) -> Instant {
        match self.next_toggle(attached) {
            Some(t) => t.min(self.next_check),
            None => self.next_check,
        }
    }

    /// Runs what is due: a check of the budget (every [`CHECK_EVERY`]) or
    /// a toggle. Returns a console line when the mode changes.
    pub fn on_event(&mut self, probes: &mut Probes) -> Result<Option<String>, ProbeError> {
        let now = Instant::now();
        if now >= self.next_check {
            let r = self.check(probes);
            // A process on its way to being bounded is checked again soon.
            let pending = self.fraction >= 1.0 && !self.strikes.is_empty();
            self.next_check = Instant::now() + if pending { CHECK_SOON } else { CHECK_EVERY };
            return r;
        }
        if self
            .next_toggle(probes.launch_probes_attached())
            .is_some_and(|t| t <= now)
        {
            self.toggle(probes)?;
        }
        Ok(None)
    }

    /// Decides the next fraction from the launches and CPU since the last
    /// check. Returns the console line, if any.
    pub fn check(&mut self, probes: &mut Probes) -> Result<Option<String>, ProbeError> {
        let now = Instant::now();
        let Some(m) = self.measure(probes, now)? else {
            return Ok(None);
        };
        self.recalibrate(now);
        let was = self.fraction;
        let counting = probes.launch_probes_attached();
        let d = self.decide(&m, counting);
        self.apply(probes, &d)?;
        Ok(self.report(was, &d))
    }
}
