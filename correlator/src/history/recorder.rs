//! The writer thread and the bounded queue that feeds it, off the ingest
//! path: the engine task only enqueues (never waits on the disk); a full
//! queue drops samples first (the last eighth of the queue is kept for
//! incident updates) and every drop is counted. What the thread does with
//! a disk fault is in [`super::writer`].
use std::{
    sync::{atomic::Ordering, Arc, Mutex},
    time::{Duration, Instant},
};

use proto::v1::CandidateUpdate;
use tokio::sync::{mpsc, oneshot};

pub use super::writer::RecorderStats;
use super::{journal::Journal, samples::Sample, writer::Writer, Store};

/// Messages handled per transaction at most.
const BATCH: usize = 4096;
/// Rollups and retention run at most this often (and on a flush).
const MAINTAIN_EVERY: Duration = Duration::from_secs(5);
/// With nothing queued for this long, the writer checks its file and
/// retries a backlog.
const IDLE: Duration = Duration::from_secs(1);

enum Msg {
    /// An incident update and its journal seq (0: no journal).
    Update(u64, Box<CandidateUpdate>),
    Samples(Vec<Sample>),
    /// A window's usage rows and its end (unix ms).
    Usage(i64, Vec<proto::v1::JobUsage>),
    Flush(oneshot::Sender<()>),
    /// Write what is queued, close the database, stop ([`Recorder::close`]).
    Close(oneshot::Sender<()>),
}

/// Handle of the writer thread (cheap to clone).
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Msg>,
    reserve: usize,
    /// Every update is appended here before it is queued (and so before
    /// the engine task broadcasts it).
    journal: Option<Arc<Mutex<Journal>>>,
    pub stats: Arc<RecorderStats>,
}

/// What the writer thread starts with besides its database.
#[derive(Default)]
pub struct Start {
    /// The API's connection, moved to a new file when the database is
    /// found deleted or replaced.
    pub reader: Option<Arc<Mutex<Store>>>,
    /// The incident journal.
    pub journal: Option<Journal>,
    /// Journaled updates the database lacks (replayed at start), written first.
    pub replay: super::journal::Replay,
}

impl Recorder {
    /// Starts the writer thread owning `store`, with a queue of `queue` messages.
    pub fn start(
        store: Store,
        queue: usize,
    ) -> std::io::Result<(Self, std::thread::JoinHandle<()>)> {
        Self::start_with(store, queue, Start::default())
    }

    /// [`start`](Self::start) with a reader to move, a journal and what it
    /// replayed ([`Start`]).
    pub fn start_with(
        store: Store,
        queue: usize,
        start: Start,
    ) -> std::io::Result<(Self, std::thread::JoinHandle<()>)> {
        let (tx, mut rx) = mpsc::channel::<Msg>(queue.max(1));
        let stats = Arc::new(RecorderStats::default());
        let st = stats.clone();
        let sync = start.journal.as_ref().and_then(|j| j.sync_handle().ok());
        let journal = start.journal.map(|j| Arc::new(Mutex::new(j)));
        let shared = journal.clone();
        let (reader, replay) = (start.reader, start.replay);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let h = std::thread::Builder::new()
            .name("history-writer".into())
            .spawn(move || {
                let mut w = Writer::new(store, reader, st, queue);
                w.journal(shared, sync, replay);
                let mut maintained = Instant::now();
                let mut ups = Vec::new();
                let mut samples = Vec::new();
                let mut flushes = Vec::new();
                let mut usage: Vec<(i64, Vec<proto::v1::JobUsage>)> = Vec::new();
                let mut closing = None;
                while closing.is_none() {
                    let first =
                        match rt.block_on(async { tokio::time::timeout(IDLE, rx.recv()).await }) {
                            Ok(Some(m)) => m,
                            Ok(None) => break,
                            Err(_) => {
                                w.idle();
                                continue;
                            }
                        };
                    let mut next = Some(first);
                    let mut n = 0;
                    while let Some(m) = next.take() {
                        match m {
                            Msg::Update(seq, u) => ups.push((seq, *u)),
                            Msg::Samples(s) => samples.extend(s),
                            Msg::Usage(ts, rows) => usage.push((ts, rows)),
                            Msg::Flush(done) => flushes.push(done),
                            Msg::Close(done) => closing = Some(done),
                        }
                        n += 1;
                        if n < BATCH && closing.is_none() {
                            next = rx.try_recv().ok();
                        }
                    }
                    w.commit(
                        std::mem::take(&mut ups),
                        &samples,
                        std::mem::take(&mut usage),
                    );
                    samples.clear();
                    if !flushes.is_empty() || maintained.elapsed() >= MAINTAIN_EVERY {
                        maintained = Instant::now();
                        w.maintain();
                    }
                    for f in flushes.drain(..) {
                        let _ = f.send(());
                    }
                }
                match closing {
                    // Closed on purpose: the database is closed before the
                    // caller goes on (and may remove it).
                    Some(done) => {
                        drop(w);
                        let _ = done.send(());
                    }
                    // The queue closed (shutdown): a last try for a backlog.
                    None => w.idle(),
                }
            })?;
        Ok((
            Self {
                tx,
                reserve: (queue / 8).max(1),
                journal,
                stats,
            },
            h,
        ))
    }

