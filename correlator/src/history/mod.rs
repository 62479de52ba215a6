//! Incident history and per-entity series in an embedded SQLite database
//! (docs/history.md): the engine task hands incident updates and window
//! samples to a writer thread through a bounded queue (a full queue drops
//! and counts, never blocks ingest); the web UI, the CLI and restart
//! recovery read through [`store::Store`].
pub mod config;
pub mod journal;
pub mod recorder;
pub mod report;
pub mod rollup;
pub mod samples;
pub mod store;
pub mod usage;
mod writer;

pub use config::HistoryConfig;
pub use recorder::Recorder;
pub use store::{
    acks::AckRow, FileState, HistoryError, IncidentFilter, IncidentRow, Offender, SeriesPoint,
    Store,
};

/// Resolutions of the series, in milliseconds (0 = raw, one row per window).
pub const RAW: i64 = 0;
pub const MINUTE: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;

pub use vocab::entity::host_of;

/// The history of a running correlator: the writer, a reader for the API,
/// and the open incidents restored into the engine.
pub struct Opened {
    pub recorder: Recorder,
    pub reader: std::sync::Arc<std::sync::Mutex<Store>>,
    pub restored: usize,
    pub writer: std::thread::JoinHandle<()>,
}

impl Opened {
    /// The open incidents as stored (each as last updated, under its id),
    /// for a process without an engine (the fleet view): unlike the
    /// engine's restore, incidents of one entity in several clusters are
    /// all kept.
    pub fn open_incidents(&self) -> Result<Vec<proto::v1::CandidateUpdate>, HistoryError> {
        let st = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(st
            .open_incidents()?
            .into_iter()
            .map(IncidentRow::into_update)
            .collect())
    }
}

/// Opens `path` (a corrupt or unwritable file is an error here, at start),
/// opens its incident journal and writes what the journal holds that the
/// database lacks (a crash while the disk was full), restores the open
/// incidents into `engine` — the journal's over the database's, when the
/// database still cannot take them — and starts the writer.
pub fn open(
    path: &std::path::Path,
    cfg: &HistoryConfig,
    engine: &mut crate::engine::Engine,
) -> Result<Opened, HistoryError> {
    let mut store = Store::open(path, cfg)?;
    let (journal, replay) = open_journal(&mut store, path, cfg)?;
    let mut open: Vec<(String, proto::v1::CandidateUpdate)> = store
        .open_incidents()?
        .into_iter()
        .map(|r| (r.id.clone(), r.into_update()))
        .collect();
    for (_, u) in &replay {
        open.retain(|(id, _)| *id != u.incident_id);
        if u.state != vocab::UpdateState::Resolved.as_str() {
            open.push((u.incident_id.clone(), u.clone()));
        }
    }
    let mut restored = 0;
    for (_, u) in open {
        let ok = engine.incidents.restore(crate::engine::incidents::Stored {
            id: u.incident_id,
            kind: u.kind,
            entity: u.entity,
            confidence: u.confidence,
            evidence: u.evidence,
            jobs: u.affected_jobs,
            runbook: u.runbook,
            updated_ms: u.ts_unix_ms,
            cluster: u.cluster,
            severity: u.severity,
        });
        restored += usize::from(ok);
    }
    let reader = std::sync::Arc::new(std::sync::Mutex::new(Store::open_reader(path, cfg)?));
    let start = recorder::Start {
        reader: Some(reader.clone()),
        journal,
        replay,
    };
    let (recorder, writer) =
        Recorder::start_with(store, cfg.queue, start).map_err(|e| HistoryError::Sql {
            path: path.to_path_buf(),
            detail: format!("cannot start the writer thread: {e}"),
        })?;
    Ok(Opened {
        recorder,
        reader,
        restored,
        writer,
    })
}

/// The incident journal of `path` and the updates it holds that `store`
/// lacks, written into `store` now when it can take them (then none are
/// returned). A journal that cannot be opened is logged and done without:
/// incidents are still detected and sent, only not journaled.
#[allow(clippy::type_complexity)]
fn open_journal(
    store: &mut Store,
    path: &std::path::Path,
    cfg: &HistoryConfig,
) -> Result<
    (
        Option<journal::Journal>,
        Vec<(u64, proto::v1::CandidateUpdate)>,
    ),
    HistoryError,
> {
    let committed = store.journal_seq()?;
    let (mut j, replay) = match journal::Journal::open(path, cfg.journal_bytes, committed) {
        Ok(x) => x,
        Err(e) => {
            metrics::counter!(crate::telemetry::HISTORY_JOURNAL_ERRORS.name).increment(1);
            tracing::error!(
                journal = %journal::path_of(path).display(),
                error = %e,
                "incident journal unavailable: incident updates are sent without it, and a disk fault followed by a crash can lose them"
            );
            return Ok((None, Vec::new()));
        }
    };
    let Some(last) = replay.last().map(|(s, _)| *s) else {
        return Ok((Some(j), replay));
    };
    let ups: Vec<_> = replay.iter().map(|(_, u)| u.clone()).collect();
    match store.write_journaled(&ups, &[], Some(last)) {
        Ok(()) => {
            j.committed(last);
            tracing::warn!(
                updates = ups.len(),
                "incident updates the database lacked (a crash while it could not be written) replayed from the incident journal"
            );
            Ok((Some(j), Vec::new()))
        }
        Err(e) => {
            tracing::error!(
                error = %e,
                updates = ups.len(),
                "incident updates from the incident journal cannot be written yet; restored from the journal and kept there"
            );
            Ok((Some(j), replay))
        }
    }
}
