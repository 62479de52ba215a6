//! History schema versions, on real SQLite files: a file written before
//! versioning (the schema of the release that had no `usage` table and no
//! `user_version`) is migrated in place and keeps its incidents; a file
//! from a newer build is refused and left as it was; a migration that
//! fails leaves the file at its old version, with nothing half-applied.
use std::path::{Path, PathBuf};

use correlator::history::{
    store::schema::VERSION, usage::By, HistoryConfig, HistoryError, IncidentFilter, Store,
};
use rusqlite::Connection;

fn file(tag: &str) -> PathBuf {
    let d = tests::fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("history_schema_{tag}_{}", std::process::id())),
    );
    d.join("history.db")
}

/// The tables as the last release before versioning created them (no
/// `usage`, `user_version` 0), with one resolved incident in them.
fn pre_versioning(path: &Path) {
    let c = Connection::open(path).expect("create");
    c.execute_batch(
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
         CREATE TABLE incidents(
           id TEXT PRIMARY KEY, kind TEXT NOT NULL, entity TEXT NOT NULL, host TEXT NOT NULL,
           state TEXT NOT NULL, opened_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
           resolved_ms INTEGER, confidence REAL NOT NULL, evidence TEXT NOT NULL,
           jobs TEXT NOT NULL, runbook TEXT NOT NULL);
         CREATE TABLE incident_jobs(
           incident_id TEXT NOT NULL, job TEXT NOT NULL, PRIMARY KEY(incident_id, job)) WITHOUT ROWID;
         CREATE TABLE updates(
           incident_id TEXT NOT NULL, ts_ms INTEGER NOT NULL, state TEXT NOT NULL,
           confidence REAL NOT NULL, evidence TEXT NOT NULL);
         CREATE TABLE series_ids(
           id INTEGER PRIMARY KEY, entity TEXT NOT NULL, signal TEXT NOT NULL, UNIQUE(entity, signal));
         CREATE TABLE series(
           res INTEGER NOT NULL, sid INTEGER NOT NULL, ts INTEGER NOT NULL,
           n INTEGER NOT NULL, sum REAL NOT NULL, min REAL NOT NULL, max REAL NOT NULL,
           PRIMARY KEY(res, sid, ts)) WITHOUT ROWID;
         INSERT INTO incidents VALUES('inc-1', 'ib_link_down', 'n007/mlx5_1/1', 'n007',
           'resolved', 1000, 2000, 2000, 0.95, '[\"port went down\"]', '[\"job7\"]', 'reseat');
         INSERT INTO incident_jobs VALUES('inc-1', 'job7');",
    )
    .expect("old schema");
}

fn user_version(path: &Path) -> i64 {
    Connection::open(path)
        .and_then(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))
        .expect("user_version")
}

#[test]
fn a_file_from_before_versioning_is_migrated_and_keeps_its_incidents() {
    let _turn = tests::one_file_at_a_time(file!());
    let path = file("old");
    pre_versioning(&path);
    assert_eq!(user_version(&path), 0);
    let store = Store::open(&path, &HistoryConfig::default()).expect("open and migrate");
    assert_eq!(user_version(&path), VERSION);
    let rows = store
        .incidents(&IncidentFilter {
            job: "job7".into(),
            ..Default::default()
        })
        .expect("query");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].id, "inc-1");
    assert_eq!(rows[0].evidence, vec!["port went down".to_string()]);
    // The table the old file lacked is there: only the TOTAL line.
    let usage = store.usage(0, By::Job).expect("usage on a migrated file");
    assert_eq!(usage.len(), 1, "{usage:?}");
    drop(store);
    // Opening again changes nothing (every migration already applied).
    let again = Store::open_reader(&path, &HistoryConfig::default()).expect("reader");
    assert_eq!(
        again
            .incidents(&IncidentFilter::default())
            .map(|r| r.len())
            .ok(),
        Some(1)
    );
    assert_eq!(user_version(&path), VERSION);
}

