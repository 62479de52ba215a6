//! InfiniBand / RoCE ports from sysfs (`<root>/class/infiniband/<dev>/ports/<n>/`):
//! state, rate, link layer, LID and every counter in `counters/` and
//! `hw_counters/`, with the counters' real semantics (4-byte data words,
//! saturating legacy widths, resets, missing files) turned into safe rates
//! ([`rates`]); the family's source ([`source`]: port rows ([`wire`]),
//! state-change events, console lines), its `/metrics` families ([`prom`])
//! and its `[ib]` section.
pub mod filter;
pub mod issues;
pub mod prom;
pub mod rates;
pub mod section;
#[cfg(agent)]
pub mod source;
pub mod sysfs;
pub mod wire;

pub use filter::{DeviceFilter, FilterError};
pub use issues::ReadIssues;
pub use rates::{PortRates, RateTracker};
pub use section::IbSection;
#[cfg(agent)]
pub use source::IbSource;
pub use sysfs::{read_ports, scan, PortSnapshot, Scan};
