//! The kernel log: the NVIDIA driver's XIDs → `gpu_xid` events on the GPU
//! NVML names at that PCI address, attributed to the process the driver
//! names (its job, rank and uid); NVSwitch SXids → `nvswitch_sxid` events
//! on `host/nvswitch/<pci>`. An XID NVML also reported (same GPU and code,
//! within `kmsg.join_s`) is one event (`source = "nvml+kmsg"`); repeats of
//! one GPU or switch and code within `join_s` fold into one event's
//! `count`. Every event waits `join_s` after its first report for its
//! repeats and its other source. `docs/kmsg.md` has the formats.
use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::Result;
use proto::v1 as pb;
use vocab::EventKind;

use crate::{
    kmsg::{
        nvrm::{pci_key, PciKey, Report},
        Counts, KmsgLog, Read,
    },
    sources::{Ctx, Fact, Facts, Source},
    window::unix_ms,
};

/// An event waiting `join_s` after its first report for its repeats and
/// its other source.
#[derive(Debug)]
struct Pending {
    /// The event as first reported (the kernel log's when it has one).
    event: pb::Event,
    kmsg: u64,
    nvml: u64,
    /// NVML's GPU UUID, for the joined event's detail.
    uuid: Option<String>,
}

pub struct KmsgSource {
    log: KmsgLog,
    proc_root: PathBuf,
    max_events: usize,
    join: Duration,
    /// Reports read in the collect phase, placed in the derive phase.
    read: Vec<Read>,
    /// By kind, entity and code; at most `max_events`.
    pending: BTreeMap<(EventKind, String, i64), Pending>,
}

impl KmsgSource {
    pub fn new(log: KmsgLog, cfg: &crate::kmsg::KmsgSection, proc_root: PathBuf) -> Self {
        crate::kmsg::describe();
        for reason in ["untrusted", "too_long", "malformed", "events"] {
            metrics::counter!(crate::kmsg::KMSG_DROPPED.name, "reason" => reason).increment(0);
        }
        Self {
            log,
            proc_root,
            max_events: cfg.max_events,
            join: Duration::from_secs_f64(cfg.join_s),
            read: Vec::new(),
            pending: BTreeMap::new(),
        }
    }
}

fn count(c: &Counts) {
    let m = |n: &'static str, v: u64| metrics::counter!(n).increment(v);
    m(crate::kmsg::KMSG_RECORDS.name, c.records);
    m(crate::kmsg::KMSG_LOST.name, c.lost);
    for (reason, v) in [
        ("untrusted", c.untrusted),
        ("too_long", c.too_long),
        ("malformed", c.malformed),
    ] {
        metrics::counter!(crate::kmsg::KMSG_DROPPED.name, "reason" => reason).increment(v);
    }
    if c.full {
        m(crate::kmsg::KMSG_WINDOW_FULL.name, 1);
    }
}

impl Source for KmsgSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, _: &mut pb::Window) -> Result<Option<Fact>> {
        match self.log.read(&mut self.read) {
            Ok(c) => {
                count(&c);
                if c.untrusted > 0 {
                    cx.console.detail(format_args!(
                        "kmsg: {} driver-like lines written from user space ignored",
                        c.untrusted
                    ));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "kmsg: reading the kernel log failed; trying again next window")
            }
        }
        Ok(None)
    }

    /// Places this window's reports (the GPUs NVML read), joins NVML's
    /// XIDs of this window, and sends the events whose wait is over.
    fn derive(&mut self, cx: &mut Ctx<'_>, facts: &Facts, wire: &mut pb::Window) -> Result<()> {
        let gpus: BTreeMap<PciKey, u32> = crate::nvml::GpuFacts::of(facts)
            .gpus
            .iter()
            .filter_map(|g| Some((pci_key(&g.pci_bus_id)?, g.index)))
            .collect();
        let (mono, real) = (crate::kmsg::monotonic_usec(), unix_ms(cx.now));
        for r in std::mem::take(&mut self.read) {
            let at = real - i64::try_from(mono.saturating_sub(r.ts_usec) / 1000).unwrap_or(0);
            let ev = self.report_event(cx, &gpus, r.report, at);
            self.add(ev, None, true);
        }
        // NVML's XIDs of this window wait with the kernel log's.
        let (nvml, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut wire.events)
            .into_iter()
            .partition(|e| e.kind == EventKind::GpuXid.as_str() && e.source == "nvml");
        wire.events = rest;
        for e in nvml {
            let uuid = e.detail.split(':').next().map(str::to_string);
            if let Some(e) = self.add(e, uuid, false) {
                wire.events.push(e); // past the bound: sent as it came
            }
        }
        let now = real;
        let join = i64::try_from(self.join.as_millis()).unwrap_or(i64::MAX);
        let due: Vec<_> = self
            .pending
            .iter()
            .filter(|(_, p)| now.saturating_sub(p.event.unix_ms) >= join)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            let Some(p) = self.pending.remove(&k) else {
                continue;
            };
            let e = finish(p);
            cx.console.detail(format_args!(
                "kmsg event {} {} {} count={} source={} pid={} job={}",
                e.entity, e.kind, e.code, e.count, e.source, e.pid, e.job
            ));
            wire.events.push(e);
        }
        Ok(())
    }
}

