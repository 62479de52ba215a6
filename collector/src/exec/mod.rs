//! The exec family: `sched_process_exec` events from their ring
//! ([`probe`]), drained between windows by [`source`], each invalidating the
//! process's cached identity.
#[cfg(feature = "probes")]
pub mod probe;
#[cfg(all(
    feature = "probes",
    feature = "nvml",
    feature = "rdma",
    feature = "otlp"
))]
pub mod source;

#[cfg(feature = "probes")]
pub use probe::{ExecRecord, ExecRing};
#[cfg(all(
    feature = "probes",
    feature = "nvml",
    feature = "rdma",
    feature = "otlp"
))]
pub use source::ExecSource;
