//! Every metric family the correlator can put on its `/metrics`, declared
//! once (name, type, labels, HELP): the emit sites name them by these
//! constants, [`ALL`] describes them at start, and a test checks
//! docs/metrics.md's correlator section against them.
use proto::metric::Family;

// The engine and its ingest.
pub const OPEN_INCIDENTS: Family = Family::gauge(
    "faultline_correlator_open_incidents",
    &["kind"],
    "Open incidents by kind",
);
pub const OPEN_INCIDENTS_BY_SEVERITY: Family = Family::gauge(
    "faultline_correlator_open_incidents_by_severity",
    &["kind", "severity"],
    "Open incidents by kind and severity (docs/alerting.md, the severity table)",
);
pub const WINDOWS: Family = Family::counter(
    "faultline_correlator_windows_total",
    &[],
    "Windows that reached the detection engine",
);
pub const DUPLICATE_WINDOWS: Family = Family::counter(
    "faultline_correlator_duplicate_windows_total",
    &[],
    "Windows dropped as duplicates (resends after a reconnect)",
);
pub const MISSING_WINDOWS: Family = Family::counter(
    "faultline_correlator_missing_windows_total",
    &[],
    "Windows missing from collectors' sequences (spool overflow)",
);
pub const COLLECTOR_LAG: Family = Family::gauge(
    "faultline_correlator_collector_lag_seconds",
    &["host"],
    "Wall clock minus the end of the collector's latest window, per host",
);
pub const INGEST_NON_FINITE: Family = Family::counter(
    "faultline_ingest_non_finite_total",
    &[],
    "NaN or infinite values removed from received windows (docs/security.md)",
);
pub const AUTH_REFUSED: Family = Family::counter(
    "faultline_auth_refused_total",
    &[],
    "Calls refused without a valid client certificate or bearer token",
);
pub const INGEST_REJECTED: Family = Family::counter(
    "faultline_ingest_rejected_total",
    &["reason"],
    "Windows or Resumes refused, never adopted (reason)",
);
pub const INGEST_FORGOTTEN: Family = Family::counter(
    "faultline_ingest_forgotten_total",
    &["what"],
    "Ingest state forgotten: idle hosts, old collector runs (what)",
);
pub const ENGINE_DROPPED: Family = Family::counter(
    "faultline_engine_dropped_total",
    &["what"],
    "Window content over the per-window caps, findings over the open-incident cap (what)",
);
pub const ENGINE_FORGOTTEN_HOSTS: Family = Family::counter(
    "faultline_engine_forgotten_hosts_total",
    &[],
    "Hosts the engine forgot (their incidents resolved as stale)",
);
pub const ENGINE_CLUSTER_MISMATCH: Family = Family::counter(
    "faultline_engine_cluster_mismatch_total",
    &[],
    "Windows whose collector names a cluster other than the correlator's cluster (the collector's label is kept)",
);
pub const ENGINE_XID_FOLLOWONS: Family = Family::counter(
    "faultline_engine_xid_followons_total",
    &["outcome"],
    "XID 43/45 follow-ons: folded into the GPU's live episode (folded) or alone, raising nothing (alone)",
);
pub const TOKEN_REVIEWS: Family = Family::counter(
    "faultline_token_reviews_total",
    &["result"],
    "Kubernetes TokenReviews of bearer tokens (result: accepted, refused, error, busy)",
);

// Alerts and acknowledgements.
pub const ALERTS_SENT: Family = Family::counter(
    "faultline_alerts_sent_total",
    &[],
    "Alerts posted to Alertmanager (firing and resolved)",
);
pub const ALERTS_FAILED: Family = Family::counter(
    "faultline_alerts_failed_total",
    &[],
    "Posts to Alertmanager that failed (retried at the next resend)",
);
pub const ALERTS_DROPPED: Family = Family::counter(
    "faultline_alerts_dropped_total",
    &[],
    "Incident updates the Alertmanager pusher dropped (it fell behind)",
);
pub const ALERTS_SILENCES: Family = Family::counter(
    "faultline_alerts_silences_total",
    &["action"],
    "Alertmanager silences of acknowledged incidents set or refreshed (set) and expired when the acknowledgement ended (expired)",
);
pub const ALERTS_SILENCE_FAILURES: Family = Family::counter(
    "faultline_alerts_silence_failures_total",
    &["action"],
    "Silence requests Alertmanager refused or did not answer, retried at the next resend (action: set, expire, list)",
);
pub const ACKS: Family = Family::counter(
    "faultline_acks_total",
    &["action"],
    "Acknowledgements set, cleared by an operator, and ended by their incident's resolution or their own end (action)",
);
pub const ACKS_REFUSED: Family = Family::counter(
    "faultline_acks_refused_total",
    &["reason"],
    "Acknowledgement requests refused (reason: off, unauthorized, invalid, not_found, full)",
);
pub const ACKS_UNRECORDED: Family = Family::counter(
    "faultline_acks_unrecorded_total",
    &[],
    "Acknowledgements in force that the history could not record",
);

