//! What the run watches while it goes: every shard's incident updates as
//! they reach NATS (a core subscription beside the fleet view's durable
//! consumer), and, every [`POLL`], the windows each shard's engine has
//! taken, JetStream's storage and the fleet view's open incidents.
use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use prost::Message as _;
use proto::v1::CandidateUpdate;

use super::procs::http_get;

/// How often the poller reads the shards, the server and the fleet view.
pub const POLL: Duration = Duration::from_millis(250);

/// An incident update as it reached NATS: when, from which shard.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub shard: String,
    pub update: CandidateUpdate,
}

/// Subscribes to every shard's incident updates; they gather in the
/// returned list until the runtime stops.
pub async fn incidents(url: &str) -> Result<Arc<Mutex<Vec<Seen>>>> {
    let client = async_nats::connect(url).await?;
    let mut sub = client
        .subscribe(format!("{}.>", vocab::nats::INCIDENTS_PREFIX))
        .await?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    tokio::spawn(async move {
        use tokio_stream::StreamExt as _;
        // The client lives as long as the subscription reads.
        let _client = client;
        while let Some(m) = sub.next().await {
            let Ok(update) = CandidateUpdate::decode(m.payload.as_ref()) else {
                continue;
            };
            let shard = m.subject.rsplit('.').next().unwrap_or("").to_string();
            if let Ok(mut v) = out.lock() {
                v.push(Seen {
                    at: Instant::now(),
                    shard,
                    update,
                });
            }
        }
    });
    Ok(seen)
}

/// One poll.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub at: Option<Instant>,
    /// Windows each shard's engine has taken.
    pub consumed: Vec<u64>,
    /// JetStream's storage in use, bytes.
    pub js_storage: u64,
}

/// What the poller gathered.
#[derive(Debug, Default)]
pub struct Polled {
    pub samples: Vec<Sample>,
    /// (kind, entity) → when the fleet view first listed it open.
    pub fleet_first: BTreeMap<(String, String), Instant>,
    /// Polls of the fleet view that failed.
    pub fleet_errors: u64,
}

/// Windows each shard has taken (delivered to it and acknowledged: its
/// engine has them), by durable consumer name, and JetStream's storage,
/// from nats-server's monitoring endpoint: polling the shards' own
/// `/metrics` four times a second would bill the shards for rendering
/// 12,500 hosts' series.
pub fn jetstream(monitor: &str) -> Option<JetStream> {
    let (_, body) = http_get(monitor, "/jsz?accounts=true&streams=true&consumers=true").ok()?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let mut js = JetStream {
        storage: v["storage"].as_u64().unwrap_or(0),
        ..JetStream::default()
    };
    for a in v["account_details"].as_array().into_iter().flatten() {
        for st in a["stream_detail"].as_array().into_iter().flatten() {
            for c in st["consumer_detail"].as_array().into_iter().flatten() {
                let n = |x: &serde_json::Value| x.as_u64().unwrap_or(0);
                let delivered = n(&c["delivered"]["consumer_seq"]);
                let unacked = n(&c["num_ack_pending"]) + n(&c["num_redelivered"]);
                if let Some(name) = c["name"].as_str() {
                    js.taken
                        .insert(name.to_string(), delivered.saturating_sub(unacked));
                    js.waiting.insert(
                        name.to_string(),
                        n(&c["num_pending"]) + n(&c["num_ack_pending"]),
                    );
                }
            }
        }
    }
    Some(js)
}

/// What nats-server's monitoring says of the run's stream.
#[derive(Debug, Default)]
pub struct JetStream {
    /// Per durable consumer: windows taken (delivered and acknowledged).
    pub taken: BTreeMap<String, u64>,
    /// Per durable consumer: windows stored and not yet taken.
    pub waiting: BTreeMap<String, u64>,
    /// Storage in use, bytes.
    pub storage: u64,
}

/// Polls until `stop`; returns what it saw. `consumers` are the shards'
/// durable consumers, in shard order; `behind` is set once one of them has
/// more than `limit[k]` windows waiting (three slots of its windows): the
/// fleet outruns that shard, and the run stops generating.
pub fn poll(
    (consumers, limit): (Vec<String>, Vec<u64>),
    (nats_monitor, fleet_web): (String, String),
    (stop, behind): (Arc<AtomicBool>, Arc<AtomicBool>),
) -> std::thread::JoinHandle<Polled> {
    std::thread::Builder::new()
        .name("fleet-watch".into())
        .spawn(move || {
            let mut p = Polled::default();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if let Some(js) = jetstream(&nats_monitor) {
                    let over = consumers
                        .iter()
                        .zip(&limit)
                        .any(|(c, l)| js.waiting.get(c).copied().unwrap_or(0) > *l);
                    if over {
                        behind.store(true, Ordering::Relaxed);
                    }
                    p.samples.push(Sample {
                        at: Some(t),
                        consumed: consumers
                            .iter()
                            .map(|c| js.taken.get(c).copied().unwrap_or(0))
                            .collect(),
                        js_storage: js.storage,
                    });
                }
                match open_list(&fleet_web) {
                    Some(list) => {
                        for k in list {
                            p.fleet_first.entry(k).or_insert(t);
                        }
                    }
                    None => p.fleet_errors += 1,
                }
                std::thread::sleep(POLL.saturating_sub(t.elapsed()));
            }
            p
        })
        .unwrap_or_else(|e| panic!("spawning the watcher thread: {e}"))
}

/// The fleet view's open incidents: (kind, entity).
pub fn open_list(web: &str) -> Option<Vec<(String, String)>> {
    let (status, body) = http_get(web, "/api/open").ok()?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    Some(
        v["incidents"]
            .as_array()?
            .iter()
            .map(|i| {
                let s = |k: &str| i[k].as_str().unwrap_or("").to_string();
                (s("kind"), s("entity"))
            })
            .collect(),
    )
}
