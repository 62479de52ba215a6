//! faultline's host agent.
//!
//! Data path: [`probes`] loads and attaches the embedded eBPF object and drains
//! its rings and maps; later stages enrich, window and stream to the correlator.
pub mod bounded_read;
pub mod config;
pub mod cuda;
pub mod cuda_lib;
pub mod http;
pub mod ib;
pub mod identity;
#[cfg(feature = "nvml")]
pub mod nvml;
pub mod otlp;
pub mod privilege;
#[cfg(feature = "probes")]
pub mod probes;
pub mod prom_text;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod storage;
pub mod stream;
pub mod tracefs;
pub mod window;
