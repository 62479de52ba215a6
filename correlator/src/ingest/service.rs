//! The `Ingest` gRPC service: checks that a stream may speak for the host
//! its windows name, admits them through [`IngestState`] and forwards the
//! new ones to the engine.
use proto::v1::{ingest_server::Ingest, ResumeReply, ResumeRequest, StreamSummary, Window};
use tonic::{Request, Response, Status, Streaming};

use super::IngestState;
use crate::auth::Peer;

/// Refuses a window or `Resume` for `host` from a peer bound to another host.
fn check_identity(peer: &Peer, host: &str) -> Result<(), Status> {
    if peer.may_speak_for(host) {
        return Ok(());
    }
    metrics::counter!(crate::telemetry::INGEST_REJECTED.name, "reason" => "identity").increment(1);
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
    /// Per-host limit, windows per second over all of the host's streams
    /// (token bucket with one second of burst); a stream over it ends with
    /// `RESOURCE_EXHAUSTED`, other hosts are unaffected. 0 = unlimited.
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
        while let Some(mut w) = s.message().await? {
            crate::finite::drop_non_finite(&mut w);
            if let Some(o) = &w.origin {
                if allowed_host.as_deref() != Some(o.hostname.as_str()) {
                    check_identity(&peer, &o.hostname)?;
                    allowed_host = Some(o.hostname.clone());
                }
            }
            last = w.seq;
            if self.state.admit(&w, self.max_windows_per_sec)? {
                accepted += 1;
                if let Some(tx) = &self.engine {
                    if tx.send(w).await.is_err() {
                        return Err(Status::unavailable("correlator engine stopped"));
                    }
                }
            } else {
                duplicates += 1;
            }
        }
        Ok(Response::new(StreamSummary {
            accepted,
            duplicates,
            last_seq: last,
        }))
    }
}
