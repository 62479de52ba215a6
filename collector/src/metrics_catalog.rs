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
    let mut all: Vec<&'static Family> = GROUPS.iter().flat_map(|g| g.iter().copied()).collect();
    // The text-writer families, declared in their family's folder.
    all.extend_from_slice(crate::block::metrics::FAMILIES);
    all.extend_from_slice(crate::nfs::delta::FAMILIES);
    all.extend_from_slice(crate::lustre::delta::FAMILIES);
    all.extend_from_slice(crate::cuda::FAMILIES);
    all.extend_from_slice(crate::nccl::series::FAMILIES);
    all.extend_from_slice(crate::usage::FAMILIES);
    #[cfg(feature = "nvml")]
    all.extend_from_slice(crate::nvml::prom::FAMILIES);
    #[cfg(all(
        feature = "probes",
        feature = "nvml",
        feature = "rdma",
        feature = "otlp"
    ))]
    all.extend_from_slice(crate::otlp::source::FAMILIES);
    all
}

#[cfg(test)]
mod tests;
