//! InfiniBand / RoCE ports from sysfs (`<root>/class/infiniband/<dev>/ports/<n>/`):
//! state, rate, link layer, LID and every counter in `counters/` and
//! `hw_counters/`, with the counters' real semantics (4-byte data words,
//! saturating legacy widths, resets, missing files) turned into safe rates.
pub mod filter;
pub mod issues;
pub mod prom;
pub mod rates;
mod section;
pub mod sysfs;

pub use filter::{DeviceFilter, FilterError};
pub use issues::ReadIssues;
pub use rates::{PortRates, RateTracker};
pub use section::IbSection;
pub use sysfs::{read_ports, scan, PortSnapshot, Scan};
