//! Windows held aside: the correlator refused them as from the future
//! (`clock_future`: the host's clock ran ahead when they were stamped, e.g.
//! a bad RTC at boot). Resending them in order would end every stream at
//! the same window until the correlator's clock catches up (a day, for a
//! day-ahead stamp) and no newer window would get through. Instead:
//!
//! - the refused window stays in the spool (its bytes within the spool
//!   bound) but is no longer sent on the stream; newer windows flow;
//! - every window ending at or after it is held without being sent (the
//!   correlator would refuse it too);
//! - one held window (the one ending first) is retried on its own call
//!   after [`RETRY_MIN`], doubling to [`RETRY_MAX`]; when it is accepted
//!   the next ones follow at once;
//! - a window held for [`LIMIT`], or past [`SHARE`] of the spool bound
//!   (oldest first), is dropped, counted in
//!   `faultline_windows_dropped_total{reason="clock_future"}`.
//!
//! Windows are never re-stamped: the collector cannot know when a window
//! stamped by a wrong clock really ended, and a re-stamped window would
//! place its events at the wrong time next to other hosts'.
use std::{collections::BTreeMap, sync::atomic::Ordering, time::Duration};

use proto::v1::{ingest_client::IngestClient, Refusal};
use tokio::time::Instant;

use super::{sender::Sender, spool, tls::AuthChannel, Backoff};

/// First retry of a held window after a refusal.
pub const RETRY_MIN: Duration = Duration::from_secs(1);
/// Retries of held windows back off (doubling, equal jitter) up to this.
pub const RETRY_MAX: Duration = Duration::from_secs(60);
/// A window refused as from the future for this long is dropped: a clock an
/// hour ahead is not a drift the correlator's clock will catch up with in
/// time for its windows to matter.
pub const LIMIT: Duration = Duration::from_secs(3600);
/// Held windows take at most 1/`SHARE` of the spool bound (the oldest held
/// windows are dropped past it), so a collector whose clock stays ahead
/// keeps room for an outage's backlog.
pub const SHARE: u64 = 4;
/// Held windows retried in one go once the correlator accepts them again.
const PER_ROUND: usize = 16;
/// How long one retry call may take.
const RETRY_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, Debug)]
struct Entry {
    since: Instant,
    end_ms: i64,
    size: u64,
}

/// The held-aside windows (names in the spool) and their retry schedule.
#[derive(Debug)]
pub struct Held {
    entries: BTreeMap<String, Entry>,
    bytes: u64,
    /// Windows ending at or after this (unix ms), plus the time since
    /// (the correlator's clock moves on too), are held unsent: at that
    /// instant the correlator refused one that ended then. Cleared when a
    /// held window is accepted.
    horizon: Option<(i64, Instant)>,
    backoff: Backoff,
    next_retry: Option<Instant>,
    /// The episode was logged (once until the held set empties).
    warned: bool,
}

impl Default for Held {
    fn default() -> Self {
        Self {
            entries: BTreeMap::new(),
            bytes: 0,
            horizon: None,
            backoff: Backoff::new(RETRY_MIN, RETRY_MAX),
            next_retry: None,
            warned: false,
        }
    }
}

impl Held {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Whether a window ending at `end_ms` would be refused at `now`.
    pub fn is_future(&self, end_ms: i64, now: Instant) -> bool {
        self.horizon_ms(now).is_some_and(|h| end_ms >= h)
    }

    /// The horizon as of `now`.
    fn horizon_ms(&self, now: Instant) -> Option<i64> {
        self.horizon.map(|(end, at)| {
            let since = now.saturating_duration_since(at).as_millis();
            end.saturating_add(i64::try_from(since).unwrap_or(i64::MAX))
        })
    }

