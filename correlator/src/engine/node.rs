//! `node_lost`: a host whose windows stopped arriving for longer than
//! `LOST_AFTER_WINDOWS` of its window length.
//!
//! Silence is judged on event time: the cluster clock, the median latest
//! window end of the hosts still reporting (a median, so that one fast or
//! slow sender does not move it; hosts already lost do not hold it back).
//! In the live service it is judged on arrival time as well
//! ([`NodeDetector::set_arrival_clock`], the correlator's wall clock): a host
//! is lost only when it has been silent for that long on both clocks, and a
//! window's end counts at most as its arrival time. So one host whose clock
//! runs ahead (inside `max_future_s`) can neither push the cluster clock past
//! everyone's deadlines (a false `node_lost` for live hosts) nor hold the
//! checks back (a silent host not reported); a correlator that falls behind
//! (windows queued) does not see silence either, because event time has not
//! moved. A collector restart (a short gap, a new instance) is not a lost node.
use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};
use vocab::kind::IncidentKind;

use proto::v1::Window;

use super::incidents::Finding;

pub const LOST_AFTER_WINDOWS: i64 = 3;

/// A host not yet silent on arrival time is checked again no sooner than
/// this (cluster time).
const RECHECK_MS: i64 = 100;

/// Where arrival times come from (unix ms).
#[derive(Clone)]
pub struct ArrivalClock(Arc<dyn Fn() -> i64 + Send + Sync>);

impl std::fmt::Debug for ArrivalClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArrivalClock")
    }
}

#[derive(Debug, Default)]
pub struct NodeDetector {
    /// host → (latest window end, at most its arrival time; window length) in ms.
    last: HashMap<String, (i64, i64)>,
    /// host → the cluster clock when its latest window arrived. Silence is
    /// measured from there, so a host whose delayed windows arrive in a burst
    /// (a catching-up sender) is alive, not lost.
    arrived: HashMap<String, i64>,
    /// host → the arrival clock when its latest window arrived.
    arrived_wall: HashMap<String, i64>,
    /// Hosts not yet reported lost, by the cluster time they would be
    /// (arrival + `LOST_AFTER_WINDOWS` windows): the silence check reads only
    /// the overdue ones (O(newly silent), not O(hosts)).
    deadlines: BTreeSet<(i64, String)>,
    /// host → its entry in `deadlines`.
    deadline: HashMap<String, i64>,
    now: i64,
    /// Windows observed since the cluster was last checked. Checks are
    /// paced by windows, not by any window's time: a window dated ahead
    /// cannot hold them back.
    since_check: usize,
    clock: Option<ArrivalClock>,
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

    /// Judge liveness on arrival time too, read from `clock` (unix ms) as
    /// each window is observed. For live windows only: a replay or a
    /// simulation (windows faster than real time) judges on event time.
    pub fn set_arrival_clock(&mut self, clock: impl Fn() -> i64 + Send + Sync + 'static) {
        self.clock = Some(ArrivalClock(Arc::new(clock)));
    }

    fn arrive(&mut self, host: &str, at: i64, len: i64) {
        self.arrived.insert(host.to_string(), at);
        self.arm(host, at + LOST_AFTER_WINDOWS * len);
    }

    fn arm(&mut self, host: &str, due: i64) {
        if let Some(old) = self.deadline.insert(host.to_string(), due) {
            self.deadlines.remove(&(old, host.to_string()));
        }
        self.deadlines.insert((due, host.to_string()));
    }

    pub fn observe(&mut self, host: &str, w: &Window) -> Vec<Finding> {
        let wall = self.clock.as_ref().map(|c| (c.0)());
        let len = (w.end_unix_ms - w.start_unix_ms).clamp(100, 60_000);
        let len = if w.start_unix_ms == 0 { 1000 } else { len };
        // A window cannot have ended after it arrived: a clock running
        // ahead counts as the arrival time.
        let end = wall.map_or(w.end_unix_ms, |a| w.end_unix_ms.min(a));
        self.last.insert(host.to_string(), (end, len));
        if let Some(a) = wall {
            self.arrived_wall.insert(host.to_string(), a);
        }
        self.arrive(host, self.now, len);
        // Advance the clock and check once per quarter of the hosts'
        // windows: an O(hosts) median every hosts/4 windows, O(1) per window.
        self.since_check += 1;
        if self.since_check < (self.last.len() / 4).max(1) {
            return Vec::new();
        }
        self.since_check = 0;
        // The clock is what the hosts still reporting say: hosts already
        // lost, or silent on arrival time, do not hold it back (else a
        // majority falling silent together would stop it).
        let mut ends: Vec<i64> = self
            .last
            .iter()
            .filter(|(h, (_, len))| {
                self.deadline.contains_key(*h)
                    && wall
                        .zip(self.arrived_wall.get(*h))
                        .is_none_or(|(a, b)| a - b < LOST_AFTER_WINDOWS * len)
            })
            .map(|(_, (e, _))| *e)
            .collect();
        if !ends.is_empty() {
            // The lower median: with two hosts, the earlier end. A clock
            // running ahead cannot push the cluster clock past the other's
            // deadline; one behind can only delay a verdict, never raise
            // a false one.
            let mid = (ends.len() - 1) / 2;
            let median = *ends.select_nth_unstable(mid).1;
            self.now = self.now.max(median);
        }
        self.arrive(host, self.now, len);
        // Silent hosts: each reported once, when it goes silent; its
        // incident stays open until it reports again (or is forgotten).
        let mut out = Vec::new();
        let mut later = Vec::new();
        while let Some((due, h)) = self.deadlines.first().cloned() {
            if due >= self.now {
                break;
            }
            self.deadlines.pop_first();
            self.deadline.remove(&h);
            let len = self.last.get(&h).map_or(1000, |x| x.1);
            let bound = LOST_AFTER_WINDOWS * len;
            // Silent on event time; on arrival time too? If not yet, check
            // again once it could be.
            let heard = wall.zip(self.arrived_wall.get(&h)).map(|(a, b)| a - b);
            if let Some(quiet) = heard.filter(|q| *q < bound) {
                later.push((h, self.now + (bound - quiet).max(RECHECK_MS)));
                continue;
            }
            let arrived = self.arrived.get(&h).copied().unwrap_or(due);
            out.push(lost(&h, heard.unwrap_or(self.now - arrived), len));
        }
        for (h, due) in later {
            self.arm(&h, due);
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
            self.arrived_wall.remove(h);
            if let Some(d) = self.deadline.remove(h) {
                self.deadlines.remove(&(d, h.clone()));
            }
        }
        gone
    }
}

fn lost(h: &str, silent: i64, len: i64) -> Finding {
    Finding::new(IncidentKind::NodeLost, h, 0.9)
        .with_evidence(format!(
            "no window from {h} for {:.1} s ({} windows)",
            silent as f64 / 1000.0,
            silent / len.max(1)
        ))
        .with_runbook({
            let h = crate::shell::quote(h);
            format!("is {h} up? `ping {h}`, BMC/IPMI console, `systemctl status faultline-collector` on {h}")
        })
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
