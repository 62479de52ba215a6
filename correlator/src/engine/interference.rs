//! `interference`: one tenant's job saturates a resource another tenant's
//! job shares (a block device, an HCA port, a time-sliced GPU) and that job
//! slows down.
//!
//! Input: the collectors' usage rows (`Window.usage`: per job and resource,
//! with the resource's utilisation) and the workload symptoms of the window
//! (a job's step-time regression, a straggling rank, a model's latency
//! regression), which carry the victim's onset and placement. For each
//! resource the victim uses on the hosts it runs on, the window history is
//! split at the victim's onset; interference needs all of:
//!
//! * saturation: the resource's median utilisation since the onset at or
//!   above its kind's saturation point (`[detect.interference]`);
//! * an aggressor: another job whose load on the resource at least
//!   `jump_ratio` times its own before the onset, and whose increase is at
//!   least `min_share` of the resource's increase — it, not the victim, took
//!   the resource to saturation;
//! * not the victim's own change: the victim's usage of the resource per
//!   step (bytes, launches: its work rate × step time) grew by less than `own_change` of its
//!   slowdown (a job that reads twice the data per step is slower on its
//!   own account).
//!
//! A saturating job that slows no one raises nothing (there is no victim
//! symptom); a victim's new phase with no aggressor raises nothing here
//! (its own `job_slowdown` does). State is bounded: `max_series` (host,
//! resource, job) series of at most `history` windows each, at most
//! `max_series_per_host` of them per host.
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use proto::v1::Window;

use super::{incidents::Finding, stats::median, workload::Symptom};

mod config;
pub use config::InterferenceConfig;

/// The incident kind.
pub const KIND: vocab::kind::IncidentKind = vocab::kind::IncidentKind::Interference;

/// Shared resources (GPUs, ports, block devices) tracked per host.
const MAX_RESOURCES_PER_HOST: usize = 256;

#[derive(Debug, Default)]
struct Series {
    team: String,
    /// (window end, load in utilisation units, usage per step or NaN).
    hist: VecDeque<(i64, f64, f64)>,
}

#[derive(Debug, Default)]
struct Resource {
    /// (window end, utilisation).
    util: VecDeque<(i64, f64)>,
    jobs: BTreeMap<String, Series>,
    /// Medians before a victim's onset, kept once computed: a regression
    /// that outlasts the history still has its baseline (at most
    /// `MAX_FROZEN` onsets per resource).
    frozen: BTreeMap<i64, Baseline>,
}

/// A resource's medians before an onset.
#[derive(Clone, Debug, Default)]
struct Baseline {
    util: f64,
    /// Per job: (load, work per step or NaN).
    jobs: BTreeMap<String, (f64, f64)>,
}

const MAX_FROZEN: usize = 4;

impl Resource {
    /// The medians before `split`, from the history or as frozen earlier.
    fn baseline(&mut self, split: i64) -> Option<Baseline> {
        if let Some(b) = self.frozen.get(&split) {
            return Some(b.clone());
        }
        let (util, _) = split_medians(self.util.iter().copied(), split);
        let b = Baseline {
            util: util?,
            jobs: self
                .jobs
                .iter()
                .map(|(j, s)| {
                    let (l, _) = split_medians(s.hist.iter().map(|h| (h.0, h.1)), split);
                    let (p, _) = split_medians(s.hist.iter().map(|h| (h.0, h.2)), split);
                    (j.clone(), (l.unwrap_or(0.0), p.unwrap_or(f64::NAN)))
                })
                .collect(),
        };
        if self.frozen.len() >= MAX_FROZEN {
            self.frozen.pop_first();
        }
        self.frozen.insert(split, b.clone());
        Some(b)
    }
}

