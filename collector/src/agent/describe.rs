//! HELP for every family of the catalog (`crate::metrics_catalog`): the
//! `metrics` recorder prints no HELP without a description, and `promtool
//! check metrics` fails. The text-writer families (`prom_text`) write
//! their own.
use proto::metric::Family;

use crate::metrics_catalog::WINDOWS_DROPPED;

/// Every family the collector can put on its `/metrics`, declared once
/// (a [`proto::metric::Family`] beside the code that emits it): the
/// catalog the recorder describes and the tests check the docs against.
pub fn all() -> Vec<&'static Family> {
    let mut all = crate::metrics_catalog::common();
    // The text-writer families, declared in their family's folder.
    all.extend_from_slice(crate::block::metrics::FAMILIES);
    all.extend_from_slice(crate::nfs::delta::FAMILIES);
    all.extend_from_slice(crate::lustre::delta::FAMILIES);
    all.extend_from_slice(crate::cuda::FAMILIES);
    all.extend_from_slice(crate::nccl::series::FAMILIES);
    all.extend_from_slice(crate::usage::FAMILIES);
    all.extend_from_slice(crate::kmsg::FAMILIES);
    all.extend(crate::ib::prom::families());
    #[cfg(feature = "probes")]
    all.extend_from_slice(crate::verbs::probe::FAMILIES);
    #[cfg(feature = "nvml")]
    all.extend_from_slice(crate::nvml::prom::FAMILIES);
    #[cfg(agent)]
    all.extend_from_slice(crate::otlp::source::FAMILIES);
    all
}

/// Registers the HELP of every recorder family.
pub fn describe() {
    proto::metric::describe_all(&all());
    // Drop counters exist at zero from the start, so an alert on their
    // increase (deploy/prometheus) has a series to compare against.
    for reason in [
        "spool_full",
        "spool_write",
        "queue_full",
        "refused",
        "clock_future",
    ] {
        metrics::counter!(WINDOWS_DROPPED.name, "reason" => reason).increment(0);
    }
}

#[cfg(test)]
mod tests;
