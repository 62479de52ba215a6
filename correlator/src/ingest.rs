//! The ingest service: collectors stream windows; each origin's sequence is
//! tracked so duplicates (resends after a reconnect) are dropped and gaps
//! (spool overflow) are counted. Accepted windows can be appended to an
//! ingest log, which also restores the per-origin state after a restart.
use std::{
    collections::HashMap,
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use proto::v1::{ingest_server::Ingest, Origin, ResumeReply, ResumeRequest, StreamSummary, Window};
use tonic::{Request, Response, Status, Streaming};

use crate::auth::Peer;

/// Key of one collector run.
pub type OriginKey = (String, String, String);

fn key(o: &Origin) -> OriginKey {
    (o.hostname.clone(), o.boot_id.clone(), o.instance.clone())
}

#[derive(Debug, Default)]
pub struct Counters {
    pub accepted: u64,
    pub duplicates: u64,
    pub missing: u64,
}

#[derive(Default)]
struct Inner {
    last_seq: HashMap<OriginKey, u64>,
    counters: Counters,
    log: Option<File>,
}

/// Shared ingest state.
#[derive(Clone, Default)]
pub struct IngestState {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("ingest log {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl IngestState {
    /// With an ingest log at `path`: existing lines restore each origin's last
    /// sequence (a truncated last line, from a crash, is ignored), and new
    /// windows are appended.
    pub fn with_log(path: &Path) -> Result<Self, IngestError> {
        let err = |source| IngestError::Log {
            path: path.to_path_buf(),
            source,
        };
        let mut last_seq = HashMap::new();
        if path.exists() {
            let f = File::open(path).map_err(err)?;
            for line in BufReader::new(f).lines() {
                let line = line.map_err(err)?;
                let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
                let seq = v
                    .get("seq")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0);
                let e = last_seq
                    .entry((s("hostname"), s("boot_id"), s("instance")))
                    .or_insert(0);
                *e = (*e).max(seq);
            }
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(err)?;
        Ok(Self {
            inner: Arc::new(Mutex::new(Inner {
                last_seq,
                counters: Counters::default(),
                log: Some(log),
            })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn last_seq(&self, o: &Origin) -> u64 {
        self.lock().last_seq.get(&key(o)).copied().unwrap_or(0)
    }

    pub fn counters(&self) -> (u64, u64, u64) {
        let g = self.lock();
        (
            g.counters.accepted,
            g.counters.duplicates,
            g.counters.missing,
        )
    }

    /// Accepts `w` unless it is a duplicate. Returns whether it was new.
    pub fn accept(&self, w: &Window) -> Result<bool, Status> {
        let o = w
            .origin
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("window without origin"))?;
        if o.hostname.is_empty() || o.instance.is_empty() {
            return Err(Status::invalid_argument(
                "window origin needs hostname and instance",
            ));
        }
        if w.seq == 0 {
            return Err(Status::invalid_argument("window seq must start at 1"));
        }
        let mut g = self.lock();
        let last = g.last_seq.get(&key(o)).copied().unwrap_or(0);
        if w.seq <= last {
            g.counters.duplicates += 1;
            return Ok(false);
        }
        if w.seq > last + 1 {
            let missing = w.seq - last - 1;
            g.counters.missing += missing;
            tracing::warn!(
                host = %o.hostname, instance = %o.instance, from = last + 1, to = w.seq - 1,
                collector_dropped = w.dropped_before,
                "windows missing from this collector"
            );
        }
        if let Some(f) = g.log.as_mut() {
            let line = serde_json::json!({
                "hostname": o.hostname, "boot_id": o.boot_id, "instance": o.instance,
                "seq": w.seq, "end_unix_ms": w.end_unix_ms, "dropped_before": w.dropped_before,
                "ib_ports": w.ib_ports.len(), "gpus": w.gpus.len(), "events": w.events.len(),
            });
            writeln!(f, "{line}")
                .and_then(|()| f.flush())
                .map_err(|e| Status::internal(format!("ingest log write failed: {e}")))?;
        }
        g.last_seq.insert(key(o), w.seq);
        g.counters.accepted += 1;
        Ok(true)
    }
}

/// Refuses a window or `Resume` for `host` from a peer bound to another host.
fn check_identity(peer: &Peer, host: &str) -> Result<(), Status> {
    if peer.may_speak_for(host) {
        return Ok(());
    }
    metrics::counter!("faultline_ingest_rejected_total", "reason" => "identity").increment(1);
    tracing::warn!(host, peer = %peer.describe(), "refused: the caller's certificate or token does not name this host");
    Err(Status::permission_denied(format!(
        "this client's certificate or token does not name host {host:?}; a collector may only send its own windows"
    )))
}

/// The tonic service.
pub struct IngestService {
    pub state: IngestState,
    /// Accepted windows go to the engine (bounded: a slow engine slows ingest).
    pub engine: Option<tokio::sync::mpsc::Sender<Window>>,
    /// Per-stream limit, windows per second (token bucket with one second of
    /// burst); a stream over it ends with `RESOURCE_EXHAUSTED`, others are
    /// unaffected. 0 = unlimited.
    pub max_windows_per_sec: u32,
}

#[tonic::async_trait]
impl Ingest for IngestService {
    async fn resume(&self, req: Request<ResumeRequest>) -> Result<Response<ResumeReply>, Status> {
        let peer = Peer::of(&req);
        let o = req
            .into_inner()
            .origin
            .ok_or_else(|| Status::invalid_argument("resume without origin"))?;
        check_identity(&peer, &o.hostname)?;
        Ok(Response::new(ResumeReply {
            last_seq: self.state.last_seq(&o),
        }))
    }

    async fn stream(
        &self,
        req: Request<Streaming<Window>>,
    ) -> Result<Response<StreamSummary>, Status> {
        let peer = Peer::of(&req);
        // The host this stream has proven it may speak for (checked once).
        let mut allowed_host: Option<String> = None;
        let mut s = req.into_inner();
        let (mut accepted, mut duplicates, mut last) = (0, 0, 0);
        let rate = f64::from(self.max_windows_per_sec);
        let mut tokens = rate;
        let mut refilled = std::time::Instant::now();
        while let Some(w) = s.message().await? {
            if rate > 0.0 {
                let now = std::time::Instant::now();
                tokens = (tokens + now.duration_since(refilled).as_secs_f64() * rate).min(rate);
                refilled = now;
                if tokens < 1.0 {
                    return Err(Status::resource_exhausted(format!(
                        "stream exceeds {} windows/s; reconnect and resume",
                        self.max_windows_per_sec
                    )));
                }
                tokens -= 1.0;
            }
            if let Some(o) = &w.origin {
                if allowed_host.as_deref() != Some(o.hostname.as_str()) {
                    check_identity(&peer, &o.hostname)?;
                    allowed_host = Some(o.hostname.clone());
                }
            }
            if self.state.accept(&w)? {
                accepted += 1;
                if let Some(tx) = &self.engine {
                    if tx.send(w.clone()).await.is_err() {
                        return Err(Status::unavailable("correlator engine stopped"));
                    }
                }
            } else {
                duplicates += 1;
            }
            last = w.seq;
        }
        Ok(Response::new(StreamSummary {
            accepted,
            duplicates,
            last_seq: last,
        }))
    }
}
