//! RDMA asynchronous events (port errors, QP fatal, …) from libibverbs'
//! event threads → wire events.
use std::sync::mpsc::Receiver;

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    rdma::AsyncEvent,
    sources::{Ctx, Fact, Source},
    window::unix_ms,
};

pub struct RdmaEventSource {
    rx: Receiver<AsyncEvent>,
}

impl RdmaEventSource {
    pub fn new(rx: Receiver<AsyncEvent>) -> Self {
        Self { rx }
    }
}

impl Source for RdmaEventSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        while let Ok(ev) = self.rx.try_recv() {
            metrics::counter!(crate::metrics_catalog::RDMA_ASYNC_EVENTS.name, "device" => ev.device.clone(), "event" => ev.name).increment(1);
            let entity = vocab::entity::port(cx.host, &ev.device, ev.port);
            cx.console
                .detail(format_args!("rdma event {entity} {}", ev.name));
            wire.events.push(pb::Event {
                unix_ms: unix_ms(ev.at),
                kind: vocab::EventKind::RdmaAsync.to_string(),
                entity,
                detail: ev.name.into(),
                code: i64::from(ev.event_type),
                ..Default::default()
            });
        }
        Ok(None)
    }
}
