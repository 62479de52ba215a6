//! Bounded-overhead mode for the CUDA launch probes.
//!
//! Every `cuLaunchKernel` of a probed process pays a uprobe trap. When a
//! process launches so often that the traps would cost more than a budget
//! (default 1 %) of its CPU time, the collector duty-cycles the launch
//! probes: they are attached for a fraction `d` of each period and detached
//! for the rest (no trap at all), and the launch counts of that time are
//! estimates scaled up from what the attached part saw, marked as sampled.
//! Blocking calls (synchronisation, copies, alloc) and kernel names keep
//! their own probes and stay exact.
//!
//! This module is the arithmetic, pure so tests can check it: the duty
//! fraction from the measured rates, and the scaling of cumulative counters.
use std::collections::{BTreeMap, BTreeSet};

use collector_common::cuda::{LaunchKey, LaunchStats};

/// Never attach for less than this share of a period: the estimate needs
/// launches to scale from.
pub const MIN_FRACTION: f64 = 0.01;

/// Launches an interval needs before its process can be judged over budget.
pub const MIN_LAUNCHES: u64 = 200;

/// The trap-slowdown correction is capped here (see [`Scaler::apply`]): at
/// most a 10× faster detached rate. Where traps are slow (a nested VM:
/// 5–12 µs each) a launch-bound process spends over half its attached time
/// in them, and a lower cap would undercount it.
pub const MAX_TRAP_SHARE: f64 = 0.9;

/// The per-hit cost's relative uncertainty is taken as at least this. The
/// calibration times an empty probe on the collector's own function; what a
/// launching process pays per trap differs from it: on single-stepped
/// entries under a loaded 2-core VM the cost paid in `launch_storm`
/// (from its CPU per launch, attached against detached, and its true
/// count) was 6.0–6.7 µs while the calibration read 5.0–6.3 µs, up to 21 %
/// apart (`faultline-bench launch --entry stepped`).
pub const HIT_COST_UNCERTAINTY_MIN: f64 = 0.25;

/// Sampled launch counts whose estimated error bound is above this are
/// marked approximate (`faultline_cuda_launch_counts_approximate`).
pub const APPROXIMATE_ABOVE: f64 = 0.05;

// The error bound of the sampled counts, measured while the mode runs, is
// `crate::cuda::launch_control::bound`.

/// One process's window, as the controller sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcWindow {
    pub pid: u32,
    /// Launches the probes counted (raw, while attached).
    pub launches: u64,
    /// The process's CPU seconds (user + system) over the window.
    pub cpu_s: f64,
}

/// What the controller decided for the next period.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Attached share of each period (1 = exact, probes always attached).
    pub fraction: f64,
    /// The process that set it and the share of its CPU the launch traps
    /// would take fully attached.
    pub worst: Option<(u32, f64)>,
    /// Per process: the share of its CPU the traps took while attached
    /// (the scaling's correction, [`Scaler::apply`]).
    pub shares: BTreeMap<u32, f64>,
}

/// The attached fraction for the next period: the largest `d ≤ 1` such that
/// every process's trap cost `launches/s × hit_cost ÷ its CPU/s`, fully
/// attached, times `d` stays within `budget`. `attached_s` is how long the
/// probes were attached during the window (so rates are per attached second).
pub fn decide(
    budget: f64,
    hit_cost_s: f64,
    attached_s: f64,
    window_s: f64,
    procs: &[ProcWindow],
) -> Decision {
    if budget <= 0.0 || attached_s <= 0.0 || window_s <= 0.0 {
        return Decision {
            fraction: 1.0,
            worst: None,
            shares: BTreeMap::new(),
        };
    }
    let mut worst: Option<(u32, f64)> = None;
    let mut shares = BTreeMap::new();
    for p in procs {
        // A short burst is no launch-heavy process (and a scaled estimate
        // of a burst would be wrong): only sustained launching counts.
        if p.launches < MIN_LAUNCHES || p.cpu_s <= 0.0 {
            continue;
        }
        // Launches per second while attached, and CPU per second.
        let rate = p.launches as f64 / attached_s;
        let cpu = p.cpu_s / window_s;
        let share = rate * hit_cost_s / cpu;
        shares.insert(p.pid, share);
        if worst.is_none_or(|(_, s)| share > s) {
            worst = Some((p.pid, share));
        }
    }
    let fraction = match worst {
        Some((_, share)) if share > budget => (budget / share).clamp(MIN_FRACTION, 1.0),
        _ => 1.0,
    };
    Decision {
        fraction,
        worst,
        shares,
    }
}

