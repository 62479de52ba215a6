//! A slow rank named from its issue lag (`NcclRank.lag_s`), for jobs that
//! send no OTLP step time.
//!
//! Every collective completes only when every rank of the communicator has
//! issued it, so a rank that computes slower makes the whole communicator's
//! cadence slower alike: cadence alone cannot say which rank it is. What
//! differs is when each rank *issues* the same collective. The collector
//! times each rank's issue of collective number `lag_seq` (the highest all
//! its local ranks of the communicator reached) against the first local
//! rank to issue it. Ranks on one host run the same code on the same kind
//! of GPU: healthy, they issue within milliseconds of each other (scheduler
//! and data-loader jitter, a few percent of compute between GPUs). A rank
//! that issues every collective `δ` after its local peers holds each of
//! them up by `δ`: with `δ ≥ straggler_lag_fraction × τ`, `τ` the mean
//! interval between the communicator's collectives (the straggler
//! detector's 30 %), at least `straggler_lag_min_s`, and at least
//! [`LAG_OUTLIER`] times the next latest local rank's lag, for
//! `workload.min_persist_s` and two windows, it is a straggler. (`δ` can
//! exceed `τ`: NCCL returns from a collective once it is enqueued, so the
//! peers run ahead, up to a few collectives, until they block; the lag
//! says who is late, not by how much the step grew.)
//!
//! What it cannot see: a rank alone on its host (no local peer to compare
//! with; `lag_seq` is 0), a whole slow host (its ranks lag alike), and two
//! slow ranks on one host (neither stands out). `τ` is an interval between
//! collectives, not the step: a job issuing many collectives per step has a
//! short `τ`, and a lag that is large against it may be small against the
//! step (the outlier test is what keeps healthy spread out then).
//! And a healthy rank held a whole collective behind its peers for good
//! (calls that block with run-ahead and never a sync) would be named; a
//! training step's sync on its collectives undoes such an offset.
use std::collections::{BTreeMap, HashMap, HashSet};

use proto::v1::{NcclRank, Window};

use super::{nccl::NcclConfig, stats::median, straggler::Slow};

/// The latest rank must be at least this many times as late as the next
/// latest on its host: ranks whose compute differs by a few percent
/// spread their lags evenly (in the simulator's ±1.5 % jitter, 0–27 ms at
/// a 0.25 s interval between collectives); one slow rank stands alone.
pub const LAG_OUTLIER: f64 = 2.0;

/// Slow runs tracked at most (one per lagging rank; memory bound).
const MAX_TRACKED: usize = 65_536;

#[derive(Debug, Clone, Copy)]
struct Run {
    since_ms: i64,
    windows: u32,
}

#[derive(Debug, Default)]
pub struct LagDetector {
    cfg: NcclConfig,
    persist_ms: i64,
    /// (host, communicator, pid) → the current run of lagging windows.
    runs: HashMap<(String, String, u32), Run>,
    /// Ranks not tracked for want of room.
    pub dropped: u64,
}

/// One rank's lag behind its host's fastest peer on a communicator.
struct Lag<'a> {
    row: &'a NcclRank,
    delta: f64,
    tau: f64,
}

impl LagDetector {
    pub fn new(cfg: NcclConfig, min_persist_s: f64) -> Self {
        Self {
            cfg,
            persist_ms: (min_persist_s * 1000.0) as i64,
            ..Self::default()
        }
    }

