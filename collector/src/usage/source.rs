//! Usage per job and team ([`super`]): all of it in the derive phase,
//! from the rows every source put on the wire this window plus the facts
//! they returned (NVML's per-process view, verbs posted bytes).
use anyhow::Result;
use proto::v1 as pb;

use super::{Accountant, GpuReading, Inputs, Who};
use crate::sources::{Ctx, Fact, Facts, Source};

/// Per GPU: utilisation, energy and NVML's processes, as the GPU source
/// returns them (a [`Fact::Typed`]).
#[derive(Debug, Default)]
pub struct GpuReadings(pub Vec<GpuReading>);

pub struct UsageSource {
    acct: Accountant,
    /// The verbs `post_send` probe is attached: fabric bytes come from it.
    verbs_active: bool,
}

impl UsageSource {
    pub fn new(cfg: &super::UsageSection, verbs_active: bool) -> Self {
        Self {
            acct: Accountant::new(cfg.teams.clone(), cfg.max_jobs),
            verbs_active,
        }
    }
}

impl Source for UsageSource {
    fn collect(&mut self, _: &mut Ctx<'_>, _: &mut pb::Window) -> Result<Option<Fact>> {
        Ok(None)
    }

    fn derive(&mut self, cx: &mut Ctx<'_>, facts: &Facts, wire: &mut pb::Window) -> Result<()> {
        let seconds = (wire.end_unix_ms - wire.start_unix_ms).max(0) as f64 / 1000.0;
        let inp = Inputs {
            seconds,
            block: &wire.block,
            cuda: &wire.cuda,
            gpus: facts.get::<GpuReadings>().map_or(&[], |g| &g.0),
            verbs_posted: &facts.verbs_posted,
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
