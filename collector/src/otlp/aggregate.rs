//! Bounded per-window aggregation. Receivers call [`Aggregator::ingest`]
//! (a short mutex: cumulative → delta and a map update per point); the
//! window loop calls [`Aggregator::take`] once per window, which swaps the
//! window's map out. Cumulative series keep their last point across windows
//! (bounded, pruned when idle).
use std::{
    collections::{BTreeMap, HashMap},
    sync::{Mutex, PoisonError},
    time::{SystemTime, UNIX_EPOCH},
};

use super::decode::{exp_bound, reason, Buckets, Point, Raw, Target, Temporality};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Distinct targets per window; points of new targets past it are dropped.
    pub max_series_per_window: usize,
    /// Cumulative series whose last point is kept.
    pub max_cumulative_series: usize,
    /// Distinct buckets kept per target and window (count and sum stay exact past it).
    pub max_buckets_per_series: usize,
    /// A cumulative series not seen for this many windows is forgotten.
    pub idle_windows: u64,
}

impl Limits {
    pub fn new(max_series_per_window: usize) -> Self {
        Self {
            max_series_per_window,
            max_cumulative_series: max_series_per_window.saturating_mul(4).max(64),
            max_buckets_per_series: 1024,
            idle_windows: 600,
        }
    }
}

/// One target's observations in a window, in the signal's unit.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Agg {
    pub count: u64,
    pub sum: f64,
    /// Largest observation, or the upper bound of the highest non-empty bucket.
    pub max: Option<f64>,
    /// Observations per `(lo, hi)` range (`f64::to_bits`); empty when no point had buckets.
    buckets: BTreeMap<(u64, u64), u64>,
    /// Observations whose bucket did not fit `max_buckets_per_series`.
    pub buckets_dropped: u64,
}

/// `a + b`, saturating at ±`f64::MAX`: the correlator drops a row whose sum
/// is not finite, so an overflowing sum must not take the series with it.
fn add_sat(a: f64, b: f64) -> f64 {
    (a + b).clamp(-f64::MAX, f64::MAX)
}

impl Agg {
    pub fn has_buckets(&self) -> bool {
        !self.buckets.is_empty()
    }

    fn add_bucket(&mut self, lo: f64, hi: f64, n: u64, cap: usize) {
        if n == 0 {
            return;
        }
        let key = (lo.to_bits(), hi.to_bits());
        if self.buckets.len() < cap || self.buckets.contains_key(&key) {
            let b = self.buckets.entry(key).or_default();
            *b = b.saturating_add(n);
        } else {
            self.buckets_dropped = self.buckets_dropped.saturating_add(n);
        }
    }

    fn add_max(&mut self, m: f64) {
        let m = m.clamp(-f64::MAX, f64::MAX);
        self.max = Some(self.max.map_or(m, |x| x.max(m)));
    }

    fn add(&mut self, count: u64, sum: f64) {
        self.count = self.count.saturating_add(count);
        self.sum = add_sat(self.sum, sum);
    }

    /// Adds everything of `other` (targets that resolve to the same job/rank).
    pub fn merge(&mut self, other: &Agg, cap: usize) {
        self.add(other.count, other.sum);
        if let Some(m) = other.max {
            self.add_max(m);
        }
        for (&(lo, hi), &n) in &other.buckets {
            self.add_bucket(f64::from_bits(lo), f64::from_bits(hi), n, cap);
        }
        self.buckets_dropped = self.buckets_dropped.saturating_add(other.buckets_dropped);
    }

