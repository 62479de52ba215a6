//! The error bound of the sampled launch counts, from what is measured
//! while bounded mode runs.
//!
//! The estimate of an uncounted stretch is `rate × uncounted CPU ÷ (1 − s)`:
//! the launches per CPU second of the process while counted, sped up by the
//! traps it did not pay (`s`, the share of its CPU the traps took while
//! attached). It is right when three things hold, and each is measured:
//!
//! - **The per-hit cost**, and with it `s`: measured again every 2 s while a
//!   process is bounded; its uncertainty is the largest deviation of any of
//!   those measurements from the cost in use (at least
//!   [`launch_budget::HIT_COST_UNCERTAINTY_MIN`], what calibration and the
//!   cost a launching process paid differed by), plus the spread of the
//!   trap share itself from check to check ([`RateTrack::share_spread`]).
//! - **The rate does not move between counted and uncounted stretches**: on
//!   a loaded node it does (other work slows the process's CPU, the host
//!   steals it, the workload changes phase). Each attached window's rate is
//!   measured (launches over the CPU it ran, read at attach, at every check
//!   in between and at detach), and the change between consecutive windows
//!   and between the two halves of each is what the unseen stretch in
//!   between may have differed by: [`RateTrack::variation`] is twice their
//!   RMS, less the part the CPU clock's 10 ms ticks explain.
//! - **The counted rate is read precisely**: the scaling's rate spans at
//!   least [`launch_budget::RATE_SPAN_CPU_S`] of counted CPU, whose tick
//!   truncation moves it by up to one tick in it; and each window's two
//!   readings of the uncounted CPU one tick each ([`quantization`]).
//!
//! Until a process's first window has given a rate change the rate term is
//! unknown, and the bound says so ([`UNMEASURED`]).
use std::collections::VecDeque;

use crate::launch_budget::{self, MAX_TRAP_SHARE};

/// Changes and shares kept per process: the last 16 (about a minute of
/// 4 s periods, two changes each).
pub const KEPT: usize = 16;

/// A stretch with less counted CPU than this (10 clock ticks) gives no
/// rate change: its own reading would be mostly tick truncation.
pub const MIN_STRETCH_CPU_S: f64 = 0.1;

/// The rate term while a process has no measured change yet: its counts
/// are then marked approximate, with an error up to the whole uncounted part.
pub const UNMEASURED: f64 = 1.0;

/// The bound where the trap correction could diverge (`s (1 + u) ≥ 1`):
/// the scaling caps the correction at `1 ÷ (1 − MAX_TRAP_SHARE)`, 10×, so
/// the uncounted part is off by at most that much (+900 %).
pub const DIVERGENT: f64 = 1.0 / (1.0 - MAX_TRAP_SHARE) - 1.0;

/// Launches counted and CPU seconds run over a stretch of counted time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stretch {
    pub launches: u64,
    pub cpu_s: f64,
}

impl Stretch {
    /// Launches per CPU second, where the stretch is long enough.
    pub fn rate(&self) -> Option<f64> {
        (self.cpu_s >= MIN_STRETCH_CPU_S && self.launches > 0)
            .then(|| self.launches as f64 / self.cpu_s)
    }
}

/// One rate change: `b`'s rate over `a`'s less one, and the variance that
/// tick truncation alone gives it (each reading of the CPU is truncated to a
/// tick, `tick_s`, uniform: variance tick²/12 per reading; `shared`: the two
/// stretches share their middle reading, the halves of one window).
pub fn rate_change(a: Stretch, b: Stretch, tick_s: f64, shared: bool) -> Option<(f64, f64)> {
    let (ra, rb) = (a.rate()?, b.rate()?);
    let (ia, ib) = (1.0 / a.cpu_s, 1.0 / b.cpu_s);
    let t2 = tick_s * tick_s / 12.0;
    let var = if shared {
        // b = (e3 − e2)/Cb, a = (e2 − e1)/Ca: e2 enters both, with 1/Ca + 1/Cb.
        t2 * (ia * ia + (ia + ib) * (ia + ib) + ib * ib)
    } else {
        2.0 * t2 * (ia * ia + ib * ib)
    };
    Some((rb / ra - 1.0, var))
}

