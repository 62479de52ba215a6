//! A port's samples over the horizon (`horizon_s`) with running totals, so
//! each window costs O(families), not O(samples).
use std::collections::VecDeque;

/// Physical error counter families judged (`ERROR_COUNTERS`).
pub(super) const FAMILIES: usize = 6;
/// Bound of a port's sample history (the horizon is in seconds; this caps
/// it for very short windows).
const MAX_SAMPLES: usize = 3600;

/// One window of one port, as the tests need it.
#[derive(Clone, Debug, Default)]
pub(super) struct Sample {
    pub secs: f64,
    /// Bits signalled while ACTIVE (rate × seconds), 0 when unknown.
    pub bits: f64,
    /// Errors per physical family; `None` when unknown (reset, saturated,
    /// missing).
    pub errors: [Option<u64>; FAMILIES],
    /// Transport retries and packets, when both are known.
    pub retries: Option<(u64, u64)>,
    /// Bytes sent and received, when known, and the link's rate.
    pub bytes: Option<u64>,
    pub rate_bytes: u64,
}

/// Sums of a port's samples over the horizon and over its latest window.
#[derive(Debug, Default)]
pub(super) struct Sums {
    /// Per family: (errors, bits) over the horizon, and the latest window's.
    pub horizon: [(u64, f64); FAMILIES],
    pub window: [(u64, f64); FAMILIES],
    pub retries_h: (u64, u64),
    pub retries_w: (u64, u64),
    pub secs: f64,
    pub window_secs: f64,
}

/// A port's samples over the horizon with their running totals, and
/// per-minute sums for the long horizons.
#[derive(Debug, Default)]
pub(super) struct History {
    pub samples: VecDeque<Sample>,
    pub secs: f64,
    errors: [(u64, f64); FAMILIES],
    retries: (u64, u64),
    minutes: Minutes,
}

/// Seconds of one long-horizon bucket.
const MINUTE_S: f64 = 60.0;
/// Buckets kept: the longest long horizon (3600 s) and the one filling.
const MAX_MINUTES: usize = 61;

/// Per-minute error and bit sums (by the port's own signalled seconds, so
/// a gap in windows does not count as time), newest last.
#[derive(Debug, Default)]
struct Minutes {
    /// Seconds signalled since the first sample (the buckets' clock).
    clock: f64,
    buckets: VecDeque<(u64, [(u64, f64); FAMILIES])>,
}

impl Minutes {
    fn add(&mut self, x: &Sample) {
        self.clock += x.secs;
        let index = (self.clock / MINUTE_S) as u64;
        if self.buckets.back().is_none_or(|b| b.0 != index) {
            if self.buckets.len() == MAX_MINUTES {
                self.buckets.pop_front();
            }
            self.buckets.push_back((index, [(0, 0.0); FAMILIES]));
        }
        if let (Some((_, b)), true) = (self.buckets.back_mut(), x.bits > 0.0) {
            for (sum, e) in b.iter_mut().zip(x.errors) {
                if let Some(e) = e {
                    sum.0 += e;
                    sum.1 += x.bits;
                }
            }
        }
    }

    /// Sums over the last `horizon_s` (whole minutes, the filling one
    /// included) and the seconds they span; `None` until the history is
    /// that long.
    fn over(&self, horizon_s: f64) -> Option<(f64, [(u64, f64); FAMILIES])> {
        let newest = self.buckets.back()?.0;
        let span = (horizon_s / MINUTE_S).ceil() as u64;
        if self.clock < horizon_s || self.buckets.front()?.0 + span > newest + 1 {
            return None;
        }
        let mut sum = [(0, 0.0); FAMILIES];
        for (_, b) in self.buckets.iter().filter(|b| b.0 + span > newest) {
            for f in 0..FAMILIES {
                sum[f].0 += b[f].0;
                sum[f].1 += b[f].1;
            }
        }
        let secs = self.clock - (newest + 1 - span) as f64 * MINUTE_S;
        Some((secs.min(span as f64 * MINUTE_S), sum))
    }
}

/// Errors and bits of one family in two consecutive stretches of minutes.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Trend {
    pub family: usize,
    pub k_old: u64,
    pub b_old: f64,
    pub k_new: u64,
    pub b_new: f64,
    /// Seconds between the two stretches' middles.
    pub dt_s: f64,
}

/// Error and bit sums over one long horizon.
#[derive(Clone, Debug)]
pub(super) struct LongSum {
    /// The horizon (configured seconds) and the seconds the sums span.
    pub horizon_s: f64,
    pub secs: f64,
    pub errors: [(u64, f64); FAMILIES],
}