    /// The slow ranks of this window (after persistence), one per job rank,
    /// for jobs `has_otlp` says sent no OTLP step (those have their own).
    pub fn observe(
        &mut self,
        host: &str,
        w: &Window,
        has_otlp: impl Fn(&str) -> bool,
    ) -> Vec<Slow> {
        if !self.cfg.enabled {
            return Vec::new();
        }
        let mut groups: BTreeMap<&str, Vec<&NcclRank>> = BTreeMap::new();
        for r in &w.nccl {
            let usable = !r.comm.is_empty()
                && !r.comm.starts_with("h:")
                && !r.ended
                && r.lag_seq > 0
                && r.lag_s.is_finite()
                && r.lag_s >= 0.0
                && r.interval_s > 0.0
                && r.interval_s.is_finite()
                && !r.job.is_empty()
                && r.job_rank.is_some()
                && !has_otlp(&r.job);
            if usable {
                groups.entry(r.comm.as_str()).or_default().push(r);
            }
        }
        let mut lags: Vec<Lag> = Vec::new();
        for rows in groups.values().filter(|g| g.len() >= 2) {
            let first = rows.iter().map(|r| r.lag_s).fold(f64::INFINITY, f64::min);
            let tau = median(&rows.iter().map(|r| r.interval_s).collect::<Vec<_>>());
            // Only a rank that stands out from its peers' spread: the
            // latest, at least LAG_OUTLIER times as late as the next.
            let mut order: Vec<&NcclRank> = rows.clone();
            order.sort_by(|a, b| b.lag_s.total_cmp(&a.lag_s));
            let (latest, next) = (order[0], order[1]);
            let delta = latest.lag_s - first;
            if delta >= LAG_OUTLIER * (next.lag_s - first) {
                lags.push(Lag {
                    row: latest,
                    delta,
                    tau,
                });
            }
            // The others are not lagging (their runs end).
            for r in &order[1..] {
                self.runs.remove(&(host.to_string(), r.comm.clone(), r.pid));
            }
        }
        // Each job rank's worst communicator.
        let mut worst: BTreeMap<(&str, u32), &Lag> = BTreeMap::new();
        for l in &lags {
            let bound = (self.cfg.straggler_lag_fraction * l.tau).max(self.cfg.straggler_lag_min_s);
            let key = (host.to_string(), l.row.comm.clone(), l.row.pid);
            if l.delta < bound {
                self.runs.remove(&key);
                continue;
            }
            if !self.runs.contains_key(&key) && self.runs.len() >= MAX_TRACKED {
                self.dropped += 1;
                metrics::counter!(crate::telemetry::ENGINE_DROPPED.name, "what" => "nccl_lag_runs")
                    .increment(1);
                continue;
            }
            let run = self.runs.entry(key).or_insert(Run {
                since_ms: w.start_unix_ms,
                windows: 0,
            });
            run.windows = run.windows.saturating_add(1);
            if run.windows < 2 || w.end_unix_ms - run.since_ms < self.persist_ms {
                continue;
            }
            let Some(jr) = l.row.job_rank else { continue };
            let k = (l.row.job.as_str(), jr);
            if worst
                .get(&k)
                .is_none_or(|b| l.delta / l.tau > b.delta / b.tau)
            {
                worst.insert(k, l);
            }
        }
        worst
            .into_iter()
            .map(|((job, rank), l)| {
                let key = (host.to_string(), l.row.comm.clone(), l.row.pid);
                let since_ms = self.runs.get(&key).map_or(w.start_unix_ms, |r| r.since_ms);
                // How much later than its cadence it comes (the peers may
                // run ahead by NCCL's asynchrony, so δ can exceed τ).
                let ratio = 1.0 + l.delta / l.tau;
                Slow {
                    job: job.to_string(),
                    rank,
                    host: host.to_string(),
                    device: l.row.device,
                    hca: l
                        .row
                        .hcas
                        .first()
                        .map(|h| h.split('/').next().unwrap_or(h).to_string())
                        .unwrap_or_default(),
                    seconds: l.tau,
                    median: l.tau / ratio,
                    since_ms,
                    basis: Some(format!(
                        "job {job} rank {rank} (pid {}, gpu {}) issues NCCL communicator {}'s collectives {:.3} s after its fastest peer on {host} (collective {}; the communicator issues one every {:.3} s): every rank waits for it",
                        l.row.pid,
                        l.row.device,
                        l.row.comm,
                        l.delta,
                        l.row.lag_seq,
                        l.tau,
                    )),
                }
            })
            .collect()
    }

