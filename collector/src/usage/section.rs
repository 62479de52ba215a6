//! `[usage]`: usage per job and team. Documented in `docs/config.md`.
//! Each key with a bound is declared once below ([`Key`]: the default and
//! `config::validate` read it).
use std::collections::BTreeMap;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// (job, team) pairs with counters.
pub const MAX_JOBS: Key<usize> = Key {
    min: Some(1),
    max: Some(100_000),
    ..Key::new(
        "usage.max_jobs",
        256,
        "(job, team) pairs with Prometheus counters",
    )
};
/// The most `teams` entries a file may hold.
pub const MAX_TEAMS: usize = 100_000;
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 1] = [MAX_JOBS.declared()];

/// Usage per job and team (`[usage]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UsageSection {
    pub enabled: bool,
    /// Job id → team; wins over `SLURM_JOB_ACCOUNT` and `POD_NAMESPACE`.
    pub teams: BTreeMap<String, String>,
    /// (job, team) pairs with Prometheus counters; more are counted under `hpc_job="_overflow"`.
    pub max_jobs: usize,
}

impl Default for UsageSection {
    fn default() -> Self {
        Self {
            enabled: true,
            teams: BTreeMap::new(),
            max_jobs: MAX_JOBS.default,
        }
    }
}