#[derive(Debug, Default)]
pub struct InterferenceDetector {
    cfg: InterferenceConfig,
    /// Per host, per (resource kind, resource).
    res: HashMap<String, BTreeMap<(String, String), Resource>>,
    series: usize,
    /// Series per host (its share: `max_series_per_host`).
    per_host: HashMap<String, usize>,
    /// Series not kept because `max_series` were tracked, or the host's
    /// `max_series_per_host`.
    pub dropped: u64,
}

/// The entity of a resource: the GPU, the HCA port or the block device.
pub fn entity(host: &str, kind: &str, resource: &str) -> String {
    match kind {
        "gpu" => vocab::entity::gpu(host, resource),
        _ => format!("{host}/{resource}"),
    }
}

fn push<T>(q: &mut VecDeque<T>, v: T, cap: usize) {
    q.push_back(v);
    while q.len() > cap {
        q.pop_front();
    }
}

/// Medians before and since `split` of `xs` (None when a side is empty).
fn split_medians(xs: impl Iterator<Item = (i64, f64)>, split: i64) -> (Option<f64>, Option<f64>) {
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for (t, v) in xs {
        if v.is_finite() {
            if t <= split {
                before.push(v);
            } else {
                after.push(v);
            }
        }
    }
    let m = |v: &Vec<f64>| (!v.is_empty()).then(|| median(v));
    (m(&before), m(&after))
}

impl InterferenceDetector {
    pub fn new(cfg: InterferenceConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        let mut freed = 0;
        self.res.retain(|h, rs| {
            let keep = !gone.contains(h);
            if !keep {
                freed += rs.values().map(|r| r.jobs.len()).sum::<usize>();
            }
            keep
        });
        self.series = self.series.saturating_sub(freed);
        self.per_host.retain(|h, _| !gone.contains(h));
    }

    /// Records the window's usage rows, then judges the symptoms' victims.
    pub fn observe(&mut self, host: &str, w: &Window, symptoms: &[Symptom]) -> Vec<Finding> {
        if !self.cfg.enabled {
            return Vec::new();
        }
        self.record(host, w);
        let mut out: BTreeMap<String, Finding> = BTreeMap::new();
        for s in symptoms {
            for f in self.judge(s) {
                match out.get_mut(&f.entity) {
                    Some(have) if have.confidence >= f.confidence => {
                        for j in f.jobs {
                            if !have.jobs.contains(&j) {
                                have.jobs.push(j);
                            }
                        }
                    }
                    _ => {
                        out.insert(f.entity.clone(), f);
                    }
                }
            }
        }
        out.into_values().collect()
    }

