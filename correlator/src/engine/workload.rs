//! Workload symptoms: a job whose step time rose against its own history
//! (`job_slowdown`) and a model server whose time to first token, time per
//! output token or request duration rose against its own history
//! (`inference_latency`).
//!
//! The test is a change-point in observation units, not in windows: each
//! window contributes its mean log step time (or latency) weighted by how
//! many steps (requests) it covers, so 1 s and 30 s windows reach the same
//! verdict after the same number of steps. A run of windows above the
//! baseline opens when its mean log ratio reaches `ln(1 + min_slowdown)`,
//! its z score (against the noise the own history shows, scaled to one
//! observation) reaches `z`, and it has lasted `min_persist_s`.
//!
//! The detector also remembers where each job's ranks run (host, GPU, HCA)
//! so that the engine can join a symptom to an infrastructure root cause.
//!
//! A restarted job is a new run ([`restart`]): its step-time history
//! starts again, and its warm-up steps are neither judged nor learnt.
use std::collections::{HashMap, VecDeque};

use proto::v1::Window;
use vocab::kind::IncidentKind;

mod config;
mod explain;
pub mod placement;
pub mod restart;

pub use config::WorkloadConfig;

/// Normal windows whose median is the baseline.
const HISTORY: usize = 32;
/// A run longer than this is the job's new normal (a new phase, a new
/// batch size): the baseline restarts from it instead of alarming forever.
const NEW_NORMAL_S: f64 = 1800.0;
/// Bounds: jobs (and model series) tracked, ranks remembered per job.
const MAX_SERIES: usize = 10_000;
const MAX_RANKS: usize = 8192;
/// A series or placement not reported for this long is forgotten.
const FORGET_MS: i64 = 600_000;

/// Where one rank (or serving process) runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Place {
    pub host: String,
    pub rank: i32,
    pub device: i32,
    pub hca: String,
}

/// A workload symptom, before it is joined to a cause.
#[derive(Clone, Debug)]
pub struct Symptom {
    pub kind: IncidentKind,
    pub job: String,
    pub entity: String,
    /// The measured impact, one evidence line.
    pub line: String,
    /// Observed over baseline (1.11 = +11 %).
    pub ratio: f64,
    pub since_ms: i64,
    /// Where the job's ranks run (the straggler: only its own).
    pub places: Vec<Place>,
}

#[derive(Debug, Default)]
struct Run {
    since_ms: i64,
    last_ms: i64,
    n: u64,
    /// Σ n·(x − μ) and Σ n·x over the run.
    dev: f64,
    sum_x: f64,
}

/// A series' own history and its current elevated run.
#[derive(Debug, Default)]
struct Shift {
    normal: VecDeque<(f64, u64)>,
    learnt: u64,
    mu: f64,
    sigma: f64,
    run: Option<Run>,
    seen_ms: i64,
    /// Steps of a new run still to skip (its warm-up).
    warmup: u64,
}

/// The verdict on one series this window.
struct Change {
    ratio: f64,
    z: f64,
    since_ms: i64,
    n: u64,
    baseline: f64,
    mean: f64,
}

impl Shift {
    /// A new run: the history starts again after `warmup` skipped steps.
    fn restart(&mut self, warmup: u64) {
        *self = Self {
            seen_ms: self.seen_ms,
            warmup,
            ..Self::default()
        };
    }

    /// Whether a slot of `n` steps over `[start_ms, end_ms)` is warm-up:
    /// inside a new run's first steps, or the first after the job's steps
    /// paused for [`restart::GAP_MS`] (a restart that went unseen).
    fn warming(&mut self, start_ms: i64, end_ms: i64, n: u64) -> bool {
        if self.warmup == 0 && self.seen_ms > 0 && start_ms - self.seen_ms >= restart::GAP_MS {
            self.warmup = restart::WARMUP_STEPS;
        }
        if self.warmup == 0 {
            return false;
        }
        self.warmup = self.warmup.saturating_sub(n.max(1));
        self.seen_ms = end_ms;
        self.run = None;
        true
    }

