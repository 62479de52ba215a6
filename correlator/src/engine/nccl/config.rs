//! `[detect.nccl]`: NCCL communicators (`collective_hang`, inferred step
//! time, the lag straggler). Each default's anchor is in docs/detection.md.
use proto::config_key::Key;
use serde::{Deserialize, Serialize};

use crate::setting::{in_bounds, pos, prob, InvalidSetting};

/// Inferred collective intervals of silence that make a hang.
pub const HANG_INTERVALS: Key<f64> = Key {
    min: Some(1.0),
    max: Some(1e6),
    ..Key::new(
        "nccl.hang_intervals",
        20.0,
        "Inferred collective intervals of silence that make a hang",
    )
};

/// NCCL communicators (`collective_hang`, inferred step time; the
/// anchors are in `engine::nccl` and docs/detection.md).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NcclConfig {
    pub enabled: bool,
    /// A communicator is hung when every rank has been silent this many of
    /// its median intervals between collectives (a memoryless cadence stays
    /// silent that long with probability e^-20) ...
    pub hang_intervals: f64,
    /// ... and at least this many seconds (window and clock granularity).
    pub hang_min_s: f64,
    /// Seconds after which a communicator nobody reports is forgotten.
    pub forget_s: f64,
    /// Communicators and ranks per communicator tracked (more are dropped, counted).
    pub max_communicators: usize,
    pub max_ranks: usize,
    /// Ranks tracked over all communicators together (memory bound).
    pub max_ranks_total: usize,
    /// A rank that issues a communicator's collectives this share of its
    /// interval after its fastest peer on the same host holds up the job
    /// by at least that share: a straggler (`engine::nccl_lag`) ...
    pub straggler_lag_fraction: f64,
    /// ... when the lag is also at least this many seconds (above the
    /// scheduling and data-loader jitter between ranks of one host).
    pub straggler_lag_min_s: f64,
    /// Every rank silent at one sequence is a hang when at least this
    /// share of the waiting ranks shows it from below (a CUDA call not
    /// returning, a GPU spinning) ...
    pub stuck_share: f64,
    /// ... a GPU spinning: NVML utilisation at least this (%; NCCL's
    /// kernels poll at ~100 % while they wait for peers) ...
    pub spin_util_pct: u32,
    /// ... and a port's traffic collapsed below this share of its level
    /// before is quoted with it.
    pub traffic_collapse_fraction: f64,
}

impl Default for NcclConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            hang_intervals: HANG_INTERVALS.default,
            hang_min_s: 1.0,
            forget_s: 600.0,
            max_communicators: 4096,
            max_ranks: 16_384,
            max_ranks_total: 262_144,
            straggler_lag_fraction: 0.3,
            straggler_lag_min_s: 0.01,
            stuck_share: 0.5,
            spin_util_pct: 90,
            traffic_collapse_fraction: 0.1,
        }
    }
}

impl NcclConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        // A NaN or negative interval count never hangs (every comparison
        // false) or always does: both refused.
        in_bounds(&HANG_INTERVALS, self.hang_intervals)?;
        pos("nccl.hang_min_s", self.hang_min_s)?;
        pos("nccl.forget_s", self.forget_s)?;
        pos("nccl.straggler_lag_fraction", self.straggler_lag_fraction)?;
        pos("nccl.straggler_lag_min_s", self.straggler_lag_min_s)?;
        prob("nccl.stuck_share", self.stuck_share)?;
        prob(
            "nccl.traffic_collapse_fraction",
            self.traffic_collapse_fraction,
        )?;
        if self.spin_util_pct > 100 {
            return Err(InvalidSetting::new(
                "nccl.spin_util_pct",
                f64::from(self.spin_util_pct),
                "must be a percentage, 0 to 100",
            ));
        }
        Ok(())
    }
}
