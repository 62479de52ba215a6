//! Workload signals received over OTLP → step times and workload samples.
use anyhow::Result;
use proto::v1 as pb;

use crate::{
    agent::{Ctx, Source},
    otlp::Receiver,
};

pub struct OtlpSource {
    rx: Receiver,
}

impl OtlpSource {
    pub fn new(rx: Receiver) -> Self {
        Self { rx }
    }
}

impl Source for OtlpSource {
    fn window(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<()> {
        let ids = &mut *cx.ids;
        let (steps, workload) = self.rx.shared.take_window(|pid| ids.get(pid).cloned());
        for s in &steps {
            cx.console.detail(format_args!(
                "steps job={} rank={} count={} mean={:.4}s max={:.4}s",
                s.job, s.rank, s.count, s.seconds, s.max_seconds
            ));
        }
        wire.steps = steps;
        wire.workload = workload;
        Ok(())
    }
}
