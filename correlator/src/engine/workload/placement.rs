//! Job claims bounded by placement: a host may report step times only for
//! ranks of processes it runs, and a job's median and slowdown are judged
//! only from ranks whose hosts the job's placement includes (issue 47: one
//! host reporting 64 slow "ranks" of another host's job masked its real
//! straggler; a slow rank 3 of a healthy job raised `job_slowdown`).
//!
//! **Placement** comes from what the collector attributes by process
//! identity (cgroup → Slurm or Kubernetes, the job's environment), never
//! from what a process says of itself over OTLP: a window's CUDA process
//! rows (`cuda`: job, rank, pid), NCCL rank rows (`nccl`: job, job rank,
//! pid) and usage rows (`usage`: job, GPUs held). A host is in a job's
//! placement while its own windows attributed the job within
//! [`ATTR_HORIZON_MS`] of its own event time.
//!
//! A step row `(job, rank)` from host H is kept when:
//! 1. the job is placed (some host attributes it) and H is among its hosts
//!    (else refused as `unplaced`); where H's rows name the job's ranks the
//!    rank is one of them, else H's ranks of the job in the window are at
//!    most the processes (or GPUs) it attributes to the job;
//! 2. no other host holds a live claim on the rank (refused as `claimed`):
//!    the first claimant keeps a rank until its own windows have gone
//!    [`CLAIM_SILENT_MS`] without it, or it is forgotten as idle;
//! 3. the claims table has room (refused as `claims`, bounded by
//!    [`MAX_CLAIMS`]).
//!
//! A job no host attributes (collectors without CUDA or NCCL probes, step
//! times under an OTLP `service.name`) is judged from rank claims alone,
//! and a host that reports GPUs reports at most one of its ranks per GPU.
//! The straggler detector leaves a placed job's ranks last reported by
//! hosts outside its placement out of the job's median (ranks taken before
//! the job's own hosts attributed it).
//! Workload samples (TTFT and the like) of a placed job are kept only from
//! its hosts. Silence is measured in the claimant's own window time, so a
//! host stamping its windows ahead (within `max_future_s`) cannot age
//! another host's claims.
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use proto::v1::Window;

/// A host's attribution of a job lasts this long after its latest row
/// (the host's own event time), as the workload detector's placements.
pub const ATTR_HORIZON_MS: i64 = 600_000;
/// A rank claim is released once its host's windows have gone this long
/// without the rank.
pub const CLAIM_SILENT_MS: i64 = 60_000;
/// Bounds: rank claims, jobs placed, hosts per job, ranks or processes per
/// host and job.
pub const MAX_CLAIMS: usize = 262_144;
const MAX_JOBS: usize = 10_000;
const MAX_HOSTS_PER_JOB: usize = 8192;
const MAX_PER_HOST: usize = 1024;

/// What one host's own rows say of one job.
#[derive(Debug, Default)]
struct Attributed {
    /// Latest window (host time) that attributed the job.
    last_ms: i64,
    /// Job ranks named by its process rows → last seen.
    ranks: BTreeMap<u32, i64>,
    /// Processes (pids) and GPUs the job holds → last seen.
    procs: BTreeMap<u32, i64>,
    gpus: BTreeMap<String, i64>,
}

impl Attributed {
    fn expire(&mut self, now_ms: i64) {
        let old = now_ms - ATTR_HORIZON_MS;
        self.ranks.retain(|_, t| *t >= old);
        self.procs.retain(|_, t| *t >= old);
        self.gpus.retain(|_, t| *t >= old);
    }

    /// How many ranks of the job the host may report in one window.
    fn room(&self) -> usize {
        self.procs.len().max(self.gpus.len()).max(1)
    }
}

/// A rank's claimant and when (its time) it last reported the rank.
#[derive(Debug)]
struct Claim {
    host: String,
    last_ms: i64,
}

