//! Mergeable summaries: what a shard tells the other shards about its part
//! of the fleet, so each judges its own entities against the whole fleet's
//! references, as one correlator would (docs/scale-out.md).
//!
//! A summary holds counts (ports tracked, ports flagged per family) that
//! add up exactly, and distributions as log-binned histograms
//! ([`LogHist`]) that merge by adding bins: the ports' horizon BER and
//! retries per packet (20 bins a decade: a median exact to a factor
//! 10^(1/20) ≈ 1.12, well inside the decades BER thresholds span), the
//! storage devices' latency quantiles per class and their shift from their
//! own baselines (20 a decade), and each job's rank step times (400 a
//! decade: within 0.6 %, against the straggler's 30 % margin). Those bin
//! widths are the approximation in them. Summaries travel as JSON.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bins a decade of the coarse histograms.
const PER_DECADE: u16 = 20;
/// Bins a decade of step times.
const FINE: u16 = 400;
/// The bin of zeros and values below 1e-30.
const ZERO: i32 = i32::MIN;

/// A log-binned histogram of non-negative values.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogHist {
    /// Bins a decade (0: the coarse 20).
    #[serde(default, skip_serializing_if = "is_zero")]
    per_decade: u16,
    /// Bin → count; bin `b` holds values in [10^(b/d), 10^((b+1)/d)).
    bins: BTreeMap<i32, u64>,
}

fn is_zero(v: &u16) -> bool {
    *v == 0
}

impl LogHist {
    /// 400 bins a decade (step times).
    pub fn fine() -> Self {
        Self {
            per_decade: FINE,
            ..Self::default()
        }
    }

    fn per_decade(&self) -> f64 {
        f64::from(if self.per_decade == 0 {
            PER_DECADE
        } else {
            self.per_decade
        })
    }

    fn bin(&self, v: f64) -> i32 {
        if v.is_finite() && v > 1e-30 {
            (v.log10() * self.per_decade()).floor() as i32
        } else {
            ZERO
        }
    }

    pub fn add(&mut self, v: f64) {
        *self.bins.entry(self.bin(v)).or_insert(0) += 1;
    }

    /// Adds `other`'s counts (of the same resolution; another is skipped:
    /// both sides of a fleet run one build).
    pub fn merge(&mut self, other: &LogHist) {
        if other.per_decade() != self.per_decade() {
            if self.bins.is_empty() {
                self.per_decade = other.per_decade;
            } else {
                return;
            }
        }
        for (b, n) in &other.bins {
            *self.bins.entry(*b).or_insert(0) += n;
        }
    }

    /// These counts and `local`'s values: a shard's own exact values merged
    /// with the other shards' histogram, for a fleet-wide median.
    pub fn with(&self, local: &[f64]) -> LogHist {
        let mut h = self.clone();
        local.iter().for_each(|v| h.add(*v));
        h
    }

    pub fn count(&self) -> u64 {
        self.bins.values().sum()
    }

    /// The median (the lower middle of an even count, as
    /// [`super::stats::median`] takes the mean of the middle two: within one bin
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
                    10f64.powf((f64::from(*b) + 0.5) / self.per_decade())
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

/// A storage class's latency quantiles (seconds) of fresh devices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassHist {
    pub p50: LogHist,
    pub p99: LogHist,
}

/// The storage part of a summary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StorageSummary {
    pub by_class: BTreeMap<String, ClassHist>,
    /// Fresh devices' p50 and p99 over their own baselines.
    pub shift50: LogHist,
    pub shift99: LogHist,
}

impl StorageSummary {
    pub fn merge(&mut self, o: &StorageSummary) {
        for (c, h) in &o.by_class {
            let e = self.by_class.entry(c.clone()).or_default();
            e.p50.merge(&h.p50);
            e.p99.merge(&h.p99);
        }
        self.shift50.merge(&o.shift50);
        self.shift99.merge(&o.shift99);
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
    #[serde(default)]
    pub storage: StorageSummary,
    /// Each job's rank step times (seconds), for the job's median.
    #[serde(default)]
    pub jobs: BTreeMap<String, LogHist>,
}

/// The other shards' summaries merged: what a shard adds to its own state
/// for the fleet's references.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Remote {
    /// Shards merged.
    pub shards: usize,
    pub ib: IbSummary,
    pub storage: StorageSummary,
    pub jobs: BTreeMap<String, LogHist>,
}

impl Remote {
    /// `peers` merged (the caller leaves out its own and stale ones).
    pub fn of<'a>(peers: impl Iterator<Item = &'a Summary>) -> Self {
        let mut r = Remote::default();
        for p in peers {
            r.shards += 1;
            r.ib.merge(&p.ib);
            r.storage.merge(&p.storage);
            for (j, h) in &p.jobs {
                r.jobs.entry(j.clone()).or_default().merge(h);
            }
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
        let exact = crate::engine::stats::median(&vals);
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
        // Step times at 400 bins a decade: within 0.6 %.
        let mut f = LogHist::fine();
        for v in [1.00, 1.01, 1.02, 1.5, 0.99] {
            f.add(v);
        }
        let mut g = LogHist::default();
        g.merge(&f);
        assert!((g.median() / 1.01 - 1.0).abs() < 0.006, "{}", g.median());
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
