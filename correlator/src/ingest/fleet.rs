//! One fleet view over the shards: every shard publishes its incident
//! updates to the `FAULTLINE_INCIDENTS` stream (subject
//! `faultline.incidents.<consumer>`), and `faultline-correlator fleet`
//! consumes all of them into one open list, one history, one web UI and
//! one Alertmanager pusher — whichever shard raised an incident, and
//! whichever process of the shard (active or standby) holds it, since the
//! standby keeps the ids.
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_nats::jetstream::{self, consumer};
use prost::Message as _;
use proto::v1::CandidateUpdate;
use tokio::sync::broadcast;
use tokio_stream::StreamExt as _;

/// The incidents stream's configuration (whichever side creates it).
fn stream_config(replicas: usize) -> jetstream::stream::Config {
    jetstream::stream::Config {
        name: vocab::nats::INCIDENTS_STREAM.into(),
        subjects: vec![vocab::nats::stream_subjects(vocab::nats::INCIDENTS_PREFIX)],
        storage: jetstream::stream::StorageType::File,
        max_age: Duration::from_secs(vocab::nats::INCIDENTS_MAX_AGE_S),
        num_replicas: replicas.max(1),
        ..Default::default()
    }
}

async fn connect(url: &str, name: &str) -> Option<jetstream::Context> {
    match super::nats::connect(url, name).await {
        Ok(js) => Some(js),
        Err(e) => {
            tracing::warn!(url, error = %e, "NATS unreachable");
            None
        }
    }
}

/// A shard's side: publishes every update of its engine. An update that
/// cannot be stored (NATS down past the client's buffering) is counted in
/// `faultline_nats_incident_updates_lost_total` and logged.
pub fn publish_updates(
    url: String,
    consumer: String,
    replicas: usize,
    mut updates: broadcast::Receiver<CandidateUpdate>,
) {
    tokio::spawn(async move {
        let subject = format!("{}.{consumer}", vocab::nats::INCIDENTS_PREFIX);
        let mut js = None;
        loop {
            let u = match updates.recv().await {
                Ok(u) => u,
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    metrics::counter!("faultline_nats_incident_updates_lost_total").increment(n);
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if js.is_none() {
                js = connect(&url, "faultline-correlator-incidents").await;
                if let Some(j) = &js {
                    if let Err(e) = j.get_or_create_stream(stream_config(replicas)).await {
                        tracing::warn!(error = %e, "incidents stream");
                    }
                }
            }
            let stored = match &js {
                Some(j) => match j.publish(subject.clone(), u.encode_to_vec().into()).await {
                    Ok(ack) => tokio::time::timeout(Duration::from_secs(5), ack)
                        .await
                        .is_ok_and(|r| r.is_ok()),
                    Err(_) => false,
                },
                None => false,
            };
            if !stored {
                js = None;
                metrics::counter!("faultline_nats_incident_updates_lost_total").increment(1);
                tracing::warn!(incident = %u.incident_id, "incident update not stored in NATS (the fleet view misses it)");
            }
        }
    });
}

/// The fleet's side: consumes every shard's updates (durable consumer
/// `durable`) into the open list and the broadcast the history, web UI and
/// Alertmanager pusher read. Reconnects until the process ends.
pub fn consume(
    url: String,
    durable: String,
    replicas: usize,
    open: Arc<Mutex<Vec<CandidateUpdate>>>,
    updates: broadcast::Sender<CandidateUpdate>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = session(&url, &durable, replicas, &open, &updates).await {
                tracing::warn!(url = %url, error = %e, "fleet: incidents stream interrupted; reconnecting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

async fn session(
    url: &str,
    durable: &str,
    replicas: usize,
    open: &Mutex<Vec<CandidateUpdate>>,
    updates: &broadcast::Sender<CandidateUpdate>,
) -> Result<(), String> {
    let js = connect(url, "faultline-fleet")
        .await
        .ok_or("NATS unreachable")?;
    let stream = js
        .get_or_create_stream(stream_config(replicas))
        .await
        .map_err(|e| e.to_string())?;
    let c: consumer::PullConsumer = stream
        .get_or_create_consumer(
            durable,
            consumer::pull::Config {
                durable_name: Some(durable.into()),
                ack_policy: consumer::AckPolicy::Explicit,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut msgs = c.messages().await.map_err(|e| e.to_string())?;
    tracing::info!(
        url,
        durable,
        "fleet: consuming every shard's incident updates"
    );
    while let Some(m) = msgs.next().await {
        let m = m.map_err(|e| e.to_string())?;
        match CandidateUpdate::decode(m.payload.clone()) {
            Ok(u) => crate::subscribe::publish(open, updates, vec![u], None),
            Err(e) => {
                tracing::warn!(subject = %m.subject, error = %e, "not an incident update; dropped")
            }
        }
        if let Err(e) = m.ack().await {
            tracing::debug!(error = %e, "ack failed (redelivered)");
        }
    }
    Ok(())
}
