//! The engine task and the `Candidates` service: accepted windows flow into
//! one engine (the state owner); its updates are broadcast to subscribers,
//! each with its own filter; `OpenIncidents` answers from a shared snapshot.
use std::{
    pin::Pin,
    sync::{Arc, Mutex},
};

use proto::v1::{
    candidates_server::Candidates, CandidateUpdate, OpenIncidentsReply, OpenIncidentsRequest,
    SubscribeRequest, Window,
};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::{wrappers::BroadcastStream, Stream, StreamExt as _};
use tonic::{Request, Response, Status};

use crate::{engine::Engine, history};

/// What the engine task feeds besides subscribers.
#[derive(Clone, Default)]
pub struct Hooks {
    /// The history writer: each window's samples and every update.
    pub history: Option<history::Recorder>,
}

/// Under a backlog, the `OpenIncidents` snapshot is at most this stale.
const SNAPSHOT_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Runs the engine until `rx` closes.
pub fn spawn_engine(
    engine: Engine,
    rx: mpsc::Receiver<Window>,
    updates: broadcast::Sender<CandidateUpdate>,
    open: Arc<Mutex<Vec<CandidateUpdate>>>,
) -> tokio::task::JoinHandle<()> {
    spawn_engine_with(engine, rx, updates, open, Hooks::default())
}

/// [`spawn_engine`] that also records history and the correlator's metrics.
pub fn spawn_engine_with(
    mut engine: Engine,
    mut rx: mpsc::Receiver<Window>,
    updates: broadcast::Sender<CandidateUpdate>,
    open: Arc<Mutex<Vec<CandidateUpdate>>>,
    hooks: Hooks,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut sampler = history::samples::Sampler::default();
        if let Ok(mut o) = open.lock() {
            *o = engine.open();
            crate::telemetry::open_incidents(&o);
        }
        let mut dirty = false;
        let mut snapped = std::time::Instant::now();
        while let Some(w) = rx.recv().await {
            let ups = engine.ingest(&w);
            crate::telemetry::window(&w);
            if let Some(h) = &hooks.history {
                h.samples(sampler.window(&w, &engine));
                h.usage(w.end_unix_ms, w.usage.clone());
                metrics::counter!("faultline_history_unbanded_total").absolute(sampler.unbanded);
                for u in &ups {
                    h.update(u);
                }
            }
            // The snapshot costs O(open incidents): rebuilt when the queue
            // is drained (so it is current whenever the engine is idle) or
            // at most every SNAPSHOT_EVERY under a sustained backlog, not
            // after every window with an update.
            dirty |= !ups.is_empty();
            if dirty && (rx.is_empty() || snapped.elapsed() >= SNAPSHOT_EVERY) {
                if let Ok(mut o) = open.lock() {
                    *o = engine.open();
                    crate::telemetry::open_incidents(&o);
                }
                dirty = false;
                snapped = std::time::Instant::now();
            }
            for u in ups {
                tracing::info!(kind = %u.kind, entity = %u.entity, state = %u.state, confidence = u.confidence, "candidate");
                // No subscribers is fine.
                let _ = updates.send(u);
            }
        }
    })
}

pub struct CandidatesService {
    pub updates: broadcast::Sender<CandidateUpdate>,
    pub open: Arc<Mutex<Vec<CandidateUpdate>>>,
}

/// Whether `u` passes a subscriber's filter.
pub fn matches(f: &SubscribeRequest, u: &CandidateUpdate) -> bool {
    (f.kinds.is_empty() || f.kinds.contains(&u.kind))
        && (f.host.is_empty()
            || u.entity == f.host
            || u.entity.starts_with(&format!("{}/", f.host)))
        && (f.job.is_empty() || u.affected_jobs.contains(&f.job))
        && (u.state == vocab::UpdateState::Resolved.as_str() || u.confidence >= f.min_confidence)
}

type UpdateStream = Pin<Box<dyn Stream<Item = Result<CandidateUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl Candidates for CandidatesService {
    type SubscribeStream = UpdateStream;

    async fn subscribe(
        &self,
        req: Request<SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let f = req.into_inner();
        if !(0.0..=1.0).contains(&f.min_confidence) {
            return Err(Status::invalid_argument(
                "min_confidence must be within 0..=1",
            ));
        }
        let rx = self.updates.subscribe();
        let s = BroadcastStream::new(rx).filter_map(move |r| match r {
            Ok(u) if matches(&f, &u) => Some(Ok(u)),
            Ok(_) => None,
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => Some(Err(
                Status::resource_exhausted(format!("subscriber too slow: {n} updates skipped")),
            )),
        });
        Ok(Response::new(Box::pin(s)))
    }

    async fn open_incidents(
        &self,
        _req: Request<OpenIncidentsRequest>,
    ) -> Result<Response<OpenIncidentsReply>, Status> {
        let incidents = self.open.lock().map(|o| o.clone()).unwrap_or_default();
        Ok(Response::new(OpenIncidentsReply { incidents }))
    }
}
