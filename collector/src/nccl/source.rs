//! NCCL probes: communicator ranks on this host → `Window.nccl` rows, console
//! lines and the `faultline_nccl_*` series; each rank's in-flight CUDA call;
//! the entries of processes that exited are removed from the maps after
//! their last window (`exited`), their series kept for
//! `nccl.retain_exited_s`, then folded into their job's totals.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    nccl::{self, RankState, Who},
    sources::{Ctx, Fact, Source},
};

pub struct NcclSource {
    prev: BTreeMap<(u32, u64), RankState>,
    /// Ranks whose process exited: series kept, then folded per job.
    exited: nccl::ExitedRanks,
    /// Who each live rank's process was last window.
    known: BTreeMap<u32, Known>,
}

/// A rank process's identity as last seen alive.
#[derive(Clone, Debug, Default)]
struct Known {
    job: String,
    rank: Option<u32>,
    hcas: Vec<String>,
}

/// `CUDA_IN_CALL` entries read per window at most (its capacity is 65,536;
/// one per thread inside a timed driver call).
const MAX_IN_FLIGHT: usize = 16_384;

impl NcclSource {
    /// `prev`: the ranks as they are at start. Libraries that appear later
    /// are attached by `super::libraries::LibrarySource`.
    pub fn new(prev: BTreeMap<(u32, u64), RankState>) -> Self {
        Self {
            prev,
            exited: nccl::ExitedRanks::default(),
            known: BTreeMap::new(),
        }
    }

    /// How exited ranks' series are kept (`nccl.retain_exited_s`,
    /// `nccl.max_job_totals`).
    pub fn with_exited(mut self, exited: nccl::ExitedRanks) -> Self {
        self.exited = exited;
        self
    }
}

impl Source for NcclSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let maps = cx.probes.nccl_maps()?;
        let mut cur = nccl::ranks(&maps, cx.host);
        let dead = cx.ids.gone(cur.keys().map(|k| k.0));
        if !dead.is_empty() {
            // Those processes are gone, so what the maps hold for them now
            // is final (a read before their exit may lack their last calls).
            cur = nccl::ranks(&cx.probes.nccl_maps()?, cx.host);
            for ((pid, _), r) in cur.iter_mut() {
                r.exited = dead.contains(pid);
            }
        }
        self.blocked_calls(cx, &mut cur);
        // The ports the ranks' QPs are bound to (verbs probes); a process
        // with none seen yet falls back to NCCL_IB_HCA.
        let ports = match cx.probes.verbs_qp_ports() {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("verbs QP ports unreadable: {e}");
                Default::default()
            }
        };
        // Who each rank's process is; an exited one as it was last seen
        // alive (its identity may be gone with it), so its last row and
        // kept series keep their job.
        let ids = &mut *cx.ids;
        let mut who: BTreeMap<u32, Known> = BTreeMap::new();
        for pid in cur.keys().map(|k| k.0) {
            if who.contains_key(&pid) {
                continue;
            }
            let w = match ids.get(pid) {
                Some(i) => Known {
                    job: i.job().unwrap_or_default(),
                    rank: i.rank(),
                    hcas: i.hcas(),
                },
                None => self.known.get(&pid).cloned().unwrap_or_default(),
            };
            who.insert(pid, w);
        }
        let rows = nccl::window_rows(&self.prev, &cur, nccl::realtime_offset_ns(), |pid| {
            let w = who.get(&pid).cloned().unwrap_or_default();
            Who {
                job: w.job,
                rank: w.rank,
                hcas: nccl::rank_hcas(ports.get(&pid), w.hcas),
            }
        });
        let job = |pid: u32| who.get(&pid).map(|w| w.job.clone()).unwrap_or_default();
        let now = Instant::now();
        let mut live = BTreeMap::new();
        for (k, r) in &cur {
            if r.exited {
                self.exited.retire(*k, r.clone(), job(k.0), now);
            } else {
                live.insert(*k, r.clone());
            }
        }
        let live_jobs: BTreeSet<String> = live.values().map(|r| job(r.pid)).collect();
        self.exited.expire(now, &live_jobs);
        metrics::gauge!(crate::metrics_catalog::NCCL_EXITED_RANKS_KEPT.name)
            .set(self.exited.len() as f64);
        cx.expo
            .set_section("nccl", nccl::render_all(&live, &self.exited, job));
        who.retain(|pid, _| !dead.contains(pid));
        self.known = who;
        if !cx.console.quiet {
            for r in &rows {
                let ops: Vec<String> = r
                    .ops
                    .iter()
                    .map(|o| format!("{}={}/{}B", o.op, o.calls, o.bytes))
                    .collect();
                let blocked = if r.blocked_call.is_empty() {
                    String::new()
                } else {
                    format!(" in {} for {:.1}s", r.blocked_call, r.blocked_s)
                };
                cx.console.detail(format_args!(
                    "nccl comm={} rank={}/{} gpu={} pid={} seq={} interval={:.3}s {}{}{}",
                    r.comm,
                    r.rank,
                    r.nranks,
                    r.device,
                    r.pid,
                    r.seq,
                    r.interval_s,
                    ops.join(" "),
                    blocked,
                    if r.exited { " (exited)" } else { "" }
                ));
            }
        }
        wire.nccl = rows;
        if !dead.is_empty() {
            let n = cx.probes.nccl_prune(&dead)? + cx.probes.cuda_in_flight_prune(&dead)?;
            metrics::counter!(crate::metrics_catalog::NCCL_PRUNED_ENTRIES.name).increment(n);
        }
        self.prev = cur;
        Ok(None)
    }
}

impl NcclSource {
    /// Each live rank's oldest in-flight CUDA driver call (the CUDA probes'
    /// entries without a return yet), read bounded.
    fn blocked_calls(&self, cx: &mut Ctx<'_>, cur: &mut BTreeMap<(u32, u64), RankState>) {
        if cur.is_empty() {
            return;
        }
        let (calls, truncated) = match cx.probes.cuda_in_flight(MAX_IN_FLIGHT) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("CUDA in-flight calls unreadable: {e}");
                return;
            }
        };
        if truncated {
            metrics::counter!(crate::metrics_catalog::NCCL_IN_FLIGHT_SCAN_TRUNCATED.name)
                .increment(1);
        }
        let pids: BTreeSet<u32> = cur.keys().map(|k| k.0).collect();
        let now = crate::probes::clock_ns(libc::CLOCK_MONOTONIC);
        let by_pid = nccl::blocked(
            calls
                .iter()
                .filter(|c| pids.contains(&c.pid))
                .map(|c| (c.pid, c.kind, c.start_ns)),
            now,
        );
        for ((pid, _), r) in cur.iter_mut() {
            r.blocked = if r.exited {
                None
            } else {
                by_pid.get(pid).copied()
            };
        }
    }
}
