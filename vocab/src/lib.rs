//! faultline's shared vocabulary: what the collector writes and the
//! correlator reads, defined once. The collector's wire rows, the
//! correlator's detectors and the simulator all name things through it,
//! instead of matching string literals by convention.
//!
//! It is a crate of its own (not hand-written impls in `proto`): it has no
//! dependencies, so the eBPF-free parts of the tree (correlator, simulator,
//! tests) use it without tonic/prost in scope for plain names and tables,
//! and `proto` stays generated code only.
pub mod entity;
pub mod hist;
pub mod ib;
pub mod ibnet;
pub mod kind;
pub mod nats;
pub mod state;
pub mod term;
pub mod time;
pub mod xid;

pub use kind::{EventKind, IncidentKind};
pub use state::UpdateState;
