//! `[collector]`: the agent's own settings (window, endpoints, roots, logs,
//! identity, job files). Documented in `docs/config.md`.
use std::{path::PathBuf, time::Duration};

use serde::{Deserialize, Serialize};

use super::values::{seconds, WINDOW_MAX_SECS, WINDOW_MIN_SECS};

/// Where `deploy/slurm/prolog.sh` writes its job files.
pub const DEFAULT_JOB_DIR: &str = "/run/faultline/jobs";
/// Where `deploy/slurm/prolog.sh` keeps dcgm-exporter's job mapping files.
pub const DEFAULT_HPC_JOB_MAPPING_DIR: &str = "/run/faultline/hpc-job-mapping";

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CollectorSection {
    /// Window length, seconds.
    pub window_secs: f64,
    /// Prometheus endpoint address.
    pub metrics_addr: String,
    /// Web config file in Prometheus exporter-toolkit's format (TLS,
    /// client certificates, basic auth on the metrics endpoint; docs/web.md).
    /// Unset: plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config_file: Option<PathBuf>,
    /// Directory holding `class/infiniband` and `dev/block`.
    pub sysfs_root: PathBuf,
    /// procfs, for process attribution.
    pub proc_root: PathBuf,
    /// Log filter (tracing EnvFilter syntax).
    pub log: String,
    /// Print no per-device/kernel/port/event lines, only one summary line per window.
    pub quiet: bool,
    /// The node's name in entities and the stream's origin (default: the
    /// kernel's hostname under `proc_root`); in a pod, the node name.
    pub hostname: Option<String>,
    /// The cluster this node belongs to, carried in the stream's origin and
    /// on every incident of the node's entities, so one fleet view tells
    /// clusters apart (unset: unnamed). One NATS subject token: letters,
    /// digits, `-` and `_`.
    pub cluster: Option<String>,
    /// Log format on stderr: "text" or "json".
    pub log_format: String,
    /// Directory of the scheduler's job files (`deploy/slurm/prolog.sh`,
    /// docs/slurm.md); a missing directory means none.
    pub job_dir: PathBuf,
    /// dcgm-exporter's `--hpc-job-mapping-dir` (one file per GPU index
    /// holding its job ids, one per line), also read for `hpc_job`; empty:
    /// not read; a missing directory means none.
    pub hpc_job_mapping_dir: PathBuf,
}

impl Default for CollectorSection {
    fn default() -> Self {
        Self {
            window_secs: 1.0,
            metrics_addr: "127.0.0.1:9477".into(),
            web_config_file: None,
            sysfs_root: "/sys".into(),
            proc_root: "/proc".into(),
            log: "info".into(),
            quiet: false,
            hostname: None,
            cluster: None,
            log_format: "text".into(),
            job_dir: DEFAULT_JOB_DIR.into(),
            hpc_job_mapping_dir: DEFAULT_HPC_JOB_MAPPING_DIR.into(),
        }
    }
}

impl CollectorSection {
    /// The window length (valid after [`super::FileConfig::validate`]).
    pub fn window(&self) -> Duration {
        seconds(self.window_secs, WINDOW_MIN_SECS, WINDOW_MAX_SECS)
            .unwrap_or(Duration::from_secs(1))
    }
}
