//! `[detect.nfs]`: NFS mounts' RPC latency (`nfs_latency`). Each default's
//! anchor is in docs/detection.md.
use proto::config_key::Key;
use serde::{Deserialize, Serialize};

use crate::setting::{at_least_one, in_bounds, pos, prob, InvalidSetting};

/// Seconds an open incident is held while its entity goes unobserved
/// (0 = no hold): up to a week.
pub const UNOBSERVED_HOLD_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(7.0 * 86_400.0),
    ..Key::new(
        "nfs.unobserved_hold_s",
        3600.0,
        "Seconds an open incident is held while unobserved",
    )
};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NfsConfig {
    /// RPCs of one procedure in a host's window below which its mean RTT
    /// is not judged.
    pub min_ops: u64,
    /// Mean RTT (ms) at or below which a procedure is never slow.
    pub floor_ms: f64,
    /// A procedure is slow on a host when its mean RTT is this many times
    /// the mount's own history.
    pub own_ratio: f64,
    /// A host whose mount alone is slow is judged against the other hosts
    /// mounting the same target: slow at this many times their median.
    pub peer_ratio: f64,
    /// Healthy peers needed to call a slow mount host-side.
    pub min_peers: usize,
    /// The target is degraded when at least this share of the hosts with a
    /// current window on it (and at least two) are slow.
    pub target_share: f64,
    /// Consecutive slow windows of a host before a finding.
    pub persist_windows: u32,
    /// (host, target, procedure) series tracked; more are dropped, counted.
    pub max_series: usize,
    /// NFS rows judged per window; more are dropped, counted.
    pub max_rows_per_window: usize,
    /// Seconds an open incident of a target is held, neither resolved nor
    /// counting quiet windows, while its hosts carry no RPCs on it (fewer
    /// than `min_ops` per procedure); past it the quiet period runs (0 = no
    /// hold: silence counts as quiet).
    pub unobserved_hold_s: f64,
}

impl Default for NfsConfig {
    fn default() -> Self {
        Self {
            min_ops: 20,
            floor_ms: 2.0,
            own_ratio: 4.0,
            peer_ratio: 4.0,
            min_peers: 3,
            target_share: 0.5,
            persist_windows: 2,
            max_series: 65_536,
            max_rows_per_window: 4096,
            unobserved_hold_s: UNOBSERVED_HOLD_S.default,
        }
    }
}

impl NfsConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        pos("nfs.floor_ms", self.floor_ms)?;
        pos("nfs.own_ratio", self.own_ratio)?;
        pos("nfs.peer_ratio", self.peer_ratio)?;
        prob("nfs.target_share", self.target_share)?;
        at_least_one("nfs.min_peers", self.min_peers)?;
        at_least_one("nfs.persist_windows", self.persist_windows as usize)?;
        at_least_one("nfs.max_series", self.max_series)?;
        at_least_one("nfs.max_rows_per_window", self.max_rows_per_window)?;
        in_bounds(&UNOBSERVED_HOLD_S, self.unobserved_hold_s)?;
        if self.own_ratio <= 1.0 || self.peer_ratio <= 1.0 {
            return Err(InvalidSetting::new(
                "nfs.own_ratio",
                self.own_ratio.min(self.peer_ratio),
                "nfs.own_ratio and nfs.peer_ratio must be above 1 (a rise)",
            ));
        }
        Ok(())
    }
}
