//! The correlator's own metrics (docs/metrics.md), served on the web
//! listener's `/metrics`: open incidents by kind, windows reaching the
//! engine, ingest duplicates and gaps, history and alert drops, and each
//! collector's lag (wall clock minus its latest window's end).
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use proto::v1::{CandidateUpdate, Window};

mod families;
pub use families::*;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder once per process (`None` when another
/// recorder was installed first, e.g. by an embedding program).
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let h = PrometheusBuilder::new().install_recorder().ok()?;
            describe();
            self_telemetry();
            Some(h)
        })
        .as_ref()
}

/// `faultline_build_info` and the standard `process_*` families.
fn self_telemetry() {
    proto::self_telemetry::start(proto::self_telemetry::Build {
        version: env!("CARGO_PKG_VERSION"),
        revision: env!("FAULTLINE_REVISION"),
        rustc: env!("FAULTLINE_RUSTC"),
    });
}

/// Registers the HELP of every family (`families::ALL`).
fn describe() {
    proto::metric::describe_all(ALL);
}

/// A window reached the engine.
pub fn window(w: &Window) {
    metrics::counter!(WINDOWS.name).increment(1);
    if let Some(o) = &w.origin {
        let now = vocab::time::now_unix_ms();
        metrics::gauge!(COLLECTOR_LAG.name, "host" => o.hostname.clone())
            .set((now - w.end_unix_ms) as f64 / 1000.0);
    }
}

/// The open incidents changed.
pub fn open_incidents(open: &[CandidateUpdate]) {
    for k in vocab::kind::IncidentKind::ALL {
        let k = k.as_str();
        let n = open.iter().filter(|u| u.kind == k).count();
        metrics::gauge!(OPEN_INCIDENTS.name, "kind" => k).set(n as f64);
        // By severity too: the Prometheus rules route on it.
        for sev in crate::engine::incidents::severity::Severity::ALL {
            let sev = sev.as_str();
            let n = open
                .iter()
                .filter(|u| u.kind == k && u.severity == sev)
                .count();
            metrics::gauge!(OPEN_INCIDENTS_BY_SEVERITY.name, "kind" => k, "severity" => sev)
                .set(n as f64);
        }
    }
}

/// Ingest counters (kept by the ingest state) as of a scrape.
pub fn ingest_counters(duplicates: u64, missing: u64) {
    metrics::counter!(DUPLICATE_WINDOWS.name).absolute(duplicates);
    metrics::counter!(MISSING_WINDOWS.name).absolute(missing);
}
