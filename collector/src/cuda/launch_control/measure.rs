//! What a check measures: the launches each process made since the last
//! check and the CPU it used, over the time the launch probes counted.
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::{LaunchController, MIN_ATTACHED_S};
use crate::{
    launch_budget::ProcWindow,
    probes::{ProbeError, Probes},
};

/// CPU time is read in clock ticks (10 ms, `/proc/<pid>/stat`): over a
/// 25–100 ms check a 2-CPU process's rate read 1.4–2.4 CPUs, and that
/// check's trap share then scaled a whole detached period (+19 % in one
/// benchmark round). So the rate is taken over at least this span of the
/// process's recent checks (±0.5 % at 2 CPUs).
pub const CPU_HORIZON: Duration = Duration::from_secs(2);

/// While no process is bounded or on its way to it, checks read the launch
/// slots each time and the overflow hash map at most this often (see
/// [`Probes::raw_launch_totals_idle`]).
pub const OVERFLOW_MAX_AGE: Duration = Duration::from_secs(1);

/// Readings kept per process whatever the check rate.
pub(super) const CPU_HIST_MAX: usize = 128;

/// Adds the reading `cpu` (CPU seconds) at `now` to `hist` and returns the
/// process's CPU rate (CPUs) since the oldest reading kept: the newest at
/// least `horizon` old, else the oldest there is. `None` with no earlier
/// reading.
pub fn cpu_rate(
    hist: &mut VecDeque<(Instant, f64)>,
    now: Instant,
    cpu: f64,
    horizon: Duration,
) -> Option<f64> {
    hist.push_back((now, cpu));
    while hist.len() > 2
        && hist
            .get(1)
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= horizon)
    {
        hist.pop_front();
    }
    while hist.len() > CPU_HIST_MAX {
        hist.pop_front();
    }
    let &(t0, c0) = hist.front()?;
    let dt = now.saturating_duration_since(t0).as_secs_f64();
    (hist.len() > 1 && dt > 0.0).then(|| (cpu - c0).max(0.0) / dt)
}

/// One check's interval: each process's launches and CPU, and how long
/// the probes counted of how long it lasted.
pub(super) struct Measured {
    pub procs: Vec<ProcWindow>,
    /// Every launching process's raw launch total and CPU seconds now.
    pub readings: Vec<(u32, u64, f64)>,
    pub attached_s: f64,
    pub secs: f64,
}

impl LaunchController {
    /// CPU seconds (user + system) of `pid` and its age in seconds, from
    /// `/proc/<pid>/stat` and `/proc/uptime`.
    fn cpu_s(&self, pid: u32) -> Option<(f64, f64)> {
        let text =
            std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("stat")).ok()?;
        let (utime, stime, start) = crate::probes::launch_cpu::stat_times(&text)?;
        let (utime, stime, start) = (utime as f64, stime as f64, start as f64);
        let uptime: f64 = std::fs::read_to_string(self.proc_root.join("uptime"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(((utime + stime) / self.ticks, uptime - start / self.ticks))
    }

    /// The launches and CPU of every launching process since the last
    /// check; `None` when the interval cannot be measured yet (too little
    /// counted time, or a change between the idle and the full read).
    pub(super) fn measure(
        &mut self,
        probes: &mut Probes,
        now: Instant,
    ) -> Result<Option<Measured>, ProbeError> {
        // Nothing bounded or about to be: the cheap read.
        let idle = self.fraction >= 1.0 && self.strikes.is_empty();
        let totals = if idle {
            probes.raw_launch_totals_idle(OVERFLOW_MAX_AGE)?
        } else {
            probes.raw_launch_totals()?
        };
        let attached_total = probes.launch_attached_total();
        // The first check measures from the controller's start.
        let (t0, att0, tot0, prev_idle) =
            self.prev
                .clone()
                .unwrap_or((self.started, Duration::ZERO, Default::default(), idle));
        let secs = now.saturating_duration_since(t0).as_secs_f64();
        let attached_s = attached_total.saturating_sub(att0).as_secs_f64();
        if self.fraction < 1.0 && attached_s < MIN_ATTACHED_S {
            // Too little counted time to measure yet: the next check covers
            // a longer interval (the decision and the trap shares stay).
            return Ok(None);
        }
        self.prev = Some((now, attached_total, totals.clone(), idle));
        if prev_idle != idle {
            // An idle read holds the overflow map as it was up to
            // OVERFLOW_MAX_AGE ago: a delta between the two kinds of read
            // would put those launches into this interval. The interval
            // starts again here (the decision and the strikes stay).
            return Ok(None);
        }
        let mut procs = Vec::new();
        let mut readings = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (&pid, &total) in &totals {
            let Some((cpu, age)) = self.cpu_s(pid) else {
                continue;
            };
            seen.insert(pid);
            readings.push((pid, total, cpu));
            // No rate at a pid's first reading: then its first sight below.
            let rate = cpu_rate(self.cpu_hist.entry(pid).or_default(), now, cpu, CPU_HORIZON);
            match (rate, tot0.get(&pid)) {
                (Some(rate), Some(&before)) => procs.push(ProcWindow {
                    pid,
                    launches: total.saturating_sub(before),
                    cpu_s: rate * secs,
                }),
                // First sight: its whole life so far, scaled to this
                // interval (its launches were counted at the current
                // fraction), so a launch-heavy process is bounded from its
                // first check on.
                _ if age > 0.0 && secs > 0.0 => {
                    let attached_age = age * self.fraction;
                    if attached_age > 0.0 && attached_s > 0.0 {
                        procs.push(ProcWindow {
                            pid,
                            launches: (total as f64 * attached_s / attached_age) as u64,
                            cpu_s: cpu * secs / age,
                        });
                    }
                }
                _ => {}
            }
        }
        self.cpu_hist.retain(|pid, _| seen.contains(pid));
        Ok(Some(Measured {
            procs,
            readings,
            attached_s,
            secs,
        }))
    }
}

impl LaunchController {
    /// `pid`'s CPU rate (CPUs) over its recent checks, without a new reading.
    pub(super) fn cpu_per_s(&self, pid: u32) -> Option<f64> {
        let h = self.cpu_hist.get(&pid)?;
        let (&(t0, c0), &(t1, c1)) = (h.front()?, h.back()?);
        let dt = t1.saturating_duration_since(t0).as_secs_f64();
        (dt > 0.0).then(|| (c1 - c0).max(0.0) / dt)
    }

