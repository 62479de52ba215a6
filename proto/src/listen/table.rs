//! The table of a listener's open connections: admission within the
//! limits, eviction of the longest-idle one, and which are busy.
use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex, MutexGuard, PoisonError,
    },
    task::Waker,
    time::Duration,
};

use tokio::time::Instant;

use super::Limits;

/// A connection idle at least this long may be displaced by a new one at a
/// limit (younger ones are a client that has not sent its request yet).
pub const EVICT_AFTER: Duration = Duration::from_secs(1);

/// One connection's state, shared by its I/O and its requests.
pub(super) struct Slot {
    pub(super) peer: SocketAddr,
    /// Requests or streams in progress.
    pub(super) active: AtomicUsize,
    /// Long-lived responses in progress that yield their slot to others
    /// (server-sent events, [`Yields`]): they keep the connection from the
    /// idle timeout but not from being displaced.
    pub(super) yielding: AtomicUsize,
    /// The authenticated identity first seen on it ([`Listener::own`]).
    pub(super) owner: Mutex<Option<u64>>,
    /// When `active` last dropped to 0 (or the connection was accepted).
    pub(super) idle_since: Mutex<Instant>,
    /// Why the listener closed it (set once).
    pub(super) closed: Mutex<Option<&'static str>>,
    /// Its counts were given back (at eviction, or when it closed).
    pub(super) released: AtomicBool,
    /// The connection's reader, woken to notice a close or an idle start.
    pub(super) waker: Mutex<Option<Waker>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Slot {
    pub(super) fn wake(&self) {
        if let Some(w) = lock(&self.waker).take() {
            w.wake();
        }
    }

    pub(super) fn idle_for(&self, now: Instant) -> Option<Duration> {
        (self.active.load(Ordering::Acquire) == 0)
            .then(|| now.saturating_duration_since(*lock(&self.idle_since)))
    }

    /// Whether only yielding responses (or nothing) are in progress.
    pub(super) fn yields(&self) -> bool {
        self.yielding.load(Ordering::Acquire) > 0
    }
}

#[derive(Default)]
pub(super) struct State {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
    per_owner: HashMap<u64, usize>,
    conns: HashMap<SocketAddr, Arc<Slot>>,
    warned: bool,
}

pub(super) struct Table {
    pub(super) name: &'static str,
    pub(super) limits: Limits,
    pub(super) first_bytes: usize,
    pub(super) state: Mutex<State>,
}

/// A listener's limits and its open connections.
#[derive(Clone)]
pub struct Listener(pub(super) Arc<Table>);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("name", &self.0.name)
            .field("limits", &self.0.limits)
            .finish()
    }
}

