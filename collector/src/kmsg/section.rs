//! `[kmsg]`: the kernel log reader's section, each key with a default or a
//! bound declared once here (read by the defaults and `config::validate`).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

use super::record;

/// Off unless the config turns it on (the Kubernetes DaemonSet's does).
pub const ENABLED: Key<bool> = Key::new(
    "kmsg.enabled",
    false,
    "Read the kernel log for XIDs and SXids",
);
/// The kernel log device.
pub const PATH: Key<&str> = Key::new("kmsg.path", "/dev/kmsg", "The kernel log device");
/// Where the resume position is kept.
pub const STATE_FILE: Key<&str> = Key::new(
    "kmsg.state_file",
    "/var/lib/faultline/kmsg.state",
    "Where the last record read is kept",
);
/// Where to start without a saved position of this boot.
pub const FIRST_START: Key<&str> = Key::new("kmsg.first_start", "end", "\"end\" or \"beginning\"");
/// Records read per window, at most.
pub const MAX_RECORDS: Key<usize> = Key {
    min: Some(1),
    max: Some(1_000_000),
    ..Key::new(
        "kmsg.max_records",
        20_000,
        "Records read per window, at most",
    )
};
/// Longer lines are skipped; at most the reader's buffer.
pub const MAX_LINE_BYTES: Key<usize> = Key {
    min: Some(64),
    max: Some(record::READ_BUF),
    ..Key::new(
        "kmsg.max_line_bytes",
        4096,
        "Longer lines are skipped, bytes",
    )
};
/// Events per window, at most.
pub const MAX_EVENTS: Key<usize> = Key {
    min: Some(1),
    max: Some(65_536),
    ..Key::new(
        "kmsg.max_events",
        256,
        "Events from the kernel log per window, at most",
    )
};
/// NVML and kernel-log XIDs this close are one event.
pub const JOIN_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(60.0),
    ..Key::new(
        "kmsg.join_s",
        2.0,
        "Seconds within which NVML and kernel-log XIDs are one",
    )
};

/// The keys of `[kmsg]` declared above.
pub const DECLARED: [Declared; 8] = [
    ENABLED.declared(),
    PATH.declared(),
    STATE_FILE.declared(),
    FIRST_START.declared(),
    MAX_RECORDS.declared(),
    MAX_LINE_BYTES.declared(),
    MAX_EVENTS.declared(),
    JOIN_S.declared(),
];

/// `[kmsg]`: the kernel log reader. Documented in `docs/config.md`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KmsgSection {
    /// Read the kernel log for the GPU driver's XIDs and NVSwitch SXids.
    pub enabled: bool,
    /// The kernel log device (or a file or FIFO in its record format).
    pub path: PathBuf,
    /// Where the last record read (boot id, sequence number) is kept, so a
    /// restart resumes after it; empty: nowhere (a restart starts at
    /// `first_start` again).
    pub state_file: PathBuf,
    /// Where to start without a saved position of this boot: "end" (only
    /// records written from now on) or "beginning" (every record the
    /// kernel's buffer still holds). A saved position of another boot always
    /// starts at the beginning: the buffer holds only this boot's records.
    pub first_start: String,
    /// At most this many records read per window; the rest wait for the
    /// next window.
    pub max_records: usize,
    /// Longer lines are skipped (counted), bytes.
    pub max_line_bytes: usize,
    /// At most this many events from the kernel log per window (distinct
    /// GPU/switch and code: repeats fold into one event's count).
    pub max_events: usize,
    /// An XID NVML and the kernel log both report within this many seconds
    /// (same GPU, same code) is one event.
    pub join_s: f64,
}

impl Default for KmsgSection {
    fn default() -> Self {
        Self {
            enabled: ENABLED.default,
            path: PATH.default.into(),
            state_file: STATE_FILE.default.into(),
            first_start: FIRST_START.default.into(),
            max_records: MAX_RECORDS.default,
            max_line_bytes: MAX_LINE_BYTES.default,
            max_events: MAX_EVENTS.default,
            join_s: JOIN_S.default,
        }
    }
}

impl KmsgSection {
    /// The key that is wrong and why, for the operator.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !matches!(self.first_start.as_str(), "end" | "beginning") {
            let m = format!(
                "must be \"end\" or \"beginning\", not {:?}",
                self.first_start
            );
            return Some(("kmsg.first_start", m));
        }
        None
    }
}