/// Rows refused in one window, by reason (`faultline_engine_dropped_total`'s
/// `what`).
pub type Refused = [(&'static str, usize); 3];

/// Job placement and rank claims across hosts.
#[derive(Debug, Default)]
pub struct Claims {
    /// job → host → its attribution.
    placed: HashMap<String, HashMap<String, Attributed>>,
    /// host → the jobs it attributes (for its expiry).
    jobs_of: HashMap<String, HashSet<String>>,
    /// job → rank → claimant, and how many in all.
    claims: HashMap<String, HashMap<u32, Claim>>,
    claimed: usize,
    /// host → its latest window end (its own clock).
    latest: HashMap<String, i64>,
}

fn host_of(w: &Window) -> &str {
    w.origin.as_ref().map_or("", |o| o.hostname.as_str())
}

impl Claims {
    /// The hosts placed for `job` now.
    pub fn hosts(&self, job: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .placed
            .get(job)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Learns the window's attribution, then keeps the step rows (and
    /// workload samples) its host may report; the window is borrowed when
    /// nothing is refused.
    pub fn admit<'a>(&mut self, w: Cow<'a, Window>) -> (Cow<'a, Window>, Refused) {
        let nothing = [("unplaced", 0), ("claimed", 0), ("claims", 0)];
        let host = host_of(&w);
        let now = w.end_unix_ms;
        match self.latest.get_mut(host) {
            Some(t) => *t = (*t).max(now),
            // A host that neither attributes nor reports a job holds
            // nothing to keep track of.
            None if w.steps.is_empty()
                && w.workload.is_empty()
                && w.cuda.is_empty()
                && w.nccl.is_empty()
                && w.usage.is_empty() =>
            {
                return (w, nothing);
            }
            None => {
                self.latest.insert(host.to_string(), now);
            }
        }
        let host = host.to_string();
        self.attribute(&host, &w);
        let steps = self.judge_steps(&host, &w);
        let samples: Vec<bool> = w
            .workload
            .iter()
            .map(|s| self.placed_on(&s.job, &host) != Some(false))
            .collect();
        let unplaced_steps = steps.iter().filter(|v| **v == Verdict::Unplaced).count();
        let claimed = steps.iter().filter(|v| **v == Verdict::Claimed).count();
        let full = steps.iter().filter(|v| **v == Verdict::Full).count();
        let unplaced = unplaced_steps + samples.iter().filter(|ok| !**ok).count();
        let refused = [
            ("unplaced", unplaced),
            ("claimed", claimed),
            ("claims", full),
        ];
        if unplaced + claimed + full == 0 {
            return (w, refused);
        }
        tracing::warn!(
            host,
            unplaced,
            claimed,
            claims_full = full,
            "step times or samples of jobs this host does not run (by its own process attribution), or of ranks another host holds: dropped"
        );
        let mut c = w.into_owned();
        let mut it = steps.iter();
        c.steps.retain(|_| it.next() == Some(&Verdict::Kept));
        let mut it = samples.iter();
        c.workload.retain(|_| it.next().copied().unwrap_or(true));
        (Cow::Owned(c), refused)
    }

    /// `Some(true)`: the job is placed and `host` is among its hosts;
    /// `Some(false)`: placed elsewhere; `None`: nobody attributes it.
    pub fn placed_on(&self, job: &str, host: &str) -> Option<bool> {
        let hosts = self.placed.get(job).filter(|m| !m.is_empty())?;
        Some(hosts.contains_key(host))
    }

    /// Records what the window's own process rows attribute, and expires
    /// the host's attributions its clock has passed.
    fn attribute(&mut self, host: &str, w: &Window) {
        let now = w.end_unix_ms;
        let rows = w
            .cuda
            .iter()
            .map(|c| (c.job.as_str(), c.rank, Some(c.pid), None))
            .chain(
                w.nccl
                    .iter()
                    .map(|n| (n.job.as_str(), n.job_rank, Some(n.pid), None)),
            )
            .chain(
                w.usage
                    .iter()
                    .filter(|u| u.resource_kind == "gpu")
                    .map(|u| (u.job.as_str(), None, None, Some(u.resource.as_str()))),
            );
        for (job, rank, pid, gpu) in rows {
            if job.is_empty() {
                continue;
            }
            let Some(a) = self.slot(host, job) else {
                continue;
            };
            a.last_ms = a.last_ms.max(now);
            if let Some(r) =
                rank.filter(|r| a.ranks.contains_key(r) || a.ranks.len() < MAX_PER_HOST)
            {
                a.ranks.insert(r, now);
            }
            if let Some(p) = pid.filter(|p| a.procs.contains_key(p) || a.procs.len() < MAX_PER_HOST)
            {
                a.procs.insert(p, now);
            }
            if let Some(g) = gpu.filter(|g| a.gpus.contains_key(*g) || a.gpus.len() < MAX_PER_HOST)
            {
                a.gpus.insert(g.to_string(), now);
            }
        }
        self.expire(host, now);
    }

    /// The host's attribution of the job, created within the bounds.
    fn slot(&mut self, host: &str, job: &str) -> Option<&mut Attributed> {
        if !self.placed.contains_key(job) {
            if self.placed.len() >= MAX_JOBS {
                return None;
            }
            self.placed.insert(job.to_string(), HashMap::new());
        }
        let hosts = self.placed.get_mut(job)?;
        if !hosts.contains_key(host) {
            if hosts.len() >= MAX_HOSTS_PER_JOB {
                return None;
            }
            hosts.insert(host.to_string(), Attributed::default());
            self.jobs_of
                .entry(host.to_string())
                .or_default()
                .insert(job.to_string());
        }
        hosts.get_mut(host)
    }

    /// Drops the host's attributions older than the horizon (its clock).
    fn expire(&mut self, host: &str, now: i64) {
        let Some(jobs) = self.jobs_of.get_mut(host) else {
            return;
        };
        jobs.retain(|job| {
            let Some(hosts) = self.placed.get_mut(job) else {
                return false;
            };
            let keep = hosts.get_mut(host).is_some_and(|a| {
                a.expire(now);
                now - a.last_ms <= ATTR_HORIZON_MS
            });
            if !keep {
                hosts.remove(host);
                if hosts.is_empty() {
                    self.placed.remove(job);
                }
            }
            keep
        });
    }

    /// Each step row's verdict, in order; claims taken or refreshed.
    fn judge_steps(&mut self, host: &str, w: &Window) -> Vec<Verdict> {
        let now = w.end_unix_ms;
        if self.claimed + w.steps.len() > MAX_CLAIMS {
            self.sweep();
        }
        let mut taken: HashMap<&str, HashSet<u32>> = HashMap::new();
        let mut out = Vec::with_capacity(w.steps.len());
        for s in &w.steps {
            let ranks = taken.entry(s.job.as_str()).or_default();
            let placed = match self.placed.get(&s.job).filter(|m| !m.is_empty()) {
                // Nobody attributes the job: a host that reports GPUs
                // reports at most one rank per GPU.
                None => w.gpus.is_empty() || ranks.contains(&s.rank) || ranks.len() < w.gpus.len(),
                Some(hosts) => hosts.get(host).is_some_and(|a| {
                    if a.ranks.is_empty() {
                        ranks.contains(&s.rank) || ranks.len() < a.room()
                    } else {
                        a.ranks.contains_key(&s.rank)
                    }
                }),
            };
            let v = if !placed {
                Verdict::Unplaced
            } else {
                self.claim(host, &s.job, s.rank, now)
            };
            if v == Verdict::Kept {
                ranks.insert(s.rank);
            }
            out.push(v);
        }
        out
    }

    /// Takes or refreshes `host`'s claim on a rank. A claim is taken over
    /// once its holder went silent on the rank, or when the job is placed
    /// and the holder is not among its hosts (a claim made before the
    /// job's own hosts attributed it).
    fn claim(&mut self, host: &str, job: &str, rank: u32, now: i64) -> Verdict {
        let holder = self.claims.get(job).and_then(|m| m.get(&rank));
        if let Some(c) = holder.filter(|c| c.host != host) {
            let holder_now = self.latest.get(&c.host).copied().unwrap_or(i64::MIN);
            let live = holder_now.saturating_sub(c.last_ms) < CLAIM_SILENT_MS;
            if live && self.placed_on(job, &c.host) != Some(false) {
                return Verdict::Claimed;
            }
        }
        if holder.is_none() && self.claimed >= MAX_CLAIMS {
            return Verdict::Full;
        }
        let ranks = match self.claims.get_mut(job) {
            Some(m) => m,
            None => self.claims.entry(job.to_string()).or_default(),
        };
        match ranks.get_mut(&rank) {
            Some(c) if c.host == host => c.last_ms = c.last_ms.max(now),
            Some(c) => {
                *c = Claim {
                    host: host.to_string(),
                    last_ms: now,
                }
            }
            None => {
                ranks.insert(
                    rank,
                    Claim {
                        host: host.to_string(),
                        last_ms: now,
                    },
                );
                self.claimed += 1;
            }
        }
        Verdict::Kept
    }

    /// Drops claims their holders have gone silent on.
    fn sweep(&mut self) {
        let latest = &self.latest;
        self.claimed = retain_claims(&mut self.claims, |c| {
            latest
                .get(&c.host)
                .is_some_and(|t| t.saturating_sub(c.last_ms) < CLAIM_SILENT_MS)
        });
    }

    /// Forgets hosts gone idle: their attributions and claims.
    pub fn forget_hosts(&mut self, gone: &HashSet<String>) {
        for h in gone {
            self.latest.remove(h);
            for job in self.jobs_of.remove(h).unwrap_or_default() {
                if let Some(hosts) = self.placed.get_mut(&job) {
                    hosts.remove(h);
                    if hosts.is_empty() {
                        self.placed.remove(&job);
                    }
                }
            }
        }
        self.claimed = retain_claims(&mut self.claims, |c| !gone.contains(&c.host));
    }
}

/// Keeps the claims `keep` says; returns how many are left.
fn retain_claims(
    claims: &mut HashMap<String, HashMap<u32, Claim>>,
    mut keep: impl FnMut(&Claim) -> bool,
) -> usize {
    for ranks in claims.values_mut() {
        ranks.retain(|_, c| keep(c));
    }
    claims.retain(|_, m| !m.is_empty());
    claims.values().map(HashMap::len).sum()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Kept,
    Unplaced,
    Claimed,
    Full,
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