    fn record(&mut self, host: &str, w: &Window) {
        if w.usage.is_empty() {
            return;
        }
        let secs = ((w.end_unix_ms - w.start_unix_ms).max(1)) as f64 / 1000.0;
        // The job's mean step time on this host (per-step usage).
        let mut steps: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
        for s in &w.steps {
            let n = f64::from(s.count.max(1));
            let e = steps.entry(s.job.as_str()).or_default();
            e.0 += s.seconds * n;
            e.1 += n;
        }
        // Totals per resource, for each job's share of the utilisation.
        let value = |u: &proto::v1::JobUsage| match u.resource_kind.as_str() {
            "gpu" => u.gpu_busy_seconds,
            "fabric" => u.fabric_bytes as f64,
            _ => u.io_device_ns as f64,
        };
        let mut total: BTreeMap<(&str, &str), (f64, f64)> = BTreeMap::new();
        for u in &w.usage {
            let e = total
                .entry((u.resource_kind.as_str(), u.resource.as_str()))
                .or_default();
            e.0 += value(u);
            e.1 = e.1.max(u.resource_util);
        }
        let cap = self.cfg.history.max(4);
        let rs = self.res.entry(host.to_string()).or_default();
        for ((kind, res), (_, util)) in &total {
            let key = (kind.to_string(), res.to_string());
            if !rs.contains_key(&key) && rs.len() >= MAX_RESOURCES_PER_HOST {
                self.dropped += 1;
                metrics::counter!("faultline_engine_dropped_total", "what" => "usage_series")
                    .increment(1);
                continue;
            }
            push(
                &mut rs.entry(key).or_default().util,
                (w.end_unix_ms, *util),
                cap,
            );
        }
        for u in w.usage.iter().filter(|u| !u.job.is_empty()) {
            let kind = u.resource_kind.as_str();
            let (sum, util) = total[&(kind, u.resource.as_str())];
            let load = if sum > 0.0 {
                util * value(u) / sum
            } else {
                0.0
            };
            // Work done (bytes, launches), not time spent: a victim's request
            // time per step grows with the queue an aggressor builds.
            let work = match kind {
                "gpu" if u.launches > 0 => u.launches as f64,
                "gpu" => u.gpu_busy_seconds,
                "fabric" => u.fabric_bytes as f64,
                _ => u.io_bytes as f64,
            };
            let per_step = steps
                .get(u.job.as_str())
                .map_or(f64::NAN, |(t, n)| work / secs * (t / n));
            let key = (kind.to_string(), u.resource.clone());
            let mine = self.per_host.get(host).copied().unwrap_or(0);
            let full = self.series >= self.cfg.max_series || mine >= self.cfg.max_series_per_host;
            let Some(r) = rs.get_mut(&key) else {
                continue;
            };
            if !r.jobs.contains_key(&u.job) {
                if full {
                    self.dropped += 1;
                    metrics::counter!("faultline_engine_dropped_total", "what" => "usage_series")
                        .increment(1);
                    continue;
                }
                self.series += 1;
                *self.per_host.entry(host.to_string()).or_default() += 1;
            }
            let s = r.jobs.entry(u.job.clone()).or_default();
            s.team.clone_from(&u.team);
            push(&mut s.hist, (w.end_unix_ms, load, per_step), cap);
        }
        // Jobs absent from this window used nothing of the resource (one
        // set lookup per series: a scan of the rows per series made a
        // window of n jobs on one resource cost n²).
        let present: HashSet<(&str, &str, &str)> = w
            .usage
            .iter()
            .map(|u| {
                (
                    u.resource_kind.as_str(),
                    u.resource.as_str(),
                    u.job.as_str(),
                )
            })
            .collect();
        for ((kind, res), _) in total {
            let Some(r) = rs.get_mut(&(kind.to_string(), res.to_string())) else {
                continue;
            };
            for (job, s) in r.jobs.iter_mut() {
                if !present.contains(&(kind, res, job.as_str())) {
                    push(&mut s.hist, (w.end_unix_ms, 0.0, f64::NAN), cap);
                }
            }
        }
    }

