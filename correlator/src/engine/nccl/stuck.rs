//! `collective_hang` where every rank waits: every live rank of a
//! communicator silent at one sequence is a hang only with proof from
//! below that the job is stuck rather than paused, and names the most
//! likely culprit when one is visible.
//!
//! Proof (each rank's host's latest window): a thread of the rank's process
//! inside a CUDA driver call (a sync, a launch) that has not returned for
//! the hang bound (`NcclRank.blocked_s`), or the rank's GPU busy at
//! `spin_util_pct` or more with no collective progress (NCCL's kernels spin
//! on the GPU while they wait for peers), on at least `stuck_share` of the
//! waiting ranks, while no rank's process launches kernels (an evaluation
//! pass launches and issues no collectives). A checkpoint (GPUs idle, the
//! job writing, no call blocked) and the end of a job (every rank exited
//! or destroyed its communicator) show none of it. The HCA ports' traffic
//! collapsing is quoted as evidence; alone it is no proof (a checkpoint
//! stops collective traffic too).
//!
//! Culprit, first visible wins: a rank whose process exited (its `exited`
//! row, or its rows stopped while its host still reports), a rank whose
//! host went silent, a port of the footprint that is down or erroring (its
//! state, its error counters, an open `ib_link_*` incident), a GPU of a rank
//! with an XID (its event, an open `gpu_xid` incident).
use std::collections::{BTreeSet, HashMap};
use vocab::kind::IncidentKind;

use super::{below::Below, Comm, NcclConfig, Rank};
use crate::engine::{incidents::Finding, stats::median};

/// What the judge sees besides the communicator.
pub(super) struct Ctx<'a> {
    pub cfg: &'a NcclConfig,
    pub host_now: &'a HashMap<String, i64>,
    pub below: &'a HashMap<String, Below>,
    /// Whether an incident of (kind, entity) is open.
    pub open: &'a dyn Fn(&'static str, &str) -> bool,
    /// Every communicator (a wider one of the same processes stands for
    /// this one's hang).
    pub comms: &'a HashMap<String, Comm>,
    /// The latest window end of any host (no host's clock is ahead).
    pub latest_ms: i64,
}

/// The tally of the waiting ranks' evidence from below.
#[derive(Debug, Default)]
struct Proof {
    waiting: usize,
    blocked: usize,
    /// The longest blocked call: (call, seconds).
    call: Option<(String, f64)>,
    spinning: usize,
    launching: usize,
    ports: usize,
    collapsed: usize,
    writes: u64,
}

impl Proof {
    fn stuck(&self, share: f64) -> bool {
        let need = (share * self.waiting as f64).max(1.0);
        (self.launching as f64) < need
            && (self.blocked as f64 >= need || self.spinning as f64 >= need)
    }
}

/// A rank as evidence names it: `rank R on H (pid P, gpu G, job J rank N)`.
pub(super) fn who(r: &Rank) -> String {
    format!(
        "rank {} on {} (pid {}, gpu {}{}{})",
        r.rank,
        r.host,
        r.pid,
        r.device,
        if r.job.is_empty() {
            String::new()
        } else {
            format!(", job {}", r.job)
        },
        r.job_rank.map(|j| format!(" rank {j}")).unwrap_or_default()
    )
}