    /// The `q` quantile (0..=1) of the bucketed observations, each bucket's
    /// observations spread evenly over its range; `None` without buckets.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let b: Vec<(f64, f64, f64)> = self
            .buckets
            .iter()
            .map(|(&(lo, hi), &n)| (f64::from_bits(lo), f64::from_bits(hi), n as f64))
            .collect();
        let total: f64 = b.iter().map(|x| x.2).sum();
        if total == 0.0 {
            return None;
        }
        let target = q.clamp(0.0, 1.0) * total;
        let cdf = |x: f64| -> f64 {
            b.iter()
                .map(|&(lo, hi, n)| {
                    if x >= hi {
                        n
                    } else if x < lo || hi <= lo {
                        0.0
                    } else {
                        n * (x - lo) / (hi - lo)
                    }
                })
                .sum()
        };
        let mut lo = b.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
        let mut hi = b.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
        if cdf(lo) >= target {
            return Some(lo);
        }
        for _ in 0..100 {
            let mid = lo + (hi - lo) / 2.0;
            if mid <= lo || mid >= hi {
                break;
            }
            if cdf(mid) >= target {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }
}

/// A point's values converted to observations (the signal's unit).
fn observe(raw: &Raw, factor: f64, exact_max: bool, agg: &mut Agg, cap: usize) {
    match raw {
        Raw::Number(v) => {
            let v = v * factor;
            agg.add(1, v);
            agg.add_max(v);
        }
        Raw::Explicit {
            count,
            sum,
            bounds,
            counts,
            min,
            max,
        } => {
            agg.add(*count, sum * factor);
            let (min, max) = (min.map(|m| m * factor), max.map(|m| m * factor));
            let n = bounds.len();
            let mut top = None;
            for (i, &c) in counts.iter().enumerate() {
                if c == 0 || n == 0 {
                    continue;
                }
                let mut lo = if i == 0 {
                    let b0 = bounds[0] * factor;
                    min.map_or(b0.min(0.0), |m| m.min(b0))
                } else {
                    bounds[i - 1] * factor
                };
                let mut hi = if i == n {
                    let bn = bounds[n - 1] * factor;
                    max.map_or(bn, |m| m.max(bn))
                } else {
                    bounds[i] * factor
                };
                if let Some(m) = min {
                    lo = lo.max(m);
                }
                if let Some(m) = max {
                    hi = hi.min(m);
                }
                lo = lo.min(hi);
                agg.add_bucket(lo, hi, c, cap);
                top = Some(hi);
            }
            // A cumulative series' max may predate the interval: then the
            // highest non-empty bucket's bound is the best known.
            if let Some(m) = if exact_max { max.or(top) } else { top } {
                agg.add_max(m);
            }
        }
        Raw::Exponential {
            count,
            sum,
            scale,
            zero_count,
            positive,
            negative,
            min,
            max,
        } => {
            agg.add(*count, sum * factor);
            let (min, max) = (min.map(|m| m * factor), max.map(|m| m * factor));
            let bound = |i: i64| exp_bound(*scale, i) * factor;
            let clamp = |lo: f64, hi: f64| {
                let lo = min.map_or(lo, |m| lo.max(m));
                let hi = max.map_or(hi, |m| hi.min(m));
                (lo.min(hi), hi)
            };
            let mut top = None;
            for (i, &c) in negative.counts.iter().enumerate() {
                let idx = i64::from(negative.offset) + i as i64;
                let (lo, hi) = clamp(-bound(idx + 1), -bound(idx));
                agg.add_bucket(lo, hi, c, cap);
                if c > 0 {
                    top = top.or(Some(hi));
                }
            }
            let (zlo, zhi) = clamp(0.0, 0.0);
            agg.add_bucket(zlo, zhi, *zero_count, cap);
            if *zero_count > 0 {
                top = Some(zhi);
            }
            for (i, &c) in positive.counts.iter().enumerate() {
                let idx = i64::from(positive.offset) + i as i64;
                let (lo, hi) = clamp(bound(idx), bound(idx + 1));
                agg.add_bucket(lo, hi, c, cap);
                if c > 0 {
                    top = Some(hi);
                }
            }
            // A cumulative series' max may predate the interval: then the
            // highest non-empty bucket's bound is the best known.
            if let Some(m) = if exact_max { max.or(top) } else { top } {
                agg.add_max(m);
            }
        }
    }
}

/// `b` re-indexed to a coarser scale (`shift` = old scale − new scale).
fn downscale(b: &Buckets, shift: u32) -> BTreeMap<i64, u64> {
    let mut out = BTreeMap::new();
    for (i, &c) in b.counts.iter().enumerate() {
        let idx = i64::from(b.offset) + i as i64;
        *out.entry(idx >> shift).or_default() += c;
    }
    out
}

/// `cur − prev` per bucket index; `None` when a bucket went down (a reset).
fn sub_buckets(cur: &Buckets, prev: &BTreeMap<i64, u64>) -> Option<Buckets> {
    let mut counts = Vec::with_capacity(cur.counts.len());
    let mut used = 0u64;
    for (i, &c) in cur.counts.iter().enumerate() {
        let idx = i64::from(cur.offset) + i as i64;
        let p = prev.get(&idx).copied().unwrap_or(0);
        used += p;
        counts.push(c.checked_sub(p)?);
    }
    // Every earlier observation must still be in a bucket of `cur`.
    (used == prev.values().sum::<u64>()).then_some(Buckets {
        offset: cur.offset,
        counts,
    })
}

/// What happened in the interval since `prev` (both cumulative, same
/// series and start); `None` when `cur` is not a continuation (a reset).
/// The flag says whether the delta's `max` is exactly its largest observation.
fn delta(prev: &Raw, cur: &Raw) -> Option<(Raw, bool)> {
    match (prev, cur) {
        (Raw::Number(p), Raw::Number(c)) => (c >= p).then(|| (Raw::Number(c - p), true)),
        (
            Raw::Explicit {
                count: pc,
                sum: ps,
                bounds: pb,
                counts: pk,
                max: pmax,
                ..
            },
            Raw::Explicit {
                count,
                sum,
                bounds,
                counts,
                min,
                max,
            },
        ) => {
            if count < pc || bounds != pb || counts.len() != pk.len() {
                return None;
            }
            let counts = counts
                .iter()
                .zip(pk)
                .map(|(c, p)| c.checked_sub(*p))
                .collect::<Option<Vec<u64>>>()?;
            let new_max = matches!((max, pmax), (Some(m), Some(p)) if m > p);
            Some((
                Raw::Explicit {
                    count: count - pc,
                    sum: sum - ps,
                    bounds: bounds.clone(),
                    counts,
                    min: *min,
                    max: *max,
                },
                new_max,
            ))
        }
        (
            Raw::Exponential {
                count: pc,
                sum: ps,
                scale: pscale,
                zero_count: pz,
                positive: ppos,
                negative: pneg,
                max: pmax,
                ..
            },
            Raw::Exponential {
                count,
                sum,
                scale,
                zero_count,
                positive,
                negative,
                min,
                max,
            },
        ) => {
            if count < pc || scale > pscale || zero_count < pz {
                return None;
            }
            let shift = u32::try_from(pscale - scale).ok()?;
            let positive = sub_buckets(positive, &downscale(ppos, shift))?;
            let negative = sub_buckets(negative, &downscale(pneg, shift))?;
            let new_max = matches!((max, pmax), (Some(m), Some(p)) if m > p);
            Some((
                Raw::Exponential {
                    count: count - pc,
                    sum: sum - ps,
                    scale: *scale,
                    zero_count: zero_count - pz,
                    positive,
                    negative,
                    min: *min,
                    max: *max,
                },
                new_max,
            ))
        }
        _ => None,
    }
}

/// A point's sum of observations (in the metric's unit).
fn sum_of(raw: &Raw) -> f64 {
    match raw {
        Raw::Number(v) => *v,
        Raw::Explicit { sum, .. } | Raw::Exponential { sum, .. } => *sum,
    }
}

struct Last {
    start_ns: u64,
    raw: Raw,
    seen: u64,
}

#[derive(Default)]
struct State {
    window: HashMap<Target, Agg>,
    last: HashMap<u64, Last>,
    generation: u64,
}

/// What [`Aggregator::ingest`] did with a request's points.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ingested {
    /// Points aggregated (a cumulative series' first point, when it is a baseline, included).
    pub accepted: u64,
    pub dropped: Vec<(&'static str, u64)>,
}

impl Ingested {
    fn drop_point(&mut self, why: &'static str) {
        match self.dropped.iter_mut().find(|(r, _)| *r == why) {
            Some((_, n)) => *n += 1,
            None => self.dropped.push((why, 1)),
        }
    }
}

pub struct Aggregator {
    state: Mutex<State>,
    limits: Limits,
    /// Receiver start (unix ns): a cumulative series that started after it
    /// is counted in full from its first point; an older one's first point
    /// is only a baseline (its history predates the collector).
    started_ns: u64,
}

impl Aggregator {
    pub fn new(limits: Limits) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Self::with_start(limits, now)
    }

