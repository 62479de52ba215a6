//! The NCCL family's configuration section (`[nccl]`); every key is
//! documented in `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
            enabled: true,
            library: Vec::new(),
            rescan_s: 30.0,
            retain_exited_s: 120.0,
            max_job_totals: 1024,
        }
    }
}