/// The relative amount the rate of an unseen stretch may differ from the
/// counted one next to it: twice the RMS of the measured changes, less the
/// variance tick truncation explains (`None` without changes).
pub fn rate_variation(changes: &[(f64, f64)]) -> Option<f64> {
    if changes.is_empty() {
        return None;
    }
    let n = changes.len() as f64;
    let ms = changes.iter().map(|(d, v)| d * d - v).sum::<f64>() / n;
    Some(2.0 * ms.max(0.0).sqrt())
}

/// The relative error tick truncation leaves in one period's estimate:
/// the scaling's rate over at least [`launch_budget::RATE_SPAN_CPU_S`] of
/// counted CPU (one tick in it), and the period's uncounted CPU
/// (`uncounted_cpu_s`, read at attach and detach: a tick each).
pub fn quantization(tick_s: f64, uncounted_cpu_s: f64) -> f64 {
    let rate = tick_s / launch_budget::RATE_SPAN_CPU_S;
    let off = if uncounted_cpu_s > 0.0 {
        2.0 * tick_s / uncounted_cpu_s
    } else {
        0.0
    };
    rate + off
}

/// The relative error bound of a period's estimate for a process counted
/// `fraction` of the time whose traps take `share` of its CPU attached: the
/// uncounted part of the estimate, `w = (1 − f) ÷ (1 − f s)` of it, is off by
/// the trap correction's error (`s` too low by `u`:
/// `s u ÷ (1 − s − s u)`) compounded with the rate's (`rate`). Counted all
/// the time it is exact; a correction that could diverge bounds nothing
/// (1: the whole count).
pub fn error_bound(fraction: f64, share: f64, u: f64, rate: f64) -> f64 {
    let f = fraction.clamp(0.0, 1.0);
    if f >= 1.0 {
        return 0.0;
    }
    let s = share.clamp(0.0, MAX_TRAP_SHARE);
    let u = u.max(0.0);
    let w = (1.0 - f) / (1.0 - f * s);
    let left = 1.0 - s - s * u;
    if left <= 0.0 {
        return DIVERGENT;
    }
    let corr = s * u / left;
    (w * ((1.0 + corr) * (1.0 + rate.max(0.0)) - 1.0)).min(DIVERGENT)
}

/// The largest relative deviation of any in-run hit-cost measurement from
/// the cost in use, at least [`launch_budget::HIT_COST_UNCERTAINTY_MIN`];
/// 1 (unknown) without a positive cost.
pub fn cost_drift(measured: &[f64], used: f64) -> f64 {
    if used.is_nan() || used <= 0.0 {
        return 1.0;
    }
    measured
        .iter()
        .filter(|x| x.is_finite())
        .map(|x| (x - used).abs() / used)
        .fold(launch_budget::HIT_COST_UNCERTAINTY_MIN, f64::max)
}

/// One bounded process: its open window's readings, the last closed
/// window, the rate changes measured, and its recent trap shares.
#[derive(Clone, Debug, Default)]
pub struct RateTrack {
    /// (raw launches, CPU seconds) read in the open window, from its start.
    readings: Vec<(u64, f64)>,
    /// Closed windows since the last comparison, summed until they reach
    /// [`MIN_STRETCH_CPU_S`] (a light process's windows are each too short).
    acc: Stretch,
    last: Option<Stretch>,
    changes: VecDeque<(f64, f64)>,
    shares: VecDeque<f64>,
    /// The last closed window's uncounted CPU to come (the process's CPU
    /// per second × the detached time), for [`quantization`].
    pub uncounted_cpu_s: f64,
}

