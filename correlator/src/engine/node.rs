//! `node_lost`: a host whose windows stopped arriving for longer than
//! `LOST_AFTER_WINDOWS` of its window length, judged on event time: the
//! cluster's median latest window end (a median, so that one fast or slow
//! sender does not move the clock). A collector restart (a short gap, a new
//! instance) is not a lost node.
use std::collections::HashMap;

use proto::v1::Window;

use super::incidents::Finding;

pub const LOST_AFTER_WINDOWS: i64 = 3;

#[derive(Debug, Default)]
pub struct NodeDetector {
    /// host → (latest window end, window length) in ms.
    last: HashMap<String, (i64, i64)>,
    /// host → the cluster clock when its latest window arrived. Silence is
    /// measured from there, so a host whose delayed windows arrive in a burst
    /// (a catching-up sender) is alive, not lost.
    arrived: HashMap<String, i64>,
    now: i64,
    checked_at: i64,
}

impl NodeDetector {
    pub fn observe(&mut self, host: &str, w: &Window) -> Vec<Finding> {
        let len = (w.end_unix_ms - w.start_unix_ms).clamp(100, 60_000);
        let len = if w.start_unix_ms == 0 { 1000 } else { len };
        self.last.insert(host.to_string(), (w.end_unix_ms, len));
        self.arrived.insert(host.to_string(), self.now);
        // Advance the clock and check at most once per 100 ms of event time
        // (O(hosts) work per step, not per window).
        if w.end_unix_ms - self.checked_at < 100 {
            return Vec::new();
        }
        self.checked_at = w.end_unix_ms;
        let mut ends: Vec<i64> = self.last.values().map(|(e, _)| *e).collect();
        ends.sort_unstable();
        self.now = self.now.max(ends[ends.len() / 2]);
        self.arrived.insert(host.to_string(), self.now);
        let mut out = Vec::new();
        for (h, &(_, len)) in &self.last {
            let Some(&arrived) = self.arrived.get(h) else {
                continue;
            };
            let silent = self.now - arrived;
            if silent > LOST_AFTER_WINDOWS * len {
                out.push(
                    Finding::new("node_lost", h, 0.9)
                        .with_evidence(format!("no window from {h} for {:.1} s ({} windows)", silent as f64 / 1000.0, silent / len))
                        .with_runbook(format!("is {h} up? `ping {h}`, BMC/IPMI console, `systemctl status faultline-collector` on {h}")),
                );
            }
        }
        out
    }
}
