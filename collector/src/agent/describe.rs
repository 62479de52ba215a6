//! HELP for every family of the catalog (`crate::metrics_catalog`): the
//! `metrics` recorder prints no HELP without a description, and `promtool
//! check metrics` fails. The text-writer families (`prom_text`) write
//! their own.
use crate::metrics_catalog::WINDOWS_DROPPED;

/// Registers the HELP of every recorder family.
pub fn describe() {
    proto::metric::describe_all(&crate::metrics_catalog::all());
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
