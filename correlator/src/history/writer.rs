//! The writer thread's state: it commits what the recorder queues and keeps
//! the open incidents through any single disk fault.
//!
//! - A transaction that fails on a disk fault (full, read-only, I/O error)
//!   keeps its incident updates in a bounded backlog, retried with the next
//!   transaction and at least every second; past the bound the oldest are
//!   dropped and counted. Samples and usage rows of a failed transaction are
//!   lost (counted as write errors).
//! - The latest state of every open incident is kept in memory and written
//!   again once a write succeeds after a fault, so an incident opened while
//!   the disk was full is in the database when the disk is back.
//! - Before every transaction (and every second) the database path is
//!   compared with the file opened (device and inode): a deleted or replaced
//!   file is closed, reopened (a deleted one is created anew) and the open
//!   incidents are written into it, counted and logged.
use std::{
    collections::{HashMap, VecDeque},
    path::PathBuf,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use proto::v1::{CandidateUpdate, JobUsage};

use super::{
    journal::Journal,
    samples::Sample,
    store::{sibling, FileState},
    HistoryConfig, HistoryError, Store,
};

/// Counters of the recorder, shared with its handles.
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Sample batches (one per window) dropped on a full queue.
    pub dropped_windows: AtomicU64,
    /// Incident updates dropped on a full queue.
    pub dropped_updates: AtomicU64,
    /// Incident updates dropped from the backlog kept through a disk fault
    /// (past its bound, or on an error retrying cannot fix).
    pub dropped_backlog: AtomicU64,
    /// Samples and updates written.
    pub written_samples: AtomicU64,
    pub written_updates: AtomicU64,
    /// Transactions that failed (their samples are lost; their incident
    /// updates are retried on a disk fault).
    pub write_errors: AtomicU64,
    /// Incident updates waiting for the disk now.
    pub backlog: AtomicU64,
    /// The database file was found deleted or replaced and reopened.
    pub reopened: AtomicU64,
    /// Rows removed by retention and the disk budget.
    pub retained_rows: AtomicU64,
    /// Incident updates not written into the incident journal (no room
    /// left while the database fails, or a write error): a crash before
    /// the database takes them loses them.
    pub journal_missed: AtomicU64,
    pub journal_errors: AtomicU64,
}

pub(super) struct Writer {
    /// None while the file cannot be (re)opened.
    store: Option<Store>,
    path: PathBuf,
    cfg: HistoryConfig,
    /// The API's reader, moved to the new file on a reopen.
    reader: Option<Arc<Mutex<Store>>>,
    stats: Arc<RecorderStats>,
    /// Incident updates not committed yet (a disk fault), oldest first.
    backlog: VecDeque<CandidateUpdate>,
    /// Bound of the backlog and of the open incidents remembered.
    cap: usize,
    /// Open incident id → (opened at, latest update).
    open: HashMap<String, (i64, CandidateUpdate)>,
    /// The open incidents must be written again (a fault lost updates, or
    /// the file is new).
    rewrite: bool,
    /// In a fault episode (logged once at its start and once at its end).
    failing: bool,
    /// Newest event time written (retention and rollups follow it).
    pub watermark: i64,
    /// The incident journal, told what the database committed.
    journal: Option<Arc<Mutex<Journal>>>,
    /// The journal's file, synced after each batch of updates.
    sync: Option<std::fs::File>,
    /// Highest journal seq in the backlog (0: none).
    backlog_seq: u64,
}

impl Writer {
    /// A writer owning `store`, remembering its open incidents; `cap`
    /// bounds the backlog and the open incidents remembered.
    pub fn new(
        store: Store,
        reader: Option<Arc<Mutex<Store>>>,
        stats: Arc<RecorderStats>,
        cap: usize,
    ) -> Self {
        let cap = cap.clamp(1024, 1 << 20);
        // Present from the start, so a rule's increase() sees the first error.
        metrics::counter!(crate::telemetry::HISTORY_WRITE_ERRORS.name).absolute(0);
        metrics::counter!(crate::telemetry::HISTORY_JOURNAL_ERRORS.name).absolute(0);
        let mut open = HashMap::new();
        for r in store
            .open_incidents()
            .unwrap_or_default()
            .into_iter()
            .take(cap)
        {
            let opened = r.opened_ms;
            let u = r.into_update();
            open.insert(u.incident_id.clone(), (opened, u));
        }
        Self {
            path: store.path().to_path_buf(),
            cfg: store.config().clone(),
            store: Some(store),
            reader,
            stats,
            backlog: VecDeque::new(),
            cap,
            open,
            rewrite: false,
            failing: false,
            watermark: 0,
            journal: None,
            sync: None,
            backlog_seq: 0,
        }
    }

