//! Duty-cycling the CUDA launch uprobes (bounded-overhead mode, see
//! [`crate::launch_budget`]): detaching and re-attaching the links of the
//! launch symbols, keeping account of how long they were attached, and
//! scaling the launch counters of each snapshot by it.
use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use aya::{
    maps::{MapData, PerCpuHashMap},
    programs::{uprobe::UProbeLinkId, UProbe},
};
use collector_common::cuda::{LaunchKey, LaunchStats};

use super::launch_cpu::CpuAccount;
use super::{
    attach::attach_one_link,
    entry::{EntryKind, Placement},
    ProbeError, Probes,
};
use crate::launch_budget::Scaler;

/// One launch symbol's uprobe: program, symbol, placement, cookie, and its
/// link while attached.
#[derive(Debug)]
pub(super) struct LaunchLink {
    pub program: &'static str,
    pub symbol: &'static str,
    /// Where in the symbol the probe goes and on what (`super::entry`).
    pub placement: Placement,
    pub cookie: u64,
    pub link: Option<UProbeLinkId>,
    /// The library it goes on (a host path or `/proc/self/fd/N`).
    pub lib: PathBuf,
}

/// The launch probes' attach state and the accounting of counted time.
#[derive(Debug, Default)]
pub struct LaunchDuty {
    links: Vec<LaunchLink>,
    attached: bool,
    /// The gate's window while open, CLOCK_MONOTONIC ns: launches count from
    /// `.0` to `.1` (`u64::MAX`: no end, exact mode).
    window: Option<(u64, u64)>,
    /// Counted ns of the windows already closed.
    closed_ns: u64,
    /// At the last snapshot: when (CLOCK_MONOTONIC ns) and the counted ns.
    last_snapshot: Option<(u64, u64)>,
    scaler: Scaler,
    /// Per pid: the share of its CPU the traps took while attached (from the controller).
    trap_share: BTreeMap<u32, f64>,
    /// The controller's attached share of each period (1 = exact).
    duty: f64,
    /// Of the last snapshot interval: attached seconds, interval seconds,
    /// and raw launches per pid counted in it.
    pub last_interval: Interval,
    /// The overflow hash map's raw launches per pid at its last read (for
    /// [`Probes::raw_launch_totals_idle`]).
    overflow: Option<(Instant, BTreeMap<u32, u64>)>,
    /// The launch-heavy processes' CPU, counted and not (the scaling's
    /// basis, see [`super::launch_cpu`]), and when it was last read.
    cpu: CpuAccount,
    cpu_read_ns: Option<u64>,
}

