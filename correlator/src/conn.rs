//! The gRPC listener's connection limits (`[detect.limits]`): the workspace's
//! one implementation, [`proto::listen`], which the web UI, `/metrics` and
//! the collector's OTLP receivers use too. A client must send its first 24
//! bytes (the HTTP/2 preface or a TLS ClientHello) within
//! `handshake_timeout_s`; a connection with no authenticated stream open for
//! `idle_connection_timeout_s` is closed; at `max_connections` or
//! `max_connections_per_peer` a new connection displaces the longest-idle one,
//! and is refused only when every connection has a stream open.
//!
//! Addresses are not identities (one client certificate can connect from
//! many), so every authenticated call is also charged to its caller's
//! identity ([`Peer::identity`]): at most `max_connections_per_identity`
//! connections and `max_streams_per_identity` calls per identity, and
//! `Candidates` calls (subscriptions) at most `max_subscriber_streams` in
//! total — below `max_connections`, so the rest of the slots stay the
//! collectors' — and `max_subscriber_streams_per_identity` per identity. A
//! call past a cap is refused RESOURCE_EXHAUSTED before it starts
//! (`faultline_grpc_refused_total{reason}`), so it never marks its
//! connection busy, and that connection is the first a new one displaces
//! (at once, without the usual second of grace).
use std::{
    collections::HashMap,
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
};

pub use proto::listen::{Limits as ConnLimits, Listener};
use tonic::{
    codegen::http,
    transport::server::{TcpConnectInfo, TlsConnectInfo},
    Status,
};

use crate::{auth::Peer, limits::LimitsConfig};

/// The HTTP/2 client preface (and any TLS ClientHello) is at least 24 bytes.
const PREFACE: usize = 24;

/// The path prefix of the subscribers' service.
const CANDIDATES: &str = "/faultline.v1.Candidates/";

/// The ingest/subscription listener (metrics label `listener="grpc"`) and
/// its per-identity shares.
#[derive(Clone, Debug)]
pub struct Grpc {
    pub listener: Listener,
    shares: Arc<Shares>,
}

/// The ingest/subscription listener within the connection keys of
/// `[detect.limits]`.
pub fn grpc(l: &LimitsConfig) -> Grpc {
    Grpc {
        listener: Listener::new("grpc", limits(l), PREFACE),
        shares: Arc::new(Shares {
            caps: Caps {
                connections_per_identity: l.max_connections_per_identity,
                streams_per_identity: l.max_streams_per_identity,
                subscriber_streams: l.max_subscriber_streams,
                subscriber_streams_per_identity: l.max_subscriber_streams_per_identity,
            },
            state: Mutex::default(),
        }),
    }
}

/// The connection part of `[detect.limits]`.
pub fn limits(l: &LimitsConfig) -> ConnLimits {
    let idle = proto::listen::seconds(l.idle_connection_timeout_s);
    ConnLimits {
        max_connections: l.max_connections,
        max_connections_per_peer: l.max_connections_per_peer,
        handshake_timeout: proto::listen::seconds(l.handshake_timeout_s),
        idle_timeout: idle,
        write_timeout: idle,
    }
}

/// The admitted connections of `listener`, for tonic's
/// `serve_with_incoming_shutdown`.
pub fn incoming(
    listener: tokio::net::TcpListener,
    g: Grpc,
) -> tokio_stream::wrappers::ReceiverStream<std::io::Result<proto::listen::Conn>> {
    proto::listen::incoming(listener, g.listener)
}

#[derive(Clone, Copy, Debug)]
struct Caps {
    connections_per_identity: usize,
    streams_per_identity: usize,
    subscriber_streams: usize,
    subscriber_streams_per_identity: usize,
}

#[derive(Debug, Default)]
struct ShareState {
    streams: HashMap<u64, usize>,
    subscriber_streams: usize,
    subscriber_per_identity: HashMap<u64, usize>,
}

#[derive(Debug)]
struct Shares {
    caps: Caps,
    state: Mutex<ShareState>,
}

fn dec(m: &mut HashMap<u64, usize>, k: u64) {
    if let Some(n) = m.get_mut(&k) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            m.remove(&k);
        }
    }
}