    fn learn(&mut self, x: f64, n: u64, min_noise: f64) {
        if self.normal.len() == HISTORY {
            self.normal.pop_front();
        }
        self.normal.push_back((x, n));
        self.learnt = self.learnt.saturating_add(n);
        let xs: Vec<f64> = self.normal.iter().map(|v| v.0).collect();
        self.mu = super::stats::median(&xs);
        // Noise of one observation: the spread of the window means, each
        // scaled by √n (a mean of n has 1/√n of one observation's spread).
        let d: Vec<f64> = self
            .normal
            .iter()
            .map(|&(x, n)| (x - self.mu).abs() * (n as f64).sqrt())
            .collect();
        self.sigma = (1.4826 * super::stats::median(&d)).max(min_noise);
    }

    /// One window's mean log value `x` over `n` observations in
    /// `[start_ms, end_ms)`; a change when the elevated run is significant.
    fn observe(
        &mut self,
        start_ms: i64,
        end_ms: i64,
        x: f64,
        n: u64,
        delta: f64,
        cfg: &WorkloadConfig,
    ) -> Option<Change> {
        self.seen_ms = end_ms;
        if n == 0 || !x.is_finite() {
            return None;
        }
        if self.learnt < cfg.warm_observations || self.normal.len() < 3 {
            self.learn(x, n, cfg.min_noise);
            return None;
        }
        if x - self.mu <= delta / 2.0 {
            self.run = None;
            self.learn(x, n, cfg.min_noise);
            return None;
        }
        let run = self.run.get_or_insert_with(|| Run {
            since_ms: start_ms,
            ..Run::default()
        });
        run.last_ms = end_ms;
        run.n = run.n.saturating_add(n);
        run.dev += n as f64 * (x - self.mu);
        run.sum_x += n as f64 * x;
        let d = run.dev / run.n as f64;
        let z = d * (run.n as f64).sqrt() / self.sigma;
        let span_s = (run.last_ms - run.since_ms) as f64 / 1000.0;
        let change = Change {
            ratio: d.exp(),
            z,
            since_ms: run.since_ms,
            n: run.n,
            baseline: self.mu.exp(),
            mean: (run.sum_x / run.n as f64).exp(),
        };
        if span_s > NEW_NORMAL_S {
            // The level held for half an hour: it is the new normal.
            let level = run.sum_x / run.n as f64;
            self.run = None;
            self.normal.clear();
            self.learnt = 0;
            self.learn(level, n, cfg.min_noise);
            return None;
        }
        (d >= delta && z >= cfg.z && span_s >= cfg.min_persist_s).then_some(change)
    }
}

/// One time slot of a series, pooled over the hosts that report it: the
/// engine sees host windows one at a time, so a series is judged once per
/// slot, when the first window of the next slot arrives.
#[derive(Clone, Debug, Default)]
struct Slot {
    start_ms: i64,
    end_ms: i64,
    /// Steps: the slowest rank's mean log step time and its count (a
    /// synchronous job runs at its slowest rank's pace).
    max_x: f64,
    max_n: u64,
    /// Latency: pooled sum and count over every replica.
    sum: f64,
    count: u64,
}

impl Slot {
    fn same(&self, start_ms: i64, end_ms: i64) -> bool {
        let half = ((self.end_ms - self.start_ms) / 2).max(1);
        (end_ms - self.end_ms).abs() < half && (start_ms - self.start_ms).abs() < half
    }
}

#[derive(Debug, Default)]
struct JobPlaces {
    ranks: HashMap<(String, i32), (Place, i64)>,
}

#[derive(Debug, Default)]
pub struct WorkloadDetector {
    cfg: WorkloadConfig,
    /// Event time of the latest forget sweep.
    forgot_at: i64,
    steps: HashMap<String, (Shift, Option<Slot>)>,
    latency: HashMap<(String, String, String), (Shift, Option<Slot>)>,
    places: HashMap<String, JobPlaces>,
    /// The jobs' processes and communicators, to see them restart.
    restarts: restart::Restarts,
    /// Series not tracked because a bound was reached.
    pub dropped: u64,
}

/// Inference signals judged against their own history.
const LATENCY_SIGNALS: &[(&str, &str)] = &[
    ("ttft_seconds", "time to first token"),
    ("tpot_seconds", "time per output token"),
    ("request_seconds", "request duration"),
];

/// A model as shown in evidence (a sample may name none).
fn model_name(model: &str) -> &str {
    if model.is_empty() {
        "(no model)"
    } else {
        model
    }
}

/// The entity of a model server's latency incident: `<job>/<model>`.
pub fn model_entity(job: &str, model: &str) -> String {
    vocab::entity::model(job, model_name(model))
}