/// How far ahead of the clock a gate change is scheduled: longer than the
/// map update takes, so the kernel switches at the stated time and not when
/// the update lands (a preempted collector used to land it milliseconds late).
const GATE_LEAD: Duration = Duration::from_micros(500);

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub(crate) fn mono_ns() -> u64 {
    super::clock_ns(libc::CLOCK_MONOTONIC)
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
    /// Adds the launch links of another library (found after start). While
    /// the probes are detached, its links are attached at the next switch.
    pub(super) fn add_links(&mut self, ebpf: &mut aya::Ebpf, mut links: Vec<LaunchLink>) {
        if self.links.is_empty() {
            // The first launch probes of all: counting starts now, exactly.
            self.attached = !links.is_empty();
            self.window = self.attached.then(|| (mono_ns(), u64::MAX));
            self.links = links;
            return;
        }
        if !self.attached {
            for l in &mut links {
                if let Some(id) = l.link.take() {
                    take_and_drop(ebpf, l.program, id);
                }
            }
        }
        self.links.extend(links);
    }

    /// Launch links attached now.
    pub(super) fn attached_links(&self) -> usize {
        self.links.iter().filter(|l| l.link.is_some()).count()
    }

    /// Removes (and detaches) the launch links on library `lib`.
    pub(super) fn remove_lib(&mut self, ebpf: &mut aya::Ebpf, lib: &std::path::Path) {
        let (gone, keep): (Vec<LaunchLink>, Vec<LaunchLink>) = std::mem::take(&mut self.links)
            .into_iter()
            .partition(|l| l.lib == lib);
        self.links = keep;
        for mut l in gone {
            if let Some(id) = l.link.take() {
                take_and_drop(ebpf, l.program, id);
            }
        }
    }

    pub(super) fn new(links: Vec<LaunchLink>) -> Self {
        let attached = !links.is_empty();
        Self {
            links,
            attached,
            // The gate starts zeroed: open, without end.
            window: attached.then(|| (mono_ns(), u64::MAX)),
            duty: 1.0,
            ..Default::default()
        }
    }

    /// Counted ns up to `now`: the closed windows and the open one's part.
    fn counted_ns(&self, now: u64) -> u64 {
        self.closed_ns
            + self
                .window
                .map_or(0, |(open, close)| now.min(close).saturating_sub(open))
    }

    /// Reads the tracked processes' CPU and attributes what they ran since
    /// the last reading to the counted side for the share of that time
    /// the gate counted.
    fn account_cpu(&mut self) {
        let now = mono_ns();
        let last = self.cpu_read_ns.replace(now);
        let share = match (last, self.window) {
            (Some(l), Some((open, close))) if now > l => {
                let on = now.min(close).saturating_sub(open.max(l));
                on as f64 / (now - l) as f64
            }
            (_, Some(_)) => 1.0,
            (_, None) => 0.0,
        };
        self.cpu.account(share);
    }

    /// Of the time since the last snapshot: the counted share (1 when the
    /// launch probes counted all of it), the counted seconds and the
    /// interval's seconds (0 at the first snapshot).
    fn take_fraction(&mut self, now: u64) -> (f64, f64, f64) {
        let counted = self.counted_ns(now);
        let Some((last, counted_then)) = self.last_snapshot.replace((now, counted)) else {
            return (1.0, 0.0, 0.0);
        };
        let on = counted.saturating_sub(counted_then) as f64 * 1e-9;
        let secs = now.saturating_sub(last) as f64 * 1e-9;
        if secs <= 0.0 {
            return (1.0, 0.0, 0.0);
        }
        ((on / secs).min(1.0), on, secs)
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
            Duration::from_nanos(d.counted_ns(mono_ns()))
        })
    }

    /// Raw launches per pid as the kernel counted them (not scaled).
    pub fn raw_launch_totals(&self) -> Result<BTreeMap<u32, u64>, ProbeError> {
        let mut out: BTreeMap<u32, u64> = BTreeMap::new();
        for (k, v) in self.raw_launches()? {
            *out.entry(k.pid).or_default() += v.launches;
        }
        Ok(out)
    }

    /// Raw launches per pid for checks while nothing is bounded: the launch
    /// slots as they are now (a pass over mapped memory, no system call)
    /// plus the overflow hash map's (`CUDA_LAUNCH_AGG`) per-pid totals as of
    /// its last read, read again once that is `max_age` old. Reading the hash
    /// map walks all of its 32,768 buckets in the kernel however few keys it
    /// holds: at every 100 ms check that was a fifth of an idle collector's
    /// CPU. Only launches of keys that found no free slot (the hash map)
    /// are seen up to `max_age` late.
    pub fn raw_launch_totals_idle(
        &self,
        max_age: Duration,
    ) -> Result<BTreeMap<u32, u64>, ProbeError> {
        let cached = self
            .launch
            .lock()
            .ok()
            .and_then(|d| d.overflow.clone())
            .filter(|(at, _)| at.elapsed() < max_age);
        let mut out = match cached {
            Some((_, m)) => m,
            None => {
                let m = self.overflow_launch_totals()?;
                if let Ok(mut d) = self.launch.lock() {
                    d.overflow = Some((Instant::now(), m.clone()));
                }
                m
            }
        };
        for s in self.launch_slot_values() {
            *out.entry(s.key.pid).or_default() += s.stats.launches;
        }
        Ok(out)
    }

    /// Raw launches per pid in the overflow hash map, summed over the CPUs.
    fn overflow_launch_totals(&self) -> Result<BTreeMap<u32, u64>, ProbeError> {
        let name = "CUDA_LAUNCH_AGG";
        let m = self.ebpf().map(name).ok_or(ProbeError::MissingMap(name))?;
        let h = PerCpuHashMap::<&MapData, LaunchKey, LaunchStats>::try_from(m)
            .map_err(|source| ProbeError::Map { name, source })?;
        let mut out: BTreeMap<u32, u64> = BTreeMap::new();
        for e in h.iter() {
            let (k, per_cpu) = e.map_err(|source| ProbeError::Map { name, source })?;
            let n = out.entry(k.pid).or_default();
            for v in per_cpu.iter() {
                *n += v.launches;
            }
        }
        Ok(out)
    }

    /// Whether there are launch probes to duty-cycle.
    pub fn has_launch_probes(&self) -> bool {
        self.launch.lock().is_ok_and(|d| !d.links.is_empty())
    }

    /// The kind of instruction the launch probes sit on, which sets what a
    /// hit costs: `cuLaunchKernel`'s (nearly every launch goes through
    /// it), else the first launch symbol's. `None` without launch probes.
    pub fn launch_entry_kind(&self) -> Option<EntryKind> {
        let d = self.launch.lock().ok()?;
        d.links
            .iter()
            .find(|l| l.symbol == "cuLaunchKernel")
            .or_else(|| d.links.first())
            .map(|l| l.placement.kind)
    }

    /// Attaches or detaches the launch uprobes (`cuLaunchKernel`,
    /// `cuLaunchCooperativeKernel`, `cuLaunchKernelEx`). Detached, a launch
    /// pays no trap. Attaching with `window`, launches count for exactly
    /// that long, starting just after the links are in place; without, they
    /// count until detached (exact mode; also switches an attached window to it).
    pub fn set_launch_attached(
        &mut self,
        on: bool,
        window: Option<Duration>,
    ) -> Result<(), ProbeError> {
        let mut duty = std::mem::take(
            &mut *self
                .launch
                .lock()
                .map_err(|_| ProbeError::Launch("state lock poisoned".into()))?,
        );
        let r = set_links(&mut self.ebpf, &mut duty, on, window);
        if let Ok(mut g) = self.launch.lock() {
            *g = duty;
        }
        r
    }

    /// Sets each process's trap share while attached (the scaling's
    /// correction for launch-bound processes).
    pub fn set_launch_trap_share(&self, share: BTreeMap<u32, f64>) {
        if let Ok(mut d) = self.launch.lock() {
            d.cpu.track(share.keys().copied());
            d.trap_share = share;
        }
    }

    /// Where the launch-heavy processes' CPU time is read (`/proc`).
    pub fn set_launch_proc_root(&self, root: &std::path::Path) {
        if let Ok(mut d) = self.launch.lock() {
            d.cpu.set_proc_root(root);
        }
    }

    /// Sets the controller's attached share of each period (1 = exact),
    /// which snapshots report as their sampled fraction.
    pub fn set_launch_duty(&self, duty: f64) {
        if let Ok(mut d) = self.launch.lock() {
            d.duty = duty;
        }
    }

    /// The last snapshot interval's attached time and raw launches per pid.
    pub fn launch_interval(&self) -> Interval {
        self.launch
            .lock()
            .map(|d| d.last_interval.clone())
            .unwrap_or_default()
    }

    /// Scales `launches` (raw cumulative) into estimates by the counted time
    /// since the previous snapshot; returns 1 when it was all counted (exact),
    /// else the controller's attached share of each period (never 0: a
    /// snapshot between two windows of a long period counted nothing, yet
    /// is an estimate, not exact).
    pub(crate) fn scale_launches(&self, launches: &mut BTreeMap<LaunchKey, LaunchStats>) -> f64 {
        let Ok(mut d) = self.launch.lock() else {
            return 1.0;
        };
        // The clock read right after the counters were.
        let (fraction, attached_s, interval_s) = d.take_fraction(mono_ns());
        // Raw launches per pid in the interval (before scaling), for the controller.
        let mut raw: BTreeMap<u32, u64> = BTreeMap::new();
        let mut raw_total: BTreeMap<u32, u64> = BTreeMap::new();
        let prev = &d.scaler;
        for (k, v) in launches.iter() {
            let before = prev.raw(k).map_or(0, |p| p.launches);
            *raw.entry(k.pid).or_default() += v.launches.saturating_sub(before);
            *raw_total.entry(k.pid).or_default() += v.launches;
        }
        d.account_cpu();
        let cpu = d.cpu.take();
        let share = d.trap_share.clone();
        d.scaler
            .apply(launches, attached_s, interval_s, &share, &cpu);
        d.last_interval = Interval {
            attached_s,
            secs: interval_s,
            raw_launches: raw,
            raw_total,
        };
        if fraction >= 1.0 {
            1.0
        } else if d.duty < 1.0 {
            d.duty
        } else {
            fraction.max(crate::launch_budget::MIN_FRACTION)
        }
    }
}

