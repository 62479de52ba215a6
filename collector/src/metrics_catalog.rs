//! Every metric family the collector can put on its `/metrics`, in one
//! list ([`all`]): each family is declared once, as a
//! [`proto::metric::Family`] beside the code that emits it, and its group
//! is listed here. The recorder describes the list at start, and the tests
//! below check docs/metrics.md and every literal metric name in the
//! crate against it.
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

/// Every declared family.
pub fn all() -> Vec<&'static Family> {
    GROUPS.iter().flat_map(|g| g.iter().copied()).collect()
}

#[cfg(test)]
mod tests;
