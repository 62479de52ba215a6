//! Switch port counters (the `[switches]` poller's latest poll) → `IbPort`
//! rows with `switch` set, and the poller's own counters.
use anyhow::Result;
use proto::v1 as pb;

use crate::{
    sources::{Ctx, Fact, Source},
    switches::Latest,
};

pub struct SwitchesSource {
    latest: Latest,
}

impl SwitchesSource {
    pub fn new(latest: Latest) -> Self {
        Self { latest }
    }
}

impl Source for SwitchesSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let Some(p) = self.latest.take() else {
            return Ok(None);
        };
        for (name, why) in &p.failed {
            cx.console
                .detail(format_args!("switch {name}: perfquery failed: {why}"));
            tracing::debug!(switch = %name, %why, "perfquery failed");
        }
        metrics::counter!(crate::metrics_catalog::SWITCH_POLLS.name, "result" => "failed")
            .increment(p.failed.len() as u64);
        metrics::counter!(crate::metrics_catalog::SWITCH_POLLS.name, "result" => "ok")
            .increment(p.ok);
        metrics::counter!(crate::metrics_catalog::SWITCH_PORTS_DROPPED.name).increment(p.dropped);
        metrics::counter!(crate::metrics_catalog::SWITCH_MALFORMED_LINES.name)
            .increment(p.malformed);
        metrics::gauge!(crate::metrics_catalog::SWITCH_PORTS.name).set(p.rows.len() as f64);
        wire.ib_ports.extend(p.rows);
        Ok(None)
    }
}
