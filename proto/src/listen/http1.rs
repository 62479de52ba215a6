//! HTTP/1 servers within a listener's limits, and bounded request bodies.
use std::{convert::Infallible, future::Future, time::Duration};

use http_body_util::BodyExt as _;
use tokio::net::TcpListener;

use super::{
    activity::hold,
    config::HttpTimeouts,
    conn::{spawn_trimmer, Conn},
    table::{closed_metric, Busy, Listener, Yielding, Yields},
};

/// The addresses of the connection a request came on, in the request's
/// extensions (HTTP/1 servers of [`serve_http1`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addrs {
    /// The client's address.
    pub peer: std::net::SocketAddr,
    /// The address it connected to (`None` if the socket could not say).
    pub local: Option<std::net::SocketAddr>,
}

/// Which guard a response holds: a request in progress, or a yielding
/// long-lived response ([`Yields`]).
enum Guard {
    Busy(#[allow(dead_code)] Busy),
    Yielding(#[allow(dead_code)] Yielding),
}

/// Serves `handler` over HTTP/1 on `listener` within `limits` and
/// `timeouts.header` until `shutdown` completes (open connections finish on
/// their own). A request marks its connection busy until its response ends
/// (a response marked [`Yields`]: until its head is out). Each request
/// carries its connection's [`Addrs`] in its extensions.
pub async fn serve_http1<H, Fut, B>(
    listener: TcpListener,
    limits: Listener,
    timeouts: HttpTimeouts,
    handler: H,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    H: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = http::Response<B>> + Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<tonic::codegen::StdError>,
{
    let plain = |c: Conn| std::future::ready(Ok(c));
    serve_http1_over(listener, limits, timeouts, plain, handler, shutdown).await;
}

/// [`serve_http1`] over what `upgrade` makes of each admitted connection
/// (a TLS handshake: `tls_handshake` in `faultline_connections_closed_total`
/// when it fails, `handshake_timeout` when it takes longer than the
/// listener's handshake timeout).
pub async fn serve_http1_over<U, UF, IO, H, Fut, B>(
    listener: TcpListener,
    limits: Listener,
    timeouts: HttpTimeouts,
    upgrade: U,
    handler: H,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    U: Fn(Conn) -> UF + Clone + Send + Sync + 'static,
    UF: Future<Output = std::io::Result<IO>> + Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(http::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = http::Response<B>> + Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<tonic::codegen::StdError>,
{
    use hyper_util::rt::{TokioIo, TokioTimer};
    spawn_trimmer();
    let name = limits.0.name;
    let handshake = limits.0.limits.handshake_timeout;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            c = limits.accept(&listener) => c,
            () = &mut shutdown => return,
        };
        let handler = handler.clone();
        let upgrade = upgrade.clone();
        tokio::spawn(async move {
            let peer = conn.peer();
            let addrs = Addrs {
                peer,
                local: conn.local(),
            };
            let slot = conn.slot.clone();
            let io = match tokio::time::timeout(handshake, upgrade(conn)).await {
                Ok(Ok(io)) => io,
                Ok(Err(e)) => {
                    closed_metric(name, "tls_handshake");
                    tracing::debug!(listener = name, %peer, error = %e, "handshake failed");
                    return;
                }
                Err(_) => {
                    closed_metric(name, "handshake_timeout");
                    return;
                }
            };
            let svc = hyper::service::service_fn(move |mut req: http::Request<_>| {
                req.extensions_mut().insert(addrs);
                let busy = Busy::new(slot.clone());
                let slot = slot.clone();
                let fut = handler(req);
                async move {
                    let resp = fut.await;
                    let guard = if resp.extensions().get::<Yields>().is_some() {
                        let y = Yielding::new(slot);
                        drop(busy);
                        Guard::Yielding(y)
                    } else {
                        Guard::Busy(busy)
                    };
                    Ok::<_, Infallible>(resp.map(|b| hold(b, guard)))
                }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeouts.header)
                .serve_connection(TokioIo::new(io), svc)
                .await;
            if let Err(e) = served {
                if e.is_timeout() {
                    closed_metric(name, "header_timeout");
                }
                tracing::debug!(listener = name, %peer, error = %e, "HTTP connection ended");
            }
        });
    }
}

/// Reads a request body within `limit` bytes and `timeout` (counted as
/// `body_timeout` on the connection's listener when it runs out).
pub async fn read_body<B>(
    body: B,
    limit: usize,
    timeout: Duration,
    listener: &'static str,
) -> Result<bytes::Bytes, BodyError>
where
    B: http_body::Body,
    B::Error: Into<tonic::codegen::StdError>,
{
    match tokio::time::timeout(timeout, http_body_util::Limited::new(body, limit).collect()).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Ok(Err(e)) => Err(BodyError::Read(e.to_string())),
        Err(_) => {
            closed_metric(listener, "body_timeout");
            Err(BodyError::Timeout)
        }
    }
}

/// Why [`read_body`] failed.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    TooLarge,
    Timeout,
    Read(String),
}