    pub fn with_start(limits: Limits, started_ns: u64) -> Self {
        Self {
            state: Mutex::new(State::default()),
            limits,
            started_ns,
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn ingest(&self, points: Vec<Point>) -> Ingested {
        let mut out = Ingested::default();
        let lim = self.limits;
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let st = &mut *st;
        for p in points {
            let (raw, exact_max) = match p.temporality {
                Temporality::Gauge | Temporality::Delta => (p.raw, true),
                Temporality::Cumulative => {
                    let gen = st.generation;
                    let full = st.last.len() >= lim.max_cumulative_series;
                    let d = match st.last.get_mut(&p.series) {
                        Some(last) => {
                            let d = if last.start_ns == p.start_ns {
                                delta(&last.raw, &p.raw)
                            } else {
                                None
                            };
                            // A duration's total cannot go down either.
                            let d =
                                d.filter(|(r, _)| !(p.target.signal.is_time() && sum_of(r) < 0.0));
                            // A reset (new start, or values went down): the point is all new.
                            let d = d.unwrap_or_else(|| (p.raw.clone(), true));
                            last.raw = p.raw;
                            last.start_ns = p.start_ns;
                            last.seen = gen;
                            Some(d)
                        }
                        None if full => {
                            out.drop_point(reason::STATE_CAP);
                            continue;
                        }
                        None => {
                            let fresh = p.start_ns != 0 && p.start_ns >= self.started_ns;
                            let d = fresh.then(|| (p.raw.clone(), true));
                            st.last.insert(
                                p.series,
                                Last {
                                    start_ns: p.start_ns,
                                    raw: p.raw,
                                    seen: gen,
                                },
                            );
                            d
                        }
                    };
                    match d {
                        Some(d) => d,
                        None => {
                            out.accepted += 1;
                            continue;
                        }
                    }
                }
            };
            let empty = match &raw {
                Raw::Number(_) => false,
                Raw::Explicit { count, .. } | Raw::Exponential { count, .. } => *count == 0,
            };
            if empty {
                out.accepted += 1;
                continue;
            }
            let len = st.window.len();
            let agg = match st.window.get_mut(&p.target) {
                Some(a) => a,
                None if len >= lim.max_series_per_window => {
                    out.drop_point(reason::SERIES_CAP);
                    continue;
                }
                None => st.window.entry(p.target).or_default(),
            };
            observe(&raw, p.factor, exact_max, agg, lim.max_buckets_per_series);
            out.accepted += 1;
        }
        out
    }

    /// The window's aggregates (swapped out: the next window starts empty).
    pub fn take(&self) -> Vec<(Target, Agg)> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.generation += 1;
        let (gen, idle) = (st.generation, self.limits.idle_windows);
        st.last.retain(|_, l| gen - l.seen <= idle);
        let mut v: Vec<(Target, Agg)> = std::mem::take(&mut st.window).into_iter().collect();
        drop(st);
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}
