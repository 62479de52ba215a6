//! Bounded-overhead mode's controller (see [`crate::launch_budget`]): each
//! window it compares every launching process's trap cost with the budget
//! and sets the share of each period the launch probes stay attached; between
//! windows it attaches and detaches them on that schedule.
use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    time::{Duration, Instant},
};

use super::{entry::EntryKind, ProbeError, Probes};
use crate::{
    config::CudaSection,
    launch_budget::{self, ProcWindow},
};

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
    calibrator: Option<crate::probes::HitCalibrator>,
    /// When the hit cost was last measured.
    calibrated: Instant,
    /// The last [`RECALIBRATE_KEEP`] measurements of the hit cost, seconds.
    recent_hit_s: VecDeque<f64>,
    /// Whether those were taken while a process was launch-heavy (else the
    /// next check with one over budget measures afresh).
    under_load: bool,
    /// Where the per-hit cost comes from (how far it can be trusted).
    cost_source: CostSource,
    /// The estimated relative error of the sampled launch counts (0 while
    /// exact): see [`launch_budget::estimate_error_bound`].
    error_bound: f64,
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

/// CPU time is read in clock ticks (10 ms, `/proc/<pid>/stat`): over a
/// 25–100 ms check a 2-CPU process's rate read 1.4–2.4 CPUs, and that
/// check's trap share then scaled a whole detached period (+19 % in one
/// benchmark round). So the rate is taken over at least this span of the
/// process's recent checks (±0.5 % at 2 CPUs).
pub const CPU_HORIZON: Duration = Duration::from_secs(2);

/// While no process is bounded or on its way to it, checks read the launch
/// slots each time and the overflow hash map at most this often (see
/// [`Probes::raw_launch_totals_idle`]).
pub const OVERFLOW_MAX_AGE: Duration = Duration::from_secs(1);

/// Readings kept per process whatever the check rate.
const CPU_HIST_MAX: usize = 128;

/// Adds the reading `cpu` (CPU seconds) at `now` to `hist` and returns the
/// process's CPU rate (CPUs) since the oldest reading kept: the newest at
/// least `horizon` old, else the oldest there is. `None` with no earlier
/// reading.
pub fn cpu_rate(
    hist: &mut VecDeque<(Instant, f64)>,
    now: Instant,
    cpu: f64,
    horizon: Duration,
) -> Option<f64> {
    hist.push_back((now, cpu));
    while hist.len() > 2
        && hist
            .get(1)
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= horizon)
    {
        hist.pop_front();
    }
    while hist.len() > CPU_HIST_MAX {
        hist.pop_front();
    }
    let &(t0, c0) = hist.front()?;
    let dt = now.saturating_duration_since(t0).as_secs_f64();
    (hist.len() > 1 && dt > 0.0).then(|| (cpu - c0).max(0.0) / dt)
}

