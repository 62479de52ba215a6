//! The NCCL series on `/metrics`: live ranks, exited ranks kept with their
//! final counts, and per-job totals that stay after the ranks are gone.
use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::{Duration, Instant},
};

use super::RankState;
use crate::prom_text::Text;

use proto::metric::Family;

pub const NCCL_CALLS: Family = Family::counter(
    "faultline_nccl_calls_total",
    &["comm", "rank", "hpc_job", "op", "parent_rank", "pid"],
    "NCCL calls per communicator, rank on this host and op (enqueued, not completed)",
);
pub const NCCL_BYTES: Family = Family::counter(
    "faultline_nccl_bytes_total",
    &["comm", "rank", "hpc_job", "op", "parent_rank", "pid"],
    "NCCL bytes per communicator, rank and op: count x datatype size as passed",
);
pub const NCCL_RANK_INFO: Family = Family::gauge(
    "faultline_nccl_rank_info",
    &[
        "comm",
        "rank",
        "nranks",
        "gpu",
        "hpc_job",
        "pid",
        "parent_rank",
    ],
    "A communicator rank on this host: its size, GPU and process (value 1)",
);
pub const NCCL_COLLECTIVES_ISSUED: Family = Family::gauge(
    "faultline_nccl_collectives_issued",
    &["comm", "rank", "hpc_job", "parent_rank", "pid"],
    "Collectives the rank has issued on the communicator (its sequence number)",
);
pub const NCCL_BLOCKED_SECONDS: Family = Family::gauge(
    "faultline_nccl_blocked_seconds",
    &["comm", "rank", "hpc_job", "parent_rank", "pid", "call"],
    "How long the rank's process has been inside its oldest unreturned CUDA driver call (call), at the window's end",
);
pub const NCCL_JOB_CALLS: Family = Family::counter(
    "faultline_nccl_job_calls_total",
    &["hpc_job", "op"],
    "NCCL calls of a job's ranks on this host by op: live ranks, exited ones (kept for nccl.retain_exited_s) and folded ones",
);
pub const NCCL_JOB_BYTES: Family = Family::counter(
    "faultline_nccl_job_bytes_total",
    &["hpc_job", "op"],
    "NCCL bytes (count x datatype size) of a job's ranks on this host by op, exited ranks included",
);

/// The families above, for `crate::metrics_catalog`.
pub const FAMILIES: &[&Family] = &[
    &NCCL_CALLS,
    &NCCL_BYTES,
    &NCCL_RANK_INFO,
    &NCCL_COLLECTIVES_ISSUED,
    &NCCL_BLOCKED_SECONDS,
    &NCCL_JOB_CALLS,
    &NCCL_JOB_BYTES,
];

/// Per-op (calls, bytes) totals.
type OpTotals = BTreeMap<&'static str, (u64, u64)>;

/// Exited ranks kept at most (the oldest fold into their job's totals
/// early past it, counted).
pub const MAX_EXITED_RANKS: usize = 4096;

/// A rank whose process exited, kept with its final counts.
#[derive(Clone, Debug)]
struct Kept {
    at: Instant,
    key: (u32, u64),
    job: String,
    rank: RankState,
}

/// Ranks of processes that exited: their series stay on `/metrics` with
/// their final counts for `retain` (at least two scrape intervals, so the
/// last increments are scraped), then fold into per-job totals that stay
/// (`faultline_nccl_job_calls_total`, `…_bytes_total`), at most
/// `max_jobs` jobs with no live or kept rank, the least recently updated
/// evicted first (counted).
#[derive(Debug)]
pub struct ExitedRanks {
    retain: Duration,
    max_jobs: usize,
    /// In exit order.
    kept: VecDeque<Kept>,
    /// job → (last fold, op → (calls, bytes)).
    folded: BTreeMap<String, (Instant, OpTotals)>,
}

impl Default for ExitedRanks {
    fn default() -> Self {
        Self::new(Duration::from_secs(120), 1024)
    }
}

impl ExitedRanks {
    pub fn new(retain: Duration, max_jobs: usize) -> Self {
        Self {
            retain,
            max_jobs: max_jobs.max(1),
            kept: VecDeque::new(),
            folded: BTreeMap::new(),
        }
    }

    /// `rank` (key `key`, job `job`) exited at `now`, its counts final.
    pub fn retire(&mut self, key: (u32, u64), rank: RankState, job: String, now: Instant) {
        let k = Kept {
            at: now,
            key,
            job,
            rank,
        };
        if self.retain.is_zero() {
            self.fold(k, now);
            return;
        }
        self.kept.push_back(k);
        while self.kept.len() > MAX_EXITED_RANKS {
            if let Some(old) = self.kept.pop_front() {
                metrics::counter!(crate::metrics_catalog::NCCL_EXITED_RANKS_FOLDED_EARLY.name)
                    .increment(1);
                self.fold(old, now);
            }
        }
    }

