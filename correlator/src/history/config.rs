//! `[history]` settings of the correlator's config file (docs/history.md).
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Where history lives and how long each resolution is kept.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// Database file; history is off without one (`--history FILE` sets it too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Seconds raw (per-window) samples are kept.
    pub raw_retention_s: u64,
    /// Seconds 1-minute rollups are kept.
    pub minute_retention_s: u64,
    /// Seconds 1-hour rollups are kept; resolved incidents are kept as long.
    pub hour_retention_s: u64,
    /// Disk budget of the database in bytes: past it the oldest raw rows go
    /// first, then the oldest minute rollups, then the oldest hour rollups.
    pub max_bytes: u64,
    /// Capacity of the queue between the engine and the writer thread, in
    /// messages (one per window or incident update); a full queue drops and
    /// counts (`faultline_history_dropped_total`).
    pub queue: usize,
    /// Bytes reserved at start for the incident journal
    /// (`<path>-incidents`): every incident update is written there before
    /// it is sent out, so a full disk followed by a crash loses none that
    /// fit (docs/history.md, "Two faults at once").
    pub journal_bytes: u64,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            path: None,
            raw_retention_s: 6 * 3600,
            minute_retention_s: 30 * 86_400,
            hour_retention_s: 365 * 86_400,
            max_bytes: 1 << 30,
            queue: 65_536,
            journal_bytes: 8 << 20,
        }
    }
}

/// Largest `queue` (messages).
pub const MAX_QUEUE: usize = 1 << 24;

impl HistoryConfig {
    /// The first setting out of range, as `(key, why)`.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        if self.raw_retention_s == 0 {
            return Some(("history.raw_retention_s", "must be at least 1"));
        }
        if self.minute_retention_s < self.raw_retention_s {
            return Some((
                "history.minute_retention_s",
                "must be at least raw_retention_s (rollups outlive raw rows)",
            ));
        }
        if self.hour_retention_s < self.minute_retention_s {
            return Some((
                "history.hour_retention_s",
                "must be at least minute_retention_s",
            ));
        }
        if self.max_bytes < 1 << 20 {
            return Some(("history.max_bytes", "must be at least 1048576 (1 MiB)"));
        }
        // Bounded memory, and tokio's channel panics past usize::MAX >> 3.
        if !(1..=MAX_QUEUE).contains(&self.queue) {
            return Some(("history.queue", "must be within 1..=16777216"));
        }
        if !(super::journal::MIN_BYTES..=super::journal::MAX_BYTES).contains(&self.journal_bytes) {
            return Some((
                "history.journal_bytes",
                "must be within 65536..=268435456 (64 KiB to 256 MiB)",
            ));
        }
        None
    }
}
