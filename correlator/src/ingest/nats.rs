//! Windows from NATS JetStream (`serve --nats URL`): a durable pull
//! consumer on the windows stream, filtered to this correlator's shard
//! subjects, feeds the same admission as the gRPC ingest ([`IngestState`]:
//! per-origin sequence, duplicates dropped, gaps counted) and the engine.
//! A message is acknowledged once the engine has taken its window (or it
//! was a duplicate, or refused for good), so a correlator that dies
//! mid-window leaves it to be redelivered to whoever consumes the shard
//! next. The stream is created with the collectors' settings when absent.
use std::time::Duration;

use async_nats::jetstream::{self, consumer, AckKind};
use prost::Message as _;
use proto::v1::Window;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;

use super::IngestState;

/// What to consume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsIngest {
    /// `nats://HOST:4222`.
    pub url: String,
    pub stream: String,
    /// The subject prefix the collectors publish under.
    pub prefix: String,
    /// This correlator's shards (subject tokens after the prefix); empty =
    /// every shard.
    pub shards: Vec<String>,
    /// The durable consumer's name: one per shard set, shared by the
    /// active correlator and its standby.
    pub consumer: String,
    /// Replicas of the stream and the shard buckets when this side creates
    /// them.
    pub replicas: usize,
    /// The stream's size bound when this side creates it.
    pub max_bytes: i64,
    /// How long a delivered window may go unacknowledged before it is
    /// delivered again (the shard lease's time): after a takeover, the
    /// dead holder's in-flight windows come back this long after it
    /// stopped, ahead of newer ones.
    pub ack_wait: Duration,
}

impl NatsIngest {
    /// The consumer's subject filters.
    pub fn filters(&self) -> Vec<String> {
        if self.shards.is_empty() {
            vec![vocab::nats::stream_subjects(&self.prefix)]
        } else {
            self.shards
                .iter()
                .map(|s| vocab::nats::subject(&self.prefix, s))
                .collect()
        }
    }
}

/// A JetStream context on `url` (2 s to connect), named `name` in the
/// server's connection list; every NATS connection of the correlator.
pub async fn connect(
    url: &str,
    name: &str,
) -> Result<jetstream::Context, async_nats::ConnectError> {
    let client = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(2))
        .connect(url)
        .await?;
    Ok(jetstream::new(client))
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("connecting: {0}")]
    Connect(#[from] async_nats::ConnectError),
    #[error("stream: {0}")]
    Stream(String),
    #[error("consumer: {0}")]
    Consumer(String),
    #[error("engine stopped")]
    Engine,
}

/// Starts consuming; reconnects with capped backoff until the process ends.
pub fn spawn(
    cfg: NatsIngest,
    state: IngestState,
    engine: mpsc::Sender<Window>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut wait = Duration::from_millis(100);
        let mut first = true;
        loop {
            match session(&cfg, &state, &engine, std::mem::take(&mut first)).await {
                Err(SessionError::Engine) => return,
                Err(e) => {
                    metrics::gauge!("faultline_nats_connected").set(0.0);
                    tracing::warn!(url = %cfg.url, error = %e, "NATS ingest interrupted; reconnecting");
                }
                Ok(()) => wait = Duration::from_millis(100),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    })
}

/// One connection: the stream, the durable consumer, its messages.
async fn session(
    cfg: &NatsIngest,
    state: &IngestState,
    engine: &mpsc::Sender<Window>,
    first: bool,
) -> Result<(), SessionError> {
    let js = connect(&cfg.url, "faultline-correlator").await?;
    let stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: cfg.stream.clone(),
            subjects: vec![vocab::nats::stream_subjects(&cfg.prefix)],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(vocab::nats::DUPLICATE_WINDOW_S),
            num_replicas: cfg.replicas.max(1),
            max_age: Duration::from_secs(vocab::nats::MAX_AGE_S),
            max_bytes: cfg.max_bytes,
            retention: jetstream::stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .map_err(|e| SessionError::Stream(e.to_string()))?;
    let mut filters = cfg.filters();
    let (filter_subject, filter_subjects) = if filters.len() == 1 {
        (filters.remove(0), Vec::new())
    } else {
        // Several filters need nats-server 2.10.
        (String::new(), filters)
    };
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(
            &cfg.consumer,
            consumer::pull::Config {
                durable_name: Some(cfg.consumer.clone()),
                filter_subject,
                filter_subjects,
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: cfg.ack_wait,
                // In flight at once: what a takeover waits out, and what a
                // slow engine sees delivered twice (dropped by sequence).
                max_ack_pending: 256,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| SessionError::Consumer(e.to_string()))?;
    if first {
        // A previous holder of this consumer (killed, or this process
        // before a restart) may have had windows in flight. JetStream gives
        // them out again once their ack wait has passed, before newer ones;
        // pulling earlier would take newer windows first, and the older
        // ones would then be refused as duplicates of an origin already
        // past them. So the first pull waits one ack wait.
        tokio::time::sleep(cfg.ack_wait + Duration::from_millis(200)).await;
    }
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| SessionError::Consumer(e.to_string()))?;
    metrics::gauge!("faultline_nats_connected").set(1.0);
    tracing::info!(url = %cfg.url, stream = %cfg.stream, consumer = %cfg.consumer, "consuming windows from NATS JetStream");
    while let Some(m) = messages.next().await {
        let m = m.map_err(|e| SessionError::Consumer(e.to_string()))?;
        let kind = match Window::decode(m.payload.clone()) {
            Ok(mut w) => {
                crate::finite::drop_non_finite(&mut w);
                match state.admit_stream(&w) {
                    Ok(true) => {
                        engine.send(w).await.map_err(|_| SessionError::Engine)?;
                        AckKind::Ack
                    }
                    Ok(false) => AckKind::Ack,
                    // Refused for good (counted by reason): never redelivered.
                    Err(_) => AckKind::Term,
                }
            }
            Err(e) => {
                metrics::counter!("faultline_ingest_rejected_total", "reason" => "decode")
                    .increment(1);
                tracing::warn!(subject = %m.subject, error = %e, "NATS message is not a window; dropped");
                AckKind::Term
            }
        };
        if let Err(e) = m.ack_with(kind).await {
            tracing::debug!(error = %e, "NATS ack failed (the message will be redelivered)");
        }
    }
    Ok(())
}
