//! Usage per job and team (`crate::usage`): runs after every other source,
//! from the rows they put on the wire this window plus what they left in
//! [`UsageFeed`] (NVML's per-process view, verbs posted bytes).
use anyhow::Result;
use proto::v1 as pb;

use crate::{
    agent::{Ctx, Source},
    probes::verbs::VerbsSnapshot,
    usage::{Accountant, GpuReading, Inputs, Who},
};

/// What other sources hand the usage source each window.
#[derive(Debug, Default)]
pub struct UsageFeed {
    pub gpus: Vec<GpuReading>,
    /// Bytes each process posted on send queues in the window.
    pub verbs_posted: Vec<(u32, u64)>,
}

/// Send-side bytes posted per process between two verbs snapshots.
pub fn verbs_posted(prev: &VerbsSnapshot, cur: &VerbsSnapshot) -> Vec<(u32, u64)> {
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

pub struct UsageSource {
    acct: Accountant,
    /// The verbs `post_send` probe is attached: fabric bytes come from it.
    verbs_active: bool,
}

impl UsageSource {
    pub fn new(cfg: &crate::config::UsageSection, verbs_active: bool) -> Self {
        Self {
            acct: Accountant::new(cfg.teams.clone(), cfg.max_jobs),
            verbs_active,
        }
    }
}

impl Source for UsageSource {
    fn window(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<()> {
        let feed = std::mem::take(cx.feed);
        let seconds = (wire.end_unix_ms - wire.start_unix_ms).max(0) as f64 / 1000.0;
        let inp = Inputs {
            seconds,
            block: &wire.block,
            cuda: &wire.cuda,
            gpus: &feed.gpus,
            verbs_posted: &feed.verbs_posted,
            verbs_active: self.verbs_active,
            ib_ports: &wire.ib_ports,
        };
        let ids = &mut *cx.ids;
        let rows = self.acct.window(&inp, |pid| match ids.get(pid) {
            Some(id) => Who {
                job: id.job().unwrap_or_default(),
                team: id.team().unwrap_or_default(),
                hca: id.hcas().into_iter().next(),
            },
            None => Who::default(),
        });
        for r in &rows {
            cx.console.detail(format_args!(
                "usage job={:?} team={:?} {}={} gpu_s={:.3}/{:.3} energy={:.3}J launches={} io={}/{}B fabric={}B method={}",
                r.job, r.team, r.resource_kind, r.resource, r.gpu_busy_seconds, r.gpu_alloc_seconds,
                r.energy_joules, r.launches, r.io_requests, r.io_bytes, r.fabric_bytes, r.method
            ));
        }
        wire.usage = rows;
        cx.expo.set_section("usage", self.acct.render_prometheus());
        Ok(())
    }
}