    /// Holds `name` (the correlator refused it, or would: `refused` says
    /// which); the first hold schedules a retry.
    pub fn hold(&mut self, name: &str, (end_ms, size): (i64, u64), refused: bool, now: Instant) {
        if refused && self.horizon_ms(now).is_none_or(|h| end_ms < h) {
            self.horizon = Some((end_ms, now));
        }
        if self.entries.contains_key(name) {
            return;
        }
        let since = now;
        self.entries.insert(
            name.to_string(),
            Entry {
                since,
                end_ms,
                size,
            },
        );
        self.bytes += size;
        if self.next_retry.is_none() {
            self.next_retry = Some(now + self.backoff.next_wait_at_least_half());
        }
    }

    /// When the next retry is due (none while nothing is held).
    pub fn next_retry(&self) -> Option<Instant> {
        self.next_retry.filter(|_| !self.is_empty())
    }

    /// The held window to retry: the one ending first.
    pub fn candidate(&self) -> Option<String> {
        self.entries
            .iter()
            .min_by_key(|(n, e)| (e.end_ms, n.as_str()))
            .map(|(n, _)| n.clone())
    }

    /// The retry was refused again (or failed): the next one backs off.
    pub fn retry_failed(&mut self, now: Instant) {
        self.next_retry = Some(now + self.backoff.next_wait_at_least_half());
    }

    /// `name` was accepted: the correlator's clock caught up, so the other
    /// held windows are retried at once and newer windows sent again.
    pub fn accepted(&mut self, name: &str, now: Instant) {
        self.forget(name);
        self.horizon = None;
        self.backoff.reset();
        self.next_retry = Some(now);
    }

    /// No longer held (delivered, dropped, evicted); whether it was.
    pub fn forget(&mut self, name: &str) -> bool {
        let Some(e) = self.entries.remove(name) else {
            return false;
        };
        self.bytes -= e.size;
        if self.entries.is_empty() {
            self.horizon = None;
            self.backoff.reset();
            self.next_retry = None;
            self.warned = false;
        }
        true
    }

    /// Whether held windows take more than their share of `spool_max`.
    pub fn over_share(&self, spool_max: u64) -> bool {
        self.bytes > spool_max / SHARE
    }

    /// Takes out the windows to drop at `now`: held for [`LIMIT`], then the
    /// oldest held while they take more than 1/[`SHARE`] of `spool_max`.
    pub fn expired(&mut self, now: Instant, spool_max: u64) -> Vec<String> {
        let mut order: Vec<(Instant, String)> = self
            .entries
            .iter()
            .map(|(n, e)| (e.since, n.clone()))
            .collect();
        order.sort();
        let mut gone = Vec::new();
        for (since, name) in order {
            let over = self.over_share(spool_max);
            if !over && now.saturating_duration_since(since) < LIMIT {
                break;
            }
            self.forget(&name);
            gone.push(name);
        }
        gone
    }

    /// Whether the episode still needs its warning (and marks it said).
    fn warn_once(&mut self) -> bool {
        !std::mem::replace(&mut self.warned, true)
    }
}

/// Where a stream stands: the running instance's last window sent, and
/// how far the older windows (earlier runs) were sent.
#[derive(Debug, Default)]
pub(super) struct Cursor {
    current: Option<String>,
    older: Option<String>,
}

impl Cursor {
    /// `name` was sent.
    pub(super) fn sent(&mut self, name: &str, running: Option<&str>) {
        let of_running = running.is_some_and(|r| instance_is(name, r));
        if of_running {
            self.current = Some(name.to_string());
        } else {
            self.older = Some(name.to_string());
        }
    }
}

fn instance_is(name: &str, inst: &str) -> bool {
    spool::parse_name(name).is_some_and(|(i, _)| i == inst)
}