    /// Takes the incident journal, its file to sync and the updates it
    /// replayed that the database lacks (written with the first commit).
    pub fn journal(
        &mut self,
        journal: Option<Arc<Mutex<Journal>>>,
        sync: Option<std::fs::File>,
        replay: Vec<(u64, CandidateUpdate)>,
    ) {
        self.journal = journal;
        self.sync = sync;
        for (seq, u) in replay {
            self.backlog_seq = self.backlog_seq.max(seq);
            self.track(&u);
            self.backlog.push_back(u);
        }
        if !self.backlog.is_empty() {
            // Written at the first idle second if nothing comes sooner.
            self.failing = true;
        }
    }

    /// Remembers the latest state of open incidents.
    fn track(&mut self, u: &CandidateUpdate) {
        if u.state == "resolved" {
            self.open.remove(&u.incident_id);
            return;
        }
        if !self.open.contains_key(&u.incident_id) && self.open.len() >= self.cap {
            // Past the bound (more open incidents than the engine keeps):
            // the least recently updated is no longer re-written.
            if let Some(old) = self
                .open
                .iter()
                .min_by_key(|(_, (_, u))| u.ts_unix_ms)
                .map(|(id, _)| id.clone())
            {
                self.open.remove(&old);
                self.drop_backlog(1);
            }
        }
        self.open
            .entry(u.incident_id.clone())
            .or_insert_with(|| (u.ts_unix_ms, u.clone()))
            .1 = u.clone();
    }

    fn drop_backlog(&self, n: usize) {
        self.stats
            .dropped_backlog
            .fetch_add(n as u64, Ordering::Relaxed);
        metrics::counter!(crate::telemetry::HISTORY_DROPPED.name, "what" => "backlog")
            .increment(n as u64);
    }

