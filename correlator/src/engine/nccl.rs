//! NCCL communicators across hosts (`Window.nccl`): each communicator's
//! footprint (hosts × GPUs × HCAs × jobs), `collective_hang`, and a step
//! time inferred from collective cadence for jobs that send none over OTLP.
//!
//! **collective_hang.** Every rank issues a communicator's collectives in
//! the same order, and a collective completes only when every rank has
//! issued it. When a rank stops issuing, the others can run ahead only as
//! far as NCCL's asynchrony allows and then wait: the communicator's
//! sequence numbers stop moving, with the stopped ranks behind. Judged:
//! every known rank silent (no new collective, per its host's own clock
//! from the probe timestamp) for at least `hang_intervals` of the
//! communicator's own median interval between collectives (a healthy
//! memoryless cadence is silent that long with probability e^-20 at the
//! default) and at least `hang_min_s`, while the ranks' sequences disagree.
//! The ranks at the lowest sequence are the stalled ones. All live ranks
//! silent at one sequence is a hang only with proof from below that the
//! job is stuck rather than paused (a checkpoint, an evaluation pass, the
//! end of the job), and names the culprit it can see ([`stuck`]).
//!
//! **Split communicators** get their rank and size from their members'
//! parent, colour and key once every member is seen ([`split`]).
//!
//! **Inferred step time.** A rank's mean interval between collectives on
//! its widest communicator (most ranks) is proportional to its step time
//! (the job issues the same collectives every step), which is all the
//! change-point and straggler detectors need. It is used only for jobs that
//! never sent an OTLP step time (OTLP wins when both exist).
//!
//! **NCCL Inspector.** What NCCL's Inspector plugin measured on a host's
//! GPU (`Window.nccl_perf`: completed collectives' execution time and bus
//! bandwidth) is kept per host and GPU from its latest window and quoted
//! next to the communicator's ranks on that GPU in the evidence of a link,
//! GPU or host incident: the throughput the job really got there.
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use vocab::kind::IncidentKind;

use proto::v1::{NcclPerf, NcclRank, StepTime, Window};

use super::{incidents::Finding, stats::median};

mod below;
mod config;
mod split;
mod stuck;

pub use config::NcclConfig;

/// One rank as last reported.
#[derive(Clone, Debug)]
struct Rank {
    host: String,
    pid: u32,
    rank: i32,
    nranks: i32,
    device: i32,
    job: String,
    job_rank: Option<u32>,
    hcas: Vec<String>,
    seq: u64,
    /// Latest collective, ms on its host's clock (0: none).
    last_ms: i64,
    /// Latest nonzero interval between collectives, s.
    interval_s: f64,
    ended: bool,
    /// The process exited (its last row came).
    exited: bool,
    /// The CUDA driver call its process is inside now and for how long (s).
    blocked_call: String,
    blocked_s: f64,
    /// Window end (its host's clock) of its latest row.
    row_ms: i64,
    /// `ncclCommSplit`: parent id, colour, key, rank in the parent (-1).
    split: Option<split::Member>,
}

#[derive(Debug, Default)]
struct Comm {
    /// (host, pid) → rank.
    ranks: BTreeMap<(String, u32), Rank>,
    /// The open hang's entity, to resolve it once the communicator moves.
    hang: Option<String>,
    /// Latest window end of any host that reported it (eviction).
    seen_ms: i64,
    /// The latest collective's op any rank reported.
    op: String,
}

