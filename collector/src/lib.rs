//! faultline's host agent.
//!
//! Data path: [`probes`] loads and attaches the embedded eBPF object and
//! drains its rings and maps; [`agent`] runs the window loop over the
//! [`sources`] (one per signal family), which enrich and turn snapshots into
//! wire rows, console lines and metrics; [`stream`] spools and sends the
//! windows to the correlator. `docs/architecture.md` follows one event.
#[cfg(agent)]
pub mod agent;
pub mod block;
pub mod bounded_read;
pub mod config;
pub mod cuda;
pub mod cuda_lib;
pub mod cumulative;
pub mod exec;
pub mod http;
pub mod ib;
pub mod identity;
pub mod jobmap;
pub mod kmsg;
pub mod launch_budget;
pub mod lustre;
pub mod metrics_catalog;
pub mod nccl;
pub mod nccl_lib;
pub mod nfs;
#[cfg(feature = "nvml")]
pub mod nvml;
/// Without NVML, only its configuration section (`[nvml]`).
#[cfg(not(feature = "nvml"))]
#[path = "nvml/section.rs"]
pub mod nvml;
pub mod otlp;
pub mod privilege;
#[cfg(feature = "probes")]
pub mod probes;
/// Without the eBPF probes, only their configuration sections.
#[cfg(not(feature = "probes"))]
#[path = "probes/section.rs"]
pub mod probes;
pub mod proc_libs;
pub mod prom_text;
#[cfg(feature = "rdma")]
pub mod rdma;
#[cfg(agent)]
pub mod sources;
pub mod stream;
pub mod switches;
pub mod tracefs;
pub mod usage;
pub mod verbs;
pub mod window;
#[cfg(feature = "nvml")]
pub mod workload;