impl History {
    fn apply(&mut self, x: &Sample, sign: bool) {
        let add = |a: u64, b: u64| if sign { a + b } else { a.saturating_sub(b) };
        let addf = |a: f64, b: f64| if sign { a + b } else { (a - b).max(0.0) };
        self.secs = addf(self.secs, x.secs);
        for f in 0..FAMILIES {
            if let (Some(e), true) = (x.errors[f], x.bits > 0.0) {
                self.errors[f] = (add(self.errors[f].0, e), addf(self.errors[f].1, x.bits));
            }
        }
        if let Some((r, p)) = x.retries {
            self.retries = (add(self.retries.0, r), add(self.retries.1, p));
        }
    }

    /// Appends a sample and drops the oldest ones beyond the horizon
    /// (keeping the shortest suffix that spans it).
    pub fn push(&mut self, x: Sample, horizon_s: f64) {
        if self.samples.len() == MAX_SAMPLES {
            if let Some(old) = self.samples.pop_front() {
                self.apply(&old, false);
            }
        }
        self.apply(&x, true);
        self.minutes.add(&x);
        self.samples.push_back(x);
        while self.samples.len() > 1
            && self
                .samples
                .front()
                .is_some_and(|s| self.secs - s.secs >= horizon_s)
        {
            if let Some(old) = self.samples.pop_front() {
                self.apply(&old, false);
            }
        }
    }

    pub fn last(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// Forgets every sample but the latest: the rate changed there (the
    /// errors stopped), and the horizon judges only the present regime.
    pub fn restart(&mut self) {
        let keep = self.samples.pop_back();
        *self = History::default();
        if let Some(x) = keep {
            self.apply(&x, true);
            self.minutes.add(&x);
            self.samples.push_back(x);
        }
    }

    /// The BER trend of the family with the most recent errors, from the
    /// per-minute sums: the last third of the kept minutes against the two
    /// thirds before (at least 6 full minutes).
    pub fn trend(&self) -> Option<Trend> {
        let b = &self.minutes.buckets;
        // Full minutes only: the filling one is left out.
        let full = b.len().checked_sub(1)?.min(15);
        if full < 6 {
            return None;
        }
        let recent_n = full / 3;
        let older_n = full - recent_n;
        let skip = b.len() - 1 - full;
        let sum = |from: usize, n: usize, f: usize| {
            b.iter()
                .skip(from)
                .take(n)
                .fold((0u64, 0.0f64), |a, x| (a.0 + x.1[f].0, a.1 + x.1[f].1))
        };
        let f = (0..FAMILIES).max_by_key(|&f| sum(skip + older_n, recent_n, f).0)?;
        let (k_old, b_old) = sum(skip, older_n, f);
        let (k_new, b_new) = sum(skip + older_n, recent_n, f);
        if b_old <= 0.0 || b_new <= 0.0 || k_new == 0 {
            return None;
        }
        Some(Trend {
            family: f,
            k_old,
            b_old,
            k_new,
            b_new,
            // Between the segments' middles.
            dt_s: (older_n + recent_n) as f64 * MINUTE_S / 2.0,
        })
    }

    /// Sums over each long horizon the history already spans.
    pub fn long_sums(&self, horizons_s: &[f64]) -> Vec<LongSum> {
        horizons_s
            .iter()
            .filter_map(|&h| {
                let (secs, errors) = self.minutes.over(h)?;
                Some(LongSum {
                    horizon_s: h,
                    secs,
                    errors,
                })
            })
            .collect()
    }

    pub fn sums(&self) -> Sums {
        let mut s = Sums {
            horizon: self.errors,
            retries_h: self.retries,
            secs: self.secs,
            ..Sums::default()
        };
        if let Some(x) = self.last() {
            s.window_secs = x.secs;
            for f in 0..FAMILIES {
                if let (Some(e), true) = (x.errors[f], x.bits > 0.0) {
                    s.window[f] = (e, x.bits);
                }
            }
            if let Some(r) = x.retries {
                s.retries_w = r;
            }
        }
        s
    }
}

/// The link's rate over the horizon (bits per second) of family `f`, so
/// that `bits / rate` is the seconds the family was known.
pub(super) fn horizon_secs(s: &Sums, f: usize) -> f64 {
    let (_, bh) = s.horizon[f];
    let (_, bw) = s.window[f];
    let secs = s.window_secs;
    if bw > 0.0 && secs > 0.0 {
        // The family's bits over the horizon at this window's bit rate.
        bh / (bw / secs)
    } else {
        // No rate this window (the counter saturated or reset): the
        // horizon's length, not its bits.
        s.secs
    }
}