/// The per-hit cost from the recent measurements: their median (the upper
/// one of an even count), `None` when there are none.
pub fn recent_cost(recent: &VecDeque<f64>) -> Option<f64> {
    let mut v: Vec<f64> = recent.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
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
            match crate::probes::HitCalibrator::new(kind).and_then(|mut c| {
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
        metrics::gauge!("faultline_cuda_launch_hit_cost_seconds").set(hit_cost_ns * 1e-9);
        metrics::gauge!("faultline_cuda_launch_attached_fraction").set(1.0);
        metrics::gauge!("faultline_cuda_launch_estimate_error_bound").set(0.0);
        metrics::gauge!("faultline_cuda_launch_counts_approximate").set(0.0);
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
        let mut c = crate::probes::HitCalibrator::new(kind)?;
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
            error_bound: 0.0,
        }
    }

    /// The relative uncertainty of the per-hit cost in use: the spread of
    /// the recent measurements (at least
    /// [`launch_budget::HIT_COST_UNCERTAINTY_MIN`]); the floor for a
    /// configured cost; 1 for an assumed one.
    pub fn hit_cost_uncertainty(&self) -> f64 {
        match self.cost_source {
            CostSource::Measured => {
                let v: Vec<f64> = self.recent_hit_s.iter().copied().collect();
                launch_budget::hit_cost_uncertainty(&v)
            }
            CostSource::Configured => launch_budget::HIT_COST_UNCERTAINTY_MIN,
            CostSource::Assumed => 1.0,
        }
    }

    /// The estimated relative error of the sampled launch counts now (0
    /// while exact).
    pub fn error_bound(&self) -> f64 {
        self.error_bound
    }

    /// Whether the sampled launch counts are approximate: their estimated
    /// error is above [`launch_budget::APPROXIMATE_ABOVE`], because the
    /// per-hit cost cannot be known well enough for how much of the
    /// processes' CPU the traps take (single-stepped entries).
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
        probes.set_launch_attached(!attached, Some(window))?;
        if !attached {
            // The period starts when counting does (attaching takes ms).
            self.phase = Instant::now();
        }
        metrics::counter!("faultline_cuda_launch_toggles_total").increment(1);
        Ok(())
    }

    /// CPU seconds (user + system) of `pid` and its age in seconds, from
    /// `/proc/<pid>/stat` and `/proc/uptime`.
    fn cpu_s(&self, pid: u32) -> Option<(f64, f64)> {
        let text =
            std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        let (utime, stime, start) = super::launch_cpu::stat_times(&text)?;
        let (utime, stime, start) = (utime as f64, stime as f64, start as f64);
        let uptime: f64 = std::fs::read_to_string(self.proc_root.join("uptime"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(((utime + stime) / self.ticks, uptime - start / self.ticks))
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
        // Nothing bounded or about to be: the cheap read.
        let idle = self.fraction >= 1.0 && self.strikes.is_empty();
        let totals = if idle {
            probes.raw_launch_totals_idle(OVERFLOW_MAX_AGE)?
        } else {
            probes.raw_launch_totals()?
        };
        let attached_total = probes.launch_attached_total();
        // The first check measures from the controller's start.
        let (t0, att0, tot0, prev_idle) =
            self.prev
                .clone()
                .unwrap_or((self.started, Duration::ZERO, Default::default(), idle));
        let secs = now.saturating_duration_since(t0).as_secs_f64();
        let attached_s = attached_total.saturating_sub(att0).as_secs_f64();
        if self.fraction < 1.0 && attached_s < MIN_ATTACHED_S {
            // Too little counted time to measure yet: the next check covers
            // a longer interval (the decision and the trap shares stay).
            return Ok(None);
        }
        self.prev = Some((now, attached_total, totals.clone(), idle));
        if prev_idle != idle {
            // An idle read holds the overflow map as it was up to
            // OVERFLOW_MAX_AGE ago: a delta between the two kinds of read
            // would put those launches into this interval. The interval
            // starts again here (the decision and the strikes stay).
            return Ok(None);
        }
        let mut procs = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (&pid, &total) in &totals {
            let Some((cpu, age)) = self.cpu_s(pid) else {
                continue;
            };
            seen.insert(pid);
            // No rate at a pid's first reading: then its first sight below.
            let rate = cpu_rate(self.cpu_hist.entry(pid).or_default(), now, cpu, CPU_HORIZON);
            match (rate, tot0.get(&pid)) {
                (Some(rate), Some(&before)) => procs.push(ProcWindow {
                    pid,
                    launches: total.saturating_sub(before),
                    cpu_s: rate * secs,
                }),
                // First sight: its whole life so far, scaled to this
                // interval (its launches were counted at the current
                // fraction), so a launch-heavy process is bounded from its
                // first check on.
                _ if age > 0.0 && secs > 0.0 => {
                    let attached_age = age * self.fraction;
                    if attached_age > 0.0 && attached_s > 0.0 {
                        procs.push(ProcWindow {
                            pid,
                            launches: (total as f64 * attached_s / attached_age) as u64,
                            cpu_s: cpu * secs / age,
                        });
                    }
                }
                _ => {}
            }
        }
        self.cpu_hist.retain(|pid, _| seen.contains(pid));
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
        if due && heavy {
            self.calibrated = now;
            if let Some(c) = self.calibrator.as_mut() {
                let mut got = Vec::new();
                for _ in 0..if fresh { FRESH_MEASUREMENTS } else { 1 } {
                    match c.measure(RECALIBRATE_CALLS, RECALIBRATE_PAIRS) {
                        Ok(ns) if ns > 0.0 => got.push(ns * 1e-9),
                        Ok(_) => {}
                        Err(e) => tracing::debug!(error = %e, "re-measuring the uprobe hit cost"),
                    }
                }
                if !got.is_empty() {
                    if fresh {
                        self.recent_hit_s.clear();
                        self.under_load = true;
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
                    metrics::gauge!("faultline_cuda_launch_hit_cost_seconds").set(self.hit_cost_s);
                }
            }
        }
        let iv = crate::probes::launch_duty::Interval {
            attached_s,
            secs,
            ..Default::default()
        };
        let all =
            launch_budget::decide(self.budget, self.hit_cost_s, iv.attached_s, iv.secs, &procs);
        for p in &procs {
            tracing::debug!(
                pid = p.pid,
                launches = p.launches,
                cpu_s = p.cpu_s,
                attached_s = iv.attached_s,
                secs = iv.secs,
                hit_cost_ns = self.hit_cost_s * 1e9,
                share = all.shares.get(&p.pid).copied().unwrap_or(0.0),
                "launch budget check"
            );
        }
        // Only processes over budget for SUSTAIN_CHECKS checks in a row set
        // the fraction; every process's trap share still corrects its scaling.
        self.strikes
            .retain(|pid, _| all.shares.get(pid).is_some_and(|s| *s > self.budget));
        for (pid, share) in &all.shares {
            if *share > self.budget {
                *self.strikes.entry(*pid).or_default() += 1;
            }
        }
        let sustained: Vec<ProcWindow> = procs
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
            iv.attached_s,
            iv.secs,
            &sustained,
        );
        d.worst = d.worst.or(all.worst);
        d.shares = all.shares;
        let was = self.fraction;
        let was_approximate = self.approximate();
        self.fraction = d.fraction;
        let u = self.hit_cost_uncertainty();
        self.error_bound = if self.fraction < 1.0 {
            d.shares
                .values()
                .map(|&s| launch_budget::estimate_error_bound(self.fraction, s, u))
                .fold(0.0, f64::max)
        } else {
            0.0
        };
        metrics::gauge!("faultline_cuda_launch_estimate_error_bound").set(self.error_bound);
        metrics::gauge!("faultline_cuda_launch_counts_approximate").set(if self.approximate() {
            1.0
        } else {
            0.0
        });
        if self.approximate() && !was_approximate {
            tracing::warn!(
                error_bound = self.error_bound,
                hit_cost_ns = self.hit_cost_s * 1e9,
                hit_cost_uncertainty = u,
                "sampled CUDA launch counts are approximate: the launch traps take so much of the process's CPU that the per-hit cost's uncertainty moves the estimate by more than 5 % (set cuda.launch_budget = 0 for exact counts at full trap cost)"
            );
        }
        let approx = if self.approximate() {
            format!(
                "; APPROXIMATE: estimated error up to {:.0}% (per-hit cost {:.0} ns ± {:.0}%)",
                self.error_bound * 100.0,
                self.hit_cost_s * 1e9,
                u * 100.0
            )
        } else {
            String::new()
        };
        probes.set_launch_proc_root(&self.proc_root);
        probes.set_launch_trap_share(d.shares.clone());
        probes.set_launch_duty(self.fraction);
        metrics::gauge!("faultline_cuda_launch_attached_fraction").set(self.fraction);
        if self.fraction >= 1.0 {
            // Exact: attached, counting without a window.
            probes.set_launch_attached(true, None)?;
        }
        let worst = d
            .worst
            .map(|(pid, s)| {
                format!(
                    "pid {pid}'s launch traps would take {:.1}% of its CPU",
                    s * 100.0
                )
            })
            .unwrap_or_default();
        Ok(if (was >= 1.0) != (self.fraction >= 1.0) {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hit_cost_is_the_median_of_recent_measurements() {
        let us = |v: &[f64]| v.iter().map(|x| x * 1e-6).collect::<VecDeque<f64>>();
        let c = |v: &[f64]| recent_cost(&us(v)).map(|x| (x * 1e9).round());
        assert_eq!(c(&[]), None);
        assert_eq!(c(&[12.9]), Some(12_900.0));
        // A high start and a spike: the median stays with what recurs.
        assert_eq!(c(&[12.9, 9.5, 9.4]), Some(9_500.0));
        assert_eq!(c(&[9.5, 9.4, 17.0, 9.6, 9.3]), Some(9_500.0));
        // Two of five spiking still leave it.
        assert_eq!(c(&[17.0, 9.4, 16.0, 9.6, 9.3]), Some(9_600.0));
        // A real move is followed once it is most of the window.
        assert_eq!(c(&[9.4, 12.0, 12.1, 11.9, 9.3]), Some(11_900.0));
        assert_eq!(c(&[f64::NAN, 9.0]), Some(9_000.0));
    }

    #[test]
    fn the_cpu_rate_spans_the_horizon_not_the_last_check() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut h = VecDeque::new();
        assert_eq!(cpu_rate(&mut h, at(0), 10.0, CPU_HORIZON), None);
        // A 2-CPU process read in 10 ms ticks: 4 s, then a 25 ms check that
        // read one tick too many (2.4 CPUs on its own).
        let r = cpu_rate(&mut h, at(4000), 18.0, CPU_HORIZON).expect("rate");
        assert!((r - 2.0).abs() < 1e-9, "{r}");
        let r = cpu_rate(&mut h, at(4025), 18.06, CPU_HORIZON).expect("rate");
        assert!((r - 2.0).abs() < 0.02, "{r}");
        // Readings older than needed go: the span starts at the newest
        // reading at least the horizon old.
        for k in 1..=100u64 {
            cpu_rate(
                &mut h,
                at(4025 + 100 * k),
                18.06 + 0.2 * k as f64,
                CPU_HORIZON,
            );
        }
        let span = at(14_025).duration_since(h.front().expect("kept").0);
        assert!(
            span >= CPU_HORIZON && span < CPU_HORIZON + Duration::from_millis(100),
            "{span:?}"
        );
        assert!(h.len() <= 22, "{}", h.len());
        // Bounded whatever the check rate.
        let mut h = VecDeque::new();
        for k in 0..1000u64 {
            cpu_rate(&mut h, at(k), k as f64 * 0.002, CPU_HORIZON);
        }
        assert!(h.len() <= CPU_HIST_MAX);
    }
}
