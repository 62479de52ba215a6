//! `[lustre]`: Lustre client RPC statistics per target. Documented in
//! `docs/config.md`. Each key with a bound is declared once below
//! ([`Key`]: the default and `config::validate` read it).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// Client targets tracked.
pub const MAX_TARGETS: Key<usize> = Key {
    min: Some(1),
    ..Key::new("lustre.max_targets", 1024, "Lustre client targets tracked")
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 1] = [MAX_TARGETS.declared()];

/// Lustre client targets (`[lustre]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LustreSection {
    pub enabled: bool,
    /// Where the client's `osc/` and `mdc/` device directories are, in
    /// order: each device's `stats` and `import` are read from the first
    /// root that has them (Lustre 2.12+ keeps `stats` in debugfs and
    /// `import` in /proc).
    pub roots: Vec<PathBuf>,
    /// The mount table, relative to `collector.proc_root`, that names each
    /// file system's mount point.
    pub mounts: String,
    /// Client targets (OSC and MDC devices) tracked; more are counted in
    /// `faultline_lustre_targets_dropped_total`.
    pub max_targets: usize,
}

impl Default for LustreSection {
    fn default() -> Self {
        Self {
            enabled: true,
            roots: vec![
                PathBuf::from("/sys/kernel/debug/lustre"),
                PathBuf::from("/proc/fs/lustre"),
            ],
            mounts: "self/mounts".into(),
            max_targets: MAX_TARGETS.default,
        }
    }
}