    /// Forgets the runs of hosts that went idle.
    pub fn forget_hosts(&mut self, gone: &HashSet<String>) {
        self.runs.retain(|(h, _, _), _| !gone.contains(h));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::nccl::tests::window;

    /// Rank `g` of host `h` (8 per host) on a ring of `n` ranks.
    fn row(node: u32, g: u32, lag: f64, interval: f64) -> NcclRank {
        NcclRank {
            comm: "00000000000000cc".into(),
            nranks: 32,
            rank: (node * 8 + g) as i32,
            device: g as i32,
            pid: 100 + g,
            job: "train".into(),
            job_rank: Some(node * 8 + g),
            hcas: vec![format!("mlx5_{g}/1")],
            seq: 400,
            lag_s: lag,
            lag_seq: 398,
            interval_s: interval,
            ..Default::default()
        }
    }

    fn host_rows(node: u32, slow: Option<(u32, f64)>, interval: f64, t: i64) -> Vec<NcclRank> {
        (0..8)
            .map(|g| {
                // A few ms of jitter, as ranks on one host really show.
                let jitter = 0.001 * ((g as i64 * 7 + t) % 5) as f64;
                let lag = match slow {
                    Some((s, d)) if s == g => d + jitter,
                    _ => jitter,
                };
                row(node, g, lag, interval)
            })
            .collect()
    }

    #[test]
    fn a_rank_late_to_every_collective_is_named_after_persisting() {
        let mut d = LagDetector::new(NcclConfig::default(), 3.0);
        let mut named = None;
        for t in 1..=8i64 {
            // Healthy: 0.5 s cadence, nobody more than 4 ms late.
            let slow = (t >= 3).then_some((5, 0.25));
            let interval = if t >= 3 { 0.75 } else { 0.5 };
            let got = d.observe(
                "n001",
                &window("n001", t * 1000, host_rows(1, slow, interval, t)),
                |_| false,
            );
            if t < 3 {
                assert!(got.is_empty(), "healthy at {t}: {got:?}");
            }
            if let Some(s) = got.first() {
                named.get_or_insert((t, s.rank, s.device, s.seconds, s.median));
            }
        }
        // Slow from the window ending at 3 s (started at 2 s): 3 s of
        // persistence reached at t = 5.
        let (t, rank, device, own, scaled) = named.expect("named");
        assert_eq!((t, rank, device), (5, 13, 5));
        // 0.25 s late at a 0.75 s cadence: a third later than its cadence.
        assert!((own / scaled - 4.0 / 3.0).abs() < 0.02, "{own} {scaled}");
    }

    #[test]
    fn jitter_spread_lags_a_whole_slow_host_and_otlp_jobs_name_nobody() {
        let mut d = LagDetector::new(NcclConfig::default(), 1.0);
        for t in 1..=10i64 {
            // Every rank of the host late alike: no local difference.
            let rows: Vec<NcclRank> = host_rows(2, None, 0.8, t)
                .into_iter()
                .map(|mut r| {
                    r.lag_s += 0.3;
                    r
                })
                .collect();
            assert!(d
                .observe("n002", &window("n002", t * 1000, rows), |_| false)
                .is_empty());
            // Below 30 % of the cadence (0.12 s of 0.5 s): not a straggler.
            let rows = host_rows(3, Some((1, 0.12)), 0.5, t);
            assert!(d
                .observe("n003", &window("n003", t * 1000, rows), |_| false)
                .is_empty());
            // Ranks whose compute differs by a few percent: lags spread
            // evenly up to 40 % of the interval, nobody stands out.
            let rows: Vec<NcclRank> = (0..8)
                .map(|g| {
                    row(
                        5,
                        g,
                        0.2 * f64::from(g) / 7.0 + 0.01 * ((t % 2) as f64),
                        0.5,
                    )
                })
                .collect();
            assert!(d
                .observe("n005", &window("n005", t * 1000, rows), |_| false)
                .is_empty());
            // A job with OTLP steps is the straggler detector's.
            let rows = host_rows(4, Some((1, 0.3)), 0.5, t);
            assert!(d
                .observe("n004", &window("n004", t * 1000, rows), |j| j == "train")
                .is_empty());
        }
    }
}
