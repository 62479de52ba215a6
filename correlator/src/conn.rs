//! Accepting connections within limits: at most `max_connections` in total
//! and `max_connections_per_peer` per remote address (further connections
//! are closed at once and counted), and a client must send its first bytes
//! (the HTTP/2 preface or the TLS ClientHello, 24 bytes) within
//! `handshake_timeout_s` or it is disconnected — a half-open client cannot
//! hold a file descriptor for long.
use std::{
    collections::HashMap,
    future::Future as _,
    net::IpAddr,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Connection limits (`[detect.limits]` keys of the same names).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    pub handshake_timeout: Duration,
}

/// The HTTP/2 client preface is 24 bytes.
const PREFACE: usize = 24;

type PerPeer = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// Releases the connection's per-peer count.
struct PeerGuard {
    ip: IpAddr,
    peers: PerPeer,
}

/// Closed connections that make a burst worth trimming the heap after.
const TRIM_AFTER: u64 = 32;

/// Connections closed so far (for [`release_freed_memory`]).
static CLOSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// After connections close, hands the heap they used back to the system:
/// glibc keeps freed memory in its per-thread arenas otherwise (20,000
/// streams left ~160 MiB resident after all of them had ended; trimming
/// returned it to ~25 MiB). At most once a second, and only after a burst:
/// [`TRIM_AFTER`] connections closed since the last trim (a collector's
/// ordinary reconnects never trigger it).
async fn release_freed_memory() {
    let mut seen = 0;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let closed = CLOSED.load(std::sync::atomic::Ordering::Relaxed);
        if closed - seen >= TRIM_AFTER {
            seen = closed;
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: malloc_trim only releases free pages of glibc's heap.
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

impl Drop for PeerGuard {
    fn drop(&mut self) {
        CLOSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut m = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// An accepted connection within the limits.
pub struct Limited {
    inner: TcpStream,
    _permit: OwnedSemaphorePermit,
    _peer: PeerGuard,
    /// Bytes read so far, until the preface is complete.
    first: usize,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Connected for Limited {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

impl AsyncRead for Limited {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(d) = self.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                metrics::counter!("faultline_connections_refused_total", "reason" => "handshake_timeout")
                    .increment(1);
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "client did not complete its handshake in time",
                )));
            }
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.deadline.is_some() {
            self.first += buf.filled().len() - before;
            if self.first >= PREFACE {
                self.deadline = None;
            }
        }
        r
    }
}

impl AsyncWrite for Limited {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Why a connection was closed at accept.
fn refuse(reason: &'static str, peer: std::net::SocketAddr) {
    metrics::counter!("faultline_connections_refused_total", "reason" => reason).increment(1);
    tracing::debug!(%peer, reason, "connection refused");
}

/// Accepts on `listener` within `limits`; the stream of admitted
/// connections for `serve_with_incoming_shutdown`.
pub fn incoming(
    listener: TcpListener,
    limits: ConnLimits,
) -> ReceiverStream<std::io::Result<Limited>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let total = Arc::new(Semaphore::new(limits.max_connections));
    let peers: PerPeer = Arc::default();
    tokio::spawn(release_freed_memory());
    tokio::spawn(async move {
        let mut warned = false;
        loop {
            let (sock, addr) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors or similar: wait, do not spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = total.clone().try_acquire_owned() else {
                if !warned {
                    warned = true;
                    tracing::warn!(
                        max = limits.max_connections,
                        "connection limit reached (detect.limits.max_connections): refusing new connections"
                    );
                }
                refuse("total", addr);
                continue;
            };
            let ip = addr.ip();
            {
                let mut m = peers
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let n = m.entry(ip).or_insert(0);
                if *n >= limits.max_connections_per_peer {
                    drop(m);
                    refuse("per_peer", addr);
                    continue;
                }
                *n += 1;
            }
            let _ = sock.set_nodelay(true);
            let c = Limited {
                inner: sock,
                _permit: permit,
                _peer: PeerGuard {
                    ip,
                    peers: peers.clone(),
                },
                first: 0,
                deadline: Some(Box::pin(tokio::time::sleep(limits.handshake_timeout))),
            };
            if tx.send(Ok(c)).await.is_err() {
                return;
            }
        }
    });
    ReceiverStream::new(rx)
}