impl Shares {
    /// Charges one call of `id` (a subscriber's when `reader`); the
    /// refusal's reason at a cap.
    fn take(self: &Arc<Self>, id: Option<u64>, reader: bool) -> Result<Share, &'static str> {
        let c = self.caps;
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = id {
            if st.streams.get(&id).copied().unwrap_or(0) >= c.streams_per_identity {
                return Err("identity_streams");
            }
        }
        if reader {
            if st.subscriber_streams >= c.subscriber_streams {
                return Err("subscriber_total");
            }
            if let Some(id) = id {
                let n = st.subscriber_per_identity.get(&id).copied().unwrap_or(0);
                if n >= c.subscriber_streams_per_identity {
                    return Err("subscriber_identity");
                }
                *st.subscriber_per_identity.entry(id).or_insert(0) += 1;
            }
            st.subscriber_streams += 1;
        }
        if let Some(id) = id {
            *st.streams.entry(id).or_insert(0) += 1;
        }
        Ok(Share {
            shares: self.clone(),
            id,
            reader,
        })
    }
}

/// One call's charge, given back when its response ends.
struct Share {
    shares: Arc<Shares>,
    id: Option<u64>,
    reader: bool,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut st = self
            .shares
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = self.id {
            dec(&mut st.streams, id);
            if self.reader {
                dec(&mut st.subscriber_per_identity, id);
            }
        }
        if self.reader {
            st.subscriber_streams = st.subscriber_streams.saturating_sub(1);
        }
    }
}

fn refused(reason: &'static str) -> Status {
    metrics::counter!(crate::telemetry::GRPC_REFUSED.name, "reason" => reason).increment(1);
    tracing::debug!(reason, "gRPC call refused at a share cap");
    let what = match reason {
        "identity_connections" => {
            "this identity's connections (limits.max_connections_per_identity)"
        }
        "identity_streams" => "this identity's calls (limits.max_streams_per_identity)",
        "subscriber_total" => "subscriptions in total (limits.max_subscriber_streams)",
        _ => "this identity's subscriptions (limits.max_subscriber_streams_per_identity)",
    };
    Status::resource_exhausted(format!(
        "too many concurrent calls: {what} is at its cap; close some, or retry later"
    ))
}

/// A tower layer for the tonic server fed by [`incoming`], inside the
/// authentication layer (a later `Server::layer` call): charges every call
/// to its caller's identity (refusing it at a cap, see the module), and
/// marks its connection busy until the response ends.
#[derive(Clone, Debug)]
pub struct ActivityLayer(pub Grpc);

impl<S> tower_layer::Layer<S> for ActivityLayer {
    type Service = Activity<S>;

    fn layer(&self, inner: S) -> Activity<S> {
        Activity {
            inner,
            grpc: self.0.clone(),
        }
    }
}

/// See [`ActivityLayer`].
#[derive(Clone, Debug)]
pub struct Activity<S> {
    inner: S,
    grpc: Grpc,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

fn remote<B>(req: &http::Request<B>) -> Option<SocketAddr> {
    let e = req.extensions();
    e.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            e.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|t| t.get_ref().remote_addr())
        })
}

impl Grpc {
    /// Ties the call's connection to its identity and charges the call.
    fn admit<B>(&self, req: &http::Request<B>) -> Result<Share, &'static str> {
        let id = req.extensions().get::<Peer>().and_then(Peer::identity);
        if let (Some(addr), Some(id)) = (remote(req), id) {
            self.listener
                .own(addr, id, self.shares.caps.connections_per_identity)
                .map_err(|_| "identity_connections")?;
        }
        self.shares
            .take(id, req.uri().path().starts_with(CANDIDATES))
    }
}

impl<S, B, RB> tonic::codegen::Service<http::Request<B>> for Activity<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    RB::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let share = match self.grpc.admit(&req) {
            Ok(s) => s,
            Err(reason) => {
                // Its connection may make room for others at once.
                if let Some(addr) = remote(&req) {
                    self.grpc.listener.spare(addr);
                }
                let resp = refused(reason).into_http();
                return Box::pin(async move { Ok(resp) });
            }
        };
        let busy = remote(&req).and_then(|p| self.grpc.listener.busy(p));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|b| tonic::body::Body::new(proto::listen::hold(b, (busy, share)))))
        })
    }
}
