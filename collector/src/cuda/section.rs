//! The CUDA family's configuration section (`[cuda]`): the uprobes and
//! the bounded-overhead launch mode; every key is documented in
//! `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