impl KmsgSource {
    /// Folds `e` into the event waiting for its key, or starts one. Returns
    /// `e` when the bound leaves no room (an NVML event: sent alone; a
    /// kernel log event: dropped, counted).
    fn add(&mut self, e: pb::Event, uuid: Option<String>, kmsg: bool) -> Option<pb::Event> {
        let key = (
            EventKind::parse(&e.kind).unwrap_or(EventKind::GpuXid),
            e.entity.clone(),
            e.code,
        );
        if let Some(p) = self.pending.get_mut(&key) {
            merge(p, e, uuid, kmsg);
            return None;
        }
        if self.pending.len() >= self.max_events {
            if kmsg {
                metrics::counter!(crate::kmsg::KMSG_DROPPED.name, "reason" => "events")
                    .increment(1);
                return None;
            }
            return Some(e);
        }
        self.pending.entry(key).or_insert_with(|| Pending {
            event: e,
            kmsg: u64::from(kmsg),
            nvml: u64::from(!kmsg),
            uuid,
        });
        None
    }

    /// The event one driver report stands for (not yet joined or folded).
    fn report_event(
        &mut self,
        cx: &mut Ctx<'_>,
        gpus: &BTreeMap<PciKey, u32>,
        report: Report,
        at: i64,
    ) -> pb::Event {
        match report {
            Report::Sxid(s) => {
                metrics::counter!(crate::kmsg::KMSG_REPORTS.name, "kind" => "sxid").increment(1);
                let device = s.device.map(|d| format!("{d} ")).unwrap_or_default();
                pb::Event {
                    unix_ms: at,
                    kind: EventKind::NvswitchSxid.to_string(),
                    entity: vocab::entity::nvswitch(cx.host, &s.pci),
                    detail: format!("{device}{}: SXid {}: {}", s.pci, s.code, s.text),
                    code: i64::try_from(s.code).unwrap_or(i64::MAX),
                    source: "kmsg".into(),
                    count: 1,
                    ..Default::default()
                }
            }
            Report::Xid(x) => {
                metrics::counter!(crate::kmsg::KMSG_REPORTS.name, "kind" => "xid").increment(1);
                let entity = match gpus.get(&x.key) {
                    Some(&i) => vocab::entity::gpu(cx.host, i),
                    None => {
                        metrics::counter!(crate::kmsg::KMSG_UNPLACED.name).increment(1);
                        cx.host.to_string()
                    }
                };
                let meaning = crate::nvml::xid_meaning(x.code);
                let mut e = pb::Event {
                    unix_ms: at,
                    kind: EventKind::GpuXid.to_string(),
                    entity,
                    detail: format!("PCI:{}: {meaning}: {}", x.pci, x.text),
                    code: i64::try_from(x.code).unwrap_or(i64::MAX),
                    source: "kmsg".into(),
                    count: 1,
                    ..Default::default()
                };
                match x.pid {
                    Some(pid) => {
                        e.pid = pid;
                        e.process = x.process.unwrap_or_default();
                        if let Some(id) = cx.ids.get(pid) {
                            e.job = id.job().unwrap_or_default();
                            e.rank = id.rank();
                        }
                        e.uid = uid_of(&self.proc_root, pid);
                    }
                    None => e.detail.push_str(" (the driver named no process)"),
                }
                e
            }
        }
    }
}

/// Folds a report into the waiting event: the kernel log's process and
/// detail win over NVML's (NVML names none).
fn merge(p: &mut Pending, e: pb::Event, uuid: Option<String>, kmsg: bool) {
    if kmsg {
        p.kmsg += 1;
        if p.kmsg == 1 {
            // The first kernel log report of an event NVML started.
            let at = p.event.unix_ms.min(e.unix_ms);
            p.event = pb::Event { unix_ms: at, ..e };
        } else if p.event.pid == 0 && e.pid != 0 {
            let (at, detail) = (p.event.unix_ms, std::mem::take(&mut p.event.detail));
            p.event = pb::Event {
                unix_ms: at,
                detail,
                ..e
            };
        }
        if p.kmsg > 1 {
            metrics::counter!(crate::kmsg::KMSG_FOLDED.name).increment(1);
        }
    } else {
        p.nvml += 1;
        p.uuid = p.uuid.take().or(uuid);
    }
}

/// The event to send: its source(s) and how many reports it folds.
fn finish(p: Pending) -> pb::Event {
    let mut e = p.event;
    e.count = p.kmsg.max(p.nvml).max(1);
    if p.kmsg > 0 && p.nvml > 0 {
        metrics::counter!(crate::kmsg::KMSG_JOINED.name).increment(1);
        e.source = "nvml+kmsg".into();
        if let Some(u) = p.uuid {
            e.detail = format!("{u} {}", e.detail);
        }
    } else if p.kmsg == 0 {
        e.source = "nvml".into();
    }
    e
}

/// The real uid of `pid` (`Uid:` of its status), if it is still there.
fn uid_of(proc_root: &std::path::Path, pid: u32) -> Option<u32> {
    let status =
        crate::bounded_read::read_to_string(&proc_root.join(pid.to_string()).join("status"), 8192)
            .ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