/// A process's CPU seconds over a snapshot interval, split by whether the
/// launch gate counted (read by [`crate::probes::launch_cpu`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuSplit {
    /// CPU seconds while the gate counted launches.
    pub counted_s: f64,
    /// CPU seconds while it did not (detached, or the gate closed).
    pub uncounted_s: f64,
}

/// Counted CPU time an interval needs before its launches set a key's
/// per-CPU-second rate.
pub const MIN_RATE_CPU_S: f64 = 0.01;

/// The per-CPU-second rate spans at least this much of the latest counted
/// CPU (up to twice it), once there is that much: the CPU is read in 10 ms
/// ticks, and a rate from the sliver of a window that fell into a snapshot
/// interval (a few ticks) was off by tens of percent and scaled a whole
/// detached period with it. One tick in a second moves it by 1 %.
pub const RATE_SPAN_CPU_S: f64 = 1.0;

/// Turns raw cumulative launch counters (counted only while attached) into
/// estimated cumulative counters, so every consumer of a snapshot (window
/// rows, `/metrics`, the console) sees rates of the whole time.
#[derive(Debug, Default)]
pub struct Scaler {
    keys: BTreeMap<LaunchKey, KeyScale>,
}

/// Counted time an interval needs before its launches set a key's rate; a
/// shorter piece of a window (a snapshot cutting it) keeps the last rate.
pub const MIN_RATE_S: f64 = 0.01;

#[derive(Debug, Default)]
struct KeyScale {
    /// Raw counters at the last snapshot.
    raw: LaunchStats,
    /// Estimated cumulative counters.
    est: LaunchStats,
    /// Per counted second, of the latest interval with enough counted time:
    /// launches, `_ex`, cooperative, blocks, threads, shared memory bytes.
    rate: Option<[f64; 6]>,
    /// Counted launches (the six fields) and CPU seconds: the span being
    /// filled, and the last one that reached [`RATE_SPAN_CPU_S`]; the rate
    /// per counted CPU second of the process is over both.
    cpu_cur: ([f64; 6], f64),
    cpu_prev: Option<([f64; 6], f64)>,
}

impl KeyScale {
    /// Adds an interval's counted launches and CPU; the rate per counted
    /// CPU second over the latest [`RATE_SPAN_CPU_S`] to twice it (less
    /// while there is less, down to [`MIN_RATE_CPU_S`]).
    fn add_counted(&mut self, delta: [u64; 6], cpu_s: f64) -> Option<[f64; 6]> {
        if cpu_s > 0.0 {
            let (n, c) = &mut self.cpu_cur;
            for (x, d) in n.iter_mut().zip(delta) {
                *x += d as f64;
            }
            *c += cpu_s;
        }
        if self.cpu_cur.1 >= RATE_SPAN_CPU_S {
            self.cpu_prev = Some(std::mem::take(&mut self.cpu_cur));
        }
        let (mut n, mut c) = self.cpu_cur;
        if let Some((pn, pc)) = self.cpu_prev {
            for (x, p) in n.iter_mut().zip(pn) {
                *x += p;
            }
            c += pc;
        }
        (c >= MIN_RATE_CPU_S).then(|| n.map(|x| x / c))
    }
}

fn fields(v: &LaunchStats) -> [u64; 6] {
    [
        v.launches,
        v.launches_ex,
        v.launches_cooperative,
        v.blocks,
        v.threads,
        v.shared_mem_bytes,
    ]
}

impl Scaler {
    /// The raw counters of `k` at the last [`Self::apply`].
    pub fn raw(&self, k: &LaunchKey) -> Option<&LaunchStats> {
        self.keys.get(k).map(|s| &s.raw)
    }