impl RateTrack {
    /// Whether a window is open (counted time being read).
    pub fn is_open(&self) -> bool {
        !self.readings.is_empty()
    }

    /// Opens a window at this reading.
    pub fn open(&mut self, raw: u64, cpu_s: f64) {
        self.readings.clear();
        self.readings.push((raw, cpu_s));
    }

    /// A reading inside the open window (ignored when none is open).
    pub fn read(&mut self, raw: u64, cpu_s: f64) {
        if self.is_open() {
            self.readings.push((raw, cpu_s));
        }
    }

    /// Closes the open window at this reading: the change from the last
    /// window (windows summed until they hold [`MIN_STRETCH_CPU_S`]), and
    /// between its halves (split at the reading nearest the middle of its
    /// CPU), are kept.
    pub fn close(&mut self, raw: u64, cpu_s: f64, tick_s: f64) {
        if !self.is_open() {
            return;
        }
        self.readings.push((raw, cpu_s));
        let stretch = |a: (u64, f64), b: (u64, f64)| Stretch {
            launches: b.0.saturating_sub(a.0),
            cpu_s: (b.1 - a.1).max(0.0),
        };
        let (first, last) = (self.readings[0], self.readings[self.readings.len() - 1]);
        let whole = stretch(first, last);
        let mid_cpu = (first.1 + last.1) / 2.0;
        let inner = &self.readings[1..self.readings.len() - 1];
        if let Some(&mid) = inner
            .iter()
            .min_by(|a, b| (a.1 - mid_cpu).abs().total_cmp(&(b.1 - mid_cpu).abs()))
        {
            if let Some(c) = rate_change(stretch(first, mid), stretch(mid, last), tick_s, true) {
                self.push_change(c);
            }
        }
        self.acc.launches += whole.launches;
        self.acc.cpu_s += whole.cpu_s;
        if self.acc.cpu_s >= MIN_STRETCH_CPU_S {
            let acc = std::mem::take(&mut self.acc);
            if let Some(c) = self
                .last
                .and_then(|prev| rate_change(prev, acc, tick_s, false))
            {
                self.push_change(c);
            }
            if acc.rate().is_some() {
                self.last = Some(acc);
            }
        }
        self.readings.clear();
    }

    fn push_change(&mut self, c: (f64, f64)) {
        if self.changes.len() >= KEPT {
            self.changes.pop_front();
        }
        self.changes.push_back(c);
    }

    /// The measured rate changes: (change, its tick variance).
    pub fn changes(&self) -> Vec<(f64, f64)> {
        self.changes.iter().copied().collect()
    }

    /// [`rate_variation`] of the changes measured so far.
    pub fn variation(&self) -> Option<f64> {
        rate_variation(&self.changes())
    }

    /// Keeps a check's trap share.
    pub fn note_share(&mut self, s: f64) {
        if !s.is_finite() {
            return;
        }
        if self.shares.len() >= KEPT {
            self.shares.pop_front();
        }
        self.shares.push_back(s);
    }

    /// The trap share the scaling uses: the median of the recent checks'
    /// (one check's reads ±15 % around it under load).
    pub fn share(&self) -> Option<f64> {
        let mut v: Vec<f64> = self.shares.iter().copied().collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }

    /// The relative uncertainty of that median: twice the standard error of
    /// a median of the recent shares (1.25 σ ÷ √n) over it; 0 with fewer
    /// than two.
    pub fn share_spread(&self) -> f64 {
        let n = self.shares.len();
        let Some(med) = self.share().filter(|m| *m > 0.0) else {
            return 0.0;
        };
        if n < 2 {
            return 0.0;
        }
        let mean = self.shares.iter().sum::<f64>() / n as f64;
        let var = self
            .shares
            .iter()
            .map(|s| (s - mean) * (s - mean))
            .sum::<f64>()
            / (n - 1) as f64;
        2.0 * 1.25 * var.sqrt() / (n as f64).sqrt() / med
    }
}
