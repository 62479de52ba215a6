//! `straggler`: one rank's step time far above its job's median for
//! `min_persist_s` of event time (whatever the window length). When the rank's GPU throttles or its host's link
//! degrades, the straggler is evidence on that incident instead (a root cause
//! absorbs its symptoms); otherwise the candidate says no cause was found.
use std::collections::HashMap;

use proto::v1::Window;

use super::{
    stats::median,
    workload::{placement::Claims, Place, Symptom},
};

/// Step time above this multiple of the job median makes a rank slow.
pub const SLOW_FACTOR: f64 = 1.3;
/// A job needs this many ranks for a meaningful median.
pub const MIN_RANKS: usize = 4;

#[derive(Debug, Clone)]
struct Rank {
    seconds: f64,
    host: String,
    device: i32,
    hca: String,
    /// Start of the current slow run (event time).
    slow_since: Option<i64>,
    /// Consecutive windows of this rank's host in which it was slow: the
    /// first window of a change is judged against the other hosts' previous
    /// slot (their windows of this slot have not arrived yet), so a slowdown
    /// of the whole job looks like stragglers until the second.
    slow_windows: u32,
}

/// A slow rank: either a straggler finding or evidence for a cause.
#[derive(Debug)]
pub struct Slow {
    pub job: String,
    pub rank: u32,
    pub host: String,
    pub device: i32,
    pub hca: String,
    pub seconds: f64,
    pub median: f64,
    /// Start of the first window in which the rank was slow.
    pub since_ms: i64,
    /// How it was judged, when not from step times (`engine::nccl_lag`).
    pub basis: Option<String>,
}

#[derive(Debug)]
pub struct StragglerDetector {
    /// job → rank → its latest step.
    ranks: HashMap<String, HashMap<u32, Rank>>,
    /// How long a rank must stay slow (`workload.min_persist_s`).
    persist_ms: i64,
    /// The other shards' summaries, when sharded: their ranks of each job.
    remote: Option<std::sync::Arc<super::fleet::Remote>>,
    /// Each job's median and rank count, recomputed once per half window
    /// of event time ([`SlotCache`](super::slot_cache::SlotCache)): the
    /// walk is over every rank of the job, so per window it made a slot
    /// of a 100,000-rank job cost 10^10 rank visits.
    medians: HashMap<String, super::slot_cache::SlotCache<(f64, usize)>>,
}

impl Default for StragglerDetector {
    fn default() -> Self {
        Self::new(super::workload::WorkloadConfig::default().min_persist_s)
    }
}

impl StragglerDetector {
    pub fn new(min_persist_s: f64) -> Self {
        Self {
            ranks: HashMap::new(),
            persist_ms: (min_persist_s * 1000.0) as i64,
            remote: None,
            medians: HashMap::new(),
        }
    }

    /// Sets the other shards' merged summaries (`None`: not sharded).
    pub fn set_remote(&mut self, remote: Option<std::sync::Arc<super::fleet::Remote>>) {
        self.remote = remote;
    }

    /// This detector's part of a shard's summary: each job's rank step
    /// times.
    pub fn summary(&self) -> std::collections::BTreeMap<String, super::fleet::LogHist> {
        self.ranks
            .iter()
            .map(|(job, ranks)| {
                let mut h = super::fleet::LogHist::fine();
                ranks.values().for_each(|r| h.add(r.seconds));
                (job.clone(), h)
            })
            .collect()
    }

    /// The job's median step time over its ranks here and, sharded, on the
    /// other shards; and how many ranks. Ranks last reported by a host
    /// outside the job's placement are dropped first.
    fn job_median(&mut self, job: &str, claims: &Claims) -> (f64, usize) {
        let Some(ranks) = self.ranks.get_mut(job) else {
            return (0.0, 0);
        };
        if claims.placed_on(job, "").is_some() {
            ranks.retain(|_, r| claims.placed_on(job, &r.host) == Some(true));
        }
        let times: Vec<f64> = ranks.values().map(|r| r.seconds).collect();
        match self.remote.as_deref().and_then(|r| r.jobs.get(job)) {
            None => (median(&times), times.len()),
            Some(h) => {
                let h = h.with(&times);
                (h.median(), h.count() as usize)
            }
        }
    }

