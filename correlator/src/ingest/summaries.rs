//! The shards' mergeable summaries through JetStream: each shard puts its
//! latest summary ([`crate::engine::fleet::Summary`]) in the key-value
//! bucket `faultline_summaries` under `<stream>.<consumer>`, and watches
//! the keys of its stream: the other shards of the same windows stream
//! (one cluster's fleet) merged are its engine's [`Remote`].
//!
//! A shard publishes when its engine has drained its queue (once a slot of
//! live windows) and at least every second under a backlog, never more
//! often than every [`MIN_GAP`] (a summary walks every entity: windows
//! trickling in one by one must not cost a walk each); a summary put
//! more than [`STALE`] ago (a shard stopped and not taken over) is left out
//! of the merge. So a shard judges window `t` against its peers as of
//! their latest published state, about one window behind.
//!
//! The same link writes the engine's baselines for a standby
//! ([`crate::engine::handover`]) to the `faultline_baselines` bucket, one
//! key per host, every `--nats-baselines-s`.
use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use async_nats::jetstream::kv;
use tokio::sync::watch;
use tokio_stream::StreamExt as _;

use super::shard::{kv_key, ShardError, BASELINES, BASELINES_AGE};
use crate::engine::{
    fleet::{Remote, Summary},
    handover::HostBaselines,
    Engine,
};

const BUCKET: &str = "faultline_summaries";
/// A summary older than this (wall time of its put) is left out.
pub const STALE: Duration = Duration::from_secs(30);
/// Under a backlog, a summary at least this often.
const EVERY: Duration = Duration::from_secs(1);
/// Summaries at most this often; windows taken since the last are
/// summarized at the next tick of the engine task.
pub const MIN_GAP: Duration = Duration::from_millis(100);

/// The engine task's end: the merged peers in, its own summary out.
pub struct FleetLink {
    shard: String,
    remote: watch::Receiver<Option<Arc<Remote>>>,
    out: watch::Sender<Option<Summary>>,
    published: Instant,
    /// Windows the engine has taken, and at the latest summary.
    windows: u64,
    summarized: u64,
    /// The engine's baselines out, every `every` (zero: never).
    baselines: watch::Sender<Option<Arc<Vec<HostBaselines>>>>,
    every: Duration,
    /// Windows taken at the latest snapshot, and when.
    snapped_at: u64,
    snapped: Instant,
}

impl crate::subscribe::ShardLink for FleetLink {
    /// The peers' merge when it changed since the last call.
    fn remote_changed(&mut self) -> Option<Option<Arc<Remote>>> {
        if self.remote.has_changed().unwrap_or(false) {
            Some(self.remote.borrow_and_update().clone())
        } else {
            None
        }
    }

    /// Counts a window taken; publishes the engine's summary when its
    /// queue is drained (`idle`) or a second has passed, at most every
    /// [`MIN_GAP`].
    fn taken(&mut self, idle: bool, engine: &Engine) {
        self.windows += 1;
        let since = self.published.elapsed();
        if (idle && since >= MIN_GAP) || since >= EVERY {
            self.summarize(engine);
        }
    }

    fn tick_every(&self) -> Duration {
        MIN_GAP
    }

    /// The windows taken since the last summary, summarized; the
    /// baselines, when due.
    fn tick(&mut self, engine: &Engine) {
        if self.summarized != self.windows && self.published.elapsed() >= MIN_GAP {
            self.summarize(engine);
        }
        if !self.every.is_zero()
            && self.snapped_at != self.windows
            && self.snapped.elapsed() >= self.every
        {
            self.baselines
                .send_replace(Some(Arc::new(engine.baselines())));
            self.snapped_at = self.windows;
            self.snapped = Instant::now();
        }
    }
}

impl FleetLink {
    fn summarize(&mut self, engine: &Engine) {
        self.out
            .send_replace(Some(engine.summary(&self.shard, self.windows)));
        self.published = Instant::now();
        self.summarized = self.windows;
    }
}