    /// Reopens the database when its path no longer names the file opened
    /// (deleted, replaced) or when an earlier reopen failed.
    fn check_file(&mut self) {
        let state = match &self.store {
            Some(s) => s.file_state(),
            None => FileState::Missing,
        };
        if state == FileState::Same {
            return;
        }
        if self.store.is_some() {
            self.stats.reopened.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::telemetry::HISTORY_REOPENED.name, "reason" => state.reason())
                .increment(1);
            tracing::error!(
                path = %self.path.display(),
                reason = state.reason(),
                open_incidents = self.open.len(),
                "history database {} while the correlator runs: reopening it and writing the open incidents into it (history before this point is in the old file only)",
                if state == FileState::Missing { "deleted" } else { "replaced" }
            );
            // Close every connection to the old file first: the last one
            // checkpoints it and removes its -wal and -shm, which a new file
            // at the same path would otherwise read as its own.
            self.store = None;
            if let Some(r) = &self.reader {
                if let Ok(p) = Store::placeholder(&self.path, &self.cfg) {
                    *r.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = p;
                }
            }
            if state == FileState::Missing && !self.path.exists() {
                for s in ["-wal", "-shm"] {
                    let _ = std::fs::remove_file(sibling(&self.path, s));
                }
            }
        }
        match Store::open(&self.path, &self.cfg) {
            Ok(s) => {
                self.store = Some(s);
                self.rewrite = true;
                if let Some(r) = &self.reader {
                    match Store::open_reader(&self.path, &self.cfg) {
                        Ok(n) => *r.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = n,
                        Err(e) => tracing::error!(error = %e, "history reader not reopened"),
                    }
                }
                tracing::info!(path = %self.path.display(), "history database reopened");
            }
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::telemetry::HISTORY_WRITE_ERRORS.name).increment(1);
                if !self.failing {
                    self.failing = true;
                    tracing::error!(error = %e, "history database cannot be reopened; keeping incident updates in memory (bounded) and retrying every second");
                }
            }
        }
    }

    /// Commits `ups` (after the backlog) and `samples` in one transaction,
    /// then `usage`; on a disk fault the updates stay in the backlog.
    pub fn commit(
        &mut self,
        ups: Vec<(u64, CandidateUpdate)>,
        samples: &[Sample],
        usage: Vec<(i64, Vec<JobUsage>)>,
    ) {
        self.check_file();
        let journaled = ups.iter().any(|(seq, _)| *seq > 0);
        let ups: Vec<CandidateUpdate> = ups
            .into_iter()
            .map(|(seq, u)| {
                self.backlog_seq = self.backlog_seq.max(seq);
                u
            })
            .collect();
        for u in &ups {
            self.watermark = self.watermark.max(u.ts_unix_ms);
            self.track(u);
        }
        if let Some(t) = samples.iter().map(|s| s.ts).max() {
            self.watermark = self.watermark.max(t);
        }
        self.backlog.extend(ups);
        let backlogged = self.backlog.len();
        let r = match self.store.as_mut() {
            None => Err(None),
            Some(store) => {
                let seq = (self.backlog_seq > 0).then_some(self.backlog_seq);
                let r = store.write_journaled(self.backlog.make_contiguous(), samples, seq);
                let r = r.and_then(|()| {
                    if !self.rewrite {
                        return Ok(());
                    }
                    let open: Vec<(i64, &CandidateUpdate)> =
                        self.open.values().map(|(t, u)| (*t, u)).collect();
                    store.rewrite_open(&open)
                });
                for (ts, rows) in &usage {
                    if let Err(e) = store.add_usage(*ts, rows) {
                        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!(crate::telemetry::HISTORY_WRITE_ERRORS.name).increment(1);
                        if r.is_ok() {
                            tracing::error!(error = %e, rows = rows.len(), "history usage write failed; these rows are lost");
                        }
                    }
                }
                r.map_err(Some)
            }
        };
        match r {
            Ok(()) => {
                self.stats
                    .written_updates
                    .fetch_add(backlogged as u64, Ordering::Relaxed);
                self.stats
                    .written_samples
                    .fetch_add(samples.len() as u64, Ordering::Relaxed);
                self.backlog.clear();
                if let Some(j) = &self.journal {
                    let mut j = j.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    j.committed(self.backlog_seq);
                    metrics::gauge!(crate::telemetry::HISTORY_JOURNAL_PENDING.name)
                        .set(j.pending() as f64);
                }
                if self.failing {
                    self.failing = false;
                    tracing::info!(
                        updates = backlogged,
                        open_incidents = self.open.len(),
                        "history writable again: backlogged incident updates written and open incidents re-written"
                    );
                }
                self.rewrite = false;
            }
            Err(e) => self.failed(e, samples.len()),
        }
        // Off the engine's path: a machine crash loses at most what was
        // journaled since the last batch.
        if let (true, Some(f)) = (journaled, &self.sync) {
            if let Err(e) = f.sync_data() {
                self.stats.journal_errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::telemetry::HISTORY_JOURNAL_ERRORS.name).increment(1);
                tracing::debug!(error = %e, "incident journal sync failed");
            }
        }
        self.stats
            .backlog
            .store(self.backlog.len() as u64, Ordering::Relaxed);
        metrics::gauge!(crate::telemetry::HISTORY_BACKLOG_UPDATES.name)
            .set(self.backlog.len() as f64);
    }

    /// A failed transaction (`None`: no database open).
    fn failed(&mut self, e: Option<HistoryError>, samples: usize) {
        self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::telemetry::HISTORY_WRITE_ERRORS.name).increment(1);
        // Whatever was lost, the open incidents are written again.
        self.rewrite = true;
        let retry = e.as_ref().is_none_or(HistoryError::is_disk);
        if !retry {
            // Not a disk fault (retrying would fail again): the updates are
            // lost, the open incidents' state is not.
            self.drop_backlog(self.backlog.len());
            self.backlog.clear();
        }
        let over = self.backlog.len().saturating_sub(self.cap);
        if over > 0 {
            self.backlog.drain(..over);
            self.drop_backlog(over);
        }
        let error = e.map_or_else(|| "no database open".to_string(), |e| e.to_string());
        if !self.failing {
            self.failing = true;
            tracing::error!(
                error = %error,
                samples,
                backlog = self.backlog.len(),
                "history write failed; samples lost, incident updates kept in memory (bounded) and retried every second"
            );
        } else {
            tracing::debug!(error = %error, backlog = self.backlog.len(), "history write still failing");
        }
    }

    /// Nothing queued for a while: notice a deleted file, retry a backlog.
    pub fn idle(&mut self) {
        self.check_file();
        if self.failing || self.rewrite || !self.backlog.is_empty() {
            self.commit(Vec::new(), &[], Vec::new());
        }
    }

    /// Rollups, retention and the disk budget; the size gauge.
    pub fn maintain(&mut self) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let r = store
            .rollup(self.watermark)
            .and_then(|()| store.retain(self.watermark));
        match r {
            Ok(gone) => {
                self.stats.retained_rows.fetch_add(gone, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::telemetry::HISTORY_WRITE_ERRORS.name).increment(1);
                if self.failing {
                    tracing::debug!(error = %e, "history rollup or retention failed");
                } else {
                    tracing::error!(error = %e, "history rollup or retention failed");
                }
            }
        }
        metrics::counter!(crate::telemetry::HISTORY_UNROLLED.name).absolute(store.unrolled());
        if let Ok(b) = store.used_bytes() {
            metrics::gauge!(crate::telemetry::HISTORY_BYTES.name).set(b as f64);
        }
    }
}
