//! The correlator's own metrics (docs/metrics.md), served on the web
//! listener's `/metrics`: open incidents by kind, windows reaching the
//! engine, ingest duplicates and gaps, history and alert drops, and each
//! collector's lag (wall clock minus its latest window's end).
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use proto::v1::{CandidateUpdate, Window};

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

fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_gauge!(
        "faultline_correlator_open_incidents",
        "Open incidents by kind"
    );
    describe_gauge!(
        "faultline_correlator_open_incidents_by_severity",
        "Open incidents by kind and severity (docs/alerting.md, the severity table)"
    );
    describe_counter!(
        "faultline_correlator_windows_total",
        "Windows that reached the detection engine"
    );
    describe_counter!(
        "faultline_correlator_duplicate_windows_total",
        "Windows dropped as duplicates (resends after a reconnect)"
    );
    describe_counter!(
        "faultline_correlator_missing_windows_total",
        "Windows missing from collectors' sequences (spool overflow)"
    );
    describe_gauge!(
        "faultline_correlator_collector_lag_seconds",
        Unit::Seconds,
        "Wall clock minus the end of the collector's latest window, per host"
    );
    describe_trust();
    describe_counter!(
        "faultline_ingest_non_finite_total",
        "NaN or infinite values removed from received windows (docs/security.md)"
    );
    describe_history();
    describe_counter!(
        "faultline_auth_refused_total",
        "Calls refused without a valid client certificate or bearer token"
    );
    describe_counter!(
        "faultline_ingest_rejected_total",
        "Windows or Resumes refused, never adopted (reason)"
    );
    describe_counter!(
        "faultline_ingest_forgotten_total",
        "Ingest state forgotten: idle hosts, old collector runs (what)"
    );
    describe_counter!(
        "faultline_engine_dropped_total",
        "Window content over the per-window caps, findings over the open-incident cap (what)"
    );
    describe_counter!(
        "faultline_engine_forgotten_hosts_total",
        "Hosts the engine forgot (their incidents resolved as stale)"
    );
    describe_counter!(
        "faultline_engine_cluster_mismatch_total",
        "Windows whose collector names a cluster other than the correlator's cluster (the collector's label is kept)"
    );
    describe_counter!(
        "faultline_connections_refused_total",
        "Connections closed at accept: a listener's connection cap or per-peer limit reached with every connection busy (listener, reason)"
    );
    describe_counter!(
        "faultline_connections_closed_total",
        "Connections a listener closed: slow handshake, head or body, idle, displaced at a cap, client not reading (listener, reason)"
    );
    describe_counter!(
        "faultline_token_reviews_total",
        "Kubernetes TokenReviews of bearer tokens (result: accepted, refused, error, busy)"
    );
    describe_counter!(
        "faultline_alerts_sent_total",
        "Alerts posted to Alertmanager (firing and resolved)"
    );
    describe_counter!(
        "faultline_alerts_failed_total",
        "Posts to Alertmanager that failed (retried at the next resend)"
    );
    describe_counter!(
        "faultline_alerts_dropped_total",
        "Incident updates the Alertmanager pusher dropped (it fell behind)"
    );
    describe_nats();
}

/// The refusals and caps of the trust boundary (docs/security.md).
/// The history's metrics.
fn describe_history() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(
        "faultline_history_dropped_total",
        "History messages dropped: a full writer queue (what: window, usage, update) or past the disk-fault backlog bound (backlog)"
    );
    describe_counter!(
        "faultline_history_write_errors_total",
        "History transactions that failed (their samples are lost; incident updates are retried on a disk fault)"
    );
    describe_gauge!(
        "faultline_history_schema_version",
        "The history database's schema version after start-up migrations"
    );
    describe_gauge!(
        "faultline_history_backlog_updates",
        "Incident updates kept in memory for the disk to come back"
    );
    describe_gauge!(
        "faultline_history_journal_pending_updates",
        "Incident updates in the incident journal that the database has not committed yet"
    );
    describe_counter!(
        "faultline_history_journal_errors_total",
        "Incident journal failures: not reserved at start, or a write or sync failed (updates meanwhile are sent without it)"
    );
    describe_counter!(
        "faultline_history_reopened_total",
        "History database found deleted or replaced while running, reopened and the open incidents re-written (reason)"
    );
    describe_counter!(
        "faultline_history_unbanded_total",
        "Samples left out of the fleet bands and error deltas (entity bound reached)"
    );
    describe_counter!(
        "faultline_history_unrolled_total",
        "Samples kept raw only: later than their minute's rollup or past the open-bucket bound"
    );
    describe_gauge!(
        "faultline_history_bytes",
        Unit::Bytes,
        "Bytes the history database takes on disk: the file, its -wal and -shm"
    );
}

