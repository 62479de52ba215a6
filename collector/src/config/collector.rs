//! `[collector]`: the agent's own settings (window, endpoints, roots, logs,
//! identity, job files). Each key with a default, a bound, a flag or an
//! environment variable is declared once below ([`Key`]: the defaults,
//! `config::validate`, the flags in `main.rs` read it); documented in
//! `docs/config.md`, which `config::doc_check` checks.
use std::{path::PathBuf, time::Duration};

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

use super::values::{seconds, WINDOW_MAX_SECS, WINDOW_MIN_SECS};

/// Window length, seconds: below 0.01 the window timer would spin.
pub const WINDOW_SECS: Key<f64> = Key {
    min: Some(WINDOW_MIN_SECS),
    max: Some(WINDOW_MAX_SECS),
    flag: Some("window"),
    ..Key::new("collector.window_secs", 1.0, "Window length in seconds")
};
/// The Prometheus endpoint.
pub const METRICS_ADDR: Key<&str> = Key {
    flag: Some("metrics-addr"),
    ..Key::new(
        "collector.metrics_addr",
        "127.0.0.1:9477",
        "Prometheus `/metrics`, `/healthz`, `/readyz` address, `HOST:PORT` or `:PORT` for every interface",
    )
};
/// The metrics endpoint's web config file (its alias, node_exporter's
/// `--web.config.file`, is in `main.rs`).
pub const WEB_CONFIG_FILE: Key<&str> = Key {
    flag: Some("web-config-file"),
    ..Key::new(
        "collector.web_config_file",
        "",
        "Web config file in Prometheus exporter-toolkit's format, as node_exporter's --web.config.file: TLS, client certificates and basic auth on the metrics endpoint",
    )
};
/// The node's name; in a pod, from the downward API.
pub const HOSTNAME: Key<&str> = Key {
    flag: Some("hostname"),
    env: Some("NODE_NAME"),
    shown: "the kernel's hostname under --proc-root",
    ..Key::new(
        "collector.hostname",
        "",
        "The node's name in entities and the stream's origin; in a pod, the node name from the downward API",
    )
};
/// The cluster's name.
pub const CLUSTER: Key<&str> = Key {
    flag: Some("cluster"),
    env: Some("FAULTLINE_CLUSTER"),
    shown: "unnamed",
    ..Key::new(
        "collector.cluster",
        "",
        "The cluster this node belongs to, on every incident of its entities",
    )
};
/// Log format on stderr.
pub const LOG_FORMAT: Key<&str> = Key {
    flag: Some("log-format"),
    ..Key::new(
        "collector.log_format",
        "text",
        "Log format on stderr: text or json",
    )
};
/// The log filter (`RUST_LOG` when neither it nor a file is given).
pub const LOG: Key<&str> = Key {
    flag: Some("log"),
    env: Some("FAULTLINE_LOG"),
    shown: "info; `RUST_LOG` is honoured when neither is set",
    ..Key::new(
        "collector.log",
        "info",
        "Log filter, tracing EnvFilter syntax",
    )
};
/// Only summary lines on the console.
pub const QUIET: Key<bool> = Key {
    flag: Some("quiet"),
    ..Key::new(
        "collector.quiet",
        false,
        "Print no per-device, kernel, port or event lines: one summary line per window",
    )
};
/// sysfs: `class/infiniband`, `dev/block`.
pub const SYSFS_ROOT: Key<&str> = Key {
    flag: Some("sysfs-root"),
    ..Key::new(
        "collector.sysfs_root",
        "/sys",
        "Directory that holds `class/infiniband` and `dev/block`",
    )
};
/// procfs, for process attribution.
pub const PROC_ROOT: Key<&str> = Key {
    flag: Some("proc-root"),
    ..Key::new(
        "collector.proc_root",
        "/proc",
        "procfs for process attribution",
    )
};
/// Where `deploy/slurm/prolog.sh` writes its job files.
pub const JOB_DIR: Key<&str> = Key {
    flag: Some("job-dir"),
    ..Key::new(
        "collector.job_dir",
        "/run/faultline/jobs",
        "Directory of the scheduler's job files",
    )
};
/// Where `deploy/slurm/prolog.sh` keeps dcgm-exporter's job mapping files.
pub const HPC_JOB_MAPPING_DIR: Key<&str> = Key {
    flag: Some("hpc-job-mapping-dir"),
    ..Key::new(
        "collector.hpc_job_mapping_dir",
        "/run/faultline/hpc-job-mapping",
        "dcgm-exporter's job mapping directory, also read for hpc_job; \"\" turns it off",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 12] = [
    WINDOW_SECS.declared(),
    METRICS_ADDR.declared(),
    WEB_CONFIG_FILE.declared(),
    HOSTNAME.declared(),
    CLUSTER.declared(),
    LOG_FORMAT.declared(),
    LOG.declared(),
    QUIET.declared(),
    SYSFS_ROOT.declared(),
    PROC_ROOT.declared(),
    JOB_DIR.declared(),
    HPC_JOB_MAPPING_DIR.declared(),
];
/// Where `deploy/slurm/prolog.sh` writes its job files.
pub const DEFAULT_JOB_DIR: &str = JOB_DIR.default;

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
            window_secs: WINDOW_SECS.default,
            metrics_addr: METRICS_ADDR.default.into(),
            web_config_file: None,
            sysfs_root: SYSFS_ROOT.default.into(),
            proc_root: PROC_ROOT.default.into(),
            log: LOG.default.into(),
            quiet: QUIET.default,
            hostname: None,
            cluster: None,
            log_format: LOG_FORMAT.default.into(),
            job_dir: JOB_DIR.default.into(),
            hpc_job_mapping_dir: HPC_JOB_MAPPING_DIR.default.into(),
        }
    }
}

impl CollectorSection {
    /// The window length (valid after [`super::FileConfig::validate`]).
    pub fn window(&self) -> Duration {
        seconds(self.window_secs, WINDOW_SECS.lo(), WINDOW_SECS.hi())
            .unwrap_or(Duration::from_secs(1))
    }
}