    fn fold(&mut self, k: Kept, now: Instant) {
        let e = self
            .folded
            .entry(k.job)
            .or_insert_with(|| (now, BTreeMap::new()));
        e.0 = now;
        for (op, (calls, bytes)) in k.rank.ops {
            let t = e.1.entry(op).or_default();
            t.0 += calls;
            t.1 += bytes;
        }
    }

    /// At `now`: folds the ranks kept for `retain`, and evicts the folded
    /// jobs over `max_jobs` that have no rank in `live_jobs` or kept (their
    /// series end: staleness, not a counter reset).
    pub fn expire(&mut self, now: Instant, live_jobs: &BTreeSet<String>) {
        while let Some(k) = self.kept.front() {
            if now.saturating_duration_since(k.at) < self.retain {
                break;
            }
            if let Some(k) = self.kept.pop_front() {
                self.fold(k, now);
            }
        }
        let over = self.folded.len().saturating_sub(self.max_jobs);
        if over == 0 {
            return;
        }
        let kept_jobs: BTreeSet<&str> = self.kept.iter().map(|k| k.job.as_str()).collect();
        let mut idle: Vec<(Instant, String)> = self
            .folded
            .iter()
            .filter(|(j, _)| !live_jobs.contains(*j) && !kept_jobs.contains(j.as_str()))
            .map(|(j, (t, _))| (*t, j.clone()))
            .collect();
        idle.sort();
        for (_, j) in idle.into_iter().take(over) {
            self.folded.remove(&j);
            metrics::counter!(crate::metrics_catalog::NCCL_JOB_TOTALS_EVICTED.name).increment(1);
        }
    }

    /// Ranks kept now.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// Jobs with folded totals.
    pub fn folded_jobs(&self) -> usize {
        self.folded.len()
    }
}

/// The labels that tell a rank's series apart on this host: `comm` and
/// `rank`; a rank whose rank is not known here (-1: a split with members on
/// other hosts, or a communicator whose creation was not seen) also
/// carries `parent_rank` (its rank in the split's parent, -1 unknown) and
/// `pid`, so two such ranks never share a label set.
fn identity(pid: u32, r: &RankState) -> Vec<(&'static str, String)> {
    let mut id = vec![("comm", r.comm.clone()), ("rank", r.rank.to_string())];
    if r.rank < 0 {
        let pr = if r.parent.is_empty() {
            -1
        } else {
            r.parent_rank
        };
        id.push(("parent_rank", pr.to_string()));
        id.push(("pid", pid.to_string()));
    }
    id
}

/// The NCCL series for `/metrics` of the live ranks (cumulative per
/// communicator, rank on this host and op).
pub fn render(ranks: &BTreeMap<(u32, u64), RankState>, job: impl FnMut(u32) -> String) -> String {
    render_all(ranks, &ExitedRanks::default(), job)
}

