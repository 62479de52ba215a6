//! `[nfs]`: NFS client RPC statistics from mountstats. Documented in
//! `docs/config.md`. Each key with a bound is declared once below
//! ([`Key`]: the default and `config::validate` read it).
use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// NFS mounts tracked.
pub const MAX_MOUNTS: Key<usize> = Key {
    min: Some(1),
    ..Key::new("nfs.max_mounts", 64, "NFS mounts tracked")
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 1] = [MAX_MOUNTS.declared()];

/// NFS mounts (`[nfs]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NfsSection {
    pub enabled: bool,
    /// The mountstats file, relative to `collector.proc_root`: the
    /// collector's own mount namespace (`self/mountstats`), or the host's
    /// (`1/mountstats`) for a collector in a container with the host's /proc.
    pub mountstats: String,
    /// NFS mounts tracked; more are counted in
    /// `faultline_nfs_mounts_dropped_total`.
    pub max_mounts: usize,
}

impl Default for NfsSection {
    fn default() -> Self {
        Self {
            enabled: true,
            mountstats: "self/mountstats".into(),
            max_mounts: MAX_MOUNTS.default,
        }
    }
}
