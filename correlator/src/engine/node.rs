//! `node_lost`: a host whose windows stopped arriving for longer than
//! `LOST_AFTER_WINDOWS` of its window length, judged on event time: the
//! cluster's median latest window end (a median, so that one fast or slow
//! sender does not move the clock). A collector restart (a short gap, a new
//! instance) is not a lost node.
use std::collections::{BTreeSet, HashMap};

use proto::v1::Window;

use super::incidents::Finding;

pub const LOST_AFTER_WINDOWS: i64 = 3;

/// Check the cluster for silent hosts at most this often (event time).
const CHECK_EVERY_MS: i64 = 100;

#[derive(Debug, Default)]
pub struct NodeDetector {
    /// host → (latest window end, window length) in ms.
    last: HashMap<String, (i64, i64)>,
    /// host → the cluster clock when its latest window arrived. Silence is
    /// measured from there, so a host whose delayed windows arrive in a burst
    /// (a catching-up sender) is alive, not lost.
    arrived: HashMap<String, i64>,
    /// Hosts not yet reported lost, by the cluster time they would be
    /// (arrival + `LOST_AFTER_WINDOWS` windows): the silence check reads only
    /// the overdue ones (O(newly silent), not O(hosts)).
    deadlines: BTreeSet<(i64, String)>,
    /// host → its entry in `deadlines`.
    deadline: HashMap<String, i64>,
    now: i64,
    checked_at: i64,
}

impl NodeDetector {
    /// Hosts tracked.
    pub fn hosts(&self) -> usize {
        self.last.len()
    }

    /// The cluster clock: the median latest window end (event time).
    pub fn now(&self) -> i64 {
        self.now
    }

    fn arrive(&mut self, host: &str, at: i64, len: i64) {
        self.arrived.insert(host.to_string(), at);
        let due = at + LOST_AFTER_WINDOWS * len;
        if let Some(old) = self.deadline.insert(host.to_string(), due) {
            self.deadlines.remove(&(old, host.to_string()));
        }
        self.deadlines.insert((due, host.to_string()));
    }

    pub fn observe(&mut self, host: &str, w: &Window) -> Vec<Finding> {
        let len = (w.end_unix_ms - w.start_unix_ms).clamp(100, 60_000);
        let len = if w.start_unix_ms == 0 { 1000 } else { len };
        self.last.insert(host.to_string(), (w.end_unix_ms, len));
        self.arrive(host, self.now, len);
        // Advance the clock and check at most once per 100 ms of event time
        // (an O(hosts) median per step, not per window).
        if w.end_unix_ms - self.checked_at < CHECK_EVERY_MS {
            return Vec::new();
        }
        self.checked_at = w.end_unix_ms;
        let mut ends: Vec<i64> = self.last.values().map(|(e, _)| *e).collect();
        let mid = ends.len() / 2;
        let median = *ends.select_nth_unstable(mid).1;
        self.now = self.now.max(median);
        self.arrive(host, self.now, len);
        // Silent hosts: each reported once, when it goes silent; its
        // incident stays open until it reports again (or is forgotten).
        let mut out = Vec::new();
        while let Some((due, h)) = self.deadlines.first().cloned() {
            if due >= self.now {
                break;
            }
            self.deadlines.pop_first();
            self.deadline.remove(&h);
            let arrived = self.arrived.get(&h).copied().unwrap_or(due);
            let len = self.last.get(&h).map_or(1000, |x| x.1);
            out.push(lost(&h, self.now - arrived, len));
        }
        out
    }

    /// Forgets hosts whose latest window ended more than `idle_ms` before
    /// `now_ms`; returns them.
    pub fn forget_idle(&mut self, now_ms: i64, idle_ms: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .last
            .iter()
            .filter(|(_, (end, _))| now_ms - *end > idle_ms)
            .map(|(h, _)| h.clone())
            .collect();
        for h in &gone {
            self.last.remove(h);
            self.arrived.remove(h);
            if let Some(d) = self.deadline.remove(h) {
                self.deadlines.remove(&(d, h.clone()));
            }
        }
        gone
    }
}

fn lost(h: &str, silent: i64, len: i64) -> Finding {
    Finding::new("node_lost", h, 0.9)
        .with_evidence(format!(
            "no window from {h} for {:.1} s ({} windows)",
            silent as f64 / 1000.0,
            silent / len.max(1)
        ))
        .with_runbook(format!(
            "is {h} up? `ping {h}`, BMC/IPMI console, `systemctl status faultline-collector` on {h}"
        ))
}
