//! One fleet view over the shards: every shard publishes its incident
//! updates to the `FAULTLINE_INCIDENTS` stream (subject
//! `faultline.incidents.<consumer>`), and `faultline-correlator fleet`
//! consumes all of them into one open list, one history, one web UI and
//! one Alertmanager pusher — whichever shard raised an incident, and
//! whichever process of the shard (active or standby) holds it, since the
//! standby keeps the ids. One fault raised by several shards is one
//! incident here ([`super::join`]); after a restart the view rebuilds which
//! shard incidents it had joined by reading the stream again up to where
//! its durable consumer had acknowledged, so it keeps the joined ids.
//!
//! With the credentials of `faultline-correlator nats-auth`, only shard
//! `<consumer>`'s correlator may publish under `faultline.incidents.<consumer>`,
//! and an update naming another shard's open incident by its id is
//! dropped here (`faultline_fleet_refused_total`): a shard updates and
//! resolves only its own incidents.
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_nats::jetstream::{self, consumer};
use prost::Message as _;
use proto::v1::CandidateUpdate;
use tokio::sync::broadcast;
use tokio_stream::StreamExt as _;

use super::{join::Joins, nats::Credentials};

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

async fn connect(url: &str, creds: &Credentials, name: &str) -> Option<jetstream::Context> {
    match super::nats::connect(url, creds, name).await {
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
    creds: Credentials,
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
                    metrics::counter!(crate::telemetry::NATS_INCIDENT_UPDATES_LOST.name)
                        .increment(n);
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            if js.is_none() {
                js = connect(&url, &creds, "faultline-correlator-incidents").await;
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
                metrics::counter!(crate::telemetry::NATS_INCIDENT_UPDATES_LOST.name).increment(1);
                tracing::warn!(incident = %u.incident_id, "incident update not stored in NATS (the fleet view misses it)");
            }
        }
    });
}

/// The fleet's side: consumes every shard's updates (durable consumer
/// `durable`), joined across shards, into the open list and the broadcast
/// the history, web UI and Alertmanager pusher read. Reconnects until the
/// process ends.
pub fn consume(
    url: String,
    creds: Credentials,
    durable: String,
    replicas: usize,
    open: Arc<Mutex<Vec<CandidateUpdate>>>,
    updates: broadcast::Sender<CandidateUpdate>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut joins = Joins::new(MAX_JOINED);
        let mut rebuilt = false;
        loop {
            let mut s = Session {
                url: &url,
                creds: &creds,
                durable: &durable,
                replicas,
                joins: &mut joins,
                rebuilt: &mut rebuilt,
            };
            if let Err(e) = s.run(&open, &updates).await {
                tracing::warn!(url = %url, error = %e, "fleet: incidents stream interrupted; reconnecting");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// The shard an incident update came from: its subject's last part (the
/// shard's consumer).
fn source_of(subject: &str) -> &str {
    subject
        .strip_prefix(vocab::nats::INCIDENTS_PREFIX)
        .map_or(subject, |s| s.trim_start_matches('.'))
}

/// Shard incidents the fleet view joins at most (its open incidents).
const MAX_JOINED: usize = 1 << 20;

/// One connection's consuming, with the joins kept across reconnects.
struct Session<'a> {
    url: &'a str,
    creds: &'a Credentials,
    durable: &'a str,
    replicas: usize,
    joins: &'a mut Joins,
    /// Whether the joins were rebuilt from the stream (once per process).
    rebuilt: &'a mut bool,
}

impl Session<'_> {
    async fn run(
        &mut self,
        open: &Mutex<Vec<CandidateUpdate>>,
        updates: &broadcast::Sender<CandidateUpdate>,
    ) -> Result<(), String> {
        let (url, durable) = (self.url, self.durable);
        let js = connect(url, self.creds, "faultline-fleet")
            .await
            .ok_or("NATS unreachable")?;
        let mut stream = js
            .get_or_create_stream(stream_config(self.replicas))
            .await
            .map_err(|e| e.to_string())?;
        if !*self.rebuilt {
            let n = rebuild(&mut stream, durable, self.joins).await?;
            *self.rebuilt = true;
            if n > 0 {
                tracing::info!(
                    updates = n,
                    joined_open = self.joins.len(),
                    "fleet: joins rebuilt from the incidents stream"
                );
            }
        }
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
                Ok(u) if self.joins.owned_elsewhere(source_of(&m.subject), &u) => {
                    metrics::counter!(crate::telemetry::FLEET_REFUSED.name, "reason" => "not_owner")
                        .increment(1);
                    tracing::warn!(subject = %m.subject, incident = %u.incident_id, state = %u.state, "fleet: an update for another shard's incident; dropped");
                }
                Ok(u) => {
                    let (joined, unjoined) = (self.joins.joined, self.joins.unjoined);
                    let u = self.joins.apply(source_of(&m.subject), u);
                    metrics::counter!(crate::telemetry::FLEET_JOINED.name)
                        .increment(self.joins.joined - joined);
                    metrics::counter!(crate::telemetry::FLEET_UNJOINED.name)
                        .increment(self.joins.unjoined - unjoined);
                    crate::subscribe::publish(open, updates, vec![u], None)
                }
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
}

/// Reads the stream from its start up to where `durable` had acknowledged
/// (the updates a previous process of this view already took) into
/// `joins`, publishing nothing; returns how many. Nothing when the
/// consumer is new.
async fn rebuild(
    stream: &mut jetstream::stream::Stream,
    durable: &str,
    joins: &mut Joins,
) -> Result<u64, String> {
    let floor = match stream.consumer_info(durable).await {
        Ok(i) => i.ack_floor.stream_sequence,
        Err(_) => return Ok(0),
    };
    let state = stream
        .info()
        .await
        .map_err(|e| e.to_string())?
        .state
        .clone();
    if floor == 0 || state.messages == 0 || state.first_sequence > floor {
        return Ok(0);
    }
    let c: consumer::PullConsumer = stream
        .create_consumer(consumer::pull::Config {
            deliver_policy: consumer::DeliverPolicy::All,
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let mut msgs = c.messages().await.map_err(|e| e.to_string())?;
    let mut n = 0;
    // Each message within seconds (they are stored); a stall ends the
    // rebuild with what it has.
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(5), msgs.next()).await {
        let m = m.map_err(|e| e.to_string())?;
        let (seq, pending) = m
            .info()
            .map(|i| (i.stream_sequence, i.pending))
            .map_err(|e| e.to_string())?;
        if seq > floor {
            break;
        }
        if let Ok(u) = CandidateUpdate::decode(m.payload.clone()) {
            let src = source_of(&m.subject);
            if !joins.owned_elsewhere(src, &u) {
                joins.apply(src, u);
                n += 1;
            }
        }
        if seq == floor || pending == 0 {
            break;
        }
    }
    Ok(n)
}