/// Starts the publisher and the watcher of `<stream>.<consumer>`'s peers,
/// and the baselines' writer (every `baselines_every`; zero: off).
pub async fn start(
    js: async_nats::jetstream::Context,
    (stream, consumer): (&str, &str),
    replicas: usize,
    baselines_every: Duration,
) -> Result<FleetLink, ShardError> {
    let store = super::shard::bucket(&js, BUCKET, Duration::from_secs(3600), replicas).await?;
    let kept = super::shard::bucket(&js, BASELINES, BASELINES_AGE, replicas).await?;
    let (baselines, snaps) = watch::channel(None);
    tokio::spawn(write_baselines(kept, consumer.to_string(), snaps));
    let me = format!("{stream}.{consumer}");
    let (out, mut out_rx) = watch::channel::<Option<Summary>>(None);
    let (remote_tx, remote) = watch::channel(None);
    let put = store.clone();
    let key = me.clone();
    tokio::spawn(async move {
        while out_rx.changed().await.is_ok() {
            let Some(mut s) = out_rx.borrow_and_update().clone() else {
                continue;
            };
            s.sent_ms = vocab::time::now_unix_ms();
            let body = serde_json::to_vec(&s).unwrap_or_default();
            if let Err(e) = put.put(&key, body.into()).await {
                metrics::counter!(crate::telemetry::FLEET_PUBLISH_ERRORS.name).increment(1);
                tracing::warn!(error = %e, "summary not published (the other shards judge without this one's part)");
            }
        }
    });
    let pattern = format!("{stream}.*");
    tokio::spawn(async move {
        loop {
            if let Err(e) = watch_peers(&store, &pattern, &me, &remote_tx).await {
                tracing::warn!(error = %e, "shard summaries: watch interrupted; again in 1 s");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    Ok(FleetLink {
        shard: consumer.to_string(),
        remote,
        out,
        published: Instant::now(),
        windows: 0,
        summarized: 0,
        baselines,
        every: baselines_every,
        snapped_at: 0,
        snapped: Instant::now(),
    })
}

/// Writes each snapshot, one key per host (`<consumer>.<host>`); a put
/// that fails is counted and the next snapshot writes it again.
async fn write_baselines(
    store: kv::Store,
    consumer: String,
    mut snaps: watch::Receiver<Option<Arc<Vec<HostBaselines>>>>,
) {
    while snaps.changed().await.is_ok() {
        let Some(all) = snaps.borrow_and_update().clone() else {
            continue;
        };
        for h in all.iter() {
            let key = format!("{consumer}.{}", kv_key(&h.host));
            let body = serde_json::to_vec(h).unwrap_or_default();
            if let Err(e) = store.put(&key, body.into()).await {
                metrics::counter!(crate::telemetry::NATS_STATE_ERRORS.name).increment(1);
                tracing::warn!(key = %key, error = %e, "baselines not written to NATS");
            }
        }
    }
}

/// Keeps `tx` the merge of the fresh peer summaries under `pattern`
/// (leaving out `me`), until the watch ends.
async fn watch_peers(
    store: &kv::Store,
    pattern: &str,
    me: &str,
    tx: &watch::Sender<Option<Arc<Remote>>>,
) -> Result<(), String> {
    let mut w = store.watch(pattern).await.map_err(|e| e.to_string())?;
    let mut peers: HashMap<String, Summary> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            e = w.next() => {
                let Some(e) = e else { return Ok(()) };
                let e = e.map_err(|e| e.to_string())?;
                if e.key == me {
                    continue;
                }
                match (&e.operation, serde_json::from_slice::<Summary>(&e.value)) {
                    (kv::Operation::Put, Ok(s)) => {
                        peers.insert(e.key.clone(), s);
                    }
                    (kv::Operation::Put, Err(err)) => {
                        tracing::warn!(key = %e.key, error = %err, "shard summary unreadable; left out");
                        peers.remove(&e.key);
                    }
                    _ => {
                        peers.remove(&e.key);
                    }
                }
            }
            _ = tick.tick() => {}
        }
        let now = vocab::time::now_unix_ms();
        let fresh = peers
            .values()
            .filter(|s| now - s.sent_ms <= STALE.as_millis() as i64);
        let r = Remote::of(fresh);
        metrics::gauge!(crate::telemetry::FLEET_PEERS.name).set(r.shards as f64);
        let next = (r.shards > 0).then(|| Arc::new(r));
        tx.send_if_modified(|cur| {
            let changed = cur.as_deref() != next.as_deref();
            if changed {
                *cur = next;
            }
            changed
        });
    }
}
