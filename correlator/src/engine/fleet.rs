//! Mergeable summaries: what a shard tells the other shards about its part
//! of the fleet, so each judges its own entities against the whole fleet's
//! references, as one correlator would (docs/scale-out.md).
//!
//! A summary holds counts (ports tracked, ports flagged per family) that
//! add up exactly, and the distributions of the ports' horizon BER and
//! retries per packet as log-binned histograms ([`LogHist`], 20 bins a
//! decade) that merge by adding bins: a median over merged histograms is
//! exact to one bin (a factor 10^(1/20) ≈ 1.12), which is the one
//! approximation in them. Summaries travel as JSON.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bins a decade.
const PER_DECADE: f64 = 20.0;
/// The bin of zeros and values below 1e-30.
const ZERO: i32 = i32::MIN;

/// A log-binned histogram of non-negative values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogHist {
    /// Bin → count; bin `b` holds values in [10^(b/20), 10^((b+1)/20)).
    bins: BTreeMap<i32, u64>,
}

impl LogHist {
    fn bin(v: f64) -> i32 {
        if v.is_finite() && v > 1e-30 {
            (v.log10() * PER_DECADE).floor() as i32
        } else {
            ZERO
        }
    }

    pub fn add(&mut self, v: f64) {
        *self.bins.entry(Self::bin(v)).or_insert(0) += 1;
    }

    pub fn merge(&mut self, other: &LogHist) {
        for (b, n) in &other.bins {
            *self.bins.entry(*b).or_insert(0) += n;
        }
    }

    pub fn count(&self) -> u64 {
        self.bins.values().sum()
    }

    /// The median (the lower middle of an even count, as
    /// [`super::median`] takes the mean of the middle two: within one bin
    /// of it), as its bin's geometric centre; 0 when empty or zero.
    pub fn median(&self) -> f64 {
        let n = self.count();
        if n == 0 {
            return 0.0;
        }
        let half = n.div_ceil(2);
        let mut seen = 0;
        for (b, c) in &self.bins {
            seen += c;
            if seen >= half {
                return if *b == ZERO {
                    0.0
                } else {
                    10f64.powf((f64::from(*b) + 0.5) / PER_DECADE)
                };
            }
        }
        0.0
    }
}

/// The InfiniBand part of a summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IbSummary {
    /// Ports with state in the detector.
    pub ports: u64,
    /// Ports flagged (a current finding) per grouping family (`errors`,
    /// `state`), for the extent's rate elsewhere.
    pub flagged: BTreeMap<String, u64>,
    /// Horizon BER estimates of the ports that have one.
    pub ber: LogHist,
    /// Horizon retries per packet of the ports that have one.
    pub retry: LogHist,
}

impl IbSummary {
    pub fn merge(&mut self, o: &IbSummary) {
        self.ports += o.ports;
        for (f, n) in &o.flagged {
            *self.flagged.entry(f.clone()).or_insert(0) += n;
        }
        self.ber.merge(&o.ber);
        self.retry.merge(&o.retry);
    }
}

/// One shard's summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The shard (its durable consumer).
    pub shard: String,
    /// The latest window end its engine has taken (unix ms).
    pub end_ms: i64,
    /// Windows its engine has taken since it started.
    pub windows: u64,
    /// When it was put (unix ms, the publisher's clock): an old one is
    /// left out of the merge.
    pub sent_ms: i64,
    pub ib: IbSummary,
}

/// The other shards' summaries merged: what a shard adds to its own state
/// for the fleet's references.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Remote {
    /// Shards merged.
    pub shards: usize,
    pub ib: IbSummary,
}

impl Remote {
    /// `peers` merged (the caller leaves out its own and stale ones).
    pub fn of<'a>(peers: impl Iterator<Item = &'a Summary>) -> Self {
        let mut r = Remote::default();
        for p in peers {
            r.shards += 1;
            r.ib.merge(&p.ib);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_histograms_give_the_pooled_median_within_one_bin() {
        // 301 BERs log-spread over 1e-15..1e-9, split over three shards.
        let vals: Vec<f64> = (0..301)
            .map(|i| 10f64.powf(-15.0 + i as f64 / 50.0))
            .collect();
        let exact = crate::engine::median(&vals);
        let mut shards = vec![LogHist::default(), LogHist::default(), LogHist::default()];
        for (i, v) in vals.iter().enumerate() {
            shards[i % 3].add(*v);
        }
        let mut all = LogHist::default();
        for s in &shards {
            all.merge(s);
        }
        assert_eq!(all.count(), 301);
        let m = all.median();
        let ratio = m / exact;
        assert!((1.0 / 1.123..=1.123).contains(&ratio), "{m:e} vs {exact:e}");
        // Zeros (ports without errors) are a median of 0.
        let mut z = LogHist::default();
        for _ in 0..3 {
            z.add(0.0);
        }
        z.add(1e-12);
        assert_eq!(z.median(), 0.0);
        assert_eq!(LogHist::default().median(), 0.0);
    }

    #[test]
    fn summaries_add_and_travel_as_json() {
        let mut a = Summary {
            shard: "a".into(),
            end_ms: 5,
            windows: 3,
            ..Summary::default()
        };
        a.ib.ports = 10;
        a.ib.flagged.insert("errors".into(), 1);
        a.ib.ber.add(1e-12);
        let mut b = a.clone();
        b.ib.ports = 6;
        b.ib.flagged.insert("state".into(), 2);
        let back: Summary =
            serde_json::from_slice(&serde_json::to_vec(&b).expect("json")).expect("parse");
        assert_eq!(back, b);
        let r = Remote::of([&a, &b].into_iter());
        assert_eq!((r.shards, r.ib.ports), (2, 16));
        assert_eq!(r.ib.flagged["errors"], 2);
        assert_eq!(r.ib.flagged["state"], 2);
        assert_eq!(r.ib.ber.count(), 2);
    }
}