/// The NCCL series for `/metrics`: the live ranks, the exited ranks kept
/// (same series, final counts) and every job's totals (live, kept and
/// folded ranks). No two samples of a family share a label set: a rank
/// whose identity labels collide with another's (one process splitting a
/// parent twice with one colour) also carries `pid` and `handle`; a sample
/// that would still collide is left out and counted
/// (`faultline_nccl_series_collisions_total`).
pub fn render_all(
    live: &BTreeMap<(u32, u64), RankState>,
    exited: &ExitedRanks,
    mut job: impl FnMut(u32) -> String,
) -> String {
    let mut t = Text::new();
    let mut totals: BTreeMap<(String, &'static str), (u64, u64)> = BTreeMap::new();
    for (j, (_, ops)) in &exited.folded {
        for (op, (c, b)) in ops {
            let e = totals.entry((j.clone(), op)).or_default();
            e.0 += c;
            e.1 += b;
        }
    }
    let all: Vec<((u32, u64), &RankState, String)> = live
        .iter()
        .map(|(k, r)| (*k, r, job(r.pid)))
        .chain(exited.kept.iter().map(|k| (k.key, &k.rank, k.job.clone())))
        .collect();
    let mut seen: BTreeSet<Vec<(&'static str, String)>> = BTreeSet::new();
    for ((pid, handle), r, j) in all {
        for (op, (c, b)) in &r.ops {
            let e = totals.entry((j.clone(), op)).or_default();
            e.0 += c;
            e.1 += b;
        }
        let mut id = identity(pid, r);
        let with_job = |id: &Vec<(&'static str, String)>| {
            let mut k = id.clone();
            k.push(("hpc_job", j.clone()));
            k
        };
        if seen.contains(&with_job(&id)) {
            if !id.iter().any(|(k, _)| *k == "pid") {
                id.push(("pid", pid.to_string()));
            }
            id.push(("handle", format!("{handle:x}")));
            if seen.contains(&with_job(&id)) {
                metrics::counter!(crate::metrics_catalog::NCCL_SERIES_COLLISIONS.name).increment(1);
                continue;
            }
        }
        seen.insert(with_job(&id));
        let gpu = if r.device < 0 {
            String::new()
        } else {
            r.device.to_string()
        };
        let nranks = r.nranks.to_string();
        let pid_s = pid.to_string();
        let base: Vec<(&str, &str)> = id.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for (o, (calls, bytes)) in &r.ops {
            let mut l = base.clone();
            l.push(("hpc_job", &j));
            l.push(("op", o));
            t.add(&NCCL_CALLS, &l, calls);
            t.add(&NCCL_BYTES, &l, bytes);
        }
        let mut info = base.clone();
        info.extend([("nranks", nranks.as_str()), ("gpu", &gpu), ("hpc_job", &j)]);
        if !id.iter().any(|(k, _)| *k == "pid") {
            info.push(("pid", &pid_s));
        }
        t.add(&NCCL_RANK_INFO, &info, 1);
        let mut l = base;
        l.push(("hpc_job", &j));
        t.add(&NCCL_COLLECTIVES_ISSUED, &l, r.seq);
        if let Some((call, age)) = r.blocked {
            l.push(("call", call));
            t.add(&NCCL_BLOCKED_SECONDS, &l, format!("{age:.3}"));
        }
    }
    job_totals(&mut t, &totals);
    t.render()
}

/// Every job's totals by op (`faultline_nccl_job_{calls,bytes}_total`).
fn job_totals(t: &mut Text, totals: &BTreeMap<(String, &'static str), (u64, u64)>) {
    for ((j, op), (calls, bytes)) in totals {
        let l: &[(&str, &str)] = &[("hpc_job", j), ("op", op)];
        t.add(&NCCL_JOB_CALLS, l, calls);
        t.add(&NCCL_JOB_BYTES, l, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(comm: &str, rank: i32, pid: u32) -> RankState {
        RankState {
            comm: comm.into(),
            nranks: 2,
            rank,
            device: 0,
            pid,
            init: "ncclCommSplit",
            ops: [("AllReduce", (3, 12))].into_iter().collect(),
            ..Default::default()
        }
    }

    #[test]
    fn ranks_whose_labels_collide_get_pid_and_handle_and_nothing_repeats() {
        // One process split one parent twice with one colour: one id, one
        // rank, two handles.
        let live: BTreeMap<(u32, u64), RankState> = [
            ((7, 0xa0), rank("c", 0, 7)),
            ((7, 0xb0), rank("c", 0, 7)),
            ((8, 0xa0), rank("c", 1, 8)),
        ]
        .into_iter()
        .collect();
        let text = render(&live, |_| "j".into());
        let keys: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' ').map(|x| x.0))
            .collect();
        let unique: BTreeSet<&str> = keys.iter().copied().collect();
        assert_eq!(keys.len(), unique.len(), "{text}");
        assert!(
            text.contains("faultline_nccl_calls_total{comm=\"c\",rank=\"0\",pid=\"7\",handle=\"b0\",hpc_job=\"j\",op=\"AllReduce\"} 3"),
            "{text}"
        );
        assert!(
            text.contains(
                "faultline_nccl_calls_total{comm=\"c\",rank=\"1\",hpc_job=\"j\",op=\"AllReduce\"} 3"
            ),
            "{text}"
        );
        // The job's totals count all three.
        assert!(
            text.contains("faultline_nccl_job_calls_total{hpc_job=\"j\",op=\"AllReduce\"} 9"),
            "{text}"
        );
    }

    #[test]
    fn a_rank_in_a_driver_call_exports_its_age() {
        let mut r = rank("c", 1, 9);
        r.blocked = Some(("cuStreamSynchronize", 2.5));
        let live: BTreeMap<(u32, u64), RankState> = [((9, 1), r), ((10, 1), rank("c", 0, 10))]
            .into_iter()
            .collect();
        let text = render(&live, |_| "j".into());
        assert!(
            text.contains("faultline_nccl_blocked_seconds{comm=\"c\",rank=\"1\",hpc_job=\"j\",call=\"cuStreamSynchronize\"} 2.500"),
            "{text}"
        );
        assert_eq!(text.matches("faultline_nccl_blocked_seconds{").count(), 1);
    }

    #[test]
    fn at_most_max_exited_ranks_are_kept_the_oldest_folded_first() {
        let t0 = Instant::now();
        let mut ex = ExitedRanks::new(Duration::from_secs(60), 4);
        for i in 0..MAX_EXITED_RANKS as u32 + 2 {
            ex.retire((i, 1), rank("c", 0, i), "j".into(), t0);
        }
        assert_eq!(ex.len(), MAX_EXITED_RANKS);
        assert_eq!(ex.folded_jobs(), 1);
        // Retain 0: folded at once.
        let mut now = ExitedRanks::new(Duration::ZERO, 4);
        now.retire((1, 1), rank("c", 0, 1), "k".into(), t0);
        assert!(now.is_empty());
        let text = render_all(&BTreeMap::new(), &now, |_| String::new());
        assert!(
            text.contains("faultline_nccl_job_calls_total{hpc_job=\"k\",op=\"AllReduce\"} 3"),
            "{text}"
        );
        assert!(!text.contains("faultline_nccl_calls_total"), "{text}");
    }
}
