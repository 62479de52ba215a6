//! NVML: per-window GPU samples, lost GPUs, and XID/ECC events from the
//! event thread → GPU rows and events; dcgm-exporter-like families.
use std::{collections::BTreeMap, sync::mpsc::Receiver};

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    agent::{Ctx, Source},
    nvml::{self, EventListener, GpuEvent, GpuEventKind, NvmlSource},
    window::unix_ms,
};

pub struct GpuSource {
    src: NvmlSource,
    events: Receiver<GpuEvent>,
    /// Keeps the event thread running.
    _listener: Option<EventListener>,
    /// XIDs since start by (GPU, code); bounded by GPUs × XID codes.
    xid_counts: BTreeMap<(u32, u64), u64>,
}

impl GpuSource {
    pub fn new(
        src: NvmlSource,
        events: Receiver<GpuEvent>,
        listener: Option<EventListener>,
    ) -> Self {
        Self {
            src,
            events,
            _listener: listener,
            xid_counts: BTreeMap::new(),
        }
    }
}

/// The entity a GPU event is about: the GPU when its index is known, the
/// node otherwise (an event from a GPU NVML could not place).
fn entity(host: &str, index: Option<u32>) -> String {
    index.map_or_else(|| host.to_string(), |i| vocab::entity::gpu(host, i))
}

fn event(
    kind: vocab::EventKind,
    at: std::time::SystemTime,
    entity: String,
    detail: String,
    code: i64,
) -> pb::Event {
    pb::Event {
        unix_ms: unix_ms(at),
        kind: kind.to_string(),
        entity,
        detail,
        code,
    }
}

impl Source for GpuSource {
    fn window(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<()> {
        let (samples, lost) = self.src.sample();
        for e in lost {
            let entity = entity(cx.host, e.index);
            cx.console.detail(format_args!(
                "gpu event {entity} {} LOST (fell off the bus)",
                e.uuid
            ));
            wire.events
                .push(event(vocab::EventKind::GpuLost, cx.now, entity, e.uuid, 0));
        }
        for s in &samples {
            let Some(mask) = s.throttle else { continue };
            let names: Vec<&str> = nvml::throttle_names(mask)
                .into_iter()
                .filter(|n| *n != "idle")
                .collect();
            if !names.is_empty() {
                cx.console.detail(format_args!(
                    "gpu {} throttle={} temp={:?}C sm_clock={:?}MHz",
                    vocab::entity::gpu(cx.host, s.index),
                    names.join(","),
                    s.temp_c,
                    s.sm_clock_mhz
                ));
            }
        }
        wire.gpus = crate::window::gpus(self.src.gpus(), &samples);
        while let Ok(e) = self.events.try_recv() {
            let entity = entity(cx.host, e.index);
            let GpuEventKind::Xid { code, meaning } = &e.kind else {
                cx.console
                    .detail(format_args!("gpu event {entity} {} {:?}", e.uuid, e.kind));
                continue;
            };
            match e.index {
                Some(i) => *self.xid_counts.entry((i, *code)).or_default() += 1,
                None => metrics::counter!("faultline_gpu_xid_unplaced_total").increment(1),
            }
            cx.console.detail(format_args!(
                "gpu event {entity} {} XID {code}: {meaning}",
                e.uuid
            ));
            let detail = format!("{}: {meaning}", e.uuid);
            let code = i64::try_from(*code).unwrap_or(i64::MAX);
            wire.events
                .push(event(vocab::EventKind::GpuXid, e.at, entity, detail, code));
        }
        cx.expo.set_section(
            "gpu",
            nvml::render_prometheus(self.src.gpus(), &samples, &self.xid_counts),
        );
        cx.feed.gpus = samples
            .iter()
            .map(|s| crate::usage::GpuReading {
                index: s.index,
                lost: s.lost,
                util_pct: s.util_gpu_pct,
                energy_mj: s.energy_mj,
                procs: if s.lost {
                    Vec::new()
                } else {
                    self.src.processes(s.index)
                },
            })
            .collect();
        cx.gpu.gpus = self.src.gpus().to_vec();
        cx.gpu.samples = samples;
        Ok(())
    }
}
