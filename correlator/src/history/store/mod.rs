//! The SQLite database: schema, writes (incident updates and samples),
//! rollups raw → 1 min → 1 h, retention per resolution, the disk budget,
//! and the queries behind the web API and the CLI.
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension as _};
use serde::Serialize;

use std::collections::HashMap;

use super::{
    rollup::{Agg, Buckets},
    HistoryConfig, HOUR, MINUTE, RAW,
};

pub mod acks;
mod maintain;
mod query;
pub mod schema;
mod write;

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
    #[error("history database {path} has schema version {found}, newer than this correlator's {supported}: run the newer correlator (or `history` CLI) that wrote it, or move the file aside to start a new one")]
    Newer {
        path: PathBuf,
        found: i64,
        supported: i64,
    },
    #[error("history database {path}: migrating the schema to version {to} ({what}) failed, the file is unchanged: {detail}")]
    Migration {
        path: PathBuf,
        to: i64,
        what: &'static str,
        detail: String,
    },
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
    /// The cluster label (empty: unnamed).
    pub cluster: String,
    /// `critical`, `warning` or `info` (empty: stored before rating).
    pub severity: String,
}

impl IncidentRow {
    /// The row as an incident's latest update (state `opened`).
    pub fn into_update(self) -> proto::v1::CandidateUpdate {
        proto::v1::CandidateUpdate {
            ts_unix_ms: self.updated_ms,
            incident_id: self.id,
            state: "opened".into(),
            kind: self.kind,
            entity: self.entity,
            confidence: self.confidence,
            evidence: self.evidence,
            affected_jobs: self.jobs,
            runbook: self.runbook,
            cluster: self.cluster,
            severity: self.severity,
        }
    }
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
    /// Only this cluster's (empty: all).
    pub cluster: String,
    /// Only this severity's (empty: all).
    pub severity: String,
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
        let (from, to) = schema::migrate(&store.conn, path)?;
        metrics::gauge!(crate::telemetry::HISTORY_SCHEMA_VERSION.name).set(to as f64);
        if from != to {
            tracing::info!(path = %path.display(), from, to, "history schema upgraded");
        }
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
        // An older file is brought up to date (the writer may not have run
        // since an upgrade); a newer one is refused.
        schema::migrate(&store.conn, path)?;
        Ok(store)
    }

    /// An empty in-memory database standing in for a reader while its file
    /// is reopened (queries answer nothing rather than read a deleted file).
    pub fn placeholder(path: &Path, cfg: &HistoryConfig) -> Result<Self, HistoryError> {
        let conn = Connection::open_in_memory().map_err(|e| classify(path, &e))?;
        let mut store = Self::with(conn, path, cfg);
        store.ident = None;
        schema::migrate(&store.conn, path)?;
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

    /// The incident journal's highest seq in the database (0: none).
    pub fn journal_seq(&self) -> Result<u64, HistoryError> {
        self.meta("journal_seq")
            .map(|v| u64::try_from(v).unwrap_or(0))
    }

    fn meta(&self, key: &str) -> Result<i64, HistoryError> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map(Option::unwrap_or_default)
            .map_err(|e| self.sql(e))
    }
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
    use proto::v1::CandidateUpdate;

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