/// Sets the launch programs' gate (`CUDA_LAUNCH_GATE`) to count while
/// `open ≤ now < close` (`close == 0`: always).
fn set_gate(ebpf: &mut aya::Ebpf, open: u64, close: u64) -> Result<(), ProbeError> {
    let name = "CUDA_LAUNCH_GATE";
    let m = ebpf.map_mut(name).ok_or(ProbeError::MissingMap(name))?;
    let mut a = aya::maps::Array::<&mut aya::maps::MapData, [u64; 2]>::try_from(m)
        .map_err(|source| ProbeError::Map { name, source })?;
    a.set(0, [open, close], 0)
        .map_err(|source| ProbeError::Map { name, source })
}

/// Closes the open window, if any, at a time the kernel is told ahead of it
/// (waiting out at most [`GATE_LEAD`]), and accounts its counted time.
fn close_window(ebpf: &mut aya::Ebpf, duty: &mut LaunchDuty) -> Result<(), ProbeError> {
    let Some((open, close)) = duty.window else {
        return Ok(());
    };
    let end = close.min(mono_ns().saturating_add(GATE_LEAD.as_nanos() as u64));
    if end < close {
        set_gate(ebpf, open, end)?;
    }
    let now = mono_ns();
    if now < end {
        std::thread::sleep(Duration::from_nanos(end - now));
    }
    // What the processes ran up to here was counted.
    duty.account_cpu();
    // Closed for good (the window above has ended by now).
    set_gate(ebpf, u64::MAX, 1)?;
    duty.closed_ns += end.saturating_sub(open);
    duty.window = None;
    Ok(())
}

