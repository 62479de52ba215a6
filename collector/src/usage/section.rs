//! `[usage]`: usage per job and team. Documented in `docs/config.md`.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
            max_jobs: 256,
        }
    }
}
