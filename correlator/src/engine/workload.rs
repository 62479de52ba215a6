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
use std::collections::{HashMap, VecDeque};

use proto::v1::Window;

use super::config::WorkloadConfig;

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
    pub kind: &'static str,
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
    fn learn(&mut self, x: f64, n: u64, min_noise: f64) {
        if self.normal.len() == HISTORY {
            self.normal.pop_front();
        }
        self.normal.push_back((x, n));
        self.learnt = self.learnt.saturating_add(n);
        let xs: Vec<f64> = self.normal.iter().map(|v| v.0).collect();
        self.mu = super::median(&xs);
        // Noise of one observation: the spread of the window means, each
        // scaled by √n (a mean of n has 1/√n of one observation's spread).
        let d: Vec<f64> = self
            .normal
            .iter()
            .map(|&(x, n)| (x - self.mu).abs() * (n as f64).sqrt())
            .collect();
        self.sigma = (1.4826 * super::median(&d)).max(min_noise);
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
    format!("{job}/{}", model_name(model))
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
        let cfg = self.cfg.clone();
        let (start, end) = (w.start_unix_ms, w.end_unix_ms);
        // Placement, from step reports and workload samples.
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
        let mut out = Vec::new();
        // Step time per job: this host's slowest rank.
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
        let delta = (1.0 + cfg.min_slowdown).ln();
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
            let Some(c) = sh.observe(
                done.start_ms,
                done.end_ms,
                done.max_x,
                done.max_n,
                delta,
                &cfg,
            ) else {
                continue;
            };
            let by_cadence = inferred(job);
            out.push(Symptom {
                kind: "job_slowdown",
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
        // Inference latency per (job, model, signal), pooled over replicas.
        let delta = (1.0 + cfg.min_latency_increase).ln();
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
            let Some(c) = sh.observe(done.start_ms, done.end_ms, x, done.count, delta, &cfg) else {
                continue;
            };
            let model = model_name(&s.model);
            out.push(Symptom {
                kind: "inference_latency",
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
        self.forget(end);
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
        self.places.retain(|_, jp| !jp.ranks.is_empty());
    }
}

impl Symptom {
    /// Whether an incident (kind, entity, evidence) on the infrastructure
    /// explains this symptom: it sits on a GPU, HCA port, host or device
    /// that one of the job's ranks uses.
    pub fn explained_by(&self, kind: &str, entity: &str, evidence: &[String]) -> bool {
        self.places
            .iter()
            .any(|p| place_explained(p, kind, entity, evidence))
    }

    /// The placement that ties the symptom to the cause, for the evidence
    /// ("rank 7 on n003 uses gpu1 and mlx5_1").
    pub fn via(&self, kind: &str, entity: &str, evidence: &[String]) -> String {
        let Some(p) = self
            .places
            .iter()
            .find(|p| place_explained(p, kind, entity, evidence))
        else {
            return String::new();
        };
        let mut s = if p.rank >= 0 {
            format!("rank {} on {}", p.rank, p.host)
        } else {
            format!("served from {}", p.host)
        };
        let mut uses = Vec::new();
        if p.device >= 0 {
            uses.push(format!("gpu{}", p.device));
        }
        if !p.hca.is_empty() {
            uses.push(p.hca.clone());
        }
        if !uses.is_empty() {
            s.push_str(&format!(" uses {}", uses.join(" and ")));
        }
        s
    }

    /// The symptom's own incident, when no cause explains it.
    pub fn finding(&self) -> super::Finding {
        if self.kind == "straggler" {
            let host = self.places.first().map_or("", |p| p.host.as_str());
            let sh = crate::shell::quote(host);
            let rank = self.places.first().map_or(-1, |p| p.rank);
            return super::Finding::new("straggler", &self.entity, 0.6)
                .with_evidence(self.line.clone())
                .with_evidence(format!("no GPU throttling, link degradation or storage stall found on {host} for this rank"))
                .with_jobs(std::slice::from_ref(&self.job))
                .with_runbook(format!("1 workload: rank {rank}'s step time against its peers (data loader, CPU contention `top -H` on {sh}, `py-spy dump`); 2 GPU: `nvidia-smi -q -d PERFORMANCE` on {sh}; 3 fabric: `NCCL_DEBUG=INFO`, `perfquery -x` on its HCA; 4 storage: `iostat -x 1` on {sh}"));
        }
        let hosts: Vec<&str> = {
            let mut h: Vec<&str> = self.places.iter().map(|p| p.host.as_str()).collect();
            h.sort_unstable();
            h.dedup();
            h
        };
        let shown = hosts.iter().take(8).copied().collect::<Vec<_>>().join(", ");
        // The runbook's copy: each host one shell word.
        let shown_sh = hosts
            .iter()
            .take(8)
            .map(|h| crate::shell::quote(h))
            .collect::<Vec<_>>()
            .join(", ");
        let more = if hosts.len() > 8 {
            format!(" and {} more", hosts.len() - 8)
        } else {
            String::new()
        };
        let conf = (0.55 + 0.2 * (self.ratio - 1.0).min(1.0)).min(0.8);
        super::Finding::new(self.kind, &self.entity, conf)
            .with_evidence(self.line.clone())
            .with_evidence(format!(
                "no open GPU, link, storage or node incident on the {} rank(s) of {} on {shown}{more}",
                self.places.len(),
                self.job
            ))
            .with_jobs(std::slice::from_ref(&self.job))
            .with_runbook(runbook(
                self.kind,
                &crate::shell::quote(&self.job),
                &shown_sh,
            ))
    }
}

fn place_explained(p: &Place, kind: &str, entity: &str, evidence: &[String]) -> bool {
    let host = format!("{}/", p.host);
    match kind {
        k if k.starts_with("gpu_") => {
            p.device >= 0 && entity == format!("{}/gpu{}", p.host, p.device)
        }
        "ib_link_degraded" | "ib_link_down" | "ib_link_flapping" => {
            let port = if p.hca.is_empty() {
                host
            } else {
                format!("{}/{}/", p.host, p.hca)
            };
            entity.starts_with(&port)
                || evidence
                    .iter()
                    .any(|e| e.starts_with(&format!("reported by {port}")))
        }
        "storage_latency" => entity.starts_with(&host),
        "node_lost" => entity == p.host,
        // Another tenant on a GPU, port or device of this rank's host.
        "interference" => {
            entity == format!("{}/gpu{}", p.host, p.device)
                || (!p.hca.is_empty() && entity.starts_with(&format!("{}/{}/", p.host, p.hca)))
                || evidence.iter().any(|e| {
                    e.starts_with("shared storage ") && e.ends_with(&format!(" on {}", p.host))
                })
        }
        _ => false,
    }
}

/// The cross-layer runbook of an unexplained workload symptom: workload →
/// GPU → fabric → storage → external.
fn runbook(kind: &str, job: &str, hosts: &str) -> String {
    let first = if kind == "inference_latency" {
        format!("1 workload: {job}'s request mix (prompt/output lengths), batch size and queue depth (gen_ai.* metrics), KV-cache pressure, a model or engine upgrade")
    } else {
        format!("1 workload: {job}'s phase (eval, recompilation, data loader stalls: `py-spy dump`), batch size and input pipeline")
    };
    format!(
        "{first}; 2 GPU on {hosts}: `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER,TEMPERATURE` for throttle reasons, `dcgmi diag -r 1`; 3 fabric: `perfquery -x` / `mlxlink -c` on the ranks' HCAs, `NCCL_DEBUG=INFO` for ring/tree changes; 4 storage: `iostat -x 1` and the checkpoint/dataset filesystem's latency; 5 external: other tenants on the nodes (CPU steal, memory bandwidth), shared filesystem or object store, upstream services"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> WorkloadConfig {
        WorkloadConfig::default()
    }

    /// Feeds `k` windows of `steps` steps at `secs` (± a deterministic
    /// 1 % wobble); returns the first window index with a change.
    fn feed(
        sh: &mut Shift,
        t: &mut i64,
        win_ms: i64,
        k: usize,
        secs: f64,
        steps: u64,
    ) -> Option<usize> {
        let delta = (1.0f64 + cfg().min_slowdown).ln();
        let mut first = None;
        for i in 0..k {
            let wobble = 1.0 + 0.01 * (((i * 7) % 5) as f64 - 2.0) / 2.0;
            let c = sh.observe(*t, *t + win_ms, (secs * wobble).ln(), steps, delta, &cfg());
            *t += win_ms;
            if c.is_some() && first.is_none() {
                first = Some(i);
            }
        }
        first
    }

    #[test]
    fn a_15_percent_slowdown_is_found_after_the_same_time_at_any_window_length() {
        // 2 s steps: 1 s windows report every other window, 30 s windows 15.
        for (win_ms, steps) in [(2_000i64, 1u64), (10_000, 5), (30_000, 15)] {
            let mut sh = Shift::default();
            let mut t = 0;
            let warm = (120_000 / win_ms) as usize;
            assert_eq!(feed(&mut sh, &mut t, win_ms, warm, 2.0, steps), None);
            let found = feed(&mut sh, &mut t, win_ms, 40, 2.3, steps).expect("found");
            let after_s = (found as i64 + 1) * win_ms / 1000;
            assert!(
                (20..=60).contains(&after_s),
                "window {win_ms} ms: found after {after_s} s"
            );
        }
    }

    #[test]
    fn steady_wobble_and_a_5_percent_drift_open_nothing() {
        let mut sh = Shift::default();
        let mut t = 0;
        assert_eq!(feed(&mut sh, &mut t, 10_000, 200, 2.0, 5), None);
        assert_eq!(feed(&mut sh, &mut t, 10_000, 100, 2.1, 5), None);
    }
}