pub(super) fn closed_metric(listener: &'static str, reason: &'static str) {
    metrics::counter!(crate::metric::shared::CONNECTIONS_CLOSED.name, "listener" => listener, "reason" => reason)
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
    pub(super) fn admit(&self, peer: SocketAddr) -> Result<Arc<Slot>, &'static str> {
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
            yielding: AtomicUsize::new(0),
            owner: Mutex::new(None),
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
        self.evict_where(st, now, |s| ip.is_none_or(|ip| s.peer.ip() == ip))
    }

    /// Closes the connection idle longest among those `which` picks: idle
    /// for [`EVICT_AFTER`] (younger ones have not sent their request yet),
    /// or holding only yielding responses (their request is in, so any
    /// age); whether one was.
    fn evict_where(&self, st: &mut State, now: Instant, which: impl Fn(&Slot) -> bool) -> bool {
        let min = EVICT_AFTER.min(self.0.limits.idle_timeout);
        let victim = st
            .conns
            .values()
            .filter(|s| which(s))
            .filter_map(|s| {
                s.idle_for(now)
                    .filter(|d| *d >= min || s.yields())
                    .map(|d| (d, s))
            })
            .max_by_key(|(d, _)| *d)
            .map(|(_, s)| s.clone());
        let Some(v) = victim else {
            return false;
        };
        let reason = if v.yields() {
            "evicted_stream"
        } else {
            "evicted"
        };
        self.close(st, &v, reason);
        true
    }

    /// Ties the connection from `peer` to the authenticated identity
    /// `owner` (its first one; later calls for it are free): at most `max`
    /// connections per identity. At the cap the identity's longest-idle
    /// other connection is displaced (the same rule as per address), else
    /// `Err("per_identity")` — the caller refuses the request, and the
    /// connection, idle, goes the way of idle ones. `Ok` for a connection
    /// this listener does not know.
    pub fn own(&self, peer: SocketAddr, owner: u64, max: usize) -> Result<(), &'static str> {
        let now = Instant::now();
        let mut st = lock(&self.0.state);
        let Some(slot) = st.conns.get(&peer).cloned() else {
            return Ok(());
        };
        if lock(&slot.owner).is_some() {
            return Ok(());
        }
        if st.per_owner.get(&owner).copied().unwrap_or(0) >= max
            && !self.evict_where(&mut st, now, |s| {
                !std::ptr::eq(s, &*slot) && *lock(&s.owner) == Some(owner)
            })
        {
            return Err("per_identity");
        }
        *lock(&slot.owner) = Some(owner);
        *st.per_owner.entry(owner).or_insert(0) += 1;
        Ok(())
    }

    /// Marks the connection from `peer` as first to go at a limit when it
    /// has nothing in progress: its caller was just refused (over a share),
    /// so it need not wait [`EVICT_AFTER`] to make room for someone else.
    pub fn spare(&self, peer: SocketAddr) {
        let Some(slot) = lock(&self.0.state).conns.get(&peer).cloned() else {
            return;
        };
        if slot.active.load(Ordering::Acquire) == 0 {
            let mut since = lock(&slot.idle_since);
            if let Some(t) = since.checked_sub(EVICT_AFTER) {
                *since = t;
            }
        }
    }

    /// Connections tied to `owner` now.
    pub fn owned_by(&self, owner: u64) -> usize {
        lock(&self.0.state)
            .per_owner
            .get(&owner)
            .copied()
            .unwrap_or(0)
    }

    /// Marks `slot` closed for `reason` (counted), gives its counts back and
    /// wakes its reader, which then fails and the server drops it.
    pub(super) fn close(&self, st: &mut State, slot: &Slot, reason: &'static str) {
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

    pub(super) fn release(st: &mut State, slot: &Slot) {
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
        if let Some(o) = *lock(&slot.owner) {
            if let Some(n) = st.per_owner.get_mut(&o) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    st.per_owner.remove(&o);
                }
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
}

/// Marks a response (in its extensions) as long-lived and yielding:
/// [`serve_http1`](super::serve_http1) then does not count it as activity
/// once its head is out. Its connection is never closed as idle while it
/// runs, but may be displaced at a limit (longest-running first,
/// `faultline_connections_closed_total{reason="evicted_stream"}`), so that
/// open event streams cannot lock other clients out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Yields;

/// A yielding response in progress (see [`Yields`]).
pub(super) struct Yielding(Arc<Slot>);

impl Yielding {
    pub(super) fn new(slot: Arc<Slot>) -> Self {
        slot.yielding.fetch_add(1, Ordering::AcqRel);
        Self(slot)
    }
}

impl Drop for Yielding {
    fn drop(&mut self) {
        if self.0.yielding.fetch_sub(1, Ordering::AcqRel) == 1 {
            *lock(&self.0.idle_since) = Instant::now();
            self.0.wake();
        }
    }
}

/// A request or stream in progress on a connection.
pub struct Busy(Arc<Slot>);

impl Busy {
    pub(super) fn new(slot: Arc<Slot>) -> Self {
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

    #[tokio::test(start_paused = true)]
    async fn yielding_streams_are_displaced_longest_running_first_at_any_age() {
        let l = Listener::new("test", limits(2, 2, 10_000), 1);
        let a = l.admit(addr([10, 0, 0, 1], 1)).expect("a");
        let _ya = Yielding::new(a.clone());
        tokio::time::advance(Duration::from_millis(10)).await;
        let b = l.admit(addr([10, 0, 0, 2], 1)).expect("b");
        let _yb = Yielding::new(b.clone());
        // Both streams are younger than EVICT_AFTER: still displaced, a first.
        let _c = l.admit(addr([10, 0, 0, 3], 1)).expect("c displaces a");
        assert_eq!(*lock(&a.closed), Some("evicted_stream"));
        assert_eq!(*lock(&b.closed), None);
    }

    #[tokio::test(start_paused = true)]
    async fn connections_per_identity_displace_the_identitys_own_idle_one() {
        let l = Listener::new("test", limits(10, 10, 10_000), 1);
        let a = l.admit(addr([10, 0, 0, 1], 1)).expect("a");
        let b = l.admit(addr([10, 0, 0, 2], 1)).expect("b");
        let c = l.admit(addr([10, 0, 0, 3], 1)).expect("c");
        let other = l.admit(addr([10, 0, 0, 4], 1)).expect("other");
        l.own(a.peer, 7, 2).expect("first of 7");
        let _busy = l.busy(a.peer).expect("a busy");
        l.own(b.peer, 7, 2).expect("second of 7");
        l.own(other.peer, 8, 2).expect("another identity");
        assert_eq!(l.owned_by(7), 2);
        // b is idle but younger than EVICT_AFTER: c is refused.
        assert_eq!(l.own(c.peer, 7, 2), Err("per_identity"));
        tokio::time::advance(EVICT_AFTER).await;
        l.own(c.peer, 7, 2).expect("c displaces b, never a (busy)");
        assert_eq!(*lock(&b.closed), Some("evicted"));
        assert_eq!(*lock(&a.closed), None);
        assert_eq!(*lock(&other.closed), None);
        assert_eq!(l.owned_by(7), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_spared_connection_makes_room_at_once() {
        let l = Listener::new("test", limits(2, 2, 10_000), 1);
        let a = l.admit(addr([10, 0, 0, 1], 1)).expect("a");
        let b = l.admit(addr([10, 0, 0, 2], 1)).expect("b");
        assert_eq!(l.admit(addr([10, 0, 0, 3], 1)).err(), Some("total"));
        l.spare(b.peer);
        l.admit(addr([10, 0, 0, 3], 1))
            .expect("b, spared, makes room");
        assert_eq!(*lock(&b.closed), Some("evicted"));
        assert_eq!(*lock(&a.closed), None);
    }
}