/// Detaches link `id` of `program`, closing it on a thread of its own (the
/// kernel waits for an RCU grace period).
fn take_and_drop(ebpf: &mut aya::Ebpf, program: &'static str, id: UProbeLinkId) {
    let p: Option<&mut UProbe> = ebpf.program_mut(program).and_then(|p| p.try_into().ok());
    if let Some(Ok(link)) = p.map(|p| p.take_link(id)) {
        std::thread::spawn(move || drop(link));
    }
}

fn set_links(
    ebpf: &mut aya::Ebpf,
    duty: &mut LaunchDuty,
    on: bool,
    window: Option<Duration>,
) -> Result<(), ProbeError> {
    if duty.links.is_empty() {
        return Ok(());
    }
    if on && duty.attached {
        // Attached already: only a switch to exact counting changes anything.
        if window.is_none() && duty.window.is_none_or(|(_, c)| c != u64::MAX) {
            close_window(ebpf, duty)?;
            set_gate(ebpf, 0, 0)?;
            duty.window = Some((mono_ns(), u64::MAX));
        }
        return Ok(());
    }
    if !on && !duty.attached {
        return Ok(());
    }
    if on {
        let mut loaded: Vec<&'static str> = duty.links.iter().map(|l| l.program).collect();
        for l in duty.links.iter_mut().rev() {
            let id = attach_one_link(
                ebpf,
                &mut loaded,
                l.program,
                super::attach::location(l.symbol, l.placement.skip),
                l.cookie,
                &l.lib,
            )
            .map_err(|reason| ProbeError::Launch(format!("re-attaching {}: {reason}", l.symbol)))?;
            l.link = Some(id);
        }
        // What the processes ran up to here was not counted.
        duty.account_cpu();
        // Counting starts once every link is in place: at a stated time
        // just ahead, for the window's length.
        match window {
            Some(len) => {
                let open = mono_ns().saturating_add(GATE_LEAD.as_nanos() as u64);
                let close = open.saturating_add(len.as_nanos() as u64);
                set_gate(ebpf, open, close)?;
                duty.window = Some((open, close));
            }
            None => {
                set_gate(ebpf, 0, 0)?;
                duty.window = Some((mono_ns(), u64::MAX));
            }
        }
    } else {
        // Counting stops at the gate, at a stated time, before any link
        // goes; the kernel's unregistering then waits for an RCU grace
        // period (hundreds of ms), so the links are closed on a thread of
        // their own, not on the agent's.
        close_window(ebpf, duty)?;
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
