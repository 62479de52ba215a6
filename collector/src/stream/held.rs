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
use std::{collections::BTreeMap, time::Duration};

use tokio::time::Instant;

use super::Backoff;

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
    pub(super) fn warn_once(&mut self) -> bool {
        !std::mem::replace(&mut self.warned, true)
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