impl Sender {
    /// The next window to send on this stream: the running instance's
    /// windows first, in order (the correlator's sequence rules), then those
    /// of earlier runs (a backlog of any size never delays a new window by
    /// more than the windows already queued on the stream). Held windows
    /// are skipped; windows the correlator would refuse as from the future
    /// are held on the way.
    pub(super) fn next_unsent(&mut self, c: &mut Cursor) -> Option<String> {
        let running = self.running.clone();
        if let Some(inst) = running.as_deref() {
            let mut from = c.current.clone().unwrap_or_else(|| spool::name_of(inst, 0));
            while let Some(n) = self.spool.next_after(Some(&from)) {
                if !instance_is(&n, inst) {
                    break;
                }
                if !self.skip_held(&n) {
                    return Some(n);
                }
                c.current = Some(n.clone());
                from = n;
            }
        }
        loop {
            let n = self.spool.next_after(c.older.as_deref())?;
            if let Some(inst) = running.as_deref().filter(|i| instance_is(&n, i)) {
                // The running instance's windows were looked at above.
                c.older = Some(spool::name_of(inst, u64::MAX));
                continue;
            }
            if !self.skip_held(&n) {
                return Some(n);
            }
            c.older = Some(n);
        }
    }

    /// Whether `name` is held (now, if it ends past the horizon).
    fn skip_held(&mut self, name: &str) -> bool {
        if self.held.contains(name) {
            return true;
        }
        match self.spool.entry(name) {
            Some(e) if self.held.is_future(e.0, Instant::now()) => {
                let now = Instant::now();
                self.held.hold(name, e, false, now);
                if self.held.over_share(self.cfg.spool_max_bytes) {
                    let gone = self.held.expired(now, self.cfg.spool_max_bytes);
                    self.drop_held(&gone, "held windows over their share of the spool");
                }
                self.pending();
                true
            }
            _ => false,
        }
    }

    /// A stream ended with `status`: when the correlator refused a window
    /// as from the future, that window is held aside (and the stream
    /// restarts without it). Returns whether so.
    pub(super) fn held_refusal(&mut self, status: &tonic::Status) -> bool {
        let Some(r) = Refusal::of(status).filter(|r| !r.permanent && r.reason == "clock_future")
        else {
            return false;
        };
        let name = spool::name_of(&r.instance, r.seq);
        let Some(entry) = self.spool.entry(&name) else {
            return false;
        };
        self.held.hold(&name, entry, true, Instant::now());
        self.held_now += 1;
        if self.held.warn_once() {
            tracing::warn!(
                instance = %r.instance,
                seq = r.seq,
                correlator = %status.message(),
                retry_max_s = RETRY_MAX.as_secs(),
                limit_s = LIMIT.as_secs(),
                "the correlator refuses windows as ahead of its clock: held aside and retried, \
                 dropped if still refused after the limit; newer windows keep flowing. Fix the host's clock (NTP)"
            );
        } else {
            tracing::debug!(instance = %r.instance, seq = r.seq, "window held aside: ahead of the correlator's clock");
        }
        self.pending();
        true
    }

    /// Drops held windows from the spool, counted as `clock_future`.
    pub(super) fn drop_held(&mut self, names: &[String], why: &str) {
        for n in names {
            self.held.forget(n);
            self.spool.remove(n);
        }
        let n = names.len() as u64;
        if n == 0 {
            return;
        }
        self.stats.dropped.fetch_add(n, Ordering::Relaxed);
        self.stats.held_dropped.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(crate::metrics_catalog::WINDOWS_DROPPED.name, "reason" => "clock_future")
            .increment(n);
        tracing::warn!(
            windows = n,
            why,
            "held-aside windows dropped from the spool"
        );
        self.pending();
    }

