//! Accepting a connection ([`Listener::accept`], within the table's limits)
//! and the admitted connection: its reads fail once the listener closes it,
//! and a write that makes no progress times out.
use std::{
    future::Future as _,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    time::Sleep,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::table::{lock, Listener, Slot};

/// Connections closed so far (for [`release_freed_memory`]).
static CLOSED: AtomicU64 = AtomicU64::new(0);
/// Closed connections that make a burst worth trimming the heap after.
const TRIM_AFTER: u64 = 32;

/// After connections close, hands the heap they used back to the system:
/// glibc keeps freed memory in its per-thread arenas otherwise (20,000
/// streams left ~160 MiB resident after all of them had ended; trimming
/// returned it to ~25 MiB). At most once a second, and only after a burst
/// of [`TRIM_AFTER`] closed connections (ordinary reconnects never trigger it).
pub(super) fn spawn_trimmer() {
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
    pub(super) slot: Arc<Slot>,
    listener: Listener,
    /// Bytes read so far, until the first `first_bytes`.
    first: usize,
    handshake: Option<Pin<Box<Sleep>>>,
    idle: Pin<Box<Sleep>>,
    write_stall: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    pub(super) fn new(io: TcpStream, slot: Arc<Slot>, listener: Listener) -> Self {
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

    /// The local address the client connected to (the listener's own
    /// address; for a wildcard listener, the interface's).
    pub fn local(&self) -> Option<SocketAddr> {
        self.io.local_addr().ok()
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
        if self.slot.active.load(Ordering::Acquire) == 0 && !self.slot.yields() {
            let deadline = *lock(&self.slot.idle_since) + self.listener.0.limits.idle_timeout;
            if self.idle.deadline() != deadline {
                self.idle.as_mut().reset(deadline);
            }
            if self.idle.as_mut().poll(cx).is_ready()
                && self.slot.active.load(Ordering::Acquire) == 0
                && !self.slot.yields()
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

impl Listener {
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
                    metrics::counter!(crate::metric::shared::CONNECTIONS_REFUSED.name, "listener" => self.0.name, "reason" => reason)
                        .increment(1);
                    tracing::debug!(listener = self.0.name, peer = %addr, reason, "connection refused");
                }
            }
        }
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
