//! The collector's configuration file (TOML) and its resolution with
//! command-line flags: defaults → file → flags. Unknown keys are rejected with
//! their name and line. Every key is documented in `docs/config.md`.
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use serde::{Deserialize, Serialize};

#[cfg(feature = "probes")]
use crate::probes::{CodeLoc, ProviderTarget};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("config error: cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("config error: {path} line {line}: {message}")]
    Parse {
        path: String,
        line: usize,
        message: String,
    },
    #[error("config error: {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub collector: CollectorSection,
    pub block: BlockSection,
    pub cuda: CudaSection,
    pub nccl: NcclSection,
    pub verbs: VerbsSection,
    pub nvml: NvmlSection,
    pub ib: IbSection,
    pub stream: StreamSection,
    pub otlp: crate::otlp::OtlpSection,
    pub usage: UsageSection,
}

/// Usage per job and team (`[usage]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UsageSection {
    pub enabled: bool,
    /// Job id → team; wins over `SLURM_JOB_ACCOUNT` and `POD_NAMESPACE`.
    pub teams: std::collections::BTreeMap<String, String>,
    /// (job, team) pairs with Prometheus counters; more are counted under `job="_overflow"`.
    pub max_jobs: usize,
}

impl Default for UsageSection {
    fn default() -> Self {
        Self {
            enabled: true,
            teams: std::collections::BTreeMap::new(),
            max_jobs: 256,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StreamSection {
    /// Correlator URL (`http://HOST:PORT`); unset = do not stream.
    pub endpoint: Option<String>,
    /// Directory of the on-disk spool.
    pub spool_dir: PathBuf,
    /// Spool bound in bytes; past it the oldest windows are dropped (counted).
    pub spool_max_bytes: u64,
    /// Also append every window to this file as JSON lines (the replay format).
    pub record: Option<PathBuf>,
    /// CA certificate (PEM) of the correlator; required for `https://`.
    pub tls_ca: Option<PathBuf>,
    /// This host's client certificate (PEM) for mTLS; its DNS name must be
    /// the hostname the collector reports.
    pub tls_cert: Option<PathBuf>,
    /// This host's private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// File with a bearer token (first line) for token-mode correlators.
    pub token_file: Option<PathBuf>,
}

impl StreamSection {
    /// The credentials for the correlator endpoint.
    pub fn auth(&self) -> crate::stream::tls::ClientAuth {
        crate::stream::tls::ClientAuth {
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            token_file: self.token_file.clone(),
        }
    }
}

impl Default for StreamSection {
    fn default() -> Self {
        Self {
            endpoint: None,
            spool_dir: "/var/lib/faultline/spool".into(),
            spool_max_bytes: 64 << 20,
            record: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            token_file: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CollectorSection {
    /// Window length, seconds.
    pub window_secs: f64,
    /// Prometheus endpoint address.
    pub metrics_addr: String,
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
    /// Log format on stderr: "text" or "json".
    pub log_format: String,
    /// Directory of the scheduler's job files (`deploy/slurm/prolog.sh`,
    /// docs/slurm.md); a missing directory means none.
    pub job_dir: PathBuf,
}

impl Default for CollectorSection {
    fn default() -> Self {
        Self {
            window_secs: 1.0,
            metrics_addr: "127.0.0.1:9477".into(),
            sysfs_root: "/sys".into(),
            proc_root: "/proc".into(),
            log: "info".into(),
            quiet: false,
            hostname: None,
            log_format: "text".into(),
            job_dir: DEFAULT_JOB_DIR.into(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BlockSection {
    pub enabled: bool,
    /// One sampled per-request event every N completions per CPU (0 = off).
    pub sample_every: u32,
    /// BTF-enabled raw tracepoints keyed by the request pointer when the
    /// kernel has BTF; false forces the classic tracepoints.
    pub btf: bool,
}

impl Default for BlockSection {
    fn default() -> Self {
        Self {
            enabled: true,
            sample_every: 0,
            btf: true,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CudaSection {
    pub enabled: bool,
    /// Path of libcuda.so.1; unset = discover.
    pub library: Option<PathBuf>,
    /// Per-event stream budget, events/s per CPU (0 = aggregates only).
    pub events_per_sec: u32,
    /// Bounded-overhead mode: the largest share of a process's CPU time its
    /// launch traps may take before the launch probes are duty-cycled
    /// (0 = always exact).
    pub launch_budget: f64,
    /// Duty-cycle period of the launch probes, milliseconds. Each period
    /// attaches and detaches the probes once, and on the VM measured here
    /// that costs the process more than the traps do at short periods
    /// (throughput kept: 0.83 at 250 ms, 0.96 at 1 s, 0.985 at 4 s).
    pub launch_period_ms: u64,
    /// Cost of one launch-probe hit, ns; 0 = measured at start and every
    /// 2 s while a process is bounded.
    pub launch_hit_cost_ns: u64,
}

impl Default for CudaSection {
    fn default() -> Self {
        Self {
            enabled: true,
            library: None,
            events_per_sec: 0,
            launch_budget: 0.01,
            launch_period_ms: 4000,
            launch_hit_cost_ns: 0,
        }
    }
}

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
}

impl Default for NcclSection {
    fn default() -> Self {
        Self {
            enabled: true,
            library: Vec::new(),
            rescan_s: 30.0,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VerbsSection {
    pub enabled: bool,
    pub library: Option<PathBuf>,
    pub provider: Option<ProviderSection>,
}

impl Default for VerbsSection {
    fn default() -> Self {
        Self {
            enabled: true,
            library: None,
            provider: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    pub path: PathBuf,
    /// Symbol name or `0x` file offset.
    pub poll_cq: String,
    pub post_send: String,
    pub post_recv: String,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NvmlSection {
    pub enabled: bool,
    pub library: Option<PathBuf>,
    /// Also export the GPU fields under dcgm-exporter's names, labels and units.
    pub dcgm_compat: bool,
    /// The kubelet's pod-resources socket: the pod, namespace and container
    /// each GPU is allocated to; empty, or a path that does not exist,
    /// leaves those labels to the processes' cgroups.
    pub pod_resources_socket: PathBuf,
}

/// The kubelet's pod-resources socket.
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// InfiniBand ports (`[ib]`): which devices are read, as node_exporter's
/// `--collector.infiniband.device-include` / `-exclude` (regular
/// expressions matched anywhere in the device name; at most one of the two).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IbSection {
    pub device_include: Option<String>,
    pub device_exclude: Option<String>,
}

/// Where `deploy/slurm/prolog.sh` writes its job files.
pub const DEFAULT_JOB_DIR: &str = "/run/faultline/jobs";

impl Default for NvmlSection {
    fn default() -> Self {
        Self {
            enabled: true,
            library: None,
            dcgm_compat: true,
            pod_resources_socket: DEFAULT_POD_RESOURCES_SOCKET.into(),
        }
    }
}

/// Parses a symbol-or-offset location.
#[cfg(feature = "probes")]
pub fn parse_loc(v: &str) -> Result<CodeLoc, String> {
    if v.is_empty() {
        return Err("empty symbol or offset".into());
    }
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16)
            .map(CodeLoc::Offset)
            .map_err(|e| format!("bad offset {v}: {e}")),
        None => Ok(CodeLoc::Symbol(v.to_string())),
    }
}

#[cfg(feature = "probes")]
impl ProviderSection {
    pub fn target(&self) -> Result<ProviderTarget, String> {
        Ok(ProviderTarget {
            path: self.path.clone(),
            poll_cq: parse_loc(&self.poll_cq)?,
            post_send: parse_loc(&self.post_send)?,
            post_recv: parse_loc(&self.post_recv)?,
        })
    }
}

/// Shortest window: below it the window timer would spin.
pub const WINDOW_MIN_SECS: f64 = 0.01;
/// Longest `--duration`: ten years.
pub const DURATION_MAX_SECS: f64 = 10.0 * 365.0 * 86400.0;

/// A number of seconds within `[min, max]` as a `Duration` (NaN, infinities
/// and out-of-range values are errors naming `key`, never a panic).
pub fn seconds(key: &'static str, v: f64, min: f64, max: f64) -> Result<Duration, ConfigError> {
    if !(v.is_finite() && v >= min && v <= max) {
        return Err(ConfigError::Invalid {
            key,
            message: format!(
                "must be a number of seconds in [{min}, {max}], got {}",
                show(v)
            ),
        });
    }
    Duration::try_from_secs_f64(v).map_err(|e| ConfigError::Invalid {
        key,
        message: format!("{v}: {e}"),
    })
}

/// A number as the operator would write it (`1e-300`, not 300 zeros).
fn show(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e9).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

/// `--duration SECONDS` (clap value parser): 0 up to ten years.
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    seconds("--duration", v, 0.0, DURATION_MAX_SECS).map_err(|e| match e {
        ConfigError::Invalid { message, .. } => message,
        other => other.to_string(),
    })
}

/// A correlator URL: `http` or `https` with a host.
pub fn check_endpoint(e: &str) -> Result<(), String> {
    let uri: tonic::codegen::http::Uri =
        e.parse().map_err(|err| format!("is not a URL ({err})"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err("must start with http:// or https://".into());
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("has no host".into());
    }
    Ok(())
}

impl CollectorSection {
    /// The window length (valid after [`FileConfig::validate`]).
    pub fn window(&self) -> Duration {
        seconds(
            "collector.window_secs",
            self.window_secs,
            WINDOW_MIN_SECS,
            3600.0,
        )
        .unwrap_or(Duration::from_secs(1))
    }
}

impl FileConfig {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = crate::bounded_read::read_to_string(path, crate::bounded_read::CONFIG_MAX)
            .map_err(|e| ConfigError::Read {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg: Self = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| {
                text[..s.start.min(text.len())].matches('\n').count() + 1
            });
            ConfigError::Parse {
                path: origin.to_string(),
                line,
                message: e.message().trim().replace('\n', " "),
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        seconds(
            "collector.window_secs",
            self.collector.window_secs,
            WINDOW_MIN_SECS,
            3600.0,
        )?;
        parse_listen_addr(&self.collector.metrics_addr).map_err(|e| ConfigError::Invalid {
            key: "collector.metrics_addr",
            message: format!(
                "{:?} is not HOST:PORT or :PORT ({e})",
                self.collector.metrics_addr
            ),
        })?;
        if !matches!(self.collector.log_format.as_str(), "text" | "json") {
            return Err(ConfigError::Invalid {
                key: "collector.log_format",
                message: format!(
                    "{:?} is not \"text\" or \"json\"",
                    self.collector.log_format
                ),
            });
        }
        if tracing_subscriber::EnvFilter::try_new(&self.collector.log).is_err() {
            return Err(ConfigError::Invalid {
                key: "collector.log",
                message: format!("{:?} is not a valid log filter", self.collector.log),
            });
        }
        if let Some(e) = &self.stream.endpoint {
            check_endpoint(e).map_err(|why| ConfigError::Invalid {
                key: "stream.endpoint",
                message: format!("{e:?} {why}; use a URL like http://127.0.0.1:50051"),
            })?;
            self.stream
                .auth()
                .check(e)
                .map_err(|err| ConfigError::Invalid {
                    key: "stream.endpoint",
                    message: err.to_string(),
                })?;
        }
        if self.stream.spool_max_bytes < 4096 {
            return Err(ConfigError::Invalid {
                key: "stream.spool_max_bytes",
                message: format!("must be at least 4096, got {}", self.stream.spool_max_bytes),
            });
        }
        seconds("nccl.rescan_s", self.nccl.rescan_s, 0.0, 86_400.0)?;
        crate::ib::DeviceFilter::new(
            self.ib.device_include.as_deref(),
            self.ib.device_exclude.as_deref(),
        )?;
        self.otlp.validate()?;
        if !(1..=100_000).contains(&self.usage.max_jobs) {
            return Err(ConfigError::Invalid {
                key: "usage.max_jobs",
                message: format!("must be within 1..=100000, got {}", self.usage.max_jobs),
            });
        }
        if self.usage.teams.len() > 100_000 {
            return Err(ConfigError::Invalid {
                key: "usage.teams",
                message: format!(
                    "at most 100000 job → team entries, got {}",
                    self.usage.teams.len()
                ),
            });
        }
        #[cfg(feature = "probes")]
        if let Some(p) = &self.verbs.provider {
            p.target().map_err(|message| ConfigError::Invalid {
                key: "verbs.provider",
                message,
            })?;
        }
        Ok(())
    }

    /// The effective configuration as TOML (for `check-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

#[cfg(test)]
mod tests;

/// A listen address: `HOST:PORT`, or `:PORT` for every interface (as
/// node_exporter's `--web.listen-address=:9100`).
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    match s.strip_prefix(':') {
        Some(port) if !port.contains(':') => format!("0.0.0.0:{port}").parse(),
        _ => s.parse(),
    }
}

#[cfg(test)]
mod listen_addr_tests {
    use super::*;

    /// `--metrics-addr :9477` was rejected; node_exporter accepts `:9100`.
    #[test]
    fn port_only_means_every_interface() {
        assert_eq!(
            parse_listen_addr(":9477").ok(),
            Some(SocketAddr::from(([0, 0, 0, 0], 9477)))
        );
        assert_eq!(
            parse_listen_addr("127.0.0.1:9477").ok(),
            Some(SocketAddr::from(([127, 0, 0, 1], 9477)))
        );
        assert!(parse_listen_addr("[::1]:9477").is_ok());
        assert!(parse_listen_addr(":").is_err());
        assert!(parse_listen_addr("9477").is_err());
        let mut c = FileConfig::default();
        c.collector.metrics_addr = ":9477".into();
        assert!(c.validate().is_ok());
    }
}