    /// Retries held windows (due now): one call each, the one ending first
    /// first, until one is refused again (which schedules the next retry).
    pub(super) async fn retry_held(
        &mut self,
        client: &mut IngestClient<AuthChannel>,
        delivered: &mut u64,
    ) {
        let now = Instant::now();
        let gone = self.held.expired(now, self.cfg.spool_max_bytes);
        self.drop_held(
            &gone,
            "refused as from the future past the limit, or over their share of the spool",
        );
        let round_end = now + RETRY_TIMEOUT;
        for _ in 0..PER_ROUND {
            if Instant::now() >= round_end {
                // The rest next time round (accepted: due at once).
                return;
            }
            let Some(name) = self.held.candidate() else {
                return;
            };
            let Some(w) = self.spool.read(&name) else {
                self.held.forget(&name);
                continue;
            };
            metrics::counter!(crate::metrics_catalog::SPOOL_HELD_RETRIES.name).increment(1);
            self.stats.held_retries.fetch_add(1, Ordering::Relaxed);
            let call = client.stream(tokio_stream::iter([w]));
            let r = tokio::time::timeout(RETRY_TIMEOUT, call).await;
            match r {
                Ok(Ok(s)) if s.get_ref().accepted == 1 => {
                    self.spool.remove(&name);
                    self.held.accepted(&name, Instant::now());
                    *delivered += 1;
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!(crate::metrics_catalog::WINDOWS_SENT.name).increment(1);
                    self.pending();
                }
                Ok(Ok(_)) => {
                    // A duplicate: the correlator started this instance's
                    // sequence after it (a newer window went first), so it
                    // can never take it.
                    let why = "the correlator already has newer windows of their run (counted as duplicates)";
                    self.drop_held(&[name], why);
                }
                Ok(Err(status)) if self.refused(&status) => {
                    // Refused for good meanwhile (e.g. now too old).
                    self.held.forget(&name);
                }
                Ok(Err(_)) | Err(_) => {
                    self.held.retry_failed(Instant::now());
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_then_resume_at_once_after_an_acceptance() {
        let t = Instant::now();
        let mut h = Held::default();
        assert_eq!(h.next_retry(), None);
        h.hold("a~1", (5_000, 10), true, t);
        h.hold("a~2", (6_000, 10), false, t);
        assert!(h.is_future(5_000, t) && h.is_future(9_000, t) && !h.is_future(4_999, t));
        // The correlator's clock moves on: 2 s later a window ending at
        // 6.5 s may be taken again.
        let later = t + Duration::from_secs(2);
        assert!(!h.is_future(6_500, later) && h.is_future(7_000, later));
        assert_eq!(h.candidate().as_deref(), Some("a~1"));
        // Equal jitter: each wait is at least half of a doubling cap, so
        // at most 6 retries fit into the first 32 s (caps 1, 2, 4, 8, 16,
        // 32, ... halves 0.5 + 1 + 2 + 4 + 8 + 16 = 31.5).
        let mut at = h.next_retry().expect("scheduled");
        assert!(at >= t + RETRY_MIN / 2 && at <= t + RETRY_MIN);
        let mut retries = 1;
        while at < t + Duration::from_secs(32) {
            h.retry_failed(at);
            let next = h.next_retry().expect("scheduled");
            assert!(next > at);
            at = next;
            retries += 1;
        }
        assert!(retries <= 7, "{retries}");
        // Capped.
        for _ in 0..20 {
            h.retry_failed(at);
        }
        assert!(h.next_retry().expect("scheduled") <= at + RETRY_MAX);
        h.accepted("a~1", at);
        assert_eq!(h.next_retry(), Some(at), "the rest follow at once");
        assert!(!h.is_future(9_000, at), "newer windows are sent again");
        assert!(h.forget("a~2"));
        assert_eq!(h.next_retry(), None);
        assert!(h.is_empty());
    }

    #[test]
    fn held_windows_are_dropped_past_the_limit_or_their_share_oldest_first() {
        let t = Instant::now();
        let mut h = Held::default();
        h.hold("a~1", (1, 100), true, t);
        h.hold("a~2", (2, 100), false, t + Duration::from_secs(10));
        h.hold("a~3", (3, 100), false, t + Duration::from_secs(20));
        assert!(h
            .expired(t + LIMIT - Duration::from_secs(1), 1 << 20)
            .is_empty());
        assert_eq!(h.expired(t + LIMIT, 1 << 20), ["a~1"]);
        assert_eq!(h.len(), 2);
        // 200 bytes held, a spool of 600 allows 150: the oldest goes.
        assert_eq!(h.expired(t, 600), ["a~2"]);
        assert_eq!(h.expired(t, 600), Vec::<String>::new());
        assert_eq!(h.expired(t + LIMIT + Duration::from_secs(20), 600), ["a~3"]);
        assert!(h.is_empty() && h.next_retry().is_none());
    }
}
