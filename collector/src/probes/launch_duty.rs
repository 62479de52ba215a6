//! Duty-cycling the CUDA launch uprobes (bounded-overhead mode, see
//! [`crate::launch_budget`]): detaching and re-attaching the links of the
//! launch symbols, keeping account of how long they were attached, and
//! scaling the launch counters of each snapshot by it.
use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use aya::programs::{
    uprobe::{UProbeAttachLocation, UProbeLinkId},
    UProbe,
};
use collector_common::cuda::{LaunchKey, LaunchStats};

use super::{attach::attach_one_link, ProbeError, Probes};
use crate::launch_budget::Scaler;

/// One launch symbol's uprobe: program, symbol, cookie, and its link while attached.
#[derive(Debug)]
struct LaunchLink {
    program: &'static str,
    symbol: &'static str,
    cookie: u64,
    link: Option<UProbeLinkId>,
}

/// The launch probes' attach state and the accounting of attached time.
#[derive(Debug, Default)]
pub struct LaunchDuty {
    lib: Option<PathBuf>,
    links: Vec<LaunchLink>,
    attached: bool,
    /// Attached since (while attached).
    since: Option<Instant>,
    /// Attached time accumulated since the last snapshot.
    acc: Duration,
    /// Attached time accumulated in all (up to the current attach).
    total: Duration,
    last_snapshot: Option<Instant>,
    scaler: Scaler,
    /// Per pid: the share of its CPU the traps took while attached (from the controller).
    trap_share: BTreeMap<u32, f64>,
    /// Of the last snapshot interval: attached seconds, interval seconds,
    /// and raw launches per pid counted in it.
    pub last_interval: Interval,
}

/// The interval between the last two snapshots, for the controller.
#[derive(Clone, Debug, Default)]
pub struct Interval {
    pub attached_s: f64,
    pub secs: f64,
    pub raw_launches: BTreeMap<u32, u64>,
    /// Raw launches per pid since the probes were attached (cumulative).
    pub raw_total: BTreeMap<u32, u64>,
}

impl LaunchDuty {
    pub(super) fn new(
        lib: Option<PathBuf>,
        links: Vec<(&'static str, &'static str, u64, UProbeLinkId)>,
    ) -> Self {
        let attached = !links.is_empty();
        Self {
            lib,
            links: links
                .into_iter()
                .map(|(program, symbol, cookie, link)| LaunchLink {
                    program,
                    symbol,
                    cookie,
                    link: Some(link),
                })
                .collect(),
            attached,
            since: attached.then(Instant::now),
            ..Default::default()
        }
    }

    /// Attached share of the time since the last snapshot (1 when the
    /// launch probes were never detached in it); resets the accounting.
    fn take_fraction(&mut self, now: Instant) -> (f64, f64) {
        let Some(last) = self.last_snapshot.replace(now) else {
            self.acc = Duration::ZERO;
            if let Some(s) = self.since.replace(now) {
                self.total += now.saturating_duration_since(s);
            }
            return (1.0, 0.0);
        };
        let mut on = self.acc;
        if let Some(s) = self.since.replace(now) {
            on += now.saturating_duration_since(s.max(last));
            self.total += now.saturating_duration_since(s);
        }
        self.acc = Duration::ZERO;
        let secs = now.saturating_duration_since(last).as_secs_f64();
        if secs <= 0.0 {
            return (1.0, 0.0);
        }
        ((on.as_secs_f64() / secs).min(1.0), on.as_secs_f64())
    }
}

impl Probes {
    /// Whether the launch probes are attached now.
    pub fn launch_probes_attached(&self) -> bool {
        self.launch.lock().is_ok_and(|d| d.attached)
    }

    /// Total time the launch probes have counted (attached, gate open).
    pub fn launch_attached_total(&self) -> Duration {
        self.launch.lock().map_or(Duration::ZERO, |d| {
            d.total
                + d.since.map_or(Duration::ZERO, |s| {
                    Instant::now().saturating_duration_since(s)
                })
        })
    }

    /// Raw launches per pid as the kernel counted them (not scaled).
    pub fn raw_launch_totals(&self) -> Result<BTreeMap<u32, u64>, ProbeError> {
        let name = "CUDA_LAUNCH_AGG";
        let m = self.ebpf().map(name).ok_or(ProbeError::MissingMap(name))?;
        let h =
            aya::maps::PerCpuHashMap::<&aya::maps::MapData, LaunchKey, LaunchStats>::try_from(m)
                .map_err(|source| ProbeError::Map { name, source })?;
        let mut out: BTreeMap<u32, u64> = BTreeMap::new();
        for e in h.iter() {
            let (k, per_cpu) = e.map_err(|source| ProbeError::Map { name, source })?;
            *out.entry(k.pid).or_default() += per_cpu.iter().map(|v| v.launches).sum::<u64>();
        }
        Ok(out)
    }

    /// Whether there are launch probes to duty-cycle.
    pub fn has_launch_probes(&self) -> bool {
        self.launch.lock().is_ok_and(|d| !d.links.is_empty())
    }

