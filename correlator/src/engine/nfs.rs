//! `nfs_latency`: an NFS target (`server:/export`) whose RPCs take far
//! longer than they did, judged per host, target and procedure (READ,
//! WRITE, GETATTR, COMMIT, …) on the mean round-trip time of the window's
//! RPCs (the kernel's cumulative RTT over its RPC count, as `nfsiostat`
//! reports "avg RTT") against that mount's own history. `lustre_latency`:
//! the same for a Lustre target (an OST or MDT, rows with `fstype =
//! "lustre"`), per RPC type (`ost_write`, `mds_getattr`, …) on the mean
//! RPC time its clients' OSC/MDC statistics report ([`Target`]).
//!
//! A storage fault shared by the hosts that mount one target is one
//! incident on the target (`nfs:server:/export`, `lustre:<target>`): when
//! at least two hosts,
//! and `target_share` of those with a current window on it, are slow, the
//! finding names every affected host and the jobs on them. A host whose
//! mount alone is slow while at least `min_peers` other hosts on the same
//! target are fine is a host-side problem (the client, its NIC or network
//! path): its incident is on `host/nfs:server:/export` and says so.
//!
//! Windows of different hosts arrive one after another, so the verdict at
//! one host's window uses the other hosts' latest windows (within one
//! window length); a host needs `persist_windows` slow windows before a
//! finding, by which time its peers have reported the slot it first saw.
//!
//! Silence is not health: a host window without `min_ops` RPCs on a target
//! it mounts (the jobs stopped, or the server answers nothing) neither
//! keeps the target's incidents open nor counts towards their quiet period:
//! they are held ([`NfsDetector::held`]) until a window with RPCs shows the
//! target healthy, or until no host has had RPCs on it for
//! `unobserved_hold_s`; then the quiet period runs as usual.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use proto::v1::Window;

use super::{baseline::OwnBaseline, incidents::Finding, stats::median};

mod config;
mod target;
pub use config::NfsConfig;
pub use target::Target;

/// The evidence line listing the affected hosts (the workload joins its
/// symptoms through it).
pub const AFFECTED: &str = "affected hosts: ";

/// One (host, target, procedure) series.
#[derive(Debug, Default)]
struct Series {
    own: OwnBaseline,
    /// The latest judged window: mean RTT (ms), RPCs, retransmissions, its end.
    rtt_ms: f64,
    ops: u64,
    retrans: u64,
    at_ms: i64,
    /// The own history before the latest window (for the evidence).
    base_ms: Option<f64>,
    streak: u32,
    mountpoint: String,
    /// The server NID (Lustre).
    nid: String,
}

/// A host's window on one target and procedure, summed over its mounts.
#[derive(Debug, Default)]
struct OpWindow {
    ops: u64,
    rtt_ms: u64,
    retrans: u64,
    mountpoint: String,
    nid: String,
}

type Key = (String, Target, String);

#[derive(Debug, Default)]
pub struct NfsDetector {
    cfg: NfsConfig,
    /// By (host, target, procedure).
    series: BTreeMap<Key, Series>,
    /// Each host's jobs in its latest window.
    jobs: HashMap<String, Vec<String>>,
    /// Per host, the targets it mounts and the end of its latest window
    /// with RPCs judged on each (one entry per host and target of
    /// `series`).
    mounts: HashMap<String, BTreeMap<Target, i64>>,
    /// Per target, the end of the latest window of any host with RPCs
    /// judged on it.
    last_rpcs: HashMap<Target, i64>,
    /// The entities the latest window holds open unobserved.
    held: Vec<String>,
    /// Per target, its series that are slow now (streak ≥ 1): a target
    /// with none has nothing to judge, so its hosts' windows skip the walk
    /// over every client of it ([`Self::views`], O(clients)), which at
    /// 12,500 clients of one target made each slot O(clients²).
    slow_series: HashMap<Target, usize>,
    /// Walks over a target's clients so far (a scaling test counts them).
    pub walks: u64,
    /// Series and rows dropped at the caps.
    pub dropped: u64,
}

/// One host's state on a target at the current slot.
struct HostView {
    host: String,
    slow: bool,
    persisted: bool,
    /// Its slow procedures: (op, mean RTT, own history, RPCs,
    /// retransmissions), by name.
    slow_ops: Vec<SlowOp>,
}

type SlowOp = (String, f64, Option<f64>, u64, u64);