/// The hang finding of a communicator whose `live` ranks all sit at one
/// sequence, if it is stuck.
pub(super) fn judge_uniform(ctx: &Ctx, id: &str, c: &Comm, live: &[&Rank]) -> Option<Finding> {
    let cfg = ctx.cfg;
    let seq = live.first()?.seq;
    if seq == 0 || c.ranks.len() < 2 {
        return None;
    }
    // A cadence observed: a communicator whose creation was not seen is
    // judged once it has one.
    let intervals: Vec<f64> = c
        .ranks
        .values()
        .map(|r| r.interval_s)
        .filter(|i| *i > 0.0)
        .collect();
    if intervals.is_empty() {
        return None;
    }
    let tau = median(&intervals);
    let bound_s = (cfg.hang_intervals * tau).max(cfg.hang_min_s);
    let bound_ms = (bound_s * 1000.0) as i64;
    let now = |h: &str| ctx.host_now.get(h).copied().unwrap_or(0);
    let fresh = c.ranks.values().map(|r| now(&r.host)).max().unwrap_or(0);
    // Ranks gone without a word: their host silent, or their rows stopped
    // while their host still reports.
    // At least three of the host's windows (hosts report in turn, a
    // window or so apart).
    let win_ms = |h: &str| ctx.below.get(h).map_or(0, |b| (b.len_s * 1000.0) as i64);
    let host_silent = |r: &Rank| fresh - now(&r.host) >= bound_ms.max(3 * win_ms(&r.host));
    let rows_stopped = |r: &Rank| now(&r.host) - r.row_ms >= bound_ms.max(2 * win_ms(&r.host));
    let (gone, waiting): (Vec<&Rank>, Vec<&Rank>) =
        live.iter().partition(|r| host_silent(r) || rows_stopped(r));
    if waiting.is_empty() {
        return None;
    }
    let silent = |r: &Rank| {
        if r.last_ms > 0 {
            now(&r.host) - r.last_ms
        } else {
            0
        }
    };
    if waiting.iter().any(|r| silent(r) < bound_ms) {
        return None;
    }
    let p = proof(ctx, c, &waiting, bound_s);
    if !p.stuck(cfg.stuck_share) {
        tracing::debug!(comm = id, seq, proof = ?p, "every rank silent at one sequence, no proof of a hang: a pause");
        return None;
    }
    if let Some(wider) = subsumed(ctx, id, c) {
        tracing::debug!(
            comm = id,
            wider,
            "every rank waits, as on a wider communicator of the same processes: raised there"
        );
        return None;
    }
    let exited: Vec<&Rank> = c.ranks.values().filter(|r| r.exited && !r.ended).collect();
    let (culprit_host, mut lines) = culprit(ctx, c, &exited, &gone, seq, bound_ms, host_silent);
    let first_waiting = waiting.iter().map(|r| r.host.as_str()).min()?;
    let entity = match &c.hang {
        Some(e) => e.clone(),
        None => vocab::entity::nccl_comm(culprit_host.as_deref().unwrap_or(first_waiting), id),
    };
    let silent_s = waiting.iter().map(|r| silent(r)).min().unwrap_or(0) as f64 / 1000.0;
    let mut ev = headline(cfg, id, c, &p, (seq, silent_s, bound_s, tau));
    let found = !lines.is_empty();
    if !found {
        lines.push(format!(
            "every rank waits in collective {seq}; no cause seen below"
        ));
    }
    ev.append(&mut lines);
    for r in waiting.iter().take(8) {
        ev.push(format!("waiting {}", who(r)));
    }
    let jobs: BTreeSet<String> = c
        .ranks
        .values()
        .map(|r| r.job.clone())
        .filter(|j| !j.is_empty())
        .collect();
    let jobs: Vec<String> = jobs.into_iter().collect();
    let pids: Vec<String> = waiting
        .iter()
        .take(2)
        .map(|r| format!("`py-spy dump --native --pid {}` on {}", r.pid, r.host))
        .collect();
    Some(
        Finding::new(IncidentKind::CollectiveHang, &entity, if found { 0.85 } else { 0.7 })
            .with_evidence_list(ev)
            .with_jobs(&jobs)
            .with_mark(format!("waiting_at:{seq}"))
            .with_runbook(format!(
                "every rank waits in the same collective: the culprit above first (a dead rank's exit code and dmesg for OOM kills, a down port's `ibstat`, an XID's `nvidia-smi -q`); else {}, NCCL_DEBUG=INFO and the watchdog (TORCH_NCCL_TIMEOUT, default 10 min) logs; restart the job from its last checkpoint",
                pids.join(", ")
            )),
    )
}

