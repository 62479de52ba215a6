//! The probe families' configuration sections (`[block]`, `[cuda]`,
//! `[nccl]`, `[verbs]`) and where a provider function is. Built without the
//! `probes` feature (the simulator), this file is all of `crate::probes`, so
//! a configuration file parses the same either way. Every key is documented
//! in `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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

/// Where a provider function is: by symbol, or at a file offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeLoc {
    Symbol(String),
    Offset(u64),
}

/// The provider library and its data-path functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderTarget {
    pub path: PathBuf,
    pub poll_cq: CodeLoc,
    pub post_send: CodeLoc,
    pub post_recv: CodeLoc,
}

/// A provider function location that is neither a symbol nor an offset.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocError {
    #[error("empty symbol or offset")]
    Empty,
    #[error("bad offset {text}: {source}")]
    BadOffset {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// Parses a symbol-or-offset location.
pub fn parse_loc(v: &str) -> Result<CodeLoc, LocError> {
    if v.is_empty() {
        return Err(LocError::Empty);
    }
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16)
            .map(CodeLoc::Offset)
            .map_err(|source| LocError::BadOffset {
                text: v.to_string(),
                source,
            }),
        None => Ok(CodeLoc::Symbol(v.to_string())),
    }
}

impl ProviderSection {
    pub fn target(&self) -> Result<ProviderTarget, LocError> {
        Ok(ProviderTarget {
            path: self.path.clone(),
            poll_cq: parse_loc(&self.poll_cq)?,
            post_send: parse_loc(&self.post_send)?,
            post_recv: parse_loc(&self.post_recv)?,
        })
    }
}

impl ProviderTarget {
    /// The `[verbs] provider` section that names this target.
    pub fn section(&self) -> ProviderSection {
        let loc = |l: &CodeLoc| match l {
            CodeLoc::Symbol(s) => s.clone(),
            CodeLoc::Offset(o) => format!("0x{o:x}"),
        };
        ProviderSection {
            path: self.path.clone(),
            poll_cq: loc(&self.poll_cq),
            post_send: loc(&self.post_send),
            post_recv: loc(&self.post_recv),
        }
    }
}

/// A `--verbs-provider` value that is not `PATH:POLL_CQ:POST_SEND:POST_RECV`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("expected PATH:POLL_CQ:POST_SEND:POST_RECV")]
    Shape,
    #[error(transparent)]
    Loc(#[from] LocError),
}

impl ProviderTarget {
    /// Parses `PATH:POLL_CQ:POST_SEND:POST_RECV` (the path may hold colons).
    pub fn parse_spec(s: &str) -> Result<Self, SpecError> {
        let parts: Vec<&str> = s.rsplitn(4, ':').collect();
        let [recv, send, poll, path] = parts.as_slice() else {
            return Err(SpecError::Shape);
        };
        Ok(Self {
            path: PathBuf::from(path),
            poll_cq: parse_loc(poll)?,
            post_send: parse_loc(send)?,
            post_recv: parse_loc(recv)?,
        })
    }
}
