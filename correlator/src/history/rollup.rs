//! Open rollup buckets kept in memory by the writer: each raw sample is
//! added to its minute and each closed minute to its hour, so rolling up
//! costs one row per series and minute instead of re-reading raw rows. A
//! restart seeds the open buckets from the rows written since the last
//! rolled-up horizon.
use std::collections::HashMap;

/// Count, sum, min and max of a bucket.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Agg {
    pub n: i64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Agg {
    pub fn merge(&mut self, o: Agg) {
        self.n += o.n;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }
}

/// Open buckets at most (series × open minutes/hours); past it samples are
/// kept raw only and counted.
pub const MAX_OPEN: usize = 1 << 22;

/// Open buckets of one resolution, by (series id, bucket start).
#[derive(Debug, Default)]
pub struct Buckets {
    pub open: HashMap<(i64, i64), Agg>,
    /// Samples not aggregated (the bound, or older than the rolled horizon).
    pub skipped: u64,
}

impl Buckets {
    /// Adds `a` at `ts` into the bucket of width `res`, unless it is before
    /// `horizon` (already rolled up).
    pub fn add(&mut self, sid: i64, ts: i64, res: i64, horizon: i64, a: Agg) {
        let b = ts.div_euclid(res) * res;
        if b < horizon {
            self.skipped += 1;
            return;
        }
        if self.open.len() >= MAX_OPEN && !self.open.contains_key(&(sid, b)) {
            self.skipped += 1;
            return;
        }
        self.open
            .entry((sid, b))
            .and_modify(|x| x.merge(a))
            .or_insert(a);
    }

    /// Removes and returns the buckets that start before `until`.
    pub fn take_before(&mut self, until: i64) -> Vec<((i64, i64), Agg)> {
        let keys: Vec<(i64, i64)> = self.open.keys().filter(|k| k.1 < until).copied().collect();
        keys.into_iter()
            .filter_map(|k| self.open.remove(&k).map(|a| (k, a)))
            .collect()
    }
}