/// Adds a host's contribution to the series' open slot; returns the
/// previous slot, complete, when this window starts a new one.
fn pool(
    slot: &mut Option<Slot>,
    start_ms: i64,
    end_ms: i64,
    add: impl FnOnce(&mut Slot),
) -> Option<Slot> {
    let mut done = None;
    match slot {
        Some(s) if s.same(start_ms, end_ms) => {}
        Some(s) if end_ms < s.end_ms => return None, // late: that slot is judged
        _ => {
            done = slot.take();
            *slot = Some(Slot {
                start_ms,
                end_ms,
                ..Slot::default()
            });
        }
    }
    if let Some(s) = slot.as_mut() {
        add(s);
    }
    done
}

fn clock(ms: i64) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

impl WorkloadDetector {
    pub fn new(cfg: WorkloadConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// Where the job's ranks run (latest report of each).
    pub fn places(&self, job: &str) -> Vec<Place> {
        let mut v: Vec<Place> = self
            .places
            .get(job)
            .map(|p| p.ranks.values().map(|(pl, _)| pl.clone()).collect())
            .unwrap_or_default();
        v.sort_by(|a, b| (a.rank, &a.host).cmp(&(b.rank, &b.host)));
        v
    }

    fn place(&mut self, job: &str, p: Place, at_ms: i64) {
        if job.is_empty() {
            return;
        }
        if !self.places.contains_key(job) && self.places.len() >= MAX_SERIES {
            self.dropped += 1;
            return;
        }
        let jp = self.places.entry(job.to_string()).or_default();
        let key = (p.host.clone(), p.rank);
        if !jp.ranks.contains_key(&key) && jp.ranks.len() >= MAX_RANKS {
            self.dropped += 1;
            return;
        }
        jp.ranks.insert(key, (p, at_ms));
    }

    /// Updates placements and series from one host window; returns the
    /// symptoms that are significant now.
    pub fn observe(&mut self, host: &str, w: &Window) -> Vec<Symptom> {
        self.observe_with(host, w, |_| false)
    }

    /// As [`Self::observe`]; `inferred(job)` says the job's step times are
    /// its NCCL collectives' interval (`engine::nccl`), which the evidence
    /// then calls what it is.
    pub fn observe_with(
        &mut self,
        host: &str,
        w: &Window,
        inferred: impl Fn(&str) -> bool,
    ) -> Vec<Symptom> {
        self.place_ranks(host, w);
        for job in self.restarts.observe(host, w) {
            if let Some((sh, slot)) = self.steps.get_mut(&job) {
                tracing::debug!(job, host, "job restarted: a new step-time baseline");
                sh.restart(restart::WARMUP_STEPS);
                *slot = None;
            }
        }
        self.dropped += std::mem::take(&mut self.restarts.dropped);
        let mut out = self.step_symptoms(w, inferred);
        out.extend(self.latency_symptoms(w));
        self.forget(w.end_unix_ms);
        out
    }

    /// Placement, from step reports and workload samples.
    fn place_ranks(&mut self, host: &str, w: &Window) {
        let end = w.end_unix_ms;
        for s in &w.steps {
            let p = Place {
                host: host.to_string(),
                rank: i32::try_from(s.rank).unwrap_or(i32::MAX),
                device: s.device,
                hca: s.hca.clone(),
            };
            self.place(&s.job, p, end);
        }
        for s in &w.workload {
            let p = Place {
                host: host.to_string(),
                rank: s.rank,
                device: s.device,
                hca: s.hca.clone(),
            };
            self.place(&s.job, p, end);
        }
    }

    /// Step time per job (this host's slowest rank), pooled per slot and
    /// judged against the job's history.
    fn step_symptoms(&mut self, w: &Window, inferred: impl Fn(&str) -> bool) -> Vec<Symptom> {
        let (start, end) = (w.start_unix_ms, w.end_unix_ms);
        let mut out = Vec::new();
        let mut per_job: HashMap<&str, (f64, u64)> = HashMap::new();
        for s in &w.steps {
            if s.seconds <= 0.0 || !s.seconds.is_finite() {
                continue;
            }
            let x = s.seconds.ln();
            let n = u64::from(s.count.max(1));
            let e = per_job.entry(s.job.as_str()).or_insert((f64::MIN, 0));
            if x > e.0 {
                *e = (x, n);
            }
        }
        let delta = (1.0 + self.cfg.min_slowdown).ln();
        for (job, (x, n)) in per_job {
            if !self.steps.contains_key(job) && self.steps.len() >= MAX_SERIES {
                self.dropped += 1;
                continue;
            }
            let (sh, slot) = self.steps.entry(job.to_string()).or_default();
            let done = pool(slot, start, end, |s| {
                if x > s.max_x || s.max_n == 0 {
                    s.max_x = x;
                    s.max_n = n;
                }
            });
            let Some(done) = done else { continue };
            if sh.warming(done.start_ms, done.end_ms, done.max_n) {
                continue;
            }
            let Some(c) = sh.observe(
                done.start_ms,
                done.end_ms,
                done.max_x,
                done.max_n,
                delta,
                &self.cfg,
            ) else {
                continue;
            };
            let by_cadence = inferred(job);
            out.push(Symptom {
                kind: IncidentKind::JobSlowdown,
                job: job.to_string(),
                entity: job.to_string(),
                line: format!(
                    "job {job} {} +{:.0}% since {} ({:.3} s vs {:.3} s baseline over {} {}, z {:.1})",
                    if by_cadence {
                        "interval between NCCL collectives (its step time, inferred: no OTLP)"
                    } else {
                        "step time"
                    },
                    100.0 * (c.ratio - 1.0),
                    clock(c.since_ms),
                    c.mean,
                    c.baseline,
                    c.n,
                    if by_cadence { "collectives" } else { "steps" },
                    c.z
                ),
                ratio: c.ratio,
                since_ms: c.since_ms,
                places: self.places(job),
            });
        }
        out
    }

    /// Inference latency per (job, model, signal), pooled over replicas
    /// per slot and judged against its history.
    fn latency_symptoms(&mut self, w: &Window) -> Vec<Symptom> {
        let (start, end) = (w.start_unix_ms, w.end_unix_ms);
        let mut out = Vec::new();
        let delta = (1.0 + self.cfg.min_latency_increase).ln();
        for s in &w.workload {
            let Some((_, what)) = LATENCY_SIGNALS.iter().find(|(n, _)| *n == s.signal) else {
                continue;
            };
            if s.count == 0 || s.sum <= 0.0 || !s.sum.is_finite() {
                continue;
            }
            let key = (s.job.clone(), s.model.clone(), s.signal.clone());
            if !self.latency.contains_key(&key) && self.latency.len() >= MAX_SERIES {
                self.dropped += 1;
                continue;
            }
            let (sh, slot) = self.latency.entry(key).or_default();
            let done = pool(slot, start, end, |p| {
                p.sum += s.sum;
                p.count += s.count;
            });
            let Some(done) = done else { continue };
            let x = (done.sum / done.count.max(1) as f64).ln();
            let Some(c) = sh.observe(done.start_ms, done.end_ms, x, done.count, delta, &self.cfg)
            else {
                continue;
            };
            let model = model_name(&s.model);
            out.push(Symptom {
                kind: IncidentKind::InferenceLatency,
                job: s.job.clone(),
                entity: model_entity(&s.job, &s.model),
                line: format!(
                    "{} {model} mean {what} +{:.0}% since {} ({:.1} ms vs {:.1} ms baseline over {} requests, z {:.1})",
                    s.job,
                    100.0 * (c.ratio - 1.0),
                    clock(c.since_ms),
                    c.mean * 1e3,
                    c.baseline * 1e3,
                    c.n,
                    c.z
                ),
                ratio: c.ratio,
                since_ms: c.since_ms,
                places: self.places(&s.job),
            });
        }
        out
    }

    /// Drops series and placements not reported for `FORGET_MS` (a sweep
    /// at most once per second of event time: O(series) per second, not per
    /// window).
    fn forget(&mut self, now_ms: i64) {
        if now_ms - self.forgot_at < 1000 && now_ms >= self.forgot_at {
            return;
        }
        self.forgot_at = now_ms;
        let old = now_ms - FORGET_MS;
        self.steps
            .retain(|_, (s, p)| s.seen_ms >= old || p.as_ref().is_some_and(|p| p.end_ms >= old));
        self.latency
            .retain(|_, (s, p)| s.seen_ms >= old || p.as_ref().is_some_and(|p| p.end_ms >= old));
        for jp in self.places.values_mut() {
            jp.ranks.retain(|_, (_, at)| *at >= old);
        }
        self.restarts.forget(old);
        self.places.retain(|_, jp| !jp.ranks.is_empty());
    }
}

#[cfg(test)]
mod tests;