    /// Rewrites `launches` (raw cumulative, as read from the kernel) into
    /// estimated cumulative values. Of the `interval_s` seconds since the
    /// last call the probes counted `counted_s`; `trap_share` (per pid) is
    /// the share of the process's CPU the traps took while attached; `cpu`
    /// (per pid, where known for the whole interval) is the process's CPU
    /// time counted and not.
    ///
    /// An interval's estimate is what was counted plus the uncounted part at
    /// the key's counted rate sped up by the traps it did not pay:
    /// `Δraw + uncounted × rate ÷ (1 − s)`, `s` capped at
    /// [`MAX_TRAP_SHARE`]. Where the process's CPU split is known, the rate
    /// is per CPU second of the process and `uncounted` its uncounted CPU
    /// seconds: CPU that other work took from it in one phase, or its exit,
    /// then move the estimate not at all (on a loaded 2-core VM the wall
    /// clock's rate overstated 8 s storms by 4–17 %, most of it the time
    /// after the process exited). Otherwise both are wall-clock seconds.
    /// The wall-clock rate is that of the latest interval with at least
    /// [`MIN_RATE_S`] counted, the CPU rate that of the latest
    /// [`RATE_SPAN_CPU_S`] to twice it of counted CPU (at least
    /// [`MIN_RATE_CPU_S`]), so a duty period longer than the
    /// snapshot interval (most snapshots then hold no counted time) is still
    /// scaled by what the last window saw. (Scaling the whole raw count by
    /// `1 ÷ (a (1 − s))` would also "correct" the counted part, which really
    /// ran slowed: at a = 0.19, s = 0.5 that overstated the launches by
    /// 10 %.) Counted all the time, the counters pass through exactly. Keys
    /// gone from `launches` (pruned) are forgotten, so memory follows the
    /// kernel map.
    pub fn apply(
        &mut self,
        launches: &mut BTreeMap<LaunchKey, LaunchStats>,
        counted_s: f64,
        interval_s: f64,
        trap_share: &BTreeMap<u32, f64>,
        cpu: &BTreeMap<u32, CpuSplit>,
    ) {
        let live: BTreeSet<LaunchKey> = launches.keys().copied().collect();
        self.keys.retain(|k, _| live.contains(k));
        let exact = interval_s <= 0.0 || counted_s >= interval_s;
        let uncounted = (interval_s - counted_s).max(0.0);
        for (k, v) in launches.iter_mut() {
            let ks = self.keys.entry(*k).or_default();
            let now = fields(v);
            let before = fields(&ks.raw);
            let delta: [u64; 6] = std::array::from_fn(|i| now[i].saturating_sub(before[i]));
            let extra: [u64; 6] = if exact {
                [0; 6]
            } else {
                if counted_s >= MIN_RATE_S {
                    ks.rate = Some(delta.map(|d| d as f64 / counted_s));
                }
                let split = cpu.get(&k.pid);
                let cpu_rate = match split {
                    Some(c) => ks.add_counted(delta, c.counted_s),
                    None => ks.add_counted([0; 6], 0.0),
                };
                let s = trap_share
                    .get(&k.pid)
                    .copied()
                    .unwrap_or(0.0)
                    .clamp(0.0, MAX_TRAP_SHARE);
                let (rate, over) = match (split, cpu_rate) {
                    (Some(c), Some(r)) => (Some(r), c.uncounted_s),
                    // Gone before its CPU rate was known: nothing is owed.
                    (Some(c), None) if c.uncounted_s <= 0.0 => (None, 0.0),
                    _ => (ks.rate, uncounted),
                };
                rate.map_or([0; 6], |r| r.map(|x| (x * over / (1.0 - s)).round() as u64))
            };
            let est = &mut ks.est;
            est.launches += delta[0] + extra[0];
            est.launches_ex += delta[1] + extra[1];
            est.launches_cooperative += delta[2] + extra[2];
            est.blocks += delta[3] + extra[3];
            est.threads += delta[4] + extra[4];
            est.shared_mem_bytes += delta[5] + extra[5];
            ks.raw = *v;
            let mut out = *est;
            out.last_grid = v.last_grid;
            out.last_block = v.last_block;
            *v = out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(pid: u32) -> LaunchKey {
        LaunchKey {
            pid,
            device: 0,
            func: 0x1000,
        }
    }

    fn stats(n: u64) -> LaunchStats {
        LaunchStats {
            launches: n,
            blocks: 2 * n,
            threads: 256 * n,
            ..Default::default()
        }
    }

    #[test]
    fn within_budget_stays_exact() {
        // 1,000 launches/s at 2 µs each on a process using one core: 0.2 %.
        let d = decide(
            0.01,
            2e-6,
            1.0,
            1.0,
            &[ProcWindow {
                pid: 7,
                launches: 1000,
                cpu_s: 1.0,
            }],
        );
        assert_eq!(d.fraction, 1.0);
        let (pid, share) = d.worst.unwrap();
        assert_eq!(pid, 7);
        assert!((share - 0.002).abs() < 1e-12);
    }

    #[test]
    fn over_budget_duty_cycles_to_the_budget() {
        // 100k launches/s counted in 0.25 s attached (400k/s attached rate)
        // at 2 µs on 4 cores: share 0.2 fully attached → d = 0.01 / 0.2.
        let d = decide(
            0.01,
            2e-6,
            0.25,
            1.0,
            &[
                ProcWindow {
                    pid: 1,
                    launches: 100_000,
                    cpu_s: 4.0,
                },
                ProcWindow {
                    pid: 2,
                    launches: 10,
                    cpu_s: 1.0,
                },
            ],
        );
        assert!((d.fraction - 0.05).abs() < 1e-9, "{d:?}");
        assert_eq!(d.worst.unwrap().0, 1);
        // Far over budget: floored at MIN_FRACTION.
        let d = decide(
            0.01,
            15e-6,
            1.0,
            1.0,
            &[ProcWindow {
                pid: 1,
                launches: 100_000,
                cpu_s: 1.0,
            }],
        );
        assert_eq!(d.fraction, MIN_FRACTION);
        // Budget 0 switches the mode off.
        assert_eq!(decide(0.0, 15e-6, 1.0, 1.0, &[]).fraction, 1.0);
    }

    #[test]
    fn a_burst_stays_exact() {
        // 25 launches in a short-lived process: over budget on paper, but
        // too few to judge.
        let d = decide(
            0.01,
            15e-6,
            0.05,
            0.05,
            &[ProcWindow {
                pid: 3,
                launches: 25,
                cpu_s: 0.01,
            }],
        );
        assert_eq!(d.fraction, 1.0);
    }

    #[test]
    fn scaler_follows_the_process_cpu_not_the_wall_clock() {
        let mut s = Scaler::default();
        let none = BTreeMap::new();
        let mut m = BTreeMap::from([(key(1), stats(0))]);
        s.apply(&mut m, 1.0, 1.0, &none, &BTreeMap::new());
        // Counted half the wall time, but other work took half the
        // process's CPU while it was uncounted: 1000 launches in 0.5 CPU s
        // counted, 0.25 CPU s uncounted, so 500 more, not the wall
        // clock's 1000.
        let cpu = BTreeMap::from([(
            1,
            CpuSplit {
                counted_s: 0.5,
                uncounted_s: 0.25,
            },
        )]);
        let mut m = BTreeMap::from([(key(1), stats(1000))]);
        s.apply(&mut m, 0.5, 1.0, &none, &cpu);
        assert_eq!(m[&key(1)].launches, 1500);
        // The process exited: no CPU after it, no launches extrapolated
        // however long the interval (the wall clock would add 2000).
        let gone = BTreeMap::from([(1, CpuSplit::default())]);
        let mut m = BTreeMap::from([(key(1), stats(1000))]);
        s.apply(&mut m, 0.0, 1.0, &none, &gone);
        assert_eq!(m[&key(1)].launches, 1500);
        // Without a CPU split, the wall clock: 1000 / 0.5 s over 1 s.
        let mut m = BTreeMap::from([(key(1), stats(1000))]);
        s.apply(&mut m, 0.0, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 3500);
    }

    #[test]
    fn the_cpu_rate_spans_a_cpu_second_not_a_windows_sliver() {
        let mut s = Scaler::default();
        let none = BTreeMap::new();
        let mut m = BTreeMap::from([(key(1), stats(0))]);
        s.apply(&mut m, 1.0, 1.0, &none, &BTreeMap::new());
        let split = |c: f64, u: f64| {
            BTreeMap::from([(
                1,
                CpuSplit {
                    counted_s: c,
                    uncounted_s: u,
                },
            )])
        };
        // A window: 150,000 launches in 1.5 CPU s counted (100k/CPU s).
        let mut m = BTreeMap::from([(key(1), stats(150_000))]);
        s.apply(&mut m, 0.8, 1.0, &none, &split(1.5, 0.0));
        assert_eq!(m[&key(1)].launches, 150_000);
        // The next snapshot holds the window's last 20 ms of CPU (3,000
        // launches: two ticks read, 150k/CPU s on their own) and 6 CPU s
        // uncounted. The rate spans the last 1.52 CPU s: 153,000 / 1.52.
        let mut m = BTreeMap::from([(key(1), stats(153_000))]);
        s.apply(&mut m, 0.01, 1.0, &none, &split(0.02, 6.0));
        let want = 153_000 + (153_000.0 / 1.52 * 6.0_f64).round() as u64;
        assert_eq!(m[&key(1)].launches, want);
        // The sliver's own rate would have added 900,000, 49 % more.
        assert!(want < 153_000 + 610_000, "{want}");
    }

    #[test]
    fn scaler_is_exact_when_attached_and_scales_when_sampled() {
        let mut s = Scaler::default();
        let none = BTreeMap::new();
        let mut m = BTreeMap::from([(key(1), stats(100))]);
        s.apply(&mut m, 1.0, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 100);
        // Next interval: 50 more raw launches seen while attached a quarter of the time.
        let mut m = BTreeMap::from([(key(1), stats(150))]);
        s.apply(&mut m, 0.25, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 100 + 200);
        assert_eq!(m[&key(1)].blocks, 200 + 400);
        // With a 20 % trap share the detached part (3/4 of the time) ran
        // 1 / 0.8 faster than the attached part: 40 counted + 40 × 3 / 0.8.
        let share = BTreeMap::from([(1, 0.2)]);
        let mut m = BTreeMap::from([(key(1), stats(190))]);
        s.apply(&mut m, 0.25, 1.0, &share, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 300 + 190);
        // Back to exact: deltas pass through unscaled.
        let mut m = BTreeMap::from([(key(1), stats(200))]);
        s.apply(&mut m, 1.0, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 500);
        // A pruned key is forgotten.
        let mut m = BTreeMap::new();
        s.apply(&mut m, 1.0, 1.0, &none, &BTreeMap::new());
        assert!(s.keys.is_empty());
    }

    #[test]
    fn a_period_longer_than_the_snapshot_interval_scales_by_the_last_window() {
        let mut s = Scaler::default();
        let none = BTreeMap::new();
        let mut m = BTreeMap::from([(key(1), stats(0))]);
        s.apply(&mut m, 1.0, 1.0, &none, &BTreeMap::new());
        // A 1 s snapshot holding a 40 ms window: 400 counted (10k/s).
        let mut m = BTreeMap::from([(key(1), stats(400))]);
        s.apply(&mut m, 0.04, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 400 + 9_600);
        assert_eq!(m[&key(1)].blocks, 2 * 10_000);
        // No window in the next snapshot: the last window's rate goes on
        // (scaling by this interval's own counted share would add nothing).
        let mut m = BTreeMap::from([(key(1), stats(400))]);
        s.apply(&mut m, 0.0, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 20_000);
        // A 5 ms piece of a window is too short to set the rate; it is counted
        // and the rest of the second goes at the last rate.
        let mut m = BTreeMap::from([(key(1), stats(430))]);
        s.apply(&mut m, 0.005, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 20_000 + 30 + 9_950);
        // A window that sees no launch: the process stopped launching, and
        // nothing more is extrapolated.
        let mut m = BTreeMap::from([(key(1), stats(430))]);
        s.apply(&mut m, 0.04, 1.0, &none, &BTreeMap::new());
        let mut m2 = BTreeMap::from([(key(1), stats(430))]);
        s.apply(&mut m2, 0.0, 1.0, &none, &BTreeMap::new());
        assert_eq!(m[&key(1)].launches, 29_980);
        assert_eq!(m2[&key(1)].launches, 29_980);
    }
}
