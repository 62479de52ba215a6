//! `[history]` settings of the correlator's config file (docs/history.md).
//! Each key with a default and a bound is declared once below ([`Key`]:
//! `Default` and [`HistoryConfig::invalid`] read it; a test checks that each
//! refusal's words name the declared bound).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

use super::journal;

/// `--history FILE`: the database; unset, history is off.
pub const PATH: Key<&str> = Key {
    flag: Some("history"),
    ..Key::new("history.path", "", "History database")
};
/// Seconds raw samples are kept.
pub const RAW_RETENTION_S: Key<u64> = Key {
    min: Some(1),
    ..Key::new(
        "history.raw_retention_s",
        6 * 3600,
        "Seconds raw (per-window) samples are kept",
    )
};
/// Seconds 1-minute rollups are kept (at least `raw_retention_s`).
pub const MINUTE_RETENTION_S: Key<u64> = Key::new(
    "history.minute_retention_s",
    30 * 86_400,
    "Seconds 1-minute rollups are kept",
);
/// Seconds 1-hour rollups are kept (at least `minute_retention_s`).
pub const HOUR_RETENTION_S: Key<u64> = Key::new(
    "history.hour_retention_s",
    365 * 86_400,
    "Seconds 1-hour rollups are kept",
);
/// The database's disk budget, bytes: at least 1 MiB.
pub const MAX_BYTES: Key<u64> = Key {
    min: Some(1 << 20),
    ..Key::new(
        "history.max_bytes",
        1 << 30,
        "Disk budget of the database in bytes",
    )
};
/// The engine → writer queue, messages: bounded memory, and tokio's
/// channel panics past `usize::MAX >> 3`.
pub const QUEUE: Key<usize> = Key {
    min: Some(1),
    max: Some(1 << 24),
    ..Key::new(
        "history.queue",
        65_536,
        "Capacity of the queue between the engine and the writer thread, in messages",
    )
};
/// Bytes reserved for the incident journal: 64 KiB to 256 MiB.
pub const JOURNAL_BYTES: Key<u64> = Key {
    min: Some(journal::MIN_BYTES),
    max: Some(journal::MAX_BYTES),
    ..Key::new(
        "history.journal_bytes",
        8 << 20,
        "Bytes reserved at start for the incident journal",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 7] = [
    PATH.declared(),
    RAW_RETENTION_S.declared(),
    MINUTE_RETENTION_S.declared(),
    HOUR_RETENTION_S.declared(),
    MAX_BYTES.declared(),
    QUEUE.declared(),
    JOURNAL_BYTES.declared(),
];

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
            raw_retention_s: RAW_RETENTION_S.default,
            minute_retention_s: MINUTE_RETENTION_S.default,
            hour_retention_s: HOUR_RETENTION_S.default,
            max_bytes: MAX_BYTES.default,
            queue: QUEUE.default,
            journal_bytes: JOURNAL_BYTES.default,
        }
    }
}

/// Largest `queue` (messages).
pub const MAX_QUEUE: usize = 1 << 24;
const _: () = assert!(matches!(QUEUE.max, Some(MAX_QUEUE)));

// The refusals' words: static (`ConfigError::Setting` holds a `&'static
// str`); `tests::the_refusals_name_the_declared_bounds` checks them against
// the declarations.
const RAW_RETENTION_S_WHY: &str = "must be at least 1";
const MAX_BYTES_WHY: &str = "must be at least 1048576 (1 MiB)";
const QUEUE_WHY: &str = "must be within 1..=16777216";
const JOURNAL_BYTES_WHY: &str = "must be within 65536..=268435456 (64 KiB to 256 MiB)";

impl HistoryConfig {
    /// The first setting out of range, as `(key, why)`.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        if !RAW_RETENTION_S.contains(self.raw_retention_s) {
            return Some((RAW_RETENTION_S.path, RAW_RETENTION_S_WHY));
        }
        if self.minute_retention_s < self.raw_retention_s {
            return Some((
                MINUTE_RETENTION_S.path,
                "must be at least raw_retention_s (rollups outlive raw rows)",
            ));
        }
        if self.hour_retention_s < self.minute_retention_s {
            return Some((HOUR_RETENTION_S.path, "must be at least minute_retention_s"));
        }
        if !MAX_BYTES.contains(self.max_bytes) {
            return Some((MAX_BYTES.path, MAX_BYTES_WHY));
        }
        if !QUEUE.contains(self.queue) {
            return Some((QUEUE.path, QUEUE_WHY));
        }
        if !JOURNAL_BYTES.contains(self.journal_bytes) {
            return Some((JOURNAL_BYTES.path, JOURNAL_BYTES_WHY));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusals_name_the_declared_bounds() {
        let words = |k: Key<u64>| match (k.min, k.max) {
            (Some(lo), Some(hi)) => format!("must be within {lo}..={hi}"),
            (Some(lo), None) => format!("must be at least {lo}"),
            _ => unreachable!("every bounded history key has a minimum"),
        };
        assert_eq!(words(RAW_RETENTION_S), RAW_RETENTION_S_WHY);
        assert!(MAX_BYTES_WHY.starts_with(&words(MAX_BYTES)));
        assert!(JOURNAL_BYTES_WHY.starts_with(&words(JOURNAL_BYTES)));
        let q = Key {
            min: QUEUE.min.map(|v| v as u64),
            max: QUEUE.max.map(|v| v as u64),
            ..Key::new(QUEUE.path, 0, "")
        };
        assert_eq!(words(q), QUEUE_WHY);
        let bad = HistoryConfig {
            queue: MAX_QUEUE + 1,
            ..HistoryConfig::default()
        };
        assert_eq!(bad.invalid(), Some(("history.queue", QUEUE_WHY)));
        assert_eq!(HistoryConfig::default().invalid(), None);
    }
}