#[test]
fn a_file_from_a_newer_build_is_refused_and_left_unchanged() {
    let _turn = tests::one_file_at_a_time(file!());
    let path = file("newer");
    pre_versioning(&path);
    let newer = VERSION + 5;
    Connection::open(&path)
        .and_then(|c| c.execute_batch(&format!("PRAGMA user_version = {newer}")))
        .expect("set version");
    for open in [Store::open, Store::open_reader] {
        match open(&path, &HistoryConfig::default()) {
            Err(e @ HistoryError::Newer { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("schema version {newer}")), "{text}");
                assert!(text.contains("move the file aside"), "{text}");
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("a newer file was opened"),
        }
    }
    assert_eq!(user_version(&path), newer);
}

#[test]
fn a_failed_migration_leaves_the_file_at_its_old_version() {
    let _turn = tests::one_file_at_a_time(file!());
    let path = file("failed");
    pre_versioning(&path);
    // Something in the way of version 2's table: an index of that name.
    Connection::open(&path)
        .and_then(|c| c.execute_batch("CREATE INDEX usage ON incidents(kind)"))
        .expect("an obstacle");
    match Store::open(&path, &HistoryConfig::default()) {
        Err(e @ HistoryError::Migration { to: 2, .. }) => {
            let text = e.to_string();
            assert!(text.contains("the file is unchanged"), "{text}");
            assert!(text.contains("already an index named usage"), "{text}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("migrated over an obstacle"),
    }
    // Version 1 (the idempotent baseline) committed; version 2 did not, nor
    // anything after it.
    assert_eq!(user_version(&path), 1);
    let c = Connection::open(&path).expect("open");
    let tables: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'usage'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(tables, 0);
}

/// Version 5 adds each incident's severity: a file of version 4 keeps its
/// incidents (severity empty: stored before rating), a new update stores
/// the incident's severity, a later one raises it, an update without one
/// (an older correlator's) keeps it, and the list filters on it.
#[test]
fn severity_is_a_column_migrated_in_and_filtered_on() {
    let _turn = tests::one_file_at_a_time(file!());
    let path = file("severity");
    pre_versioning(&path);
    {
        let mut store = Store::open(&path, &HistoryConfig::default()).expect("open");
        drop(store.write(&[], &[]));
    }
    // Back to version 4: the severity column and its index removed.
    Connection::open(&path)
        .and_then(|c| {
            c.execute_batch(
                "DROP INDEX incidents_by_severity; ALTER TABLE incidents DROP COLUMN severity; \
                 PRAGMA user_version = 4;",
            )
        })
        .expect("a version 4 file");
    let mut store = Store::open(&path, &HistoryConfig::default()).expect("migrate 4 -> 5");
    assert_eq!(user_version(&path), VERSION);
    let rows = store.incidents(&IncidentFilter::default()).expect("query");
    assert_eq!((rows.len(), rows[0].severity.as_str()), (1, ""));
    let mut u = proto::v1::CandidateUpdate {
        ts_unix_ms: 5_000,
        incident_id: "inc-2".into(),
        state: "opened".into(),
        kind: "ib_link_degraded".into(),
        entity: "n1/mlx5_0/1".into(),
        severity: "warning".into(),
        ..Default::default()
    };
    store.write(std::slice::from_ref(&u), &[]).expect("write");
    u.state = "updated".into();
    u.ts_unix_ms = 6_000;
    u.severity = "critical".into();
    store.write(std::slice::from_ref(&u), &[]).expect("write");
    u.ts_unix_ms = 7_000;
    u.severity = String::new();
    store.write(std::slice::from_ref(&u), &[]).expect("write");
    let critical = store
        .incidents(&IncidentFilter {
            severity: "critical".into(),
            ..Default::default()
        })
        .expect("query");
    assert_eq!(critical.len(), 1, "{critical:?}");
    assert_eq!(critical[0].id, "inc-2");
    assert_eq!(critical[0].clone().into_update().severity, "critical");
    let (row, _) = store.incident("inc-2").expect("query").expect("found");
    assert_eq!(row.severity, "critical");
}