fn describe_trust() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        "faultline_grpc_refused_total",
        "gRPC calls refused at an identity's or the subscribers' share of the slots (reason: the [detect.limits] key)"
    );
    describe_counter!(
        "faultline_web_refused_total",
        "Web requests refused: a Host header naming another server (host), no or a wrong viewer token (token)"
    );
    describe_gauge!(
        "faultline_web_event_streams",
        "Open /api/stream event streams"
    );
    describe_counter!(
        "faultline_web_event_streams_displaced_total",
        "Event streams ended to make room at [web] max_event_streams (total) or max_event_streams_per_peer (per_peer)"
    );
    describe_counter!(
        "faultline_fleet_refused_total",
        "Incident updates the fleet view dropped: naming an open incident another shard raised (not_owner)"
    );
    describe_counter!(
        "faultline_nats_redelivery_delayed_total",
        "Windows from NATS refused as from the future but due within 60 s, given back to the stream (Nak) to be taken once due"
    );
    describe_counter!(
        "faultline_engine_xid_followons_total",
        "XID 43/45 follow-ons: folded into the GPU's live episode (folded) or alone, raising nothing (alone)"
    );
}

/// The sharded correlator's and the fleet view's series (docs/scale-out.md).
fn describe_nats() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(
        "faultline_nats_connected",
        "1 while the NATS JetStream window consumer is connected (serve --nats), 0 after it was interrupted"
    );
    describe_gauge!(
        "faultline_correlator_shard_active",
        "1 while this process holds its shard's lease and correlates it (serve --nats), 0 while it is the shard's standby (consumer: the durable consumer, --nats-consumer, whose lease it is)"
    );
    describe_counter!(
        "faultline_nats_state_errors_total",
        "Open-incident updates not mirrored to the shard's NATS key-value bucket"
    );
    describe_counter!(
        "faultline_nats_state_lagged_total",
        "Open-incident updates the NATS mirror missed (it fell behind the engine)"
    );
    describe_counter!(
        "faultline_nats_incident_updates_lost_total",
        "Incident updates not stored in the NATS incidents stream (the fleet view misses them)"
    );
    describe_counter!(
        "faultline_engine_baselines_restored_total",
        "Baselines a process taking a shard over gave back to its hosts' entities"
    );
    describe_gauge!(
        "faultline_fleet_peers",
        "Other shards whose fresh summaries this shard merges"
    );
    describe_counter!(
        "faultline_fleet_publish_errors_total",
        "This shard's summaries not put to NATS"
    );
    describe_counter!(
        "faultline_fleet_joined_total",
        "Shard incidents joined into another shard's incident of the same cluster, kind family and entity"
    );
    describe_counter!(
        "faultline_fleet_unjoined_total",
        "Shard incidents passed through unjoined at the fleet view's bound"
    );
}

/// A window reached the engine.
pub fn window(w: &Window) {
    metrics::counter!("faultline_correlator_windows_total").increment(1);
    if let Some(o) = &w.origin {
        let now = vocab::time::now_unix_ms();
        metrics::gauge!("faultline_correlator_collector_lag_seconds", "host" => o.hostname.clone())
            .set((now - w.end_unix_ms) as f64 / 1000.0);
    }
}

/// The open incidents changed.
pub fn open_incidents(open: &[CandidateUpdate]) {
    for k in vocab::kind::IncidentKind::ALL {
        let k = k.as_str();
        let n = open.iter().filter(|u| u.kind == k).count();
        metrics::gauge!("faultline_correlator_open_incidents", "kind" => k).set(n as f64);
        // By severity too: the Prometheus rules route on it.
        for sev in crate::engine::incidents::severity::Severity::ALL {
            let sev = sev.as_str();
            let n = open
                .iter()
                .filter(|u| u.kind == k && u.severity == sev)
                .count();
            metrics::gauge!("faultline_correlator_open_incidents_by_severity", "kind" => k, "severity" => sev)
                .set(n as f64);
        }
    }
}

/// Ingest counters (kept by the ingest state) as of a scrape.
pub fn ingest_counters(duplicates: u64, missing: u64) {
    metrics::counter!("faultline_correlator_duplicate_windows_total").absolute(duplicates);
    metrics::counter!("faultline_correlator_missing_windows_total").absolute(missing);
}
