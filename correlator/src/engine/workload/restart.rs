//! A restarted job is a new run (docs/detection.md, "A restarted job"): a
//! rank whose processes are all new (CUDA and NCCL rows: pids none of which
//! it had before) or whose NCCL communicators are all new (hashes of a new
//! `ncclUniqueId`) has restarted, and its job's step-time history starts
//! again; the new run's first steps (warm-up: the CUDA context, NCCL
//! set-up, compilation and cache warm-up make them 1.5–3x slower) are
//! neither judged nor learnt.
use std::collections::{BTreeSet, HashMap};

use proto::v1::Window;

/// Steps of a new run (its slowest rank's) skipped before it is judged.
pub const WARMUP_STEPS: u64 = 3;
/// A job whose steps paused this long (event time) between two reported
/// slots may have restarted unseen: its next `WARMUP_STEPS` steps are
/// skipped, its history kept.
pub const GAP_MS: i64 = 60_000;
/// Ranks remembered per job, and jobs.
const MAX_RANKS: usize = 8192;
const MAX_JOBS: usize = 10_000;
/// Pids and communicators remembered per rank (its latest window's).
const MAX_IDS: usize = 64;

/// What a rank ran as in its latest window with rows: its processes and
/// communicators, and when.
#[derive(Debug, Default)]
struct Ident {
    pids: BTreeSet<u32>,
    comms: BTreeSet<String>,
    at_ms: i64,
}

/// A rank of a job on a host: its rank, or its device when the rank is
/// unknown (`-1 - device`).
type RankKey = (String, i64);

#[derive(Debug, Default)]
pub struct Restarts {
    jobs: HashMap<String, HashMap<RankKey, Ident>>,
    /// Ranks not tracked because a bound was reached.
    pub dropped: u64,
}

/// This window's processes and communicators per (job, rank).
fn this_window<'w>(host: &str, w: &'w Window) -> HashMap<(&'w str, RankKey), Ident> {
    let mut now: HashMap<(&'w str, RankKey), Ident> = HashMap::new();
    for c in &w.cuda {
        if c.job.is_empty() || c.pid == 0 {
            continue;
        }
        let rank = c.rank.map_or(-1 - i64::from(c.device), i64::from);
        let id = now.entry((&c.job, (host.to_string(), rank))).or_default();
        id.pids.insert(c.pid);
    }
    for r in &w.nccl {
        if r.job.is_empty() || r.ended || r.exited {
            continue;
        }
        let rank = r.job_rank.map_or(-1 - i64::from(r.device), i64::from);
        let id = now.entry((&r.job, (host.to_string(), rank))).or_default();
        if r.pid != 0 {
            id.pids.insert(r.pid);
        }
        if !r.comm.is_empty() {
            id.comms.insert(r.comm.clone());
        }
    }
    now
}

impl Restarts {
    /// The jobs `host`'s window shows restarted: a rank seen before whose
    /// processes (or communicators) are now all new.
    pub fn observe(&mut self, host: &str, w: &Window) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for ((job, key), now) in this_window(host, w) {
            if !self.jobs.contains_key(job) && self.jobs.len() >= MAX_JOBS {
                self.dropped += 1;
                continue;
            }
            let ranks = self.jobs.entry(job.to_string()).or_default();
            if !ranks.contains_key(&key) && ranks.len() >= MAX_RANKS {
                self.dropped += 1;
                continue;
            }
            let id = ranks.entry(key).or_default();
            let new_pids =
                !id.pids.is_empty() && !now.pids.is_empty() && id.pids.is_disjoint(&now.pids);
            let new_comms =
                !id.comms.is_empty() && !now.comms.is_empty() && id.comms.is_disjoint(&now.comms);
            if new_pids || new_comms {
                out.insert(job.to_string());
            }
            // The latest processes and communicators of the rank (a window
            // without rows of one kind keeps the ones before).
            if !now.pids.is_empty() {
                id.pids = now.pids.into_iter().take(MAX_IDS).collect();
            }
            if !now.comms.is_empty() {
                id.comms = now.comms.into_iter().take(MAX_IDS).collect();
            }
            id.at_ms = w.end_unix_ms;
        }
        out
    }

    /// Forgets ranks not seen since `old_ms`.
    pub fn forget(&mut self, old_ms: i64) {
        for ranks in self.jobs.values_mut() {
            ranks.retain(|_, id| id.at_ms >= old_ms);
        }
        self.jobs.retain(|_, r| !r.is_empty());
    }
}
