//! The block family: block I/O per device, op and cgroup.
//!
//! One block window goes [`probe`] (the in-kernel aggregates read into a
//! [`BlockSnapshot`]) → [`window`] (two snapshots into a [`BlockWindow`]:
//! rates, bytes, latency percentiles, devices and cgroups named) →
//! [`wire`] (the window's `BlockStat` rows) and [`metrics`] (the `/metrics`
//! families: `faultline_block_*`), driven by [`source`] each window. The
//! `[block]` section is [`section`]. The attach itself is table-driven
//! (`probes::table`, `BlockMode`/`BlockAttach`). Everything but the probe
//! and the source is pure (no aya): the simulator and tests use it with
//! synthetic snapshots.
pub mod metrics;
#[cfg(feature = "probes")]
pub mod probe;
pub mod section;
#[cfg(agent)]
pub mod source;
pub mod window;
pub mod wire;

pub use metrics::render_prometheus;
pub use section::BlockSection;
#[cfg(agent)]
pub use source::BlockSource;
pub use window::*;
pub use wire::cgroup_job;
