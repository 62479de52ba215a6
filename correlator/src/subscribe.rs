//! The engine task and the `Candidates` service: accepted windows flow into
//! one engine (the state owner); its updates are broadcast to subscribers,
//! each with its own filter; `OpenIncidents` answers from a shared snapshot.
//!
//! The snapshot and the broadcast change together, under the snapshot's
//! lock ([`publish`]): a subscriber that asks for the open incidents first
//! (`with_open`) takes the snapshot and joins the broadcast under that lock,
//! so every update is either in its snapshot or in its stream, never both,
//! never neither.
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
#[derive(Default)]
pub struct Hooks {
    /// The history writer: each window's samples and every update.
    pub history: Option<history::Recorder>,
    /// A shard's link to the others' summaries (sharded on NATS).
    pub fleet: Option<Box<dyn ShardLink>>,
}

/// What a sharded engine exchanges with the other shards
/// (`ingest::summaries::FleetLink`).
pub trait ShardLink: Send {
    /// The other shards' merge, when it changed since the last call.
    fn remote_changed(&mut self) -> Option<Option<std::sync::Arc<crate::engine::fleet::Remote>>>;
    /// A window was taken (`idle`: the queue is drained).
    fn taken(&mut self, idle: bool, engine: &Engine);
    /// How often [`Self::tick`] is due.
    fn tick_every(&self) -> std::time::Duration;
    /// Whatever is due without a window: a summary of the windows taken
    /// since the last, the baselines.
    fn tick(&mut self, engine: &Engine);
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
    mut hooks: Hooks,
) -> tokio::task::JoinHandle<()> {
    // The restored open incidents are in `open` before this returns, so a
    // consumer started next (the Alertmanager pusher re-posting them after
    // a restart) cannot see an empty list.
    if let Ok(mut o) = open.lock() {
        *o = engine.open();
        crate::telemetry::open_incidents(&o);
    }
    tokio::spawn(async move {
        let mut sampler = history::samples::Sampler::default();
        let mut dirty = false;
        let mut snapped = std::time::Instant::now();
        // A shard's summaries and baselines are also due on a timer.
        let mut tick = tokio::time::interval(
            hooks
                .fleet
                .as_ref()
                .map_or(std::time::Duration::from_secs(3600), |f| f.tick_every()),
        );
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let w = tokio::select! {
                w = rx.recv() => match w {
                    Some(w) => w,
                    None => break,
                },
                _ = tick.tick() => {
                    if let Some(f) = hooks.fleet.as_mut() {
                        f.tick(&engine);
                    }
                    continue;
                }
            };
            if let Some(r) = hooks.fleet.as_mut().and_then(|f| f.remote_changed()) {
                engine.set_remote(r);
            }
            let ups = engine.ingest(&w);
            if let Some(f) = hooks.fleet.as_mut() {
                f.taken(rx.is_empty(), &engine);
            }
            crate::telemetry::window(&w);
            if let Some(h) = &hooks.history {
                h.samples(sampler.window(&w, &engine));
                h.usage(w.end_unix_ms, w.usage.clone());
                metrics::counter!(crate::telemetry::HISTORY_UNBANDED.name)
                    .absolute(sampler.unbanded);
                for u in &ups {
                    h.update(u);
                }
            }
            for u in &ups {
                tracing::info!(kind = %u.kind, entity = %u.entity, state = %u.state, confidence = u.confidence, "candidate");
            }
            // The snapshot follows every update (applied in place); the
            // engine's full list replaces it, and the gauges are set, when
            // the queue is drained or at most every SNAPSHOT_EVERY under a
            // sustained backlog: that costs O(open incidents).
            dirty |= !ups.is_empty();
            let rebuild = dirty && (rx.is_empty() || snapped.elapsed() >= SNAPSHOT_EVERY);
            publish(&open, &updates, ups, rebuild.then(|| engine.open()));
            if rebuild {
                if let Ok(o) = open.lock() {
                    crate::telemetry::open_incidents(&o);
                }
                dirty = false;
                snapped = std::time::Instant::now();
            }
        }
    })
}

/// Applies `ups` to the open snapshot (or replaces it with `full`, the
/// engine's list after them) and broadcasts them, all under the snapshot's
/// lock.
pub fn publish(
    open: &Mutex<Vec<CandidateUpdate>>,
    updates: &broadcast::Sender<CandidateUpdate>,
    ups: Vec<CandidateUpdate>,
    full: Option<Vec<CandidateUpdate>>,
) {
    if ups.is_empty() && full.is_none() {
        return;
    }
    let mut o = open
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match full {
        Some(f) => *o = f,
        None => ups.iter().for_each(|u| apply(&mut o, u)),
    }
    for u in ups {
        // No subscribers is fine.
        let _ = updates.send(u);
    }
}