    /// Each tracked process's raw launches and CPU seconds, and when
    /// they were read (empty without tracked processes).
    pub(super) fn read_now(&self, probes: &Probes) -> (Instant, Vec<(u32, u64, f64)>) {
        let mut out = Vec::new();
        if self.tracks.is_empty() {
            return (Instant::now(), out);
        }
        let totals = match probes.raw_launch_totals() {
            Ok(t) => t,
            Err(e) => {
                tracing::debug!(error = %e, "reading launch totals at a toggle");
                return (Instant::now(), out);
            }
        };
        let at = Instant::now();
        for &pid in self.tracks.keys() {
            if let (Some(&raw), Some((cpu, _))) = (totals.get(&pid), self.cpu_s(pid)) {
                out.push((pid, raw, cpu));
            }
        }
        (at, out)
    }

    /// The CPU a process ran between `from` and `to` at its recent rate
    /// (negative when `to` is earlier).
    fn cpu_between(&self, pid: u32, from: Instant, to: Instant) -> f64 {
        let rate = self.cpu_per_s(pid).unwrap_or(0.0);
        let secs = if to >= from {
            to.duration_since(from).as_secs_f64()
        } else {
            -from.duration_since(to).as_secs_f64()
        };
        rate * secs
    }

    /// Opens each tracked process's window at `opened` (when the gate
    /// opened), from a reading taken before the attach: the raw counts stood
    /// still until then, the CPU is carried forward at its rate.
    pub(super) fn open_tracks(
        &mut self,
        (at, r): (Instant, Vec<(u32, u64, f64)>),
        opened: Instant,
    ) {
        for (pid, raw, cpu) in r {
            let cpu = cpu + self.cpu_between(pid, at, opened);
            if let Some(t) = self.tracks.get_mut(&pid) {
                t.open(raw, cpu);
            }
        }
    }

    /// Closes each tracked process's window at `closed` (when the gate
    /// closed), from a reading taken after: the raw counts stood still
    /// since, the CPU run since (the agent may be scheduled late on a loaded
    /// node) is taken back at its rate.
    pub(super) fn close_tracks(
        &mut self,
        (at, r): (Instant, Vec<(u32, u64, f64)>),
        closed: Instant,
    ) {
        let tick = 1.0 / self.ticks;
        let off_s = self.period.as_secs_f64() * (1.0 - self.fraction);
        for (pid, raw, cpu) in r {
            let cpu = cpu - self.cpu_between(pid, closed.min(at), at);
            let rate = self.cpu_per_s(pid);
            let Some(t) = self.tracks.get_mut(&pid) else {
                continue;
            };
            t.close(raw, cpu, tick);
            if let Some(r) = rate {
                t.uncounted_cpu_s = r * off_s;
            }
            tracing::debug!(
                pid,
                changes = ?t.changes(),
                variation = ?t.variation(),
                "launch window closed"
            );
        }
    }
}