#[derive(Debug, Default)]
pub struct NcclDetector {
    cfg: NcclConfig,
    comms: HashMap<String, Comm>,
    /// Latest window end per host (its clock).
    host_now: HashMap<String, i64>,
    /// The latest window end of any host: no communicator's freshest
    /// host is ahead of it.
    latest_ms: i64,
    /// Communicators judged so far (a scaling test counts them).
    pub judged: u64,
    /// Jobs that sent an OTLP step time: never inferred.
    otlp_jobs: HashSet<String>,
    /// Communicators with an open hang (judged on every window of the
    /// stalled host, also when none of its ranks reports any more).
    hung: HashSet<String>,
    /// The NCCL Inspector's latest collective rows per (host, GPU): the
    /// busiest few (most points) of the host's latest window that had any.
    perf: HashMap<(String, i32), Vec<NcclPerf>>,
    /// Each host's latest window below NCCL (GPUs, ports, launches, writes).
    below: HashMap<String, below::Below>,
    /// Ranks tracked over all communicators (`max_ranks_total`).
    ranks: usize,
    pub dropped: u64,
    /// Rows of a host's window below NCCL past the per-host bound.
    pub dropped_below: u64,
}

impl NcclDetector {
    pub fn new(cfg: NcclConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// Whether `job`'s step times are inferred from its collectives: it has
    /// NCCL ranks and never sent an OTLP step time.
    pub fn infers_steps_of(&self, job: &str) -> bool {
        !self.otlp_jobs.contains(job)
            && self
                .comms
                .values()
                .any(|c| c.ranks.values().any(|r| r.job == job))
    }

    /// Whether `job` sent an OTLP step time (then its step times are its own).
    pub fn has_otlp(&self, job: &str) -> bool {
        self.otlp_jobs.contains(job)
    }

    /// Communicators tracked.
    pub fn communicators(&self) -> usize {
        self.comms.len()
    }

    fn update(&mut self, host: &str, end_ms: i64, r: &NcclRank) {
        if r.comm.is_empty() || r.comm.starts_with("h:") {
            // A rank whose creation the probes did not see: no shared id.
            return;
        }
        if !self.comms.contains_key(&r.comm) && self.comms.len() >= self.cfg.max_communicators {
            self.dropped += 1;
            metrics::counter!("faultline_engine_dropped_total", "what" => "nccl_ranks")
                .increment(1);
            return;
        }
        let c = self.comms.entry(r.comm.clone()).or_default();
        c.seen_ms = c.seen_ms.max(end_ms);
        let key = (host.to_string(), r.pid);
        let new = !c.ranks.contains_key(&key);
        if new && (c.ranks.len() >= self.cfg.max_ranks || self.ranks >= self.cfg.max_ranks_total) {
            self.dropped += 1;
            metrics::counter!("faultline_engine_dropped_total", "what" => "nccl_ranks")
                .increment(1);
            return;
        }
        if new {
            self.ranks += 1;
        }
        let prev_interval = c.ranks.get(&key).map_or(0.0, |x| x.interval_s);
        if let Some(o) = r.ops.iter().filter(|o| o.calls > 0).max_by_key(|o| o.calls) {
            if c.op != o.op {
                c.op = o.op.chars().take(32).collect();
            }
        }
        c.ranks.insert(
            key,
            Rank {
                host: host.to_string(),
                pid: r.pid,
                rank: r.rank,
                nranks: r.nranks,
                device: r.device,
                job: r.job.clone(),
                job_rank: r.job_rank,
                hcas: r.hcas.iter().take(8).cloned().collect(),
                seq: r.seq,
                last_ms: r.last_unix_ms,
                interval_s: if r.interval_s > 0.0 {
                    r.interval_s
                } else {
                    prev_interval
                },
                ended: r.ended,
                exited: r.exited,
                blocked_call: r.blocked_call.chars().take(48).collect(),
                blocked_s: r.blocked_s,
                row_ms: end_ms,
                split: split::Member::of(r),
            },
        );
    }

    /// Takes one window: updates the footprints and judges the
    /// communicators this host has ranks in. Returns the findings and the
    /// entities evaluated (open hangs of communicators that move again).
    pub fn observe(&mut self, host: &str, w: &Window) -> (Vec<Finding>, Vec<String>) {
        self.observe_with(host, w, &|_, _| false)
    }

    /// [`Self::observe`], with `open(kind, entity)` saying whether an
    /// incident is open (a hang's culprit: a link or XID incident).
    pub fn observe_with(
        &mut self,
        host: &str,
        w: &Window,
        open: &dyn Fn(&'static str, &str) -> bool,
    ) -> (Vec<Finding>, Vec<String>) {
        if !w.steps.is_empty() {
            for s in &w.steps {
                if self.otlp_jobs.len() < self.cfg.max_communicators {
                    self.otlp_jobs.insert(s.job.clone());
                }
            }
        }
        self.host_now.insert(host.to_string(), w.end_unix_ms);
        self.take_perf(host, &w.nccl_perf);
        if !w.nccl.is_empty() || self.below.contains_key(host) {
            let n = self
                .below
                .entry(host.to_string())
                .or_default()
                .take(w, self.cfg.traffic_collapse_fraction);
            if n > 0 {
                self.dropped_below += n as u64;
                metrics::counter!("faultline_engine_dropped_total", "what" => "nccl_below")
                    .increment(n as u64);
            }
        }
        let mut touched = BTreeSet::new();
        // Communicators in which this host has a live rank whose latest
        // collective is within `hang_min_s` of its window's end, its host
        // not behind any other by as much: no verdict can find them hung
        // (every rank would have to be silent past the bound, or gone,
        // which a rank reporting now is not), so the walk over their ranks
        // (O(ranks) a window: O(ranks²) a slot of a 100,000-rank ring) is
        // skipped.
        let mut moving = BTreeSet::new();
        self.latest_ms = self.latest_ms.max(w.end_unix_ms);
        let min_ms = (self.cfg.hang_min_s * 1000.0) as i64;
        let current = self.latest_ms - w.end_unix_ms < min_ms;
        for r in &w.nccl {
            self.update(host, w.end_unix_ms, r);
            touched.insert(r.comm.clone());
            let live_now = self
                .comms
                .get(&r.comm)
                .and_then(|c| c.ranks.get(&(host.to_string(), r.pid)))
                .is_some_and(|k| {
                    !k.ended && !k.exited && k.last_ms > 0 && w.end_unix_ms - k.last_ms < min_ms
                });
            if current && live_now {
                moving.insert(r.comm.clone());
            }
        }
        split::resolve(&mut self.comms, &touched);
        let prefix = vocab::entity::host_prefix(host);
        for id in &self.hung {
            let mine = self
                .comms
                .get(id)
                .and_then(|c| c.hang.as_deref())
                .is_some_and(|e| e.starts_with(&prefix));
            if mine {
                touched.insert(id.clone());
            }
        }
        let mut findings = Vec::new();
        let mut evaluated = Vec::new();
        for id in touched {
            let Some(c) = self.comms.get(&id) else {
                continue;
            };
            if moving.contains(&id) {
                if let Some(e) = self.comms.get_mut(&id).and_then(|c| c.hang.take()) {
                    evaluated.push(e);
                }
                self.hung.remove(&id);
                continue;
            }
            self.judged += 1;
            let ctx = stuck::Ctx {
                cfg: &self.cfg,
                host_now: &self.host_now,
                below: &self.below,
                open,
                comms: &self.comms,
                latest_ms: self.latest_ms,
            };
            match judge(&ctx, &id, c) {
                Some(f) => {
                    let e = f.entity.clone();
                    findings.push(f);
                    if let Some(c) = self.comms.get_mut(&id) {
                        c.hang = Some(e);
                    }
                    self.hung.insert(id);
                }
                None => {
                    if let Some(e) = self.comms.get_mut(&id).and_then(|c| c.hang.take()) {
                        evaluated.push(e);
                    }
                    self.hung.remove(&id);
                }
            }
        }
        // Communicators nobody reported for a long time (ended jobs).
        let horizon = w.end_unix_ms - (self.cfg.forget_s * 1000.0) as i64;
        self.comms
            .retain(|_, c| c.seen_ms >= horizon && !c.ranks.values().all(|r| r.ended || r.exited));
        self.ranks = self.comms.values().map(|c| c.ranks.len()).sum();
        let comms = &self.comms;
        self.hung.retain(|id| comms.contains_key(id));
        (findings, evaluated)
    }

    /// Forgets the ranks of hosts that went idle (and communicators left empty).
    /// Keeps a window's Inspector rows (collectives, at most
    /// `PERF_PER_GPU` per GPU, the most-sampled first).
    fn take_perf(&mut self, host: &str, rows: &[NcclPerf]) {
        const PERF_PER_GPU: usize = 4;
        if rows.is_empty() {
            return;
        }
        self.perf.retain(|(h, _), _| h != host);
        let mut by_gpu: BTreeMap<i32, Vec<&NcclPerf>> = BTreeMap::new();
        for r in rows.iter().filter(|r| !r.p2p && r.device >= 0) {
            by_gpu.entry(r.device).or_default().push(r);
        }
        for (d, mut v) in by_gpu {
            v.sort_by(|a, b| b.points.cmp(&a.points).then(a.op.cmp(&b.op)));
            let keep = v.into_iter().take(PERF_PER_GPU).cloned().collect();
            self.perf.insert((host.to_string(), d), keep);
        }
    }

    /// The Inspector's line for a rank, when it measured the rank's GPU on a
    /// communicator of the rank's size.
    fn perf_line(&self, r: &Rank) -> Option<String> {
        let rows = self.perf.get(&(r.host.clone(), r.device))?;
        let p = rows
            .iter()
            .find(|p| p.nranks == r.nranks || p.nranks < 0 || r.nranks < 0)?;
        Some(format!(
            "NCCL Inspector on {} GPU{}: {} {} at {:.1} GB/s bus bandwidth, {:.3} ms each ({} ops, {} ranks, comm {})",
            r.host,
            r.device,
            p.op,
            p.message_size,
            p.busbw_gbs,
            p.exec_us / 1000.0,
            p.points,
            p.nranks,
            if p.comm_id.is_empty() { &p.comm_name } else { &p.comm_id }
        ))
    }

    pub fn forget_hosts(&mut self, gone: &HashSet<String>) {
        self.perf.retain(|(h, _), _| !gone.contains(h));
        self.below.retain(|h, _| !gone.contains(h));
        for c in self.comms.values_mut() {
            c.ranks.retain(|(h, _), _| !gone.contains(h));
        }
        self.comms.retain(|_, c| !c.ranks.is_empty());
        self.ranks = self.comms.values().map(|c| c.ranks.len()).sum();
        let comms = &self.comms;
        self.hung.retain(|id| comms.contains_key(id));
        self.host_now.retain(|h, _| !gone.contains(h));
    }

    /// Step times inferred from collective cadence for this window's ranks
    /// of jobs without OTLP steps: (job, job rank) → the interval on the
    /// rank's widest communicator.
    pub fn inferred_steps(&self, w: &Window) -> Vec<StepTime> {
        let mut best: BTreeMap<(String, u32), &NcclRank> = BTreeMap::new();
        for r in &w.nccl {
            let Some(jr) = r.job_rank else { continue };
            if r.job.is_empty() || r.interval_s <= 0.0 || self.otlp_jobs.contains(&r.job) {
                continue;
            }
            let k = (r.job.clone(), jr);
            let better = best.get(&k).is_none_or(|b| {
                (r.nranks, r.interval_s.to_bits()) > (b.nranks, b.interval_s.to_bits())
            });
            if better {
                best.insert(k, r);
            }
        }
        best.into_iter()
            .map(|((job, rank), r)| {
                // The window's collectives (point-to-point is not cadence).
                let prev = r
                    .ops
                    .iter()
                    .filter(|o| is_collective(&o.op))
                    .map(|o| o.calls)
                    .sum::<u64>();
                StepTime {
                    job,
                    rank,
                    seconds: r.interval_s,
                    device: r.device,
                    hca: r
                        .hcas
                        .first()
                        .map(|h| h.split('/').next().unwrap_or(h).to_string())
                        .unwrap_or_default(),
                    count: u32::try_from(prev.max(1)).unwrap_or(u32::MAX),
                    max_seconds: 0.0,
                }
            })
            .collect()
    }

    /// Adds to each finding on a link, GPU or host the communicators whose
    /// ranks run there and their jobs.
    pub fn annotate(&self, findings: &mut [Finding]) {
        for f in findings.iter_mut() {
            let crosses = |r: &Rank| -> bool {
                let host = &r.host;
                match f.kind.as_str() {
                    k if k.starts_with("ib_link") => {
                        let Some(rest) = f.entity.strip_prefix(&vocab::entity::host_prefix(host))
                        else {
                            return false;
                        };
                        let hca = rest.split('/').next().unwrap_or("");
                        // `hca/port` (seen on the QPs) or a whole `hca`.
                        r.hcas.is_empty() || r.hcas.iter().any(|h| h == rest || h == hca)
                    }
                    k if k.starts_with("gpu_") => {
                        let gpu = vocab::entity::gpu(host, r.device);
                        // A host incident stands for the GPUs it absorbs.
                        r.device >= 0 && (f.entity == gpu || f.absorbs.contains(&gpu))
                    }
                    "node_lost" => &f.entity == host,
                    _ => false,
                }
            };
            let mut lines = Vec::new();
            for (id, c) in &self.comms {
                let on: Vec<&Rank> = c
                    .ranks
                    .values()
                    .filter(|r| !r.ended && !r.exited && crosses(r))
                    .collect();
                if on.is_empty() {
                    continue;
                }
                let hosts: BTreeSet<&str> = c.ranks.values().map(|r| r.host.as_str()).collect();
                let jobs: BTreeSet<&str> = c
                    .ranks
                    .values()
                    .map(|r| r.job.as_str())
                    .filter(|j| !j.is_empty())
                    .collect();
                for j in &jobs {
                    if !f.jobs.iter().any(|x| x == j) {
                        f.jobs.push(j.to_string());
                    }
                }
                let nranks = c.ranks.values().map(|r| r.nranks).max().unwrap_or(-1);
                let ranks: Vec<String> = on.iter().map(|r| r.rank.to_string()).collect();
                let mut group = vec![format!(
                    "NCCL communicator {id} ({} of {} ranks seen on {} hosts, job {}) has rank {} here",
                    c.ranks.len(),
                    nranks,
                    hosts.len(),
                    jobs.into_iter().collect::<Vec<_>>().join(","),
                    ranks.join(",")
                )];
                group.extend(on.iter().filter_map(|r| self.perf_line(r)));
                lines.push(group);
            }
            // Each communicator's line, then what the Inspector measured on
            // its ranks there; communicators in id order.
            lines.sort();
            f.evidence.extend(lines.into_iter().flatten().take(8));
        }
    }
}

/// The hang finding of one communicator, if it is hung now.
fn judge(ctx: &stuck::Ctx, id: &str, c: &Comm) -> Option<Finding> {
    let (cfg, host_now) = (ctx.cfg, ctx.host_now);
    if !cfg.enabled {
        return None;
    }
    // A live rank that issued within `hang_min_s` (≤ any bound) of its
    // host's clock, its rows current and its host not behind the others by
    // as much, is neither silent past the bound nor gone: no verdict can
    // find a hang. The scan stops at the first such rank, so a moving
    // communicator costs a few ranks, not all of them.
    let min_ms = (cfg.hang_min_s * 1000.0) as i64;
    let now = |h: &str| host_now.get(h).copied().unwrap_or(0);
    let moving = |r: &Rank| {
        let n = now(&r.host);
        !r.ended
            && !r.exited
            && r.last_ms > 0
            && n - r.last_ms < min_ms
            && n - r.row_ms < min_ms
            && ctx.latest_ms - n < min_ms
    };
    if c.ranks.values().any(moving) {
        return None;
    }
    let live: Vec<&Rank> = c.ranks.values().filter(|r| !r.ended && !r.exited).collect();
    let lo = live.iter().map(|r| r.seq).min()?;
    let hi = live.iter().map(|r| r.seq).max()?;
    if lo == hi {
        return stuck::judge_uniform(ctx, id, c, &live);
    }
    if live.len() < 2 || hi == 0 {
        return None;
    }
    let intervals: Vec<f64> = live
        .iter()
        .map(|r| r.interval_s)
        .filter(|i| *i > 0.0)
        .collect();
    let tau = median(&intervals);
    let bound_ms = ((cfg.hang_intervals * tau).max(cfg.hang_min_s) * 1000.0) as i64;
    // Each rank's silence on its own host's clock: its host's latest window
    // end since its latest collective.
    let silent = |r: &Rank| -> i64 {
        let now = host_now.get(&r.host).copied().unwrap_or(0);
        if r.last_ms <= 0 {
            return 0;
        }
        now - r.last_ms
    };
    if live.iter().any(|r| silent(r) < bound_ms) {
        return None;
    }
    let stalled: Vec<&&Rank> = live.iter().filter(|r| r.seq == lo).collect();
    let waiting = live.len() - stalled.len();
    let first_host = stalled.iter().map(|r| r.host.as_str()).min()?;
    let entity = vocab::entity::nccl_comm(first_host, id);
    let jobs: BTreeSet<String> = live
        .iter()
        .map(|r| r.job.clone())
        .filter(|j| !j.is_empty())
        .collect();
    let jobs: Vec<String> = jobs.into_iter().collect();
    let mut ev = vec![format!(
        "communicator {id}: {} rank(s) stopped at collective {lo}, {waiting} wait at up to {hi}; silent {:.1} s (bound {:.1} s = max({} x median interval {:.3} s, {} s))",
        stalled.len(),
        live.iter().map(|r| silent(r)).min().unwrap_or(0) as f64 / 1000.0,
        bound_ms as f64 / 1000.0,
        cfg.hang_intervals,
        tau,
        cfg.hang_min_s
    )];
    for r in stalled.iter().take(16) {
        ev.push(format!("stalled {}", stuck::who(r)));
    }
    let pids: Vec<String> = stalled
        .iter()
        .take(4)
        .map(|r| format!("`py-spy dump --pid {}` on {}", r.pid, r.host))
        .collect();
    Some(
        Finding::new(IncidentKind::CollectiveHang, &entity, 0.85)
            .with_evidence_list(ev)
            .with_jobs(&jobs)
            .with_mark(format!("stalled_at:{lo}"))
            .with_runbook(format!(
                "the stalled ranks are not issuing collectives: {}; their GPUs' XIDs (`nvidia-smi -q`) and their hosts' links; NCCL_DEBUG=INFO and the job's watchdog (TORCH_NCCL_TIMEOUT) logs; the waiting ranks are victims",
                pids.join(", ")
            )),
    )
}

/// Whether `op` is a collective (it advances the communicator's sequence):
/// not point-to-point, one-sided or lifecycle calls, whose counts say
/// nothing of the step's cadence.
fn is_collective(op: &str) -> bool {
    matches!(
        op,
        "AllReduce"
            | "AllGather"
            | "ReduceScatter"
            | "Broadcast"
            | "Reduce"
            | "AlltoAll"
            | "Gather"
            | "Scatter"
    )
}

#[cfg(test)]
pub(super) mod tests;
#[cfg(test)]
mod wait_tests;
