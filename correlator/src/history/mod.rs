//! Incident history and per-entity series in an embedded SQLite database
//! (docs/history.md): the engine task hands incident updates and window
//! samples to a writer thread through a bounded queue (a full queue drops
//! and counts, never blocks ingest); the web UI, the CLI and restart
//! recovery read through [`store::Store`].
pub mod config;
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
/// restores its open incidents into `engine` and starts the writer.
pub fn open(
    path: &std::path::Path,
    cfg: &HistoryConfig,
    engine: &mut crate::engine::Engine,
) -> Result<Opened, HistoryError> {
    let store = Store::open(path, cfg)?;
    let mut restored = 0;
    for r in store.open_incidents()? {
        let ok = engine.incidents.restore(crate::engine::incidents::Stored {
            id: r.id,
            kind: r.kind,
            entity: r.entity,
            confidence: r.confidence,
            evidence: r.evidence,
            jobs: r.jobs,
            runbook: r.runbook,
            updated_ms: r.updated_ms,
            cluster: r.cluster,
        });
        restored += usize::from(ok);
    }
    let reader = std::sync::Arc::new(std::sync::Mutex::new(Store::open_reader(path, cfg)?));
    let (recorder, writer) =
        Recorder::start_with(store, cfg.queue, Some(reader.clone())).map_err(|e| {
            HistoryError::Sql {
                path: path.to_path_buf(),
                detail: format!("cannot start the writer thread: {e}"),
            }
        })?;
    Ok(Opened {
        recorder,
        reader,
        restored,
        writer,
    })
}