    /// Attaches or detaches the launch uprobes (`cuLaunchKernel`,
    /// `cuLaunchCooperativeKernel`, `cuLaunchKernelEx`). Detached, a launch
    /// pays no trap.
    pub fn set_launch_attached(&mut self, on: bool) -> Result<(), ProbeError> {
        let mut duty = std::mem::take(
            &mut *self
                .launch
                .lock()
                .map_err(|_| ProbeError::Launch("state lock poisoned".into()))?,
        );
        let r = set_links(&mut self.ebpf, &mut duty, on);
        if let Ok(mut g) = self.launch.lock() {
            *g = duty;
        }
        r
    }

    /// Sets each process's trap share while attached (the scaling's
    /// correction for launch-bound processes).
    pub fn set_launch_trap_share(&self, share: BTreeMap<u32, f64>) {
        if let Ok(mut d) = self.launch.lock() {
            d.trap_share = share;
        }
    }

    /// The last snapshot interval's attached time and raw launches per pid.
    pub fn launch_interval(&self) -> Interval {
        self.launch
            .lock()
            .map(|d| d.last_interval.clone())
            .unwrap_or_default()
    }

    /// Scales `launches` (raw cumulative) into estimates by the attached
    /// share since the previous snapshot; returns that share (1 = exact).
    pub(super) fn scale_launches(
        &self,
        launches: &mut BTreeMap<LaunchKey, LaunchStats>,
        now: Instant,
    ) -> f64 {
        let Ok(mut d) = self.launch.lock() else {
            return 1.0;
        };
        let (fraction, attached_s) = d.take_fraction(now);
        // Raw launches per pid in the interval (before scaling), for the controller.
        let mut raw: BTreeMap<u32, u64> = BTreeMap::new();
        let mut raw_total: BTreeMap<u32, u64> = BTreeMap::new();
        let prev = &d.scaler;
        for (k, v) in launches.iter() {
            let before = prev.raw(k).map_or(0, |p| p.launches);
            *raw.entry(k.pid).or_default() += v.launches.saturating_sub(before);
            *raw_total.entry(k.pid).or_default() += v.launches;
        }
        let share = d.trap_share.clone();
        d.scaler.apply(launches, fraction, &share);
        let interval_s = if fraction > 0.0 {
            attached_s / fraction
        } else {
            0.0
        };
        d.last_interval = Interval {
            attached_s,
            secs: interval_s,
            raw_launches: raw,
            raw_total,
        };
        fraction
    }
}

/// Opens or closes the launch programs' gate (`CUDA_LAUNCH_PAUSED`).
fn set_paused(ebpf: &mut aya::Ebpf, paused: bool) -> Result<(), ProbeError> {
    let name = "CUDA_LAUNCH_PAUSED";
    let m = ebpf.map_mut(name).ok_or(ProbeError::MissingMap(name))?;
    let mut a = aya::maps::Array::<&mut aya::maps::MapData, u32>::try_from(m)
        .map_err(|source| ProbeError::Map { name, source })?;
    a.set(0, u32::from(paused), 0)
        .map_err(|source| ProbeError::Map { name, source })
}

fn set_links(ebpf: &mut aya::Ebpf, duty: &mut LaunchDuty, on: bool) -> Result<(), ProbeError> {
    if duty.attached == on {
        return Ok(());
    }
    let Some(lib) = duty.lib.clone() else {
        return Ok(());
    };
    if on {
        let mut loaded: Vec<&'static str> = duty.links.iter().map(|l| l.program).collect();
        // cuLaunchKernel (first in the table) is attached last and detached
        // first, so its counting time is exactly the accounted one.
        for l in duty.links.iter_mut().rev() {
            let id = attach_one_link(
                ebpf,
                &mut loaded,
                l.program,
                UProbeAttachLocation::Symbol(l.symbol),
                l.cookie,
                &lib,
            )
            .map_err(|reason| ProbeError::Launch(format!("re-attaching {}: {reason}", l.symbol)))?;
            l.link = Some(id);
        }
        // Counting starts with the gate open, once every link is in place.
        set_paused(ebpf, false)?;
        duty.since = Some(Instant::now());
    } else {
        // Counting stops when a link is closed; the kernel's unregistering
        // then waits for an RCU grace period (hundreds of ms), so the links
        // are closed on a thread of their own, not on the agent's.
        // Counting stops at the gate, synchronously.
        set_paused(ebpf, true)?;
        if let Some(s) = duty.since.take() {
            let on = Instant::now().saturating_duration_since(s);
            duty.acc += on;
            duty.total += on;
        }
        let mut taken = Vec::new();
        for l in &mut duty.links {
            let Some(id) = l.link.take() else { continue };
            let p: &mut UProbe = ebpf
                .program_mut(l.program)
                .ok_or(ProbeError::MissingMap(l.program))?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| {
                    ProbeError::Launch(format!("{}: {e}", l.program))
                })?;
            taken.push(
                p.take_link(id)
                    .map_err(|e| ProbeError::Launch(format!("detaching {}: {e}", l.symbol)))?,
            );
        }
        std::thread::spawn(move || drop(taken));
    }
    duty.attached = on;
    Ok(())
}
