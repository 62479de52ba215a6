//! Accepting connections within limits, for every listener of the collector
//! and the correlator (gRPC ingest and subscriptions, the web UI, `/metrics`,
//! OTLP): at most `max_connections` in total and `max_connections_per_peer`
//! per remote address, a client must send its first bytes within
//! `handshake_timeout`, and a connection with no request (HTTP/1) or
//! authenticated stream (HTTP/2) in progress is closed after
//! `idle_timeout` — an HTTP/2 client that sends the preface and answers
//! PINGs but never opens a stream holds its slot for that long at most.
//!
//! At a limit, a new connection displaces the connection that has been idle
//! longest (for at least [`EVICT_AFTER`]) instead of being refused: slow or
//! idle connections cannot keep a real client out, even one from the same
//! address (every local process is 127.0.0.1). Only when every connection is
//! busy is the new one closed at accept. Every refusal and close is counted:
//! `faultline_connections_refused_total{listener,reason}` (`total`,
//! `per_peer`) and `faultline_connections_closed_total{listener,reason}`
//! (`handshake_timeout`, `idle`, `evicted`, `write_timeout`,
//! `header_timeout`, `body_timeout`).
//!
//! [`incoming`] feeds a tonic server (with [`ActivityLayer`] inside its
//! authentication layer, so that only authenticated streams count as
//! activity); [`serve_http1`] serves an HTTP/1 handler (web UI, OTLP/HTTP)
//! with a header read timeout as well.
use std::{
    collections::HashMap,
    convert::Infallible,
    future::Future,
    io,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::{
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    task::{Context, Poll, Waker},
    time::Duration,
};

use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    time::{Instant, Sleep},
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

/// A connection idle at least this long may be displaced by a new one at a
/// limit (younger ones are a client that has not sent its request yet).
pub const EVICT_AFTER: Duration = Duration::from_secs(1);

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    /// The first [`Listener::new`]`(…, first_bytes)` bytes must arrive within this.
    pub handshake_timeout: Duration,
    /// A connection with nothing in progress for this long is closed.
    pub idle_timeout: Duration,
    /// A write that makes no progress for this long (a client that does
    /// not read) closes the connection.
    pub write_timeout: Duration,
}

/// The connection limits of an HTTP/1 listener as config keys (`[web.limits]`,
/// `[otlp.http_limits]`; docs/config.md).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpLimitsConfig {
    /// Connections in total; past it the longest-idle one is closed, or the
    /// new one when all are busy.
    pub max_connections: usize,
    /// Connections per remote address (same rule).
    pub max_connections_per_peer: usize,
    /// Seconds a new connection has to send its first byte.
    pub handshake_timeout_s: f64,
    /// Seconds a request's header may take (from its first byte, or from
    /// the end of the previous request on a kept-alive connection).
    pub header_timeout_s: f64,
    /// Seconds a request's body may take.
    pub body_timeout_s: f64,
    /// Seconds a connection may stay open with no request in progress;
    /// also the longest a response may wait on a client that does not read.
    pub idle_timeout_s: f64,
}

impl Default for HttpLimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_connections_per_peer: 64,
            handshake_timeout_s: 5.0,
            header_timeout_s: 10.0,
            body_timeout_s: 10.0,
            idle_timeout_s: 30.0,
        }
    }
}

/// Largest connection count accepted in a config (far above any file limit).
pub const MAX_CONNECTIONS: usize = 1 << 20;
/// Longest timeout accepted in a config, seconds.
pub const MAX_TIMEOUT_S: f64 = 3600.0;

/// Whether `v` is a usable timeout in seconds: (0, [`MAX_TIMEOUT_S`]].
pub fn valid_timeout(v: f64) -> bool {
    v > 0.0 && v <= MAX_TIMEOUT_S
}

/// Whether `v` is a usable connection count: 1..=[`MAX_CONNECTIONS`].
pub fn valid_count(v: usize) -> bool {
    (1..=MAX_CONNECTIONS).contains(&v)
}