    /// The resources a symptom's placement uses that another job took to saturation.
    fn judge(&mut self, s: &Symptom) -> Vec<Finding> {
        let mut out = Vec::new();
        let mut hosts: Vec<&str> = s.places.iter().map(|p| p.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        for host in hosts {
            let Some(rs) = self.res.get_mut(host) else {
                continue;
            };
            for ((kind, res), r) in rs.iter_mut().filter(|(_, r)| r.jobs.len() >= 2) {
                let used = s.places.iter().any(|p| {
                    p.host == *host
                        && match kind.as_str() {
                            "gpu" => p.device >= 0 && res.parse::<i32>().ok() == Some(p.device),
                            "fabric" => {
                                p.hca.is_empty()
                                    || res == "verbs"
                                    || res.split('/').next() == Some(p.hca.as_str())
                            }
                            _ => true,
                        }
                });
                if !used {
                    continue;
                }
                if let Some(f) = judge_resource(&self.cfg, s, host, kind, res, r) {
                    out.push(f);
                }
            }
        }
        out
    }
}

fn judge_resource(
    cfg: &InterferenceConfig,
    s: &Symptom,
    host: &str,
    kind: &str,
    res: &str,
    r: &mut Resource,
) -> Option<Finding> {
    if !r.jobs.contains_key(&s.job) {
        return None;
    }
    let split = s.since_ms;
    let base = r.baseline(split)?;
    let victim = r.jobs.get(&s.job)?;
    let (_, u_after) = split_medians(r.util.iter().copied(), split);
    let (u_before, u_after) = (base.util, u_after?);
    let sat = match kind {
        "gpu" => cfg.gpu_saturation,
        "fabric" => cfg.fabric_saturation,
        _ => cfg.storage_saturation,
    };
    if u_after < sat {
        return None;
    }
    let rise = u_after - u_before;
    if rise <= 0.0 {
        return None;
    }
    let (v_load_b, v_step_b) = base.jobs.get(&s.job).copied().unwrap_or((0.0, f64::NAN));
    // The victim must have used the resource before its regression.
    if v_load_b <= 0.0 {
        return None;
    }
    // The aggressor: the other job with the largest increase.
    let mut best: Option<(&str, &Series, f64, f64)> = None;
    for (job, a) in &r.jobs {
        if *job == s.job {
            continue;
        }
        let (_, after) = split_medians(a.hist.iter().map(|h| (h.0, h.1)), split);
        let b = base.jobs.get(job).map_or(0.0, |x| x.0);
        let after = after.unwrap_or(0.0);
        let jumped = after >= cfg.jump_ratio * b && after - b >= cfg.min_share * rise;
        if jumped && best.is_none_or(|x| after - b > x.3 - x.2) {
            best = Some((job.as_str(), a, b, after));
        }
    }
    let (agg, a, a_b, a_a) = best?;
    // The victim's own change: its usage per step grew with its slowdown.
    let (_, ps_a) = split_medians(victim.hist.iter().map(|h| (h.0, h.2)), split);
    let own = match ps_a {
        Some(a) if v_step_b > 0.0 => a / v_step_b,
        _ => 1.0,
    };
    if own - 1.0 >= cfg.own_change * (s.ratio - 1.0) {
        return None;
    }
    let share = ((a_a - a_b) / rise).min(1.0);
    let conf = (0.6 + 0.15 * share + 0.15 * ((s.ratio - 1.0) / 0.5).min(1.0)).min(0.9);
    let unit = match kind {
        "gpu" => "of GPU time",
        "fabric" => "of line rate",
        _ => "requests in flight",
    };
    let team = |t: &str| {
        if t.is_empty() {
            "unknown team".to_string()
        } else {
            format!("team {t}")
        }
    };
    let jump = if a_b > 0.0 {
        format!("×{:.1}", a_a / a_b)
    } else {
        "from none".to_string()
    };
    let entity = entity(host, kind, res);
    Some(
        Finding::new(KIND, &entity, conf)
            .with_evidence(format!("shared {kind} {res} on {host}"))
            .with_evidence(format!(
                "aggressor job {agg} ({}): load {a_b:.2} → {a_a:.2} {unit} ({jump}), {:.0} % of the resource's rise",
                team(&a.team),
                share * 100.0
            ))
            .with_evidence(format!(
                "victim job {} ({}): {}",
                s.job,
                team(&victim.team),
                s.line
            ))
            .with_evidence(format!(
                "{kind} {res} saturated: {u_before:.2} → {u_after:.2} {unit} (saturation at {sat})"
            ))
            .with_evidence(format!(
                "the victim's own usage per step ×{own:.2}: not its own change"
            ))
            .with_jobs(&[s.job.clone(), agg.to_string()])
            .with_runbook(format!(
                "1 tenants: {agg} ({}) saturates {kind} {res} on {host} that {} ({}) shares — throttle or move one of them (Slurm: a QOS or GRES limit, `--exclusive`; Kubernetes: I/O and network limits, node affinity or MIG instead of time-slicing); 2 check the aggressor's new phase (checkpoint burst, data reshuffle, a larger batch) with its owner; 3 chargeback: `faultline-correlator usage --since 1d --by job`",
                team(&a.team),
                s.job,
                team(&victim.team)
            )),
    )
}

#[cfg(test)]
mod tests;
