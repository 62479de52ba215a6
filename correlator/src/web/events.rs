//! Server-sent event streams (`GET /api/stream`), bounded: at most
//! `[web] max_event_streams` open in total and `max_event_streams_per_peer`
//! per client address. A new stream at a cap displaces the oldest one (of
//! that address, or of anyone): the displaced stream gets a last
//! `event: displaced` (with a 10 s `retry`, after which the page's
//! EventSource reconnects) and ends cleanly, counted in
//! `faultline_web_event_streams_displaced_total{reason}`. An open stream
//! never counts as activity on its connection ([`proto::listen::Yields`]):
//! the listener may displace it too, so open streams cannot lock page
//! loads or `/healthz` out.
use std::{
    collections::VecDeque,
    convert::Infallible,
    future::Future as _,
    net::IpAddr,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Duration,
};

use axum::response::sse::Event;
use tokio::sync::oneshot;
use tokio_stream::Stream;

/// How long a displaced page waits before it reconnects.
const RETRY: Duration = Duration::from_secs(10);

struct Entry {
    id: u64,
    ip: IpAddr,
    stop: oneshot::Sender<()>,
}

#[derive(Default)]
struct Open {
    next: u64,
    /// Oldest first.
    streams: VecDeque<Entry>,
}

/// The open event streams and their caps.
pub struct EventStreams {
    max: usize,
    max_per_peer: usize,
    open: Mutex<Open>,
}

impl EventStreams {
    pub fn new(max: usize, max_per_peer: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            max_per_peer: max_per_peer.max(1),
            open: Mutex::default(),
        })
    }

    /// Streams open now.
    pub fn open(&self) -> usize {
        self.lock().streams.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a new stream from `ip`, displacing the oldest at a cap.
    pub fn join(self: &Arc<Self>, ip: IpAddr) -> Ticket {
        let mut o = self.lock();
        if o.streams.iter().filter(|e| e.ip == ip).count() >= self.max_per_peer {
            if let Some(i) = o.streams.iter().position(|e| e.ip == ip) {
                displace(o.streams.remove(i), "per_peer");
            }
        }
        while o.streams.len() >= self.max {
            match o.streams.pop_front() {
                Some(e) => displace(Some(e), "total"),
                None => break,
            }
        }
        let id = o.next;
        o.next += 1;
        let (stop, stopped) = oneshot::channel();
        o.streams.push_back(Entry { id, ip, stop });
        metrics::gauge!(crate::telemetry::WEB_EVENT_STREAMS.name).set(o.streams.len() as f64);
        Ticket {
            id,
            streams: self.clone(),
            stopped,
        }
    }
}

fn displace(e: Option<Entry>, reason: &'static str) {
    if let Some(e) = e {
        metrics::counter!(crate::telemetry::WEB_EVENT_STREAMS_DISPLACED.name, "reason" => reason)
            .increment(1);
        tracing::debug!(peer = %e.ip, reason, "event stream displaced");
        let _ = e.stop.send(());
    }
}

/// One open stream's place; gives it back when dropped.
pub struct Ticket {
    id: u64,
    streams: Arc<EventStreams>,
    stopped: oneshot::Receiver<()>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut o = self.streams.lock();
        if let Some(i) = o.streams.iter().position(|e| e.id == self.id) {
            o.streams.remove(i);
        }
        metrics::gauge!(crate::telemetry::WEB_EVENT_STREAMS.name).set(o.streams.len() as f64);
    }
}

/// `inner` until its [`Ticket`] is displaced: then one `displaced` event,
/// and the end.
pub struct Displaceable<S> {
    inner: Pin<Box<S>>,
    ticket: Ticket,
    state: End,
}

#[derive(PartialEq)]
enum End {
    Running,
    Displaced,
    Done,
}

impl<S> Displaceable<S> {
    pub fn new(inner: S, ticket: Ticket) -> Self {
        Self {
            inner: Box::pin(inner),
            ticket,
            state: End::Running,
        }
    }
}

impl<S: Stream<Item = Result<Event, Infallible>>> Stream for Displaceable<S> {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.state {
            End::Done => return Poll::Ready(None),
            End::Displaced => {
                self.state = End::Done;
                return Poll::Ready(None);
            }
            End::Running => {}
        }
        if Pin::new(&mut self.ticket.stopped).poll(cx).is_ready() {
            self.state = End::Displaced;
            let last = Event::default()
                .event("displaced")
                .data("too many open event streams: reconnecting later")
                .retry(RETRY);
            return Poll::Ready(Some(Ok(last)));
        }
        self.inner.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn the_oldest_stream_goes_first_per_peer_and_in_total() {
        let s = EventStreams::new(3, 2);
        let ip = |n| IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
        let mut a = s.join(ip(1));
        let mut b = s.join(ip(1));
        let mut c = s.join(ip(1));
        // Per peer: a (oldest of 10.0.0.1) goes.
        assert!(a.stopped.try_recv().is_ok());
        assert!(b.stopped.try_recv().is_err());
        let mut d = s.join(ip(2));
        assert_eq!(s.open(), 3);
        // In total: b, the oldest left, goes.
        let _e = s.join(ip(3));
        assert!(b.stopped.try_recv().is_ok());
        assert!(c.stopped.try_recv().is_err() && d.stopped.try_recv().is_err());
        assert_eq!(s.open(), 3);
        drop(c);
        assert_eq!(s.open(), 2);
    }
}
