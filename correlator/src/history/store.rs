//! The SQLite database: schema, writes (incident updates and samples),
//! rollups raw → 1 min → 1 h, retention per resolution, the disk budget,
//! and the queries behind the web API and the CLI.
use std::path::{Path, PathBuf};

use proto::v1::CandidateUpdate;
use rusqlite::{params, params_from_iter, Connection, OpenFlags, OptionalExtension as _};
use serde::Serialize;

use std::collections::HashMap;

use super::{
    host_of,
    rollup::{Agg, Buckets},
    samples::Sample,
    HistoryConfig, HOUR, MINUTE, RAW,
};

/// Windows arriving this late (event time) still make their minute's rollup.
pub const LATE_MS: i64 = 10_000;

/// Why the history database cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history database {path} is not a usable SQLite database ({detail}): move it aside (keep it for inspection) or restore a backup; the correlator then starts a new one")]
    Corrupt { path: PathBuf, detail: String },
    #[error("history database {path} cannot be opened for writing ({detail}): check that the correlator's user can write the file and its directory and that the disk is not full")]
    Unwritable { path: PathBuf, detail: String },
    #[error("history database {path}: {detail}")]
    Sql { path: PathBuf, detail: String },
}

impl HistoryError {
    /// A disk fault (full, read-only, I/O error, cannot open): what was
    /// being written can succeed once the disk is back.
    pub fn is_disk(&self) -> bool {
        matches!(self, Self::Unwritable { .. })
    }
}

/// One incident as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IncidentRow {
    pub id: String,
    pub kind: String,
    pub entity: String,
    pub host: String,
    /// `open` or `resolved`.
    pub state: String,
    pub opened_ms: i64,
    pub updated_ms: i64,
    pub resolved_ms: Option<i64>,
    pub confidence: f64,
    pub evidence: Vec<String>,
    pub jobs: Vec<String>,
    pub runbook: String,
}

/// One streamed update of an incident.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UpdateRow {
    pub ts_ms: i64,
    pub state: String,
    pub confidence: f64,
    pub evidence: Vec<String>,
}

/// Filter of the incident list; empty fields match everything.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct IncidentFilter {
    pub kind: String,
    pub host: String,
    pub job: String,
    pub entity: String,
    /// `open`, `resolved` or empty.
    pub state: String,
    /// Opened at or after (unix ms; 0 = any).
    pub since_ms: i64,
    /// Opened before (unix ms; 0 = any).
    pub until_ms: i64,
    /// At most this many, newest first (0 = 200; capped at 10 000).
    pub limit: usize,
}

/// An entity with repeated incidents: a replacement candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Offender {
    pub entity: String,
    pub host: String,
    pub kinds: Vec<String>,
    pub incidents: u64,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Seconds the entity spent in an open incident over the period.
    pub open_s: f64,
}

/// One point of a series at some resolution.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeriesPoint {
    pub ts: i64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

/// Series ids by entity and signal, as the writer has seen them.
type SidCache = HashMap<String, Vec<(String, i64)>>;

/// Series ids the writer remembers at most (then it starts over).
const MAX_SIDS: usize = 1 << 22;

/// Whether the file at the store's path is still the one it opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileState {
    Same,
    /// Deleted while open: writes go to a file no one can read again.
    Missing,
    /// Another file took its place (moved over, restored from a backup).
    Replaced,
}

impl FileState {
    /// The `reason` label of `faultline_history_reopened_total`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Same => "same",
            Self::Missing => "deleted",
            Self::Replaced => "replaced",
        }
    }
}

/// Device and inode of the file at `path`.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Bytes allocated on disk for the file at `path` (0 when missing).
fn disk_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).map_or(0, |m| match m.blocks() {
        0 => m.len(),
        b => b * 512,
    })
}

/// `path` with `suffix` appended (`history.db` → `history.db-wal`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The database connection (one writer or one reader).
pub struct Store {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    /// Device and inode of the file opened (a deleted or replaced file is
    /// detected by comparing them with the path's).
    ident: Option<(u64, u64)>,
    /// Free pages can go back to the file system (`auto_vacuum = INCREMENTAL`).
    can_shrink: bool,
    cfg: HistoryConfig,
    sids: SidCache,
    minutes: Buckets,
    hours: Buckets,
    /// Rolled-up horizons (exclusive), as stored in `meta`.
    rolled_minute: i64,
    rolled_hour: i64,
}

const SCHEMA: &str = "
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

/// Merges a row into an existing one of the same key (several hosts'
/// windows ending in the same millisecond, late windows, re-run rollups).
const MERGE: &str = "ON CONFLICT(res, sid, ts) DO UPDATE SET n = n + excluded.n, \
     sum = sum + excluded.sum, min = MIN(min, excluded.min), max = MAX(max, excluded.max)";