// The history.
pub const HISTORY_DROPPED: Family = Family::counter(
    "faultline_history_dropped_total",
    &["what"],
    "History messages dropped: a full writer queue (what: window, usage, update) or past the disk-fault backlog bound (backlog)",
);
pub const HISTORY_WRITE_ERRORS: Family = Family::counter(
    "faultline_history_write_errors_total",
    &[],
    "History transactions that failed (their samples are lost; incident updates are retried on a disk fault)",
);
pub const HISTORY_SCHEMA_VERSION: Family = Family::gauge(
    "faultline_history_schema_version",
    &[],
    "The history database's schema version after start-up migrations",
);
pub const HISTORY_BACKLOG_UPDATES: Family = Family::gauge(
    "faultline_history_backlog_updates",
    &[],
    "Incident updates kept in memory for the disk to come back",
);
pub const HISTORY_JOURNAL_PENDING: Family = Family::gauge(
    "faultline_history_journal_pending_updates",
    &[],
    "Incident updates in the incident journal that the database has not committed yet",
);
pub const HISTORY_JOURNAL_ERRORS: Family = Family::counter(
    "faultline_history_journal_errors_total",
    &[],
    "Incident journal failures: not reserved at start, or a write or sync failed (updates meanwhile are sent without it)",
);
pub const HISTORY_REOPENED: Family = Family::counter(
    "faultline_history_reopened_total",
    &["reason"],
    "History database found deleted or replaced while running, reopened and the open incidents re-written (reason)",
);
pub const HISTORY_UNBANDED: Family = Family::counter(
    "faultline_history_unbanded_total",
    &[],
    "Samples left out of the fleet bands and error deltas (entity bound reached)",
);
pub const HISTORY_UNROLLED: Family = Family::counter(
    "faultline_history_unrolled_total",
    &[],
    "Samples kept raw only: later than their minute's rollup or past the open-bucket bound",
);
pub const HISTORY_BYTES: Family = Family::gauge(
    "faultline_history_bytes",
    &[],
    "Bytes the history database takes on disk: the file, its -wal and -shm",
);

// The trust boundary (docs/security.md).
pub const GRPC_REFUSED: Family = Family::counter(
    "faultline_grpc_refused_total",
    &["reason"],
    "gRPC calls refused at an identity's or the subscribers' share of the slots (reason: the [detect.limits] key)",
);
pub const WEB_REFUSED: Family = Family::counter(
    "faultline_web_refused_total",
    &["reason"],
    "Web requests refused: a Host header naming another server (host), no or a wrong viewer token (token)",
);
pub const WEB_EVENT_STREAMS: Family = Family::gauge(
    "faultline_web_event_streams",
    &[],
    "Open /api/stream event streams",
);
pub const WEB_EVENT_STREAMS_DISPLACED: Family = Family::counter(
    "faultline_web_event_streams_displaced_total",
    &["reason"],
    "Event streams ended to make room at [web] max_event_streams (total) or max_event_streams_per_peer (per_peer)",
);
pub const FLEET_REFUSED: Family = Family::counter(
    "faultline_fleet_refused_total",
    &["reason"],
    "Incident updates the fleet view dropped: naming an open incident another shard raised (not_owner)",
);

// The sharded correlator and the fleet view (docs/scale-out.md).
pub const NATS_REDELIVERY_DELAYED: Family = Family::counter(
    "faultline_nats_redelivery_delayed_total",
    &[],
    "Windows from NATS refused as from the future but due within 60 s, given back to the stream (Nak) to be taken once due",
);
pub const NATS_CONNECTED: Family = Family::gauge(
    "faultline_nats_connected",
    &[],
    "1 while the NATS JetStream window consumer is connected (serve --nats), 0 after it was interrupted",
);
pub const SHARD_ACTIVE: Family = Family::gauge(
    "faultline_correlator_shard_active",
    &["consumer"],
    "1 while this process holds its shard's lease and correlates it (serve --nats), 0 while it is the shard's standby (consumer: the durable consumer, --nats-consumer, whose lease it is)",
);
pub const NATS_STATE_ERRORS: Family = Family::counter(
    "faultline_nats_state_errors_total",
    &[],
    "Open-incident updates not mirrored to the shard's NATS key-value bucket",
);
pub const NATS_STATE_LAGGED: Family = Family::counter(
    "faultline_nats_state_lagged_total",
    &[],
    "Open-incident updates the NATS mirror missed (it fell behind the engine)",
);
pub const NATS_INCIDENT_UPDATES_LOST: Family = Family::counter(
    "faultline_nats_incident_updates_lost_total",
    &[],
    "Incident updates not stored in the NATS incidents stream (the fleet view misses them)",
);
pub const ENGINE_BASELINES_RESTORED: Family = Family::counter(
    "faultline_engine_baselines_restored_total",
    &[],
    "Baselines a process taking a shard over gave back to its hosts' entities",
);
pub const FLEET_PEERS: Family = Family::gauge(
    "faultline_fleet_peers",
    &[],
    "Other shards whose fresh summaries this shard merges",
);
pub const FLEET_PUBLISH_ERRORS: Family = Family::counter(
    "faultline_fleet_publish_errors_total",
    &[],
    "This shard's summaries not put to NATS",
);
pub const FLEET_JOINED: Family = Family::counter(
    "faultline_fleet_joined_total",
    &[],
    "Shard incidents joined into another shard's incident of the same cluster, kind family and entity",
);
pub const FLEET_UNJOINED: Family = Family::counter(
    "faultline_fleet_unjoined_total",
    &[],
    "Shard incidents passed through unjoined at the fleet view's bound",
);