/// Over the slow hosts, per procedure: mean RTTs, own histories, RPCs,
/// retransmissions.
type OpSummary = (Vec<f64>, Vec<f64>, u64, u64);

impl NfsDetector {
    pub fn new(cfg: NfsConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// The window's rows per (target, procedure), within the row cap.
    fn per_target(&mut self, w: &Window) -> BTreeMap<(Target, String), OpWindow> {
        let mut per: BTreeMap<(Target, String), OpWindow> = BTreeMap::new();
        let over = w.nfs.len().saturating_sub(self.cfg.max_rows_per_window);
        self.count_drops(over as u64);
        for r in w.nfs.iter().take(self.cfg.max_rows_per_window) {
            let target = Target::of(r);
            let failed = target.failed(r);
            let e = per.entry((target, r.op.clone())).or_default();
            e.ops += r.ops;
            e.rtt_ms += r.rtt_ms_sum;
            e.retrans += failed;
            if e.mountpoint.is_empty() {
                e.mountpoint.clone_from(&r.mountpoint);
            }
            if e.nid.is_empty() {
                e.nid.clone_from(&r.nid);
            }
        }
        per
    }

    fn count_drops(&mut self, n: u64) {
        if n > 0 {
            self.dropped += n;
            metrics::counter!(crate::telemetry::ENGINE_DROPPED.name, "what" => "nfs").increment(n);
        }
    }

    /// Judges one host's window: its findings (target or host-scoped) and
    /// the target entities it evaluated (so their incidents resolve once
    /// quiet).
    pub fn observe(
        &mut self,
        host: &str,
        w: &Window,
        jobs: &[String],
    ) -> (Vec<Finding>, Vec<String>) {
        self.held.clear();
        let mut out = Vec::new();
        let mut evaluated = Vec::new();
        let mut observed = BTreeSet::new();
        if !w.nfs.is_empty() {
            let len_ms = if w.end_unix_ms > w.start_unix_ms && w.start_unix_ms > 0 {
                w.end_unix_ms - w.start_unix_ms
            } else {
                1000
            };
            self.jobs.insert(host.to_string(), jobs.to_vec());
            let mut targets = BTreeSet::new();
            for ((target, op), d) in self.per_target(w) {
                targets.insert(target.clone());
                if self.learn(host, target.clone(), op, &d, w.end_unix_ms) {
                    observed.insert(target);
                }
            }
            for target in targets {
                evaluated.push(target.entity());
                // Both verdicts need a slow series on the target: a
                // target-wide one at least two, a host's its own.
                if self.slow_series.get(&target).copied().unwrap_or(0) == 0 {
                    continue;
                }
                self.walks += 1;
                let views = self.views(&target, w.end_unix_ms - len_ms);
                out.extend(self.judge(host, &target, &views));
            }
        }
        self.hold(host, w.end_unix_ms, &observed, &mut evaluated);
        (out, evaluated)
    }

    /// The targets `host` mounts without RPCs judged in its window ending at
    /// `now`: their entities (the target's, the host's mount) are held
    /// while the silence is within `unobserved_hold_s`; past it, the
    /// target's is evaluated (its quiet period runs) whoever mounts it.
    fn hold(
        &mut self,
        host: &str,
        now: i64,
        observed: &BTreeSet<Target>,
        evaluated: &mut Vec<String>,
    ) {
        let horizon = (self.cfg.unobserved_hold_s * 1000.0) as i64;
        let Some(mounts) = self.mounts.get(host) else {
            return;
        };
        for (t, last) in mounts {
            if observed.contains(t) {
                continue;
            }
            if now - last < horizon {
                self.held.push(t.host_entity(host));
            }
            let any = self.last_rpcs.get(t).copied().unwrap_or(*last).max(*last);
            if now - any < horizon {
                self.held.push(t.entity());
            } else {
                evaluated.push(t.entity());
            }
        }
    }

    /// The entities the latest observed window holds open unobserved (its
    /// host had no RPCs on their target): their incidents neither resolve
    /// nor count quiet windows from it.
    pub fn held(&self) -> &[String] {
        &self.held
    }

    /// Feeds one (target, procedure) window into its series and judges it
    /// against the series' own history; false when not judged (too few
    /// RPCs, or over the series cap).
    fn learn(&mut self, host: &str, target: Target, op: String, d: &OpWindow, end_ms: i64) -> bool {
        if d.ops < self.cfg.min_ops {
            return false;
        }
        let key = (host.to_string(), target, op);
        if !self.series.contains_key(&key) && self.series.len() >= self.cfg.max_series {
            self.count_drops(1);
            return false;
        }
        self.mounts
            .entry(host.to_string())
            .or_default()
            .insert(key.1.clone(), end_ms);
        let last = self.last_rpcs.entry(key.1.clone()).or_insert(end_ms);
        *last = (*last).max(end_ms);
        let cfg = &self.cfg;
        let target = key.1.clone();
        let s = self.series.entry(key).or_default();
        let x = d.rtt_ms as f64 / d.ops as f64;
        let base = s.own.value().filter(|_| s.own.warm());
        let slow = x > cfg.floor_ms && base.is_some_and(|b| x > cfg.own_ratio * b.max(1e-3));
        let was_slow = s.streak > 0;
        s.streak = if slow { s.streak.saturating_add(1) } else { 0 };
        if slow != was_slow {
            let n = self.slow_series.entry(target).or_insert(0);
            *n = if slow { *n + 1 } else { n.saturating_sub(1) };
        }
        s.base_ms = base;
        let near = s.own.near(x, cfg.floor_ms);
        s.own.learn(x, near);
        s.rtt_ms = x;
        s.ops = d.ops;
        s.retrans = d.retrans;
        s.at_ms = end_ms;
        s.mountpoint.clone_from(&d.mountpoint);
        s.nid.clone_from(&d.nid);
        true
    }

    /// Every host with a window on `target` ending at or after `fresh`.
    fn views(&self, target: &Target, fresh: i64) -> Vec<HostView> {
        let mut by: BTreeMap<&str, HostView> = BTreeMap::new();
        for ((h, t, op), s) in &self.series {
            if t != target || s.at_ms < fresh {
                continue;
            }
            let v = by.entry(h.as_str()).or_insert_with(|| HostView {
                host: h.clone(),
                slow: false,
                persisted: false,
                slow_ops: Vec::new(),
            });
            if s.streak >= 1 {
                v.slow = true;
                v.slow_ops
                    .push((op.clone(), s.rtt_ms, s.base_ms, s.ops, s.retrans));
            }
            v.persisted |= s.streak >= self.cfg.persist_windows;
        }
        by.into_values().collect()
    }

    /// The verdict at `host`'s window on one target.
    fn judge(&self, host: &str, target: &Target, views: &[HostView]) -> Option<Finding> {
        let cfg = &self.cfg;
        let slow: Vec<&HostView> = views.iter().filter(|v| v.slow).collect();
        let n = views.len();
        let need = ((cfg.target_share * n as f64).ceil() as usize).max(2);
        if slow.len() >= need && slow.iter().any(|v| v.persisted) {
            return Some(self.target_finding(target, n, &slow));
        }
        let me = views.iter().find(|v| v.host == host && v.persisted)?;
        // Its slow procedure with the most RPCs (the steadiest mean).
        let (op, x, base, ops, retrans) = me.slow_ops.iter().max_by_key(|o| o.3)?.clone();
        let peers: Vec<f64> = views
            .iter()
            .filter(|v| !v.slow && v.host != host)
            .filter_map(|v| self.peer_rtt(&v.host, target, &op))
            .collect();
        let m = median(&peers);
        if peers.len() < cfg.min_peers || x <= cfg.peer_ratio * m {
            return None;
        }
        let mp = self
            .series
            .get(&(host.to_string(), target.clone(), op.clone()))
            .map_or("", |s| s.mountpoint.as_str());
        let own = base.map_or_else(String::new, |b| {
            format!(", {:.1}x its own history {b:.2} ms", x / b.max(1e-3))
        });
        let (lat, label, failures) = (target.latency(), target.label(), target.failures());
        Some(
            Finding::new(target.kind(), &target.host_entity(host), 0.75)
                .with_evidence(format!("{op} mean {lat} {x:.2} ms on {host}'s mount {mp} of {label}{own}; {ops} RPCs, {retrans} {failures} this window"))
                .with_evidence(format!("{} other hosts on the same target are fine: median {op} {lat} {m:.2} ms ({:.1}x): a host-side problem (this client, its NIC or network path), not the server", peers.len(), x / m.max(1e-3)))
                .with_jobs(self.jobs.get(host).map_or(&[][..], Vec::as_slice))
                .with_runbook(target.host_runbook(host, mp)),
        )
    }

    fn peer_rtt(&self, host: &str, target: &Target, op: &str) -> Option<f64> {
        self.series
            .get(&(host.to_string(), target.clone(), op.to_string()))
            .map(|s| s.rtt_ms)
    }

    /// One incident on the target: every slow host, their jobs, and per
    /// procedure the median RTT over them against their own history.
    fn target_finding(&self, target: &Target, n: usize, slow: &[&HostView]) -> Finding {
        let hosts: Vec<&str> = slow.iter().map(|v| v.host.as_str()).collect();
        let mut jobs: Vec<String> = hosts
            .iter()
            .filter_map(|h| self.jobs.get(*h))
            .flatten()
            .cloned()
            .collect();
        jobs.sort();
        jobs.dedup();
        let mut by_op: BTreeMap<&str, OpSummary> = BTreeMap::new();
        for v in slow {
            for (op, x, base, ops, retrans) in &v.slow_ops {
                let e = by_op.entry(op.as_str()).or_default();
                e.0.push(*x);
                if let Some(b) = base {
                    e.1.push(*b);
                }
                e.2 += ops;
                e.3 += retrans;
            }
        }
        let (lat, label, failures) = (target.latency(), target.label(), target.failures());
        let mut ev = vec![
            format!("RPC latency on {label} rose on {} of the {n} hosts mounting it: the server or the network path to it (one target problem, not {} client problems)", hosts.len(), hosts.len()),
            format!("{AFFECTED}{}", hosts.join(" ")),
        ];
        for (op, (xs, bs, ops, retrans)) in &by_op {
            let x = median(xs);
            let b = median(bs);
            ev.push(format!("{op} mean {lat} {x:.2} ms (median over {} hosts), {:.1}x their own history {b:.2} ms; {ops} RPCs, {retrans} {failures} in their latest windows", xs.len(), x / b.max(1e-3)));
        }
        let nids = self.nids(target);
        if !nids.is_empty() {
            ev.push(format!("served from {nids}"));
        }
        let conf = (0.7 + 0.05 * hosts.len().min(5) as f64).min(0.95);
        let mut f = Finding::new(target.kind(), &target.entity(), conf)
            .with_evidence_list(ev)
            .with_jobs(&jobs)
            .with_runbook(target.runbook(if nids.is_empty() { "its server" } else { &nids }));
        for h in hosts {
            f = f.with_mark(format!("host:{h}"));
        }
        f
    }

    /// The server NIDs the hosts' latest windows on `target` name.
    fn nids(&self, target: &Target) -> String {
        let set: BTreeSet<&str> = self
            .series
            .iter()
            .filter(|((_, t, _), s)| t == target && !s.nid.is_empty())
            .map(|(_, s)| s.nid.as_str())
            .collect();
        set.into_iter().collect::<Vec<_>>().join(" ")
    }

    /// Forgets the series and jobs of these hosts.
    /// The series' learnt round-trip baselines: (host, target, procedure,
    /// baseline).
    pub fn own_baselines(&self) -> Vec<(&str, &Target, &str, &OwnBaseline)> {
        self.series
            .iter()
            .filter(|(_, s)| s.own.learnt() > 0)
            .map(|((h, t, op), s)| (h.as_str(), t, op.as_str(), &s.own))
            .collect()
    }

    /// Gives a series its baseline back (a series this engine tracks).
    pub fn restore_baseline(&mut self, host: &str, t: &Target, op: &str, b: &OwnBaseline) -> bool {
        match self
            .series
            .get_mut(&(host.to_string(), t.clone(), op.to_string()))
        {
            Some(s) => {
                s.own = b.clone();
                true
            }
            None => false,
        }
    }

    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.series.retain(|(h, _, _), _| !gone.contains(h));
        self.slow_series.clear();
        for ((_, t, _), s) in &self.series {
            if s.streak > 0 {
                *self.slow_series.entry(t.clone()).or_insert(0) += 1;
            }
        }
        self.jobs.retain(|h, _| !gone.contains(h));
        self.mounts.retain(|h, _| !gone.contains(h));
        let mounted: BTreeSet<&Target> = self.mounts.values().flat_map(|m| m.keys()).collect();
        self.last_rpcs.retain(|t, _| mounted.contains(t));
    }

    /// Series tracked.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

#[cfg(test)]
mod tests;
