//! The NCCL family's configuration section (`[nccl]`); every key is
//! documented in `docs/config.md`. Each key with a bound or a flag is
//! declared once below ([`Key`]: the default, `config::validate` and the
//! flags in `main.rs` read it).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// `--no-nccl`: the NCCL uprobes.
pub const ENABLED: Key<bool> = Key {
    flag: Some("no-nccl"),
    ..Key::new("nccl.enabled", true, "Disable the NCCL probes")
};
/// `--nccl-library PATH`, repeatable; none: discovered.
pub const LIBRARY: Key<&str> = Key {
    flag: Some("nccl-library"),
    shown: "ld.so cache, running processes and their Python site-packages",
    ..Key::new("nccl.library", "", "A libnccl.so.2 to probe, repeatable")
};
/// Seconds between two discoveries; 0 = never; at most a day.
pub const RESCAN_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(86_400.0),
    ..Key::new(
        "nccl.rescan_s",
        30.0,
        "Seconds between two library discoveries",
    )
};
/// Seconds an exited rank's series stay; 0 = folded at once.
pub const RETAIN_EXITED_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(86_400.0),
    ..Key::new(
        "nccl.retain_exited_s",
        120.0,
        "Seconds an exited rank's series stay on /metrics",
    )
};
/// Jobs whose folded totals are kept.
pub const MAX_JOB_TOTALS: Key<usize> = Key {
    min: Some(1),
    max: Some(65_536),
    ..Key::new(
        "nccl.max_job_totals",
        1024,
        "Jobs whose folded totals are kept",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 5] = [
    ENABLED.declared(),
    LIBRARY.declared(),
    RESCAN_S.declared(),
    RETAIN_EXITED_S.declared(),
    MAX_JOB_TOTALS.declared(),
];

/// NCCL uprobes (`[nccl]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NcclSection {
    pub enabled: bool,
    /// `libnccl.so.2` copies to probe; empty = discover (ld.so cache, the
    /// maps of running processes, the wheel beside their site-packages).
    pub library: Vec<PathBuf>,
    /// With discovery: look again every this many seconds for copies that
    /// appeared since (a venv created after start); 0 = never.
    pub rescan_s: f64,
    /// How long an exited rank's series stay on `/metrics` with their final
    /// counts before they fold into the job's totals: two of Prometheus's
    /// default 1-minute scrape intervals; 0 = fold at once.
    pub retain_exited_s: f64,
    /// Jobs whose folded totals are kept (those with no rank left, least
    /// recently updated first, are evicted past it).
    pub max_job_totals: usize,
}

impl Default for NcclSection {
    fn default() -> Self {
        Self {
            enabled: ENABLED.default,
            library: Vec::new(),
            rescan_s: RESCAN_S.default,
            retain_exited_s: RETAIN_EXITED_S.default,
            max_job_totals: MAX_JOB_TOTALS.default,
        }
    }
}