fn json_list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn list_of(s: &str) -> Vec<String> {
    serde_json::from_str(s).unwrap_or_default()
}

impl Store {
    /// Opens (creating when missing) the database for writing: checks that
    /// it is an intact SQLite file and writable, and creates the schema.
    pub fn open(path: &Path, cfg: &HistoryConfig) -> Result<Self, HistoryError> {
        let fresh = !path.exists();
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify(path, &e))?;
        let mut store = Self::with(conn, path, cfg);
        store.check()?;
        if fresh {
            // Freed pages go back to the file system on `incremental_vacuum`.
            store.exec("PRAGMA auto_vacuum = INCREMENTAL")?;
        }
        store
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            .map_err(|e| classify(path, &e))?;
        // The write-ahead log goes back to this size after a checkpoint
        // instead of keeping its largest size on disk.
        store.exec(&format!(
            "PRAGMA journal_size_limit = {}",
            (cfg.max_bytes / 8).clamp(1 << 20, 64 << 20)
        ))?;
        store.can_shrink = store
            .conn
            .query_row("PRAGMA auto_vacuum", [], |r| r.get::<_, i64>(0))
            .map_err(|e| classify(path, &e))?
            == 2;
        store.exec("PRAGMA synchronous = NORMAL")?;
        store.exec("PRAGMA busy_timeout = 5000")?;
        // The series' B-tree pages stay cached across a fleet's windows.
        store.exec("PRAGMA cache_size = -65536")?;
        store
            .conn
            .execute_batch(SCHEMA)
            .and_then(|()| store.conn.execute_batch(super::usage::SCHEMA))
            .map_err(|e| classify(path, &e))?;
        store.seed()?;
        Ok(store)
    }

    /// Opens an existing database for queries only (the web API, the CLI).
    pub fn open_reader(path: &Path, cfg: &HistoryConfig) -> Result<Self, HistoryError> {
        if !path.exists() {
            return Err(HistoryError::Sql {
                path: path.to_path_buf(),
                detail: "no such file: give the path of the correlator's `[history] path`".into(),
            });
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| classify(path, &e))?;
        let store = Self::with(conn, path, cfg);
        store.exec("PRAGMA busy_timeout = 5000")?;
        store.check()?;
        Ok(store)
    }

    /// An empty in-memory database standing in for a reader while its file
    /// is reopened (queries answer nothing rather than read a deleted file).
    pub fn placeholder(path: &Path, cfg: &HistoryConfig) -> Result<Self, HistoryError> {
        let conn = Connection::open_in_memory().map_err(|e| classify(path, &e))?;
        let mut store = Self::with(conn, path, cfg);
        store.ident = None;
        store.exec(SCHEMA)?;
        store.exec(super::usage::SCHEMA)?;
        Ok(store)
    }

    fn with(conn: Connection, path: &Path, cfg: &HistoryConfig) -> Self {
        Self {
            conn,
            path: path.to_path_buf(),
            ident: identity(path),
            can_shrink: false,
            cfg: cfg.clone(),
            sids: SidCache::new(),
            minutes: Buckets::default(),
            hours: Buckets::default(),
            rolled_minute: 0,
            rolled_hour: 0,
        }
    }

    /// Loads the rolled-up horizons and the open buckets written since
    /// (after a restart: the minute and hour in progress).
    fn seed(&mut self) -> Result<(), HistoryError> {
        self.rolled_minute = self.meta("rolled_minute")?;
        self.rolled_hour = self.meta("rolled_hour")?;
        for (from_res, to_res, horizon) in [
            (RAW, MINUTE, self.rolled_minute),
            (MINUTE, HOUR, self.rolled_hour),
        ] {
            let mut stmt = self
                .conn
                .prepare(
                    "SELECT sid, (ts / ?1) * ?1, SUM(n), SUM(sum), MIN(min), MAX(max) FROM series \
                     WHERE res = ?2 AND ts >= ?3 GROUP BY sid, ts / ?1",
                )
                .map_err(|e| self.sql(e))?;
            let rows: Vec<(i64, i64, Agg)> = stmt
                .query_map(params![to_res, from_res, horizon], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        Agg {
                            n: r.get(2)?,
                            sum: r.get(3)?,
                            min: r.get(4)?,
                            max: r.get(5)?,
                        },
                    ))
                })
                .and_then(Iterator::collect)
                .map_err(|e| self.sql(e))?;
            let b = if to_res == MINUTE {
                &mut self.minutes
            } else {
                &mut self.hours
            };
            for (sid, ts, a) in rows {
                b.add(sid, ts, to_res, horizon, a);
            }
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn config(&self) -> &HistoryConfig {
        &self.cfg
    }

    /// Whether the path still names the file this store opened.
    pub fn file_state(&self) -> FileState {
        match identity(&self.path) {
            None => FileState::Missing,
            Some(id) if Some(id) != self.ident => FileState::Replaced,
            Some(_) => FileState::Same,
        }
    }

    fn exec(&self, sql: &str) -> Result<(), HistoryError> {
        self.conn
            .execute_batch(sql)
            .map_err(|e| classify(&self.path, &e))
    }

    fn sql(&self, e: rusqlite::Error) -> HistoryError {
        classify(&self.path, &e)
    }

    /// `PRAGMA quick_check`: a damaged file is an error at start, never
    /// silently replaced.
    fn check(&self) -> Result<(), HistoryError> {
        let mut stmt = self
            .conn
            .prepare("PRAGMA quick_check")
            .map_err(|e| self.sql(e))?;
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get(0))
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))?;
        if rows.len() == 1 && rows[0] == "ok" {
            return Ok(());
        }
        Err(HistoryError::Corrupt {
            path: self.path.clone(),
            detail: rows.into_iter().take(3).collect::<Vec<_>>().join("; "),
        })
    }

    /// Writes incident updates and samples in one transaction.
    pub fn write(
        &mut self,
        updates: &[CandidateUpdate],
        samples: &[Sample],
    ) -> Result<(), HistoryError> {
        let r = self.write_tx(updates, samples);
        if r.is_err() {
            // Ids created by a rolled-back transaction are not in the database.
            self.sids.clear();
        }
        r
    }

    fn write_tx(
        &mut self,
        updates: &[CandidateUpdate],
        samples: &[Sample],
    ) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let e = |e: rusqlite::Error| classify(&path, &e);
        let tx = self.conn.transaction().map_err(e)?;
        {
            let mut inc = tx
                .prepare_cached(
                    "INSERT INTO incidents(id, kind, entity, host, state, opened_ms, updated_ms, \
                     resolved_ms, confidence, evidence, jobs, runbook) \
                     VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11) \
                     ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, state = excluded.state, \
                     updated_ms = excluded.updated_ms, resolved_ms = excluded.resolved_ms, \
                     confidence = excluded.confidence, evidence = excluded.evidence, \
                     jobs = excluded.jobs, runbook = excluded.runbook",
                )
                .map_err(e)?;
            let mut upd = tx
                .prepare_cached(
                    "INSERT INTO updates(incident_id, ts_ms, state, confidence, evidence) \
                     VALUES(?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(e)?;
            let mut job = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO incident_jobs(incident_id, job) VALUES(?1, ?2)",
                )
                .map_err(e)?;
            for u in updates {
                let resolved = u.state == "resolved";
                let evidence = json_list(&u.evidence);
                inc.execute(params![
                    u.incident_id,
                    u.kind,
                    u.entity,
                    host_of(&u.entity),
                    if resolved { "resolved" } else { "open" },
                    u.ts_unix_ms,
                    resolved.then_some(u.ts_unix_ms),
                    u.confidence,
                    evidence,
                    json_list(&u.affected_jobs),
                    u.runbook,
                ])
                .map_err(e)?;
                upd.execute(params![
                    u.incident_id,
                    u.ts_unix_ms,
                    u.state,
                    u.confidence,
                    evidence
                ])
                .map_err(e)?;
                for j in &u.affected_jobs {
                    job.execute(params![u.incident_id, j]).map_err(e)?;
                }
            }
            let mut raw = tx
                .prepare_cached(&format!(
                    "INSERT INTO series(res, sid, ts, n, sum, min, max) \
                     VALUES(0, ?1, ?2, 1, ?3, ?3, ?3) {MERGE}"
                ))
                .map_err(e)?;
            let mut new_sid = tx
                .prepare_cached(
                    "INSERT INTO series_ids(entity, signal) VALUES(?1, ?2) \
                     ON CONFLICT(entity, signal) DO UPDATE SET entity = excluded.entity RETURNING id",
                )
                .map_err(e)?;
            if self.sids.len() >= MAX_SIDS {
                self.sids.clear();
            }
            for s in samples {
                if !s.value.is_finite() {
                    continue;
                }
                let known = self
                    .sids
                    .get(s.entity.as_str())
                    .and_then(|v| v.iter().find(|(sig, _)| sig == s.signal))
                    .map(|x| x.1);
                let sid = match known {
                    Some(id) => id,
                    None => {
                        let id: i64 = new_sid
                            .query_row(params![s.entity, s.signal], |r| r.get(0))
                            .map_err(e)?;
                        self.sids
                            .entry(s.entity.clone())
                            .or_default()
                            .push((s.signal.to_string(), id));
                        id
                    }
                };
                raw.execute(params![sid, s.ts, s.value]).map_err(e)?;
                let a = Agg {
                    n: 1,
                    sum: s.value,
                    min: s.value,
                    max: s.value,
                };
                self.minutes.add(sid, s.ts, MINUTE, self.rolled_minute, a);
            }
        }
        tx.commit().map_err(e)
    }

    /// Writes the latest state of incidents that are open — `(opened_ms,
    /// latest update)` each — in one transaction: after a disk fault lost
    /// some of their updates, or into a new file that replaced a deleted
    /// one. An incident without any stored update gets its latest one.
    pub fn rewrite_open(&mut self, open: &[(i64, &CandidateUpdate)]) -> Result<(), HistoryError> {
        let path = self.path.clone();
        let e = |e: rusqlite::Error| classify(&path, &e);
        let tx = self.conn.transaction().map_err(e)?;
        {
            let mut inc = tx
                .prepare_cached(
                    "INSERT INTO incidents(id, kind, entity, host, state, opened_ms, updated_ms, \
                     resolved_ms, confidence, evidence, jobs, runbook) \
                     VALUES(?1, ?2, ?3, ?4, 'open', ?5, ?6, NULL, ?7, ?8, ?9, ?10) \
                     ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, state = 'open', \
                     opened_ms = MIN(opened_ms, excluded.opened_ms), \
                     updated_ms = MAX(updated_ms, excluded.updated_ms), resolved_ms = NULL, \
                     confidence = excluded.confidence, evidence = excluded.evidence, \
                     jobs = excluded.jobs, runbook = excluded.runbook",
                )
                .map_err(e)?;
            let mut upd = tx
                .prepare_cached(
                    "INSERT INTO updates(incident_id, ts_ms, state, confidence, evidence) \
                     SELECT ?1, ?2, ?3, ?4, ?5 \
                     WHERE NOT EXISTS (SELECT 1 FROM updates WHERE incident_id = ?1)",
                )
                .map_err(e)?;
            let mut job = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO incident_jobs(incident_id, job) VALUES(?1, ?2)",
                )
                .map_err(e)?;
            for (opened, u) in open {
                let evidence = json_list(&u.evidence);
                inc.execute(params![
                    u.incident_id,
                    u.kind,
                    u.entity,
                    host_of(&u.entity),
                    opened,
                    u.ts_unix_ms,
                    u.confidence,
                    evidence,
                    json_list(&u.affected_jobs),
                    u.runbook,
                ])
                .map_err(e)?;
                upd.execute(params![
                    u.incident_id,
                    u.ts_unix_ms,
                    u.state,
                    u.confidence,
                    evidence
                ])
                .map_err(e)?;
                for j in &u.affected_jobs {
                    job.execute(params![u.incident_id, j]).map_err(e)?;
                }
            }
        }
        tx.commit().map_err(e)
    }

    fn meta(&self, key: &str) -> Result<i64, HistoryError> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.sql(e))
    }

    /// Writes the complete minutes (older than `now_ms - LATE_MS`) and the
    /// complete hours of the open buckets, with the new horizons, in one
    /// transaction: a restart neither loses nor double-counts a rollup.
    pub fn rollup(&mut self, now_ms: i64) -> Result<(), HistoryError> {
        let minute = (now_ms - LATE_MS).div_euclid(MINUTE) * MINUTE;
        if minute <= self.rolled_minute {
            return Ok(());
        }
        let closed = self.minutes.take_before(minute);
        for ((sid, b), a) in &closed {
            self.hours.add(*sid, *b, HOUR, self.rolled_hour, *a);
        }
        let hour = minute.div_euclid(HOUR) * HOUR;
        let hours = if hour > self.rolled_hour {
            self.hours.take_before(hour)
        } else {
            Vec::new()
        };
        let path = self.path.clone();
        let e = |e: rusqlite::Error| classify(&path, &e);
        let tx = self.conn.transaction().map_err(e)?;
        {
            let mut ins = tx
                .prepare_cached(&format!(
                    "INSERT INTO series(res, sid, ts, n, sum, min, max) \
                     VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7) {MERGE}"
                ))
                .map_err(e)?;
            for (res, rows) in [(MINUTE, &closed), (HOUR, &hours)] {
                for ((sid, b), a) in rows {
                    ins.execute(params![res, sid, b, a.n, a.sum, a.min, a.max])
                        .map_err(e)?;
                }
            }
            let mut meta = tx
                .prepare_cached(
                    "INSERT INTO meta(key, value) VALUES(?1, ?2) \
                     ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                )
                .map_err(e)?;
            meta.execute(params!["rolled_minute", minute]).map_err(e)?;
            if hour > self.rolled_hour {
                meta.execute(params!["rolled_hour", hour]).map_err(e)?;
            }
        }
        tx.commit().map_err(e)?;
        self.rolled_minute = minute;
        self.rolled_hour = self.rolled_hour.max(hour);
        Ok(())
    }

    /// Samples kept raw only: older than the rolled horizon when they came,
    /// or past the bound of open buckets.
    pub fn unrolled(&self) -> u64 {
        self.minutes.skipped + self.hours.skipped
    }

    /// Deletes rows past each resolution's retention and resolved incidents
    /// past the hour retention; then keeps the file within `max_bytes`.
    /// Returns the rows deleted.
    pub fn retain(&self, now_ms: i64) -> Result<u64, HistoryError> {
        let mut gone = 0;
        for (res, keep_s) in [
            (RAW, self.cfg.raw_retention_s),
            (MINUTE, self.cfg.minute_retention_s),
            (HOUR, self.cfg.hour_retention_s),
        ] {
            let horizon = now_ms.saturating_sub(
                i64::try_from(keep_s)
                    .unwrap_or(i64::MAX / 2)
                    .saturating_mul(1000),
            );
            gone += self
                .conn
                .execute(
                    "DELETE FROM series WHERE res = ?1 AND ts < ?2",
                    params![res, horizon],
                )
                .map_err(|e| self.sql(e))? as u64;
        }
        let horizon = now_ms.saturating_sub(
            i64::try_from(self.cfg.hour_retention_s)
                .unwrap_or(i64::MAX / 2)
                .saturating_mul(1000),
        );
        gone += self.delete_incidents_before(horizon)?;
        // Usage is kept as long as the hourly series (chargeback horizon).
        gone += self
            .conn
            .execute("DELETE FROM usage WHERE hour < ?1", params![horizon])
            .map_err(|e| self.sql(e))? as u64;
        gone += self.keep_budget()?;
        Ok(gone)
    }

    fn delete_incidents_before(&self, horizon: i64) -> Result<u64, HistoryError> {
        let old = "SELECT id FROM incidents WHERE state = 'resolved' AND resolved_ms < ?1";
        let e = |e| self.sql(e);
        self.conn
            .execute(
                &format!("DELETE FROM updates WHERE incident_id IN ({old})"),
                [horizon],
            )
            .map_err(e)?;
        self.conn
            .execute(
                &format!("DELETE FROM incident_jobs WHERE incident_id IN ({old})"),
                [horizon],
            )
            .map_err(e)?;
        self.conn
            .execute(
                "DELETE FROM incidents WHERE state = 'resolved' AND resolved_ms < ?1",
                [horizon],
            )
            .map(|n| n as u64)
            .map_err(e)
    }

    /// Bytes the database takes on disk: the file, its write-ahead log and
    /// its shared-memory index (`-wal`, `-shm`), as allocated.
    pub fn used_bytes(&self) -> Result<u64, HistoryError> {
        Ok(["", "-wal", "-shm"]
            .iter()
            .map(|s| disk_bytes(&sibling(&self.path, s)))
            .sum())
    }

    /// Bytes of the pages holding data (not on the free list), wherever
    /// they are (file or write-ahead log).
    pub fn live_bytes(&self) -> Result<u64, HistoryError> {
        let q = |p: &str| -> Result<i64, HistoryError> {
            self.conn
                .query_row(p, [], |r| r.get(0))
                .map_err(|e| self.sql(e))
        };
        let pages = q("PRAGMA page_count")? - q("PRAGMA freelist_count")?;
        Ok(u64::try_from(pages * q("PRAGMA page_size")?).unwrap_or(0))
    }

    /// Returns free pages and the write-ahead log to the file system (the
    /// log is truncated unless a reader still needs it).
    fn compact(&self) -> Result<(), HistoryError> {
        if self.can_shrink {
            // One page per step: step until done, not once.
            let mut stmt = self
                .conn
                .prepare("PRAGMA incremental_vacuum")
                .map_err(|e| self.sql(e))?;
            let mut rows = stmt.query([]).map_err(|e| self.sql(e))?;
            while rows.next().map_err(|e| self.sql(e))?.is_some() {}
        }
        // A reader in the log makes the checkpoint wait for it: give up
        // quickly (the next maintenance tries again), not the 5 s the
        // writes wait.
        let pragma = |sql: &str| {
            self.conn
                .query_row(sql, [], |_| Ok(()))
                .map_err(|e| self.sql(e))
        };
        pragma("PRAGMA busy_timeout = 100")?;
        let r = pragma("PRAGMA wal_checkpoint(TRUNCATE)");
        pragma("PRAGMA busy_timeout = 5000")?;
        r
    }

    /// Over budget on disk: first the write-ahead log and free pages go
    /// back to the file system; then, while still over, the oldest tenth of
    /// the finest resolution that has rows is deleted (then of the resolved
    /// incidents), compacting after each step. Rows are deleted only while
    /// the data itself (with the `-shm` index) exceeds the budget: a log a
    /// reader still holds, or free pages of a file without incremental
    /// auto-vacuum (an older release's), are not worth any history.
    fn keep_budget(&self) -> Result<u64, HistoryError> {
        let max = self.cfg.max_bytes;
        if self.used_bytes()? <= max {
            return Ok(0);
        }
        self.compact()?;
        let shm = disk_bytes(&sibling(&self.path, "-shm"));
        let mut gone = 0;
        for _ in 0..64 {
            if self.used_bytes()? <= max || self.live_bytes()? + shm <= max {
                break;
            }
            let mut deleted = false;
            for res in [RAW, MINUTE, HOUR] {
                let span: Option<(i64, i64)> = self
                    .conn
                    .query_row(
                        "SELECT MIN(ts), MAX(ts) FROM series WHERE res = ?1",
                        [res],
                        |r| Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?)),
                    )
                    .map_err(|e| self.sql(e))?;
                let Some((lo, hi)) = span else { continue };
                let cut = lo + ((hi - lo) / 10).max(1);
                gone += self
                    .conn
                    .execute(
                        "DELETE FROM series WHERE res = ?1 AND ts < ?2",
                        params![res, cut],
                    )
                    .map_err(|e| self.sql(e))? as u64;
                deleted = true;
                break;
            }
            if !deleted {
                // Only incidents left: the oldest resolved tenth.
                let span: Option<(i64, i64)> = self
                    .conn
                    .query_row(
                        "SELECT MIN(resolved_ms), MAX(resolved_ms) FROM incidents WHERE state = 'resolved'",
                        [],
                        |r| Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?)),
                    )
                    .map_err(|e| self.sql(e))?;
                let Some((lo, hi)) = span else { break };
                gone += self.delete_incidents_before(lo + ((hi - lo) / 10).max(1))?;
            }
            self.compact()?;
        }
        Ok(gone)
    }

    /// Newest first.
    pub fn incidents(&self, f: &IncidentFilter) -> Result<Vec<IncidentRow>, HistoryError> {
        let mut sql = String::from(
            "SELECT id, kind, entity, host, state, opened_ms, updated_ms, resolved_ms, confidence, \
             evidence, jobs, runbook FROM incidents WHERE 1 = 1",
        );
        let mut args: Vec<rusqlite::types::Value> = Vec::new();
        let mut eq = |col: &str, v: &str, args: &mut Vec<rusqlite::types::Value>| {
            if !v.is_empty() {
                args.push(v.to_string().into());
                sql.push_str(&format!(" AND {col} = ?{}", args.len()));
            }
        };
        eq("kind", &f.kind, &mut args);
        eq("host", &f.host, &mut args);
        eq("entity", &f.entity, &mut args);
        eq("state", &f.state, &mut args);
        eq(
            "id IN (SELECT incident_id FROM incident_jobs WHERE job",
            &f.job,
            &mut args,
        );
        if !f.job.is_empty() {
            sql.push(')');
        }
        if f.since_ms > 0 {
            args.push(f.since_ms.into());
            sql.push_str(&format!(" AND opened_ms >= ?{}", args.len()));
        }
        if f.until_ms > 0 {
            args.push(f.until_ms.into());
            sql.push_str(&format!(" AND opened_ms < ?{}", args.len()));
        }
        let limit = match f.limit {
            0 => 200,
            n => n.min(10_000),
        };
        sql.push_str(&format!(" ORDER BY opened_ms DESC, id LIMIT {limit}"));
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params_from_iter(args), row_of)
            .and_then(Iterator::collect);
        rows.map_err(|e| self.sql(e))
    }

    /// One incident and its updates, oldest first.
    pub fn incident(
        &self,
        id: &str,
    ) -> Result<Option<(IncidentRow, Vec<UpdateRow>)>, HistoryError> {
        let row = self
            .conn
            .query_row(
                "SELECT id, kind, entity, host, state, opened_ms, updated_ms, resolved_ms, confidence, \
                 evidence, jobs, runbook FROM incidents WHERE id = ?1",
                [id],
                row_of,
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        let Some(row) = row else { return Ok(None) };
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT ts_ms, state, confidence, evidence FROM updates WHERE incident_id = ?1 \
                 ORDER BY ts_ms, rowid LIMIT 1000",
            )
            .map_err(|e| self.sql(e))?;
        let ups = stmt
            .query_map([id], |r| {
                Ok(UpdateRow {
                    ts_ms: r.get(0)?,
                    state: r.get(1)?,
                    confidence: r.get(2)?,
                    evidence: list_of(&r.get::<_, String>(3)?),
                })
            })
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))?;
        Ok(Some((row, ups)))
    }

    /// Open incidents (restored into the engine after a restart).
    pub fn open_incidents(&self) -> Result<Vec<IncidentRow>, HistoryError> {
        self.incidents(&IncidentFilter {
            state: "open".into(),
            limit: 10_000,
            ..IncidentFilter::default()
        })
    }

    /// Signals recorded for an entity (any resolution).
    pub fn signals(&self, entity: &str) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT signal FROM series_ids i WHERE entity = ?1 AND (\
                 EXISTS (SELECT 1 FROM series WHERE res = 0 AND sid = i.id) OR \
                 EXISTS (SELECT 1 FROM series WHERE res = 60000 AND sid = i.id) OR \
                 EXISTS (SELECT 1 FROM series WHERE res = 3600000 AND sid = i.id)) ORDER BY signal",
            )
            .map_err(|e| self.sql(e))?;
        stmt.query_map([entity], |r| r.get(0))
            .and_then(Iterator::collect)
            .map_err(|e| self.sql(e))
    }

    /// Time of the entity's latest sample at any resolution.
    pub fn latest_ts(&self, entity: &str) -> Result<Option<i64>, HistoryError> {
        Ok(self.span(entity)?.map(|s| s.1))
    }

    /// Entities recorded under `prefix/` (a host's ports, GPUs, devices; a
    /// job's models), at most `limit`.
    pub fn entities_under(&self, prefix: &str, limit: usize) -> Result<Vec<String>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT entity FROM series_ids WHERE entity > ?1 AND entity < ?2 \
                 ORDER BY entity LIMIT ?3",
            )
            .map_err(|e| self.sql(e))?;
        // `prefix/` up to `prefix0` ('0' follows '/'): an index range.
        stmt.query_map(
            params![format!("{prefix}/"), format!("{prefix}0"), limit as i64],
            |r| r.get(0),
        )
        .and_then(Iterator::collect)
        .map_err(|e| self.sql(e))
    }

    /// Times of the entity's earliest and latest samples at any resolution.
    pub fn span(&self, entity: &str) -> Result<Option<(i64, i64)>, HistoryError> {
        self.conn
            .query_row(
                "SELECT MIN(ts), MAX(ts) FROM series WHERE res IN (0, 60000, 3600000) \
                 AND sid IN (SELECT id FROM series_ids WHERE entity = ?1)",
                [entity],
                |r| Ok(r.get::<_, Option<i64>>(0)?.zip(r.get::<_, Option<i64>>(1)?)),
            )
            .map_err(|e| self.sql(e))
    }

    /// A series over `[from, to)`, at the finest resolution that has rows
    /// there, merged into at most `points` buckets.
    pub fn series(
        &self,
        entity: &str,
        signal: &str,
        from: i64,
        to: i64,
        points: usize,
    ) -> Result<(i64, Vec<SeriesPoint>), HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT ts, n, sum, min, max FROM series WHERE res = ?1 AND sid = \
                 (SELECT id FROM series_ids WHERE entity = ?2 AND signal = ?3) \
                 AND ts >= ?4 AND ts < ?5 ORDER BY ts",
            )
            .map_err(|e| self.sql(e))?;
        for res in [RAW, MINUTE, HOUR] {
            let rows: Vec<(i64, i64, f64, f64, f64)> = stmt
                .query_map(params![res, entity, signal, from, to], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .and_then(Iterator::collect)
                .map_err(|e| self.sql(e))?;
            if rows.is_empty() {
                continue;
            }
            let width = ((to - from) / points.max(1) as i64).max(1);
            let mut out: Vec<(SeriesPoint, i64, f64)> = Vec::new();
            for (ts, n, sum, min, max) in rows {
                let b = from + (ts - from) / width * width;
                match out.last_mut() {
                    Some((p, cn, cs)) if p.ts == b => {
                        *cn += n;
                        *cs += sum;
                        p.min = p.min.min(min);
                        p.max = p.max.max(max);
                    }
                    _ => out.push((
                        SeriesPoint {
                            ts: b,
                            mean: 0.0,
                            min,
                            max,
                        },
                        n,
                        sum,
                    )),
                }
            }
            let pts = out
                .into_iter()
                .map(|(mut p, n, s)| {
                    p.mean = s / n.max(1) as f64;
                    p
                })
                .collect();
            return Ok((res, pts));
        }
        Ok((RAW, Vec::new()))
    }

    /// Entities with at least `min` incidents opened since `since_ms`,
    /// most incidents first (workload symptoms, which are not hardware,
    /// are left out).
    pub fn offenders(
        &self,
        since_ms: i64,
        min: u64,
        limit: usize,
    ) -> Result<Vec<Offender>, HistoryError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT entity, host, group_concat(DISTINCT kind), COUNT(*), MIN(opened_ms), MAX(opened_ms), \
                 SUM(COALESCE(resolved_ms, updated_ms) - opened_ms) FROM incidents \
                 WHERE opened_ms >= ?1 AND kind NOT IN ('job_slowdown', 'inference_latency', 'straggler') \
                 GROUP BY entity HAVING COUNT(*) >= ?2 \
                 ORDER BY COUNT(*) DESC, MAX(opened_ms) DESC LIMIT ?3",
            )
            .map_err(|e| self.sql(e))?;
        // Saturating: `min` past i64 is "more than any entity has", not
        // (wrapped to -1) "at least -1"; a `limit` past i64 is no limit.
        let min = i64::try_from(min).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        stmt.query_map(params![since_ms, min, limit], |r| {
            let kinds: String = r.get(2)?;
            Ok(Offender {
                entity: r.get(0)?,
                host: r.get(1)?,
                kinds: kinds.split(',').map(str::to_string).collect(),
                incidents: r.get::<_, i64>(3)?.max(0) as u64,
                first_ms: r.get(4)?,
                last_ms: r.get(5)?,
                open_s: r.get::<_, Option<i64>>(6)?.unwrap_or(0).max(0) as f64 / 1000.0,
            })
        })
        .and_then(Iterator::collect)
        .map_err(|e| self.sql(e))
    }

    /// Rows per resolution (raw, minute, hour) and incidents, for metrics and tests.
    pub fn counts(&self) -> Result<[u64; 4], HistoryError> {
        let mut out = [0u64; 4];
        for (i, res) in [RAW, MINUTE, HOUR].into_iter().enumerate() {
            out[i] = self
                .conn
                .query_row("SELECT COUNT(*) FROM series WHERE res = ?1", [res], |r| {
                    r.get::<_, i64>(0)
                })
                .map_err(|e| self.sql(e))?
                .max(0) as u64;
        }
        out[3] = self
            .conn
            .query_row("SELECT COUNT(*) FROM incidents", [], |r| r.get::<_, i64>(0))
            .map_err(|e| self.sql(e))?
            .max(0) as u64;
        Ok(out)
    }
}

