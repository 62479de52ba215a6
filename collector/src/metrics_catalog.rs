//! The collector's metric declarations that belong to no family folder:
//! the recorder families of the agent, stream, HTTP and library rescans
//! ([`recorder`]), the probes' in-kernel counters ([`kernel`]), and the
//! groups `proto` and `webconfig` declare. Each is a
//! [`proto::metric::Family`]; the whole list, with the families' own
//! groups, is `agent::describe::all`.
use proto::metric::{shared, Family};

mod kernel;
mod recorder;
pub use kernel::*;
pub use recorder::*;

/// The groups of declared families, one per module that declares some.
const GROUPS: &[&[&Family]] = &[
    RECORDER_FAMILIES,
    KERNEL_FAMILIES,
    &[
        &shared::CONNECTIONS_REFUSED,
        &shared::CONNECTIONS_CLOSED,
        &shared::BUILD_INFO,
    ],
    &[&webconfig::AUTH_FAILURES, &webconfig::TLS_RELOAD_ERRORS],
];

/// The families declared here and in `proto` and `webconfig` (the
/// families' own groups are added by `agent::describe::all`, which may
/// depend on every family; this module may not).
pub fn common() -> Vec<&'static Family> {
    GROUPS.iter().flat_map(|g| g.iter().copied()).collect()
}