    /// Journals an incident update, then queues it (dropped and counted
    /// only when the queue is full). Returns once the journal holds it
    /// (a write into reserved page-cache space, no fsync), so a caller that
    /// sends the update out afterwards never sends one a crash can lose.
    pub fn update(&self, u: &CandidateUpdate) {
        let Some(j) = &self.journal else {
            return self.queue(0, u);
        };
        let mut j = j.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = j.counts;
        let seq = j.append(u);
        let (missed, errors) = (
            j.counts.missed - before.missed,
            j.counts.errors - before.errors,
        );
        if missed > 0 {
            self.stats
                .journal_missed
                .fetch_add(missed, Ordering::Relaxed);
            metrics::counter!(crate::telemetry::HISTORY_DROPPED.name, "what" => "journal")
                .increment(missed);
        }
        if errors > 0 {
            self.stats
                .journal_errors
                .fetch_add(errors, Ordering::Relaxed);
            metrics::counter!(crate::telemetry::HISTORY_JOURNAL_ERRORS.name).increment(errors);
        }
        // Queued under the journal's lock: seqs reach the writer in order,
        // so the highest it commits covers every one before.
        self.queue(seq, u);
    }

    fn queue(&self, seq: u64, u: &CandidateUpdate) {
        if self
            .tx
            .try_send(Msg::Update(seq, Box::new(u.clone())))
            .is_err()
        {
            self.stats.dropped_updates.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::telemetry::HISTORY_DROPPED.name, "what" => "update")
                .increment(1);
        }
    }

    /// Queues one window's samples, unless the queue is within its reserve
    /// for incident updates (then dropped and counted).
    pub fn samples(&self, s: Vec<Sample>) {
        if s.is_empty() {
            return;
        }
        if self.tx.capacity() <= self.reserve || self.tx.try_send(Msg::Samples(s)).is_err() {
            self.stats.dropped_windows.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::telemetry::HISTORY_DROPPED.name, "what" => "window")
                .increment(1);
        }
    }

    /// Queues one window's usage rows (chargeback), unless the queue is
    /// within its reserve for incident updates (then dropped and counted).
    pub fn usage(&self, ts_ms: i64, rows: Vec<proto::v1::JobUsage>) {
        if rows.is_empty() {
            return;
        }
        if self.tx.capacity() <= self.reserve || self.tx.try_send(Msg::Usage(ts_ms, rows)).is_err()
        {
            self.stats.dropped_windows.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(crate::telemetry::HISTORY_DROPPED.name, "what" => "usage")
                .increment(1);
        }
    }

    /// Writes everything queued before, then stops the writer and closes the
    /// database; later messages are dropped and counted. For a process that
    /// removes its database next (the simulator's temporary history): a
    /// running writer would read the removal as a deleted file and reopen it.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Close(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Waits until everything queued before is written, rolled up and retained.
    pub async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}