impl HttpLimitsConfig {
    /// The first key out of range (without the table's prefix), and why.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        for (key, v) in [
            ("max_connections", self.max_connections),
            ("max_connections_per_peer", self.max_connections_per_peer),
        ] {
            if !valid_count(v) {
                return Some((key, "must be within 1..=1048576"));
            }
        }
        for (key, v) in [
            ("handshake_timeout_s", self.handshake_timeout_s),
            ("header_timeout_s", self.header_timeout_s),
            ("body_timeout_s", self.body_timeout_s),
            ("idle_timeout_s", self.idle_timeout_s),
        ] {
            if !valid_timeout(v) {
                return Some((key, "must be a number of seconds in (0, 3600]"));
            }
        }
        None
    }

    /// The accept-side limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            handshake_timeout: seconds(self.handshake_timeout_s),
            idle_timeout: seconds(self.idle_timeout_s),
            write_timeout: seconds(self.idle_timeout_s),
        }
    }

    /// The HTTP/1 timeouts.
    pub fn http(&self) -> HttpTimeouts {
        HttpTimeouts {
            header: seconds(self.header_timeout_s),
            body: seconds(self.body_timeout_s),
        }
    }
}

/// Seconds as a duration, clamped to what [`valid_timeout`] admits (an
/// unvalidated NaN or infinity must not panic).
pub fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_nan() {
        1.0
    } else {
        s.clamp(0.001, MAX_TIMEOUT_S)
    })
}

/// HTTP/1 request timeouts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HttpTimeouts {
    pub header: Duration,
    /// Not applied here: a handler reading a body bounds it with this.
    pub body: Duration,
}

/// One connection's state, shared by its I/O and its requests.
struct Slot {
    peer: SocketAddr,
    /// Requests or streams in progress.
    active: AtomicUsize,
    /// When `active` last dropped to 0 (or the connection was accepted).
    idle_since: Mutex<Instant>,
    /// Why the listener closed it (set once).
    closed: Mutex<Option<&'static str>>,
    /// Its counts were given back (at eviction, or when it closed).
    released: AtomicBool,
    /// The connection's reader, woken to notice a close or an idle start.
    waker: Mutex<Option<Waker>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Slot {
    fn wake(&self) {
        if let Some(w) = lock(&self.waker).take() {
            w.wake();
        }
    }

    fn idle_for(&self, now: Instant) -> Option<Duration> {
        (self.active.load(Ordering::Acquire) == 0)
            .then(|| now.saturating_duration_since(*lock(&self.idle_since)))
    }
}

#[derive(Default)]
struct State {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
    conns: HashMap<SocketAddr, Arc<Slot>>,
    warned: bool,
}

struct Table {
    name: &'static str,
    limits: Limits,
    first_bytes: usize,
    state: Mutex<State>,
}

/// A listener's limits and its open connections.
#[derive(Clone)]
pub struct Listener(Arc<Table>);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.0.name)
            .field("limits", &self.0.limits)
            .finish()
    }
}

fn closed_metric(listener: &'static str, reason: &'static str) {
    metrics::counter!("faultline_connections_closed_total", "listener" => listener, "reason" => reason)
        .increment(1);
}

impl Listener {
    /// `name` labels its metrics (`grpc`, `web`, `metrics`, `otlp_http`,
    /// `otlp_grpc`); a client must send `first_bytes` within the handshake
    /// timeout (24 for HTTP/2's preface or a TLS ClientHello, 1 for HTTP/1).
    pub fn new(name: &'static str, limits: Limits, first_bytes: usize) -> Self {
        Self(Arc::new(Table {
            name,
            limits,
            first_bytes,
            state: Mutex::default(),
        }))
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        lock(&self.0.state).total
    }

