//! Block devices: each node's devices of one or more classes (NVMe, SSD,
//! HDD) with a healthy median latency of their own; per window a device's
//! requests are Poisson(rate × W), its median jitters ±10 %, and request
//! latencies are lognormal (σ = 0.5) around it. The log2 histogram is a
//! multinomial draw over the buckets' lognormal probabilities, its sum the
//! buckets' counts times their conditional means, its maximum a draw of the
//! largest of the top bucket's requests.
use proto::v1::BlockStat;

use super::{Cluster, StorageMix, JOB};
use crate::rng::{norm_cdf, norm_quantile, Rng};

/// Lognormal σ of request latency around a device's median.
pub(super) const LATENCY_SIGMA: f64 = 0.5;
/// Bytes per block request (checkpoint and data-loader I/O).
pub(super) const REQUEST_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug)]
pub(super) struct Device {
    pub name: String,
    pub class: &'static str,
    /// Healthy median request latency (ns).
    pub median_ns: f64,
    /// Requests per second while the job runs.
    pub rate: f64,
    /// This window's row.
    pub stat: Option<BlockStat>,
}

/// A device's window: (log2 histogram, latency sum, max) of `n` lognormal
/// request latencies with median `median_ns` and σ `sigma`.
pub fn latency_hist(rng: &mut Rng, n: u64, median_ns: f64, sigma: f64) -> (Vec<u64>, u64, u64) {
    if n == 0 {
        return (Vec::new(), 0, 0);
    }
    let ln2 = std::f64::consts::LN_2;
    let mu = median_ns.max(1.0).ln();
    let lo = ((mu - 7.0 * sigma) / ln2).floor().max(0.0) as usize;
    let hi = (((mu + 7.0 * sigma) / ln2).ceil() as usize).clamp(lo, 62);
    // Standardised log edges of bucket i: [2^i, 2^(i+1)), open at both ends.
    let z = |i: usize| (i as f64 * ln2 - mu) / sigma;
    let edge = |i: usize, first: bool| -> f64 {
        if first {
            f64::NEG_INFINITY
        } else if i > hi {
            f64::INFINITY
        } else {
            z(i)
        }
    };
    let cdf = |x: f64| {
        if x == f64::NEG_INFINITY {
            0.0
        } else if x == f64::INFINITY {
            1.0
        } else {
            norm_cdf(x)
        }
    };
    let scale = (mu + sigma * sigma / 2.0).exp();
    let mut hist = vec![0u64; hi + 1];
    let mut rem = n;
    let mut mass = 1.0;
    let mut sum = 0.0;
    let mut top = None;
    for (i, slot) in hist.iter_mut().enumerate().skip(lo) {
        let (zl, zh) = (edge(i, i == lo), edge(i + 1, false));
        let (cl, ch) = (cdf(zl), cdf(zh));
        let p = (ch - cl).max(0.0);
        let cnt = if i == hi {
            rem
        } else if mass > 0.0 {
            rng.binomial(rem, (p / mass).clamp(0.0, 1.0))
        } else {
            0
        };
        rem -= cnt;
        mass -= p;
        *slot = cnt;
        if cnt > 0 {
            let (b_lo, b_hi) = ((i as f64).exp2(), ((i + 1) as f64).exp2());
            let partial = scale * (cdf(zh - sigma) - cdf(zl - sigma));
            let mean = if p > 1e-300 {
                (partial / p).clamp(b_lo, b_hi)
            } else {
                (i as f64 + 0.5).exp2()
            };
            sum += cnt as f64 * mean;
            top = Some((i, cnt, cl, ch));
        }
    }
    let max = match top {
        Some((i, c, cl, ch)) => {
            // The largest of c draws within the bucket.
            let u = rng.uniform().powf(1.0 / c as f64);
            let x = (mu + sigma * norm_quantile(cl + u * (ch - cl))).exp();
            x.clamp((i as f64).exp2(), ((i + 1) as f64).exp2() - 1.0) as u64
        }
        None => 0,
    };
    if let Some(last) = hist.iter().rposition(|&c| c > 0) {
        hist.truncate(last + 1);
    }
    (hist, sum.round() as u64, max)
}

pub(super) fn devices_for(mix: StorageMix, rng: &mut Rng) -> Vec<Device> {
    let classes: Vec<&'static str> = match mix {
        StorageMix::Nvme => vec!["nvme"],
        StorageMix::Ssd => vec!["ssd"],
        StorageMix::Hdd => vec!["hdd"],
        StorageMix::Mixed => loop {
            let mut c = Vec::new();
            if rng.bernoulli(0.75) {
                c.push("nvme");
            }
            if rng.bernoulli(0.5) {
                c.push("ssd");
            }
            if rng.bernoulli(0.5) {
                c.push("hdd");
            }
            if !c.is_empty() {
                break c;
            }
        },
    };
    let mut sd = 0u8;
    let mut nvme = 0;
    classes
        .into_iter()
        .map(|class| {
            let (name, lo, hi) = match class {
                "nvme" => {
                    nvme += 1;
                    (format!("nvme{}n1", nvme - 1), 0.08, 0.2)
                }
                _ => {
                    sd += 1;
                    let name = format!("sd{}", (b'a' + sd - 1) as char);
                    if class == "ssd" {
                        (name, 0.2, 0.5)
                    } else {
                        (name, 4.0, 9.0)
                    }
                }
            };
            Device {
                name,
                class,
                median_ns: rng.log_uniform(lo, hi) * 1e6,
                rate: rng.range(30.0, 80.0),
                stat: None,
            }
        })
        .collect()
}

impl Cluster {
    /// Every device's window: its requests, their latency histogram, sum and
    /// maximum; `slow` is each node's per-device latency factor, `io_scale`
    /// the share of the job's I/O rate this window.
    pub(super) fn devices_advance(&mut self, w: f64, slow: Vec<Vec<f64>>, io_scale: f64) {
        let job = if self.job_running { JOB } else { "" };
        for (node, slow) in self.nodes.iter_mut().zip(slow) {
            for (d, f) in node.devices.iter_mut().zip(slow) {
                let n = self.rng.poisson(d.rate * w * io_scale);
                let median = d.median_ns * self.rng.range(0.9, 1.1) * f;
                let (hist, sum, max) = latency_hist(&mut self.rng, n, median, LATENCY_SIGMA);
                d.stat = Some(BlockStat {
                    device: d.name.clone(),
                    op: "write".into(),
                    job: job.into(),
                    requests: n,
                    bytes: n * REQUEST_BYTES,
                    latency_sum_ns: sum,
                    latency_max_ns: max,
                    hist,
                    device_class: d.class.into(),
                });
            }
        }
    }
}