fn row_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<IncidentRow> {
    Ok(IncidentRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        entity: r.get(2)?,
        host: r.get(3)?,
        state: r.get(4)?,
        opened_ms: r.get(5)?,
        updated_ms: r.get(6)?,
        resolved_ms: r.get(7)?,
        confidence: r.get(8)?,
        evidence: list_of(&r.get::<_, String>(9)?),
        jobs: list_of(&r.get::<_, String>(10)?),
        runbook: r.get(11)?,
    })
}

/// Corrupt files, unwritable files and other failures, told apart.
pub(super) fn classify(path: &Path, e: &rusqlite::Error) -> HistoryError {
    use rusqlite::ErrorCode as C;
    let detail = e.to_string();
    match e.sqlite_error_code() {
        Some(C::NotADatabase | C::DatabaseCorrupt) => HistoryError::Corrupt {
            path: path.to_path_buf(),
            detail,
        },
        Some(
            C::ReadOnly | C::CannotOpen | C::PermissionDenied | C::DiskFull | C::SystemIoFailure,
        ) => HistoryError::Unwritable {
            path: path.to_path_buf(),
            detail,
        },
        _ => HistoryError::Sql {
            path: path.to_path_buf(),
            detail,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offenders_min_past_i64_matches_no_entity() {
        let path =
            std::env::temp_dir().join(format!("faultline-offenders-min-{}.db", std::process::id()));
        let mut st = Store::open(&path, &HistoryConfig::default()).expect("open");
        let ups: Vec<CandidateUpdate> = (0..2)
            .map(|i| CandidateUpdate {
                ts_unix_ms: 1_700_000_000_000 + i * 60_000,
                incident_id: format!("inc-{i}"),
                state: "opened".into(),
                kind: "ib_link_degraded".into(),
                entity: "n017/mlx5_2/1".into(),
                confidence: 0.9,
                ..CandidateUpdate::default()
            })
            .collect();
        st.write(&ups, &[]).expect("write");
        let at_least = |min| st.offenders(1, min, 10).expect("offenders");
        let two = at_least(2);
        assert_eq!(two.len(), 1);
        assert_eq!(
            (two[0].entity.as_str(), two[0].incidents),
            ("n017/mlx5_2/1", 2)
        );
        assert!(at_least(3).is_empty());
        // u64::MAX once wrapped to -1 in SQL: every entity matched.
        assert!(at_least(u64::MAX).is_empty());
        // A limit past i64 is no limit (it once wrapped to -1, too).
        assert_eq!(st.offenders(1, 1, usize::MAX).expect("offenders").len(), 1);
        drop(st);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
