//! Verbs (RDMA) probes: completions by status and QP transitions → rows.
use anyhow::Result;
use collector_common::verbs::{qp_state_name, wc_status_name};
use proto::v1 as pb;

use crate::{
    agent::{Ctx, Source},
    probes::verbs::VerbsSnapshot,
};

pub struct VerbsSource {
    prev: VerbsSnapshot,
}

impl VerbsSource {
    pub fn new(prev: VerbsSnapshot) -> Self {
        Self { prev }
    }
}

impl Source for VerbsSource {
    fn window(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<()> {
        let cur = cx.probes.verbs_snapshot()?;
        for line in window_lines(&self.prev, &cur) {
            cx.console.detail(line);
        }
        wire.verbs = crate::window::verbs(&self.prev, &cur, cx.ids);
        cx.feed.verbs_posted = super::usage::verbs_posted(&self.prev, &cur);
        let ids = &mut *cx.ids;
        cx.expo
            .set_section("verbs", cur.render_prometheus(|pid| ids.job_rank(pid)));
        // After this window's rows: the exited processes' last counts are in them.
        let pids = cur.completions.keys().map(|k| k.pid);
        let pids = pids.chain(cur.posts.keys().map(|k| k.pid));
        let pids = pids.chain(cur.qp_states.keys().map(|k| k.pid));
        let dead = cx
            .ids
            .exited(pids.chain(cur.async_events.keys().map(|k| k.pid)));
        if !dead.is_empty() {
            let n = cx.probes.verbs_prune(&dead)?;
            metrics::counter!("faultline_verbs_pruned_entries_total").increment(n);
        }
        self.prev = cur;
        Ok(())
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