/// The hang's first two lines: the communicator and what is below.
fn headline(
    cfg: &NcclConfig,
    id: &str,
    c: &Comm,
    p: &Proof,
    (seq, silent_s, bound_s, tau): (u64, f64, f64, f64),
) -> Vec<String> {
    let op = if c.op.is_empty() { "?" } else { c.op.as_str() };
    vec![
        format!(
            "communicator {id}: every rank waits in collective {seq} ({op}); {} live rank(s) silent {silent_s:.1} s (bound {bound_s:.1} s = max({} x median interval {tau:.3} s, {} s))",
            p.waiting, cfg.hang_intervals, cfg.hang_min_s
        ),
        format!(
            "below: {}/{} ranks inside a CUDA call that has not returned{}; {}/{} GPUs busy >= {}% with no collective progress (NCCL kernels spin); {}/{} HCA ports' traffic collapsed; {} kernel launches continuing; job writes {} MB",
            p.blocked,
            p.waiting,
            p.call
                .as_ref()
                .map(|(c, s)| format!(" ({c} for {s:.1} s)"))
                .unwrap_or_default(),
            p.spinning,
            p.waiting,
            cfg.spin_util_pct,
            p.collapsed,
            p.ports,
            p.launching,
            p.writes / 1_000_000
        ),
    ]
}

/// A wider communicator (more ranks; the same: a smaller id) that shares
/// a process with `c` and whose every live rank is silent too: the job's
/// one hang, raised there (the processes block on one collective; their
/// other communicators merely go quiet).
fn subsumed<'a>(ctx: &Ctx<'a>, id: &str, c: &Comm) -> Option<&'a str> {
    let procs: Vec<&(String, u32)> = c.ranks.keys().take(8).collect();
    let me = (c.ranks.len(), std::cmp::Reverse(id));
    ctx.comms
        .iter()
        .filter(|(oid, o)| (o.ranks.len(), std::cmp::Reverse(oid.as_str())) > me)
        .filter(|(_, o)| procs.iter().any(|k| o.ranks.contains_key(*k)))
        .find(|(_, o)| all_silent(ctx, o))
        .map(|(oid, _)| oid.as_str())
}

/// Whether every live rank of `o` has been silent for its hang bound.
fn all_silent(ctx: &Ctx, o: &Comm) -> bool {
    let intervals: Vec<f64> = o
        .ranks
        .values()
        .map(|r| r.interval_s)
        .filter(|i| *i > 0.0)
        .collect();
    let bound_ms =
        ((ctx.cfg.hang_intervals * median(&intervals)).max(ctx.cfg.hang_min_s) * 1000.0) as i64;
    let mut live = o
        .ranks
        .values()
        .filter(|r| !r.ended && !r.exited)
        .peekable();
    live.peek().is_some()
        && live.all(|r| {
            let now = ctx.host_now.get(&r.host).copied().unwrap_or(0);
            r.last_ms > 0 && now - r.last_ms >= bound_ms
        })
}

/// The waiting ranks' evidence from their hosts' latest windows.
fn proof(ctx: &Ctx, c: &Comm, waiting: &[&Rank], bound_s: f64) -> Proof {
    let mut p = Proof {
        waiting: waiting.len(),
        ..Proof::default()
    };
    let mut ports = BTreeSet::new();
    for r in waiting {
        if !r.blocked_call.is_empty() && r.blocked_s >= bound_s {
            p.blocked += 1;
            if p.call.as_ref().is_none_or(|(_, s)| r.blocked_s > *s) {
                p.call = Some((r.blocked_call.clone(), r.blocked_s));
            }
        }
        let Some(b) = ctx.below.get(&r.host) else {
            continue;
        };
        let util = u32::try_from(r.device)
            .ok()
            .and_then(|d| b.util.get(&d).copied());
        p.spinning += usize::from(util.is_some_and(|u| u >= ctx.cfg.spin_util_pct));
        p.launching += usize::from(b.launches.get(&r.pid).is_some_and(|n| *n > 0));
        for (k, port) in b.ports_of(&r.hcas) {
            if ports.insert((r.host.as_str(), k)) {
                p.ports += 1;
                p.collapsed += usize::from(port.collapsed(ctx.cfg.traffic_collapse_fraction));
            }
        }
    }
    // The job's writes on the communicator's hosts (one pass over the
    // ranks for the hosts and jobs, then one lookup per pair).
    let mut hosts = BTreeSet::new();
    let mut jobs = BTreeSet::new();
    for r in c.ranks.values() {
        hosts.insert(r.host.as_str());
        jobs.insert(r.job.as_str());
    }
    for b in hosts.into_iter().filter_map(|h| ctx.below.get(h)) {
        p.writes += b.net_writes + jobs.iter().filter_map(|j| b.writes.get(*j)).sum::<u64>();
    }
    p
}