/// Every family the correlator can emit: its own, the listeners' and the
/// web config file's (declared in `proto` and `webconfig`), and the build.
pub const ALL: &[&Family] = &[
    &OPEN_INCIDENTS,
    &OPEN_INCIDENTS_BY_SEVERITY,
    &WINDOWS,
    &DUPLICATE_WINDOWS,
    &MISSING_WINDOWS,
    &COLLECTOR_LAG,
    &INGEST_NON_FINITE,
    &AUTH_REFUSED,
    &INGEST_REJECTED,
    &INGEST_FORGOTTEN,
    &ENGINE_DROPPED,
    &ENGINE_FORGOTTEN_HOSTS,
    &ENGINE_CLUSTER_MISMATCH,
    &ENGINE_XID_FOLLOWONS,
    &TOKEN_REVIEWS,
    &ALERTS_SENT,
    &ALERTS_FAILED,
    &ALERTS_DROPPED,
    &ALERTS_SILENCES,
    &ALERTS_SILENCE_FAILURES,
    &ACKS,
    &ACKS_REFUSED,
    &ACKS_UNRECORDED,
    &HISTORY_DROPPED,
    &HISTORY_WRITE_ERRORS,
    &HISTORY_SCHEMA_VERSION,
    &HISTORY_BACKLOG_UPDATES,
    &HISTORY_JOURNAL_PENDING,
    &HISTORY_JOURNAL_ERRORS,
    &HISTORY_REOPENED,
    &HISTORY_UNBANDED,
    &HISTORY_UNROLLED,
    &HISTORY_BYTES,
    &GRPC_REFUSED,
    &WEB_REFUSED,
    &WEB_EVENT_STREAMS,
    &WEB_EVENT_STREAMS_DISPLACED,
    &FLEET_REFUSED,
    &NATS_REDELIVERY_DELAYED,
    &NATS_CONNECTED,
    &SHARD_ACTIVE,
    &NATS_STATE_ERRORS,
    &NATS_STATE_LAGGED,
    &NATS_INCIDENT_UPDATES_LOST,
    &ENGINE_BASELINES_RESTORED,
    &FLEET_PEERS,
    &FLEET_PUBLISH_ERRORS,
    &FLEET_JOINED,
    &FLEET_UNJOINED,
    &proto::metric::shared::CONNECTIONS_REFUSED,
    &proto::metric::shared::CONNECTIONS_CLOSED,
    &proto::metric::shared::BUILD_INFO,
    &webconfig::AUTH_FAILURES,
    &webconfig::TLS_RELOAD_ERRORS,
];

#[cfg(test)]
mod tests {
    use std::path::Path;

    use proto::metric::{check_docs, duplicates, literals, section};

    use super::ALL;

    /// Names with the metric prefix that are not metrics: the NATS
    /// key-value buckets of a shard.
    const NOT_METRICS: &[&str] = &[
        "faultline_summaries",
        "faultline_open",
        "faultline_leases",
        "faultline_baselines",
    ];

    /// docs/metrics.md's correlator section documents exactly the
    /// declared families, with their types and labels.
    #[test]
    fn docs_match_the_declarations() {
        let md = include_str!("../../../docs/metrics.md");
        let drift = check_docs(ALL, section(md, "## Correlator"));
        assert!(
            drift.is_empty(),
            "docs/metrics.md drifted:\n{}",
            drift.join("\n")
        );
        assert!(duplicates(ALL).is_empty(), "{:?}", duplicates(ALL));
    }

    /// A metric name spelled as a literal anywhere in the crate is one
    /// of the declared families.
    #[test]
    fn every_literal_name_is_declared() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let found = literals::undeclared(&src, ALL, NOT_METRICS).expect("read src");
        assert!(
            found.is_empty(),
            "declare these in correlator/src/telemetry/families.rs:\n{}",
            found.join("\n")
        );
    }
}