    /// Admits a connection from `peer`, displacing the longest-idle one at a
    /// limit; the refusal's reason otherwise.
    fn admit(&self, peer: SocketAddr) -> Result<Arc<Slot>, &'static str> {
        let t = &self.0;
        let now = Instant::now();
        let mut st = lock(&t.state);
        let ip = peer.ip();
        if st.per_peer.get(&ip).copied().unwrap_or(0) >= t.limits.max_connections_per_peer
            && !self.evict(&mut st, now, Some(ip))
        {
            return Err("per_peer");
        }
        if st.total >= t.limits.max_connections && !self.evict(&mut st, now, None) {
            if !st.warned {
                st.warned = true;
                tracing::warn!(
                    listener = t.name,
                    max = t.limits.max_connections,
                    "connection limit reached and every connection busy: refusing new connections"
                );
            }
            return Err("total");
        }
        let slot = Arc::new(Slot {
            peer,
            active: AtomicUsize::new(0),
            idle_since: Mutex::new(now),
            closed: Mutex::new(None),
            released: AtomicBool::new(false),
            waker: Mutex::new(None),
        });
        st.total += 1;
        *st.per_peer.entry(ip).or_insert(0) += 1;
        st.conns.insert(peer, slot.clone());
        Ok(slot)
    }

    /// Closes the connection idle longest (of `ip`, or of anyone), if one
    /// has been idle [`EVICT_AFTER`]; whether one was.
    fn evict(&self, st: &mut State, now: Instant, ip: Option<IpAddr>) -> bool {
        let min = EVICT_AFTER.min(self.0.limits.idle_timeout);
        let victim = st
            .conns
            .values()
            .filter(|s| ip.is_none_or(|ip| s.peer.ip() == ip))
            .filter_map(|s| s.idle_for(now).filter(|d| *d >= min).map(|d| (d, s)))
            .max_by_key(|(d, _)| *d)
            .map(|(_, s)| s.clone());
        let Some(v) = victim else {
            return false;
        };
        self.close(st, &v, "evicted");
        true
    }

    /// Marks `slot` closed for `reason` (counted), gives its counts back and
    /// wakes its reader, which then fails and the server drops it.
    fn close(&self, st: &mut State, slot: &Slot, reason: &'static str) {
        {
            let mut c = lock(&slot.closed);
            if c.is_some() {
                return;
            }
            *c = Some(reason);
        }
        closed_metric(self.0.name, reason);
        tracing::debug!(listener = self.0.name, peer = %slot.peer, reason, "connection closed");
        Self::release(st, slot);
        slot.wake();
    }

    fn release(st: &mut State, slot: &Slot) {
        if slot.released.swap(true, Ordering::AcqRel) {
            return;
        }
        st.total = st.total.saturating_sub(1);
        let ip = slot.peer.ip();
        if let Some(n) = st.per_peer.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                st.per_peer.remove(&ip);
            }
        }
        if st
            .conns
            .get(&slot.peer)
            .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), slot))
        {
            st.conns.remove(&slot.peer);
        }
    }

    /// Marks a request or stream of the connection from `peer` in progress
    /// until the guard drops (`None` for a connection this listener does not
    /// know).
    pub fn busy(&self, peer: SocketAddr) -> Option<Busy> {
        let slot = lock(&self.0.state).conns.get(&peer).cloned()?;
        Some(Busy::new(slot))
    }

    /// Accepts one connection within the limits (refusals are closed at
    /// once, counted and logged at debug).
    pub async fn accept(&self, listener: &TcpListener) -> Conn {
        loop {
            let (sock, addr) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors or similar: wait, do not spin.
                    tracing::warn!(listener = self.0.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match self.admit(addr) {
                Ok(slot) => {
                    let _ = sock.set_nodelay(true);
                    return Conn::new(sock, slot, self.clone());
                }
                Err(reason) => {
                    metrics::counter!("faultline_connections_refused_total", "listener" => self.0.name, "reason" => reason)
                        .increment(1);
                    tracing::debug!(listener = self.0.name, peer = %addr, reason, "connection refused");
                }
            }
        }
    }
}

/// A request or stream in progress on a connection.
pub struct Busy(Arc<Slot>);

impl Busy {
    fn new(slot: Arc<Slot>) -> Self {
        slot.active.fetch_add(1, Ordering::AcqRel);
        Self(slot)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            *lock(&self.0.idle_since) = Instant::now();
            self.0.wake();
        }
    }
}

/// Connections closed so far (for [`release_freed_memory`]).
static CLOSED: AtomicU64 = AtomicU64::new(0);
/// Closed connections that make a burst worth trimming the heap after.
const TRIM_AFTER: u64 = 32;