/// The culprit lines, first visible kind first, and the culprit's host.
fn culprit(
    ctx: &Ctx,
    c: &Comm,
    exited: &[&Rank],
    gone: &[&Rank],
    seq: u64,
    bound_ms: i64,
    host_silent: impl Fn(&Rank) -> bool,
) -> (Option<String>, Vec<String>) {
    if let Some(r) = exited.first() {
        let lines = exited
            .iter()
            .take(4)
            .map(|r| {
                format!(
                    "culprit: {} exited while the others wait in collective {seq}: a dead peer",
                    who(r)
                )
            })
            .collect();
        return (Some(r.host.clone()), lines);
    }
    if let Some(r) = gone.first() {
        let lines = gone
            .iter()
            .take(4)
            .map(|r| {
                if host_silent(r) {
                    format!("culprit: {} is on a host that went silent (no window for {:.0} s or more)", who(r), bound_ms as f64 / 1000.0)
                } else {
                    format!("culprit: {} stopped reporting while its host still reports: its process is gone", who(r))
                }
            })
            .collect();
        return (Some(r.host.clone()), lines);
    }
    // Ports: down first, then an open link incident, then link events.
    let mut ports: Vec<(u8, String, String)> = Vec::new();
    let mut seen = BTreeSet::new();
    for r in c.ranks.values() {
        let Some(b) = ctx.below.get(&r.host) else {
            continue;
        };
        for (k, port) in b.ports_of(&r.hcas) {
            if !seen.insert((r.host.clone(), k.to_string())) {
                continue;
            }
            let entity = format!("{}/{k}", r.host);
            let open = ["ib_link_down", "ib_link_flapping", "ib_link_degraded"]
                .into_iter()
                .find(|kind| (ctx.open)(kind, &entity));
            let (class, why) = if port.down() {
                (0, format!("is down (state {})", port.state))
            } else if let Some(kind) = open {
                (1, format!("has an open {kind} incident"))
            } else if port.errors > 0 {
                (
                    2,
                    format!(
                        "went down or retrained {} time(s) in the latest window",
                        port.errors
                    ),
                )
            } else {
                continue;
            };
            ports.push((
                class,
                r.host.clone(),
                format!("culprit: port {entity} of {} {why}", who(r)),
            ));
        }
    }
    if let Some(best) = ports.iter().map(|p| p.0).min() {
        ports.retain(|p| p.0 == best);
        ports.sort();
        let host = ports.first().map(|p| p.1.clone());
        return (host, ports.into_iter().take(4).map(|p| p.2).collect());
    }
    let mut lines = Vec::new();
    let mut host = None;
    let since = c.ranks.values().map(|r| r.last_ms).max().unwrap_or(0) - bound_ms;
    for r in c.ranks.values() {
        let Ok(d) = u32::try_from(r.device) else {
            continue;
        };
        let gpu = vocab::entity::gpu(&r.host, d);
        let xid = ctx
            .below
            .get(&r.host)
            .and_then(|b| b.xid.get(&d))
            .filter(|(_, ms)| *ms >= since);
        let why = match xid {
            Some((code, _)) => format!("had XID {code}"),
            None if (ctx.open)("gpu_xid", &gpu) => "has an open gpu_xid incident".to_string(),
            None => continue,
        };
        host.get_or_insert_with(|| r.host.clone());
        lines.push(format!("culprit: GPU {gpu} of {} {why}", who(r)));
        if lines.len() >= 4 {
            break;
        }
    }
    (host, lines)
}
