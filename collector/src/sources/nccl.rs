//! NCCL probes: communicator ranks on this host → `Window.nccl` rows, console
//! lines and the `faultline_nccl_*` series; the entries of processes that
//! exited are removed from the maps after their last window.
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    nccl::{self, RankState, Who},
    sources::{Ctx, Fact, Source},
};

pub struct NcclSource {
    prev: BTreeMap<(u32, u64), RankState>,
    /// Discovery to repeat, and how often (libraries that appear later).
    rescan: Option<(crate::nccl_lib::Search, Duration)>,
    last_scan: Instant,
}

impl NcclSource {
    pub fn new(
        prev: BTreeMap<(u32, u64), RankState>,
        rescan: Option<(crate::nccl_lib::Search, Duration)>,
    ) -> Self {
        Self {
            prev,
            rescan,
            last_scan: Instant::now(),
        }
    }
}

impl Source for NcclSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        if let Some((search, every)) = &self.rescan {
            if self.last_scan.elapsed() >= *every {
                self.last_scan = Instant::now();
                for lib in cx.probes.nccl_rescan(search) {
                    cx.console.detail(format_args!(
                        "nccl probes attached to {} (found after start)",
                        lib.display()
                    ));
                }
            }
        }
        let maps = cx.probes.nccl_maps()?;
        let cur = nccl::ranks(&maps, cx.host);
        // The ports the ranks' QPs are bound to (verbs probes); a process
        // with none seen yet falls back to NCCL_IB_HCA.
        let ports = match cx.probes.verbs_qp_ports() {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!("verbs QP ports unreadable: {e}");
                Default::default()
            }
        };
        let ids = &mut *cx.ids;
        let rows = nccl::window_rows(
            &self.prev,
            &cur,
            nccl::realtime_offset_ns(),
            |pid| match ids.get(pid) {
                Some(i) => Who {
                    job: i.job().unwrap_or_default(),
                    rank: i.rank(),
                    hcas: nccl::rank_hcas(ports.get(&pid), i.hcas()),
                },
                None => Who {
                    job: String::new(),
                    rank: None,
                    hcas: nccl::rank_hcas(ports.get(&pid), Vec::new()),
                },
            },
        );
        cx.expo
            .set_section("nccl", nccl::render(&cur, |pid| ids.job_rank(pid).0));
        if !cx.console.quiet {
            for r in &rows {
                let ops: Vec<String> = r
                    .ops
                    .iter()
                    .map(|o| format!("{}={}/{}B", o.op, o.calls, o.bytes))
                    .collect();
                cx.console.detail(format_args!(
                    "nccl comm={} rank={}/{} gpu={} pid={} seq={} interval={:.3}s {}",
                    r.comm,
                    r.rank,
                    r.nranks,
                    r.device,
                    r.pid,
                    r.seq,
                    r.interval_s,
                    ops.join(" ")
                ));
            }
        }
        wire.nccl = rows;
        let dead = cx.ids.gone(cur.keys().map(|k| k.0));
        if !dead.is_empty() {
            let n = cx.probes.nccl_prune(&dead)?;
            metrics::counter!("faultline_nccl_pruned_entries_total").increment(n);
        }
        self.prev = cur;
        Ok(None)
    }
}
