//! The CUDA family's configuration section (`[cuda]`): the uprobes and
//! the bounded-overhead launch mode; every key is documented in
//! `docs/config.md`. Each key with a bound or a flag is declared once
//! below ([`Key`]: the default, `config::validate` and the flags in
//! `main.rs` read it).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// `--no-cuda`: the driver-API uprobes.
pub const ENABLED: Key<bool> = Key {
    flag: Some("no-cuda"),
    ..Key::new("cuda.enabled", true, "Disable the CUDA driver-API probes")
};
/// `--cuda-library PATH`; unset: discovered.
pub const LIBRARY: Key<&str> = Key {
    flag: Some("cuda-library"),
    shown: "ld.so cache, running processes, usual paths",
    ..Key::new("cuda.library", "", "Path of libcuda.so.1")
};
/// A share of CPU time: 0 = always exact, 1 = never bounded.
pub const LAUNCH_BUDGET: Key<f64> = Key {
    min: Some(0.0),
    max: Some(1.0),
    ..Key::new(
        "cuda.launch_budget",
        0.01,
        "The largest share of a process's CPU time its launch traps may take",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 3] = [
    ENABLED.declared(),
    LIBRARY.declared(),
    LAUNCH_BUDGET.declared(),
];

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
            enabled: ENABLED.default,
            library: None,
            events_per_sec: 0,
            launch_budget: LAUNCH_BUDGET.default,
            launch_period_ms: 4000,
            launch_hit_cost_ns: 0,
        }
    }
}
