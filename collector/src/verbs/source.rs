//! Verbs (RDMA) probes: completions by status and QP transitions → rows.
use anyhow::Result;
use collector_common::verbs::{qp_state_name, wc_status_name};
use proto::v1 as pb;

use super::{
    probe::{absorb, render_series, VerbsSeries, VerbsSnapshot},
    wire,
};
use crate::sources::{retired::Retired, Ctx, Fact, Source};

/// Send-side bytes posted per process between two verbs snapshots.
fn verbs_posted(prev: &VerbsSnapshot, cur: &VerbsSnapshot) -> Vec<(u32, u64)> {
    let mut by: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for (k, v) in cur.posts.iter().filter(|(k, _)| k.dir == 0) {
        let before = prev.posts.get(k).map_or(0, |p| p.bytes);
        let n = v.bytes.saturating_sub(before);
        if n > 0 {
            *by.entry(k.pid).or_default() += n;
        }
    }
    by.into_iter().collect()
}

pub struct VerbsSource {
    prev: VerbsSnapshot,
    /// Last counts of processes that exited (see [`crate::sources::retired`]).
    retired: VerbsSeries,
    retired_pairs: Retired,
}

impl VerbsSource {
    pub fn new(prev: VerbsSnapshot) -> Self {
        Self {
            prev,
            retired: VerbsSeries::new(),
            retired_pairs: Retired::default(),
        }
    }
}

impl Source for VerbsSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let cur = cx.probes.verbs_snapshot()?;
        for line in window_lines(&self.prev, &cur) {
            cx.console.detail(line);
        }
        wire.verbs = wire::rows(&self.prev, &cur, cx.ids);
        let posted = verbs_posted(&self.prev, &cur);
        let pids = cur.completions.keys().map(|k| k.pid);
        let pids = pids.chain(cur.posts.keys().map(|k| k.pid));
        let pids = pids.chain(cur.qp_states.keys().map(|k| k.pid));
        let dead = cx
            .ids
            .gone(pids.chain(cur.async_events.keys().map(|k| k.pid)));
        let ids = &mut *cx.ids;
        let live = cur.series(|pid| !dead.contains(&pid), |pid| ids.job_rank(pid));
        let exited = cur.series(|pid| dead.contains(&pid), |pid| ids.job_rank(pid));
        // This window exports every process's counts, the exited ones' last.
        let mut all = self.retired.clone();
        absorb(&mut all, &live);
        absorb(&mut all, &exited);
        cx.expo.set_section("verbs", render_series(&all));
        let now = std::time::Instant::now();
        if !dead.is_empty() {
            let n = cx.probes.verbs_prune(&dead)?;
            metrics::counter!(crate::metrics_catalog::VERBS_PRUNED_ENTRIES.name).increment(n);
            cx.ids.forget(&dead);
            self.retired_pairs.retire(
                exited.keys().map(|(_, j, r, _)| (j.clone(), r.clone())),
                now,
            );
            absorb(&mut self.retired, &exited);
        }
        let live_pairs = live.keys().map(|(_, j, r, _)| (j.clone(), r.clone()));
        let gone = self.retired_pairs.expire(&live_pairs.collect(), now);
        self.retired
            .retain(|(_, j, r, _), _| !gone.contains(&(j.clone(), r.clone())));
        self.prev = cur;
        Ok(Some(Fact::VerbsPosted(posted)))
    }
}

/// Completions by status and QP transitions that happened in the window.
pub fn window_lines(prev: &VerbsSnapshot, cur: &VerbsSnapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in &cur.completions {
        let before = prev.completions.get(k).map_or(0, |p| p.completions);
        let n = v.completions - before.min(v.completions);
        if n > 0 {
            out.push(format!(
                "verbs pid={} qp={} {}={n}",
                k.pid,
                k.qp_num,
                wc_status_name(k.status)
            ));
        }
    }
    for (k, v) in &cur.qp_states {
        let n = v - prev.qp_states.get(k).copied().unwrap_or(0).min(*v);
        if n > 0 {
            out.push(format!(
                "verbs pid={} qp={} -> {} ×{n}",
                k.pid,
                k.qp_num,
                qp_state_name(k.state)
            ));
        }
    }
    out
}