/// After connections close, hands the heap they used back to the system:
/// glibc keeps freed memory in its per-thread arenas otherwise (20,000
/// streams left ~160 MiB resident after all of them had ended; trimming
/// returned it to ~25 MiB). At most once a second, and only after a burst
/// of [`TRIM_AFTER`] closed connections (ordinary reconnects never trigger it).
fn spawn_trimmer() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        tokio::spawn(async {
            let mut seen = 0;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let closed = CLOSED.load(Ordering::Relaxed);
                if closed - seen >= TRIM_AFTER {
                    seen = closed;
                    #[cfg(all(target_os = "linux", target_env = "gnu"))]
                    // SAFETY: malloc_trim only releases free pages of glibc's heap.
                    unsafe {
                        libc::malloc_trim(0);
                    }
                }
            }
        });
    });
}

/// An admitted connection: its reads fail once the listener closes it (idle,
/// evicted, no handshake in time), and so the server drops it.
pub struct Conn {
    io: TcpStream,
    slot: Arc<Slot>,
    listener: Listener,
    /// Bytes read so far, until the first `first_bytes`.
    first: usize,
    handshake: Option<Pin<Box<Sleep>>>,
    idle: Pin<Box<Sleep>>,
    write_stall: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    fn new(io: TcpStream, slot: Arc<Slot>, listener: Listener) -> Self {
        let l = listener.0.limits;
        Self {
            io,
            slot,
            first: 0,
            handshake: Some(Box::pin(tokio::time::sleep(l.handshake_timeout))),
            idle: Box::pin(tokio::time::sleep(l.idle_timeout)),
            write_stall: None,
            listener,
        }
    }

    /// The remote address.
    pub fn peer(&self) -> SocketAddr {
        self.slot.peer
    }

    fn fail(&self, reason: &'static str) -> io::Error {
        let mut st = lock(&self.listener.0.state);
        self.listener.close(&mut st, &self.slot, reason);
        let why = lock(&self.slot.closed).unwrap_or(reason);
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connection closed by the listener: {why}"),
        )
    }

    /// The listener's verdict on this connection before any read.
    fn check(&mut self, cx: &mut Context<'_>) -> Result<(), io::Error> {
        *lock(&self.slot.waker) = Some(cx.waker().clone());
        if let Some(why) = *lock(&self.slot.closed) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("connection closed by the listener: {why}"),
            ));
        }
        let late = self
            .handshake
            .as_mut()
            .is_some_and(|d| d.as_mut().poll(cx).is_ready());
        if late {
            return Err(self.fail("handshake_timeout"));
        }
        if self.slot.active.load(Ordering::Acquire) == 0 {
            let deadline = *lock(&self.slot.idle_since) + self.listener.0.limits.idle_timeout;
            if self.idle.deadline() != deadline {
                self.idle.as_mut().reset(deadline);
            }
            if self.idle.as_mut().poll(cx).is_ready()
                && self.slot.active.load(Ordering::Acquire) == 0
            {
                return Err(self.fail("idle"));
            }
        }
        Ok(())
    }

    fn wrote<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.write_stall = None;
            return r;
        }
        let limit = self.listener.0.limits.write_timeout;
        let stalled = self
            .write_stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)))
            .as_mut()
            .poll(cx)
            .is_ready();
        if stalled {
            return Poll::Ready(Err(self.fail("write_timeout")));
        }
        r
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        CLOSED.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.listener.0.state);
        Listener::release(&mut st, &self.slot);
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.io.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Err(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if self.handshake.is_some() {
            self.first += buf.filled().len() - before;
            if self.first >= self.listener.0.first_bytes {
                self.handshake = None;
            }
        }
        r
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.wrote(cx, r)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.wrote(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.wrote(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The admitted connections of `listener`, for tonic's
/// `serve_with_incoming_shutdown`.
pub fn incoming(listener: TcpListener, limits: Listener) -> ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    spawn_trimmer();
    tokio::spawn(async move {
        loop {
            let c = limits.accept(&listener).await;
            if tx.send(Ok(c)).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}

/// A tower layer for a tonic server fed by [`incoming`]: every request
/// (stream) it sees marks its connection busy until the response ends. Put
/// it inside the authentication layer (a later `Server::layer` call), so
/// that refused calls do not keep a connection alive.
#[derive(Clone, Debug)]
pub struct ActivityLayer(pub Listener);

impl<S> tower_layer::Layer<S> for ActivityLayer {
    type Service = Activity<S>;

    fn layer(&self, inner: S) -> Activity<S> {
        Activity {
            inner,
            listener: self.0.clone(),
        }
    }
}

/// See [`ActivityLayer`].
#[derive(Clone, Debug)]
pub struct Activity<S> {
    inner: S,
    listener: Listener,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> tower_service::Service<http::Request<B>> for Activity<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    RB: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    RB::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let e = req.extensions();
        let peer = e
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr)
            .or_else(|| {
                e.get::<TlsConnectInfo<TcpConnectInfo>>()
                    .and_then(|t| t.get_ref().remote_addr())
            });
        let busy = peer.and_then(|p| self.listener.busy(p));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|b| tonic::body::Body::new(hold(b, busy))))
        })
    }
}