    /// [`Self::job_median`] as of the slot of the window ending at
    /// `end_ms`: computed by the slot's first window of the job, reused by
    /// the rest (like the peers of the other shards, one slot behind).
    fn slot_median(
        &mut self,
        job: &str,
        claims: &Claims,
        end_ms: i64,
        len_ms: i64,
    ) -> (f64, usize) {
        let mut cache = self.medians.remove(job).unwrap_or_default();
        let v = cache.get(end_ms, len_ms, || self.job_median(job, claims));
        if self.ranks.contains_key(job) {
            self.medians.insert(job.to_string(), cache);
        }
        v
    }

    /// Updates the ranks reported by this window; returns the slow ranks
    /// (after persistence) and the `<job>/<rank>` entities evaluated. Cost:
    /// the window's steps, plus the ranks of the jobs it reports once per
    /// half window of event time.
    pub fn observe(&mut self, host: &str, w: &Window, claims: &Claims) -> (Vec<Slow>, Vec<String>) {
        let mut evaluated = Vec::with_capacity(w.steps.len());
        let mut by_job: HashMap<&str, Vec<&proto::v1::StepTime>> = HashMap::new();
        for s in &w.steps {
            let r = self
                .ranks
                .entry(s.job.clone())
                .or_default()
                .entry(s.rank)
                .or_insert(Rank {
                    seconds: s.seconds,
                    host: host.to_string(),
                    device: s.device,
                    hca: s.hca.clone(),
                    slow_since: None,
                    slow_windows: 0,
                });
            r.seconds = s.seconds;
            r.host = host.to_string();
            r.device = s.device;
            r.hca = s.hca.clone();
            evaluated.push(vocab::entity::rank(&s.job, s.rank));
            by_job.entry(s.job.as_str()).or_default().push(s);
        }
        let mut slow = Vec::new();
        let mut jobs: Vec<(&str, Vec<&proto::v1::StepTime>)> = by_job.into_iter().collect();
        jobs.sort_by(|a, b| a.0.cmp(b.0));
        let len_ms = if w.start_unix_ms > 0 && w.end_unix_ms > w.start_unix_ms {
            w.end_unix_ms - w.start_unix_ms
        } else {
            1000
        };
        for (job, steps) in jobs {
            let (m, n) = self.slot_median(job, claims, w.end_unix_ms, len_ms);
            if n < MIN_RANKS {
                continue;
            }
            let Some(ranks) = self.ranks.get_mut(job) else {
                continue;
            };
            for s in steps {
                let Some(r) = ranks.get_mut(&s.rank) else {
                    continue;
                };
                r.slow_since = if m > 0.0 && r.seconds > SLOW_FACTOR * m {
                    r.slow_windows = r.slow_windows.saturating_add(1);
                    Some(r.slow_since.unwrap_or(w.start_unix_ms))
                } else {
                    r.slow_windows = 0;
                    None
                };
                if r.slow_windows >= 2
                    && r.slow_since
                        .is_some_and(|t| w.end_unix_ms - t >= self.persist_ms)
                {
                    slow.push(Slow {
                        job: job.to_string(),
                        rank: s.rank,
                        host: r.host.clone(),
                        device: r.device,
                        hca: r.hca.clone(),
                        seconds: r.seconds,
                        median: m,
                        since_ms: r.slow_since.unwrap_or(w.start_unix_ms),
                        basis: None,
                    });
                }
            }
        }
        (slow, evaluated)
    }

    /// Forgets the ranks last reported by these hosts.
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        for ranks in self.ranks.values_mut() {
            ranks.retain(|_, r| !gone.contains(&r.host));
        }
        self.ranks.retain(|_, r| !r.is_empty());
        self.medians.retain(|j, _| self.ranks.contains_key(j));
    }
}

impl Slow {
    pub fn describe(&self) -> String {
        if let Some(b) = &self.basis {
            return b.clone();
        }
        format!(
            "job {} rank {} step {:.2} s vs job median {:.2} s (+{:.0}%)",
            self.job,
            self.rank,
            self.seconds,
            self.median,
            100.0 * (self.seconds / self.median - 1.0)
        )
    }

    /// The slow rank as a workload symptom (its own placement only).
    pub fn symptom(&self) -> Symptom {
        Symptom {
            kind: vocab::kind::IncidentKind::Straggler,
            job: self.job.clone(),
            entity: vocab::entity::rank(&self.job, self.rank),
            line: self.describe(),
            ratio: if self.median > 0.0 {
                self.seconds / self.median
            } else {
                1.0
            },
            since_ms: self.since_ms,
            places: vec![Place {
                host: self.host.clone(),
                rank: i32::try_from(self.rank).unwrap_or(i32::MAX),
                device: self.device,
                hca: self.hca.clone(),
            }],
        }
    }
}
