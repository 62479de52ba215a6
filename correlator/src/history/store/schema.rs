//! The schema and its versioned migrations. The version lives in SQLite's
//! `PRAGMA user_version`; each migration runs in one transaction with the
//! version bump, so a failed migration leaves the file as it was. A file
//! written before versioning (version 0) gets every migration: the first
//! two create only what is missing.
use rusqlite::Connection;

use super::{classify, HistoryError};
use std::path::Path;

/// The schema version this build reads and writes.
pub const VERSION: i64 = 5;

/// One step: the SQL that takes the schema from `to - 1` to `to`.
struct Migration {
    to: i64,
    what: &'static str,
    sql: &'static str,
}

/// The `usage` table (`history::usage` reads and writes it).
const USAGE: &str = "
CREATE TABLE IF NOT EXISTS usage(
  hour INTEGER NOT NULL, job TEXT NOT NULL, team TEXT NOT NULL, kind TEXT NOT NULL,
  gpu_alloc_s REAL NOT NULL, gpu_busy_s REAL NOT NULL, energy_j REAL NOT NULL,
  peak_mem_bytes INTEGER NOT NULL, launches INTEGER NOT NULL, copy_bytes INTEGER NOT NULL,
  sync_wait_ns INTEGER NOT NULL, io_requests INTEGER NOT NULL, io_bytes INTEGER NOT NULL,
  io_device_ns INTEGER NOT NULL, fabric_bytes INTEGER NOT NULL,
  PRIMARY KEY(hour, job, team, kind)) WITHOUT ROWID;
";

const MIGRATIONS: &[Migration] = &[
    Migration {
        to: 1,
        what: "incidents, their updates and jobs, per-entity series",
        sql: V1,
    },
    Migration {
        to: 2,
        what: "resource usage per hour, job, team and kind",
        sql: USAGE,
    },
    Migration {
        to: 3,
        what: "operator acknowledgements of incidents",
        sql: ACKS,
    },
    Migration {
        to: 4,
        what: "the cluster label of incidents",
        sql: CLUSTER,
    },
    Migration {
        to: 5,
        what: "the severity of incidents",
        sql: SEVERITY,
    },
];

/// The severity of each incident (`critical`, `warning`, `info`; empty for
/// every incident stored before it was rated).
const SEVERITY: &str = "
ALTER TABLE incidents ADD COLUMN severity TEXT NOT NULL DEFAULT '';
CREATE INDEX incidents_by_severity ON incidents(severity, opened_ms);
";

/// The cluster of each incident (empty: unnamed, and every incident
/// stored before the label existed).
const CLUSTER: &str = "
ALTER TABLE incidents ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
CREATE INDEX incidents_by_cluster ON incidents(cluster, opened_ms);
";

/// Every acknowledgement set or cleared (`action`: `set` or `cleared`).
const ACKS: &str = "
CREATE TABLE acks(
  incident_id TEXT NOT NULL, ts_ms INTEGER NOT NULL, action TEXT NOT NULL,
  by TEXT NOT NULL, why TEXT NOT NULL, until_ms INTEGER,
  PRIMARY KEY(incident_id, ts_ms, action)) WITHOUT ROWID;
";

const V1: &str = "
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS incidents(
  id TEXT PRIMARY KEY, kind TEXT NOT NULL, entity TEXT NOT NULL, host TEXT NOT NULL,
  state TEXT NOT NULL, opened_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
  resolved_ms INTEGER, confidence REAL NOT NULL, evidence TEXT NOT NULL,
  jobs TEXT NOT NULL, runbook TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS incidents_by_time ON incidents(opened_ms);
CREATE INDEX IF NOT EXISTS incidents_by_entity ON incidents(entity, opened_ms);
CREATE INDEX IF NOT EXISTS incidents_open ON incidents(state) WHERE state = 'open';
CREATE TABLE IF NOT EXISTS incident_jobs(
  incident_id TEXT NOT NULL, job TEXT NOT NULL, PRIMARY KEY(incident_id, job)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS incident_jobs_by_job ON incident_jobs(job);
CREATE TABLE IF NOT EXISTS updates(
  incident_id TEXT NOT NULL, ts_ms INTEGER NOT NULL, state TEXT NOT NULL,
  confidence REAL NOT NULL, evidence TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS updates_by_incident ON updates(incident_id, ts_ms);
CREATE TABLE IF NOT EXISTS series_ids(
  id INTEGER PRIMARY KEY, entity TEXT NOT NULL, signal TEXT NOT NULL, UNIQUE(entity, signal));
CREATE TABLE IF NOT EXISTS series(
  res INTEGER NOT NULL, sid INTEGER NOT NULL, ts INTEGER NOT NULL,
  n INTEGER NOT NULL, sum REAL NOT NULL, min REAL NOT NULL, max REAL NOT NULL,
  PRIMARY KEY(res, sid, ts)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS series_by_time ON series(res, ts);
";

/// The file's schema version.
pub(super) fn version(conn: &Connection, path: &Path) -> Result<i64, HistoryError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| classify(path, &e))
}

/// Brings the schema to [`VERSION`]: the versions it went from and to.
/// A file from a newer build is refused, not changed.
pub(super) fn migrate(conn: &Connection, path: &Path) -> Result<(i64, i64), HistoryError> {
    let from = version(conn, path)?;
    if from > VERSION {
        return Err(HistoryError::Newer {
            path: path.to_path_buf(),
            found: from,
            supported: VERSION,
        });
    }
    for m in MIGRATIONS.iter().filter(|m| m.to > from) {
        let step = format!(
            "BEGIN IMMEDIATE;\n{}\nPRAGMA user_version = {};\nCOMMIT;",
            m.sql, m.to
        );
        if let Err(e) = conn.execute_batch(&step) {
            // Nothing of this step stays: the transaction is rolled back.
            let _ = conn.execute_batch("ROLLBACK");
            let fault = classify(path, &e);
            if fault.is_disk() {
                return Err(fault);
            }
            return Err(HistoryError::Migration {
                path: path.to_path_buf(),
                to: m.to,
                what: m.what,
                detail: e.to_string(),
            });
        }
        tracing::info!(path = %path.display(), version = m.to, what = m.what, "history schema migrated");
    }
    Ok((from, VERSION))
}
