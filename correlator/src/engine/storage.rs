//! `storage_latency`: a block device whose mean request latency is far above
//! its peers' (all devices of the cluster with traffic in their latest window)
//! for consecutive windows — checkpoint stalls, a failing disk, a slow target.
use std::collections::HashMap;

use proto::v1::Window;

use super::{baseline::OwnBaseline, incidents::Finding, mad, median};

/// Requests per window below which latency is not judged.
pub const MIN_REQUESTS: u64 = 10;
/// Latency floor (seconds): slower than this can be anomalous.
pub const FLOOR_S: f64 = 0.005;
pub const RATIO: f64 = 5.0;
pub const MADS: f64 = 6.0;

#[derive(Debug, Default)]
struct DevState {
    mean_s: Option<f64>,
    streak: u32,
    /// Own history: mean latencies of windows with enough requests.
    own: OwnBaseline,
}

/// With fewer devices than this, a device is judged against its own history.
pub const MIN_PEERS: usize = 4;

#[derive(Debug, Default)]
pub struct StorageDetector {
    devs: HashMap<String, DevState>,
    /// Peer summary (window end, median, MAD, devices), once per time slot.
    peers: Option<(i64, f64, f64, usize)>,
}

impl StorageDetector {
    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        // Per device: sum over ops and jobs.
        let mut per: HashMap<String, (u64, u64, u64, u64)> = HashMap::new();
        for b in &w.block {
            let e = per.entry(b.device.clone()).or_default();
            e.0 += b.requests;
            e.1 += b.latency_sum_ns;
            e.2 = e.2.max(b.latency_max_ns);
            e.3 += b.bytes;
        }
        let mut candidates = Vec::new();
        for (dev, (req, sum, max, bytes)) in per {
            let entity = format!("{host}/{dev}");
            let st = self.devs.entry(entity.clone()).or_default();
            if req < MIN_REQUESTS {
                st.mean_s = None;
                st.streak = 0;
                continue;
            }
            let mean = sum as f64 / req as f64 / 1e9;
            st.mean_s = Some(mean);
            candidates.push((entity, mean, req, max, bytes));
        }
        let (m, d, n_means) = match self.peers {
            Some((ts, m, d, n)) if ts == w.end_unix_ms => (m, d, n),
            _ => {
                let means: Vec<f64> = self.devs.values().filter_map(|s| s.mean_s).collect();
                let m = median(&means);
                let d = mad(&means, m);
                self.peers = Some((w.end_unix_ms, m, d, means.len()));
                (m, d, means.len())
            }
        };
        let peer_threshold = (m * RATIO).max(m + MADS * d).max(FLOOR_S);
        let few_peers = n_means < MIN_PEERS;
        let mut out = Vec::new();
        for (entity, mean, req, max, bytes) in candidates {
            let Some(st) = self.devs.get_mut(&entity) else {
                continue;
            };
            // Against peers when there are enough, else against the device's
            // own history once it has one.
            let threshold = if !few_peers {
                Some(peer_threshold)
            } else if st.own.warm() {
                Some(st.own.threshold(RATIO, FLOOR_S))
            } else {
                None
            };
            st.streak = match threshold {
                Some(t) if mean > t => st.streak + 1,
                _ => 0,
            };
            let own = st.own.value();
            let learnt = st.own.learnt();
            let near = st.own.near(mean, FLOOR_S);
            st.own.learn(mean, near);
            if st.streak >= 2 {
                let compared = match (few_peers, own) {
                    (true, Some(b)) if b > 0.0 => format!(
                        "{:.0}x this device's own baseline {:.2} ms over {learnt} windows; {n_means} devices are too few to compare with peers",
                        mean / b,
                        b * 1e3
                    ),
                    _ => format!(
                        "{:.0}x the median {:.2} ms of {n_means} devices",
                        if m > 0.0 { mean / m } else { f64::INFINITY },
                        m * 1e3
                    ),
                };
                out.push(
                    Finding::new("storage_latency", &entity, (0.7 + 0.05 * f64::from(st.streak.min(5))).min(0.95))
                        .with_evidence(format!("mean latency {:.1} ms ({compared})", mean * 1e3))
                        .with_evidence(format!("{req} requests, {bytes} bytes, max {:.1} ms this window", max as f64 / 1e6))
                        .with_jobs(jobs)
                        .with_runbook(format!("slow storage on {entity}: `iostat -x 1`, `nvme smart-log`, check the filesystem/target it backs (checkpoint writes)")),
                );
            }
        }
        out
    }
}