/// `body`, holding `guard` until it is dropped (the response ended). The
/// body's size hint is kept, so a response of known length still carries
/// `Content-Length` (not chunked encoding).
fn hold<B, G>(body: B, guard: G) -> Hold<B, G>
where
    B: http_body::Body + Send + 'static,
    G: Send + 'static,
{
    Hold {
        body: Box::pin(body),
        _guard: guard,
    }
}

/// See [`hold`].
struct Hold<B, G> {
    body: Pin<Box<B>>,
    _guard: G,
}

impl<B: http_body::Body, G: Unpin> http_body::Body for Hold<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.body.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves `handler` over HTTP/1 on `listener` within `limits` and
/// `timeouts.header` until `shutdown` completes (open connections finish on
/// their own). A request marks its connection busy until its response ends.
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
    use hyper_util::rt::{TokioIo, TokioTimer};
    spawn_trimmer();
    let name = limits.0.name;
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            c = limits.accept(&listener) => c,
            () = &mut shutdown => return,
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let peer = conn.peer();
            let slot = conn.slot.clone();
            let svc = hyper::service::service_fn(move |req| {
                let busy = Busy::new(slot.clone());
                let fut = handler(req);
                async move { Ok::<_, Infallible>(fut.await.map(|b| hold(b, busy))) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(timeouts.header)
                .serve_connection(TokioIo::new(conn), svc)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_peer: usize, idle_ms: u64) -> Limits {
        Limits {
            max_connections: total,
            max_connections_per_peer: per_peer,
            handshake_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_millis(idle_ms),
            write_timeout: Duration::from_secs(5),
        }
    }

    fn addr(ip: [u8; 4], port: u16) -> SocketAddr {
        SocketAddr::from((ip, port))
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_displaces_the_longest_idle_never_a_busy_one() {
        let l = Listener::new("test", limits(3, 2, 10_000), 1);
        let a = l.admit(addr([10, 0, 0, 1], 1)).expect("a");
        tokio::time::advance(Duration::from_secs(3)).await;
        let b = l.admit(addr([10, 0, 0, 1], 2)).expect("b");
        tokio::time::advance(Duration::from_secs(2)).await;
        // Per peer: the third from 10.0.0.1 displaces a (idle 5 s), not b (2 s).
        let c = l.admit(addr([10, 0, 0, 1], 3)).expect("c");
        assert_eq!(*lock(&a.closed), Some("evicted"));
        assert_eq!(*lock(&b.closed), None);
        assert_eq!(l.open(), 2);
        // Busy connections are never displaced; a young idle one neither.
        let _busy = l.busy(b.peer).expect("b is known");
        tokio::time::advance(Duration::from_millis(100)).await;
        let d = l.admit(addr([10, 0, 0, 2], 1)).expect("d");
        assert_eq!(l.open(), 3);
        assert_eq!(
            l.admit(addr([10, 0, 0, 3], 1)).err(),
            Some("total"),
            "c and d are younger than EVICT_AFTER, b is busy"
        );
        tokio::time::advance(EVICT_AFTER).await;
        let _e = l
            .admit(addr([10, 0, 0, 3], 1))
            .expect("e displaces c, idle longest");
        assert_eq!(*lock(&c.closed), Some("evicted"));
        assert_eq!(*lock(&b.closed), None);
        assert_eq!(*lock(&d.closed), None);
        assert_eq!(l.open(), 3);
        // A busy connection's guard ending starts its idle time anew.
        drop(_busy);
        assert_eq!(b.idle_for(Instant::now()), Some(Duration::ZERO));
    }
}