/// One update applied to a list of open incidents.
fn apply(open: &mut Vec<CandidateUpdate>, u: &CandidateUpdate) {
    let at = open.iter().position(|o| o.incident_id == u.incident_id);
    match (u.state == vocab::UpdateState::Resolved.as_str(), at) {
        (true, Some(i)) => {
            open.swap_remove(i);
        }
        (true, None) => {}
        (false, Some(i)) => open[i] = u.clone(),
        (false, None) => open.push(u.clone()),
    }
}

/// Highest confidence first, then by id (the order `OpenIncidents` gives).
fn ranked(mut v: Vec<CandidateUpdate>) -> Vec<CandidateUpdate> {
    v.sort_by(|a, b| {
        b.confidence
            .total_cmp(&a.confidence)
            .then_with(|| a.incident_id.cmp(&b.incident_id))
    });
    v
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
            || u.entity.starts_with(&vocab::entity::host_prefix(&f.host)))
        && (f.job.is_empty() || u.affected_jobs.contains(&f.job))
        && (f.cluster.is_empty() || u.cluster == f.cluster)
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
        // Joined under the snapshot's lock (see [`publish`]).
        let (rx, first) = {
            let o = self
                .open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let first = if f.with_open {
                ranked(o.iter().filter(|u| matches(&f, u)).cloned().collect())
            } else {
                Vec::new()
            };
            (self.updates.subscribe(), first)
        };
        let first = tokio_stream::iter(first.into_iter().map(Ok));
        let s = first.chain(BroadcastStream::new(rx).filter_map(move |r| match r {
            Ok(u) if matches(&f, &u) => Some(Ok(u)),
            Ok(_) => None,
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => Some(Err(
                Status::resource_exhausted(format!("subscriber too slow: {n} updates skipped")),
            )),
        }));
        Ok(Response::new(Box::pin(s)))
    }

    async fn open_incidents(
        &self,
        _req: Request<OpenIncidentsRequest>,
    ) -> Result<Response<OpenIncidentsReply>, Status> {
        let incidents = ranked(self.open.lock().map(|o| o.clone()).unwrap_or_default());
        Ok(Response::new(OpenIncidentsReply { incidents }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: u32, state: &str, confidence: f64) -> CandidateUpdate {
        CandidateUpdate {
            incident_id: format!("inc-{id}"),
            state: state.into(),
            kind: "ib_link_degraded".into(),
            entity: format!("n{id:03}/mlx5_0/1"),
            confidence,
            ..Default::default()
        }
    }

    /// A subscriber joining while updates flow: its snapshot plus its stream
    /// give exactly the open set at the end (nothing missed, nothing twice).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_subscriber_with_open_misses_nothing_between_snapshot_and_stream() {
        let open = Arc::new(Mutex::new(Vec::new()));
        let (tx, _keep) = broadcast::channel(1 << 17);
        let svc = CandidatesService {
            updates: tx.clone(),
            open: open.clone(),
        };
        let (o2, t2) = (open.clone(), tx.clone());
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let producer = std::thread::spawn(move || {
            // The engine's own list, replacing the applied snapshot now and then.
            let mut model = Vec::new();
            for i in 0..40_000u32 {
                let id = i % 300;
                let state = match (i / 300) % 3 {
                    0 => "opened",
                    1 => "updated",
                    _ => "resolved",
                };
                let u = up(id, state, f64::from(i % 97) / 100.0);
                apply(&mut model, &u);
                let full = (i % 1000 == 999).then(|| ranked(model.clone()));
                publish(&o2, &t2, vec![u], full);
                if i == 5_000 {
                    let _ = started_tx.send(());
                }
            }
            // The end marker, then the final set.
            publish(&o2, &t2, vec![up(9_999, "opened", 1.0)], None);
        });
        started_rx.recv().expect("producer running");
        let mut s = svc
            .subscribe(Request::new(SubscribeRequest {
                with_open: true,
                ..SubscribeRequest::default()
            }))
            .await
            .expect("subscribe")
            .into_inner();
        let mut seen: Vec<CandidateUpdate> = Vec::new();
        let mut n = 0u64;
        while let Some(u) = s.next().await {
            let u = u.expect("not lagged");
            n += 1;
            let end = u.incident_id == "inc-9999";
            apply(&mut seen, &u);
            if end {
                break;
            }
        }
        producer.join().expect("producer");
        let want = ranked(open.lock().expect("lock").clone());
        assert_eq!(ranked(seen), want, "after {n} messages");
        assert!(n > 1, "a stream, not only the snapshot");
    }
}
