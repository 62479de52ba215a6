//! The exec family: `sched_process_exec` events from their ring
//! ([`probe`]), drained between windows by [`source`], each invalidating the
//! process's cached identity.
#[cfg(feature = "probes")]
pub mod probe;
#[cfg(agent)]
pub mod source;

#[cfg(feature = "probes")]
pub use probe::{ExecRecord, ExecRing};
#[cfg(agent)]
pub use source::ExecSource;
