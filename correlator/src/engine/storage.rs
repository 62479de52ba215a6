//! `storage_latency`: a block device whose p50 or p99 request latency (from
//! the window's log2 latency histogram) is far above the median of its
//! class peers (NVMe with NVMe, HDD with HDD, …) and above its own history,
//! and above its class's floor, for `persist_windows` consecutive windows —
//! checkpoint stalls, a failing disk, a slow target. A fleet-wide slowdown
//! moves the peers' median with it and raises nothing.
//!
//! Silence is not health: a device with fewer than `min_requests` in its
//! host's window (or none) is held ([`StorageDetector::held`]): its open
//! incident neither resolves nor counts quiet windows until requests show
//! it healthy or none came for `unobserved_hold_s`.
use std::collections::HashMap;
use vocab::kind::IncidentKind;

use proto::v1::Window;
use vocab::hist::quantile_ns;
use vocab::hist::LAT_BUCKETS;

use super::{baseline::OwnBaseline, incidents::Finding, stats::median};

mod config;
pub use config::{ClassFloor, StorageConfig};

#[derive(Debug, Default)]
struct DevState {
    class: String,
    /// Latest window's quantiles (seconds), `None` below `min_requests`.
    p50: Option<f64>,
    p99: Option<f64>,
    /// Window end of the latest quantiles: stale devices leave the peers.
    at_ms: i64,
    /// Window end of the latest window with `min_requests` (judged).
    judged_ms: i64,
    streak: u32,
    own_p50: OwnBaseline,
    own_p99: OwnBaseline,
}

/// Per class: (median p50, median p99, devices).
type ClassPeers = HashMap<String, (f64, f64, usize)>;

/// The yardsticks of one time slot: class peers, and the fleet's common
/// shift — the median over every device (any class) of its latest p50 and
/// p99 divided by its own history — with the devices it is taken over.
#[derive(Clone, Debug, Default)]
struct Peers {
    by_class: ClassPeers,
    shift50: f64,
    shift99: f64,
    n_shift: usize,
}

#[derive(Debug, Default)]
pub struct StorageDetector {
    cfg: StorageConfig,
    devs: HashMap<String, DevState>,
    /// Peer medians per class, recomputed once per half window of event time.
    peers: super::slot_cache::SlotCache<Peers>,
    /// The other shards' summaries, when sharded.
    remote: Option<std::sync::Arc<super::fleet::Remote>>,
    /// The latest window's length (ms): devices fresh within 3 of them.
    len_ms: i64,
    /// Each host's devices (entities of `devs`).
    by_host: HashMap<String, std::collections::BTreeSet<String>>,
    /// The devices the latest window holds open unobserved.
    held: Vec<String>,
}

/// One device's window: requests, latency sum and max (ns), bytes,
/// histogram, class.
struct DevWindow {
    requests: u64,
    timed: u64,
    sum_ns: u64,
    max_ns: u64,
    bytes: u64,
    hist: [u64; LAT_BUCKETS],
    class: String,
}

impl Default for DevWindow {
    fn default() -> Self {
        Self {
            requests: 0,
            timed: 0,
            sum_ns: 0,
            max_ns: 0,
            bytes: 0,
            hist: [0; LAT_BUCKETS],
            class: String::new(),
        }
    }
}

impl StorageDetector {
    /// A device's latest latency quantiles (p50, p99, seconds), for the
    /// history's series.
    pub fn latency(&self, entity: &str) -> Option<(Option<f64>, Option<f64>)> {
        self.devs.get(entity).map(|d| (d.p50, d.p99))
    }

    pub fn new(cfg: StorageConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// Class peers and the fleet shift of the slot ending at `end_ms`.
    fn class_peers(&mut self, end_ms: i64, len_ms: i64) -> Peers {
        let devs = &self.devs;
        let remote = self.remote.as_deref().map(|r| &r.storage);
        // Devices whose latest quantiles are recent (within 3 windows).
        self.peers.get(end_ms, len_ms, || {
            peers_of(&fresh_values(devs, end_ms - 3 * len_ms), remote)
        })
    }

    /// The devices' learnt latency baselines: (entity, `p50`/`p99`,
    /// baseline).
    pub fn own_baselines(&self) -> Vec<(&str, &'static str, &OwnBaseline)> {
        let mut v = Vec::new();
        for (e, d) in &self.devs {
            for (sig, b) in [("p50", &d.own_p50), ("p99", &d.own_p99)] {
                if b.learnt() > 0 {
                    v.push((e.as_str(), sig, b));
                }
            }
        }
        v
    }

    /// Gives a device a latency baseline back (a device this engine tracks).
    pub fn restore_baseline(&mut self, entity: &str, signal: &str, b: &OwnBaseline) -> bool {
        let Some(d) = self.devs.get_mut(entity) else {
            return false;
        };
        match signal {
            "p50" => d.own_p50 = b.clone(),
            "p99" => d.own_p99 = b.clone(),
            _ => return false,
        }
        true
    }

    /// Sets the other shards' merged summaries (`None`: not sharded).
    pub fn set_remote(&mut self, remote: Option<std::sync::Arc<super::fleet::Remote>>) {
        self.remote = remote;
    }

    /// This detector's part of a shard's summary: the devices fresh at
    /// `clock_ms`.
    pub fn summary(&self, clock_ms: i64) -> super::fleet::StorageSummary {
        let v = fresh_values(&self.devs, clock_ms - 3 * self.len_ms.max(1));
        let mut s = super::fleet::StorageSummary::default();
        for (c, (a, b)) in &v.by_class {
            let e = s.by_class.entry(c.clone()).or_default();
            a.iter().for_each(|x| e.p50.add(*x));
            b.iter().for_each(|x| e.p99.add(*x));
        }
        v.r50.iter().for_each(|x| s.shift50.add(*x));
        v.r99.iter().for_each(|x| s.shift99.add(*x));
        s
    }

    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        let len_ms = if w.start_unix_ms > 0 && w.end_unix_ms > w.start_unix_ms {
            w.end_unix_ms - w.start_unix_ms
        } else {
            1000
        };
        self.len_ms = len_ms;
        let candidates = self.quantiles(host, w.end_unix_ms, per_device(w));
        let peers = self.class_peers(w.end_unix_ms, len_ms);
        let mut out = Vec::new();
        for (entity, d) in &candidates {
            let Some(st) = self.devs.get_mut(entity) else {
                continue;
            };
            st.judged_ms = w.end_unix_ms;
            out.extend(judge(&self.cfg, st, d, &peers, entity, jobs));
        }
        self.hold(host, w.end_unix_ms);
        out
    }

    /// The host's devices without a judged window now, within
    /// `unobserved_hold_s` of their last one.
    fn hold(&mut self, host: &str, now: i64) {
        self.held.clear();
        let horizon = (self.cfg.unobserved_hold_s * 1000.0) as i64;
        for e in self.by_host.get(host).into_iter().flatten() {
            let Some(st) = self.devs.get(e) else {
                continue;
            };
            if st.judged_ms > 0 && st.judged_ms < now && now - st.judged_ms < horizon {
                self.held.push(e.clone());
            }
        }
    }

    /// The devices the latest observed window holds open unobserved (too
    /// few requests to judge them): their incidents neither resolve nor
    /// count quiet windows from it.
    pub fn held(&self) -> &[String] {
        &self.held
    }

    /// Each device's latest quantiles from its window (ending at `end_ms`);
    /// the devices with enough requests to judge.
    fn quantiles(
        &mut self,
        host: &str,
        end_ms: i64,
        per: HashMap<&str, DevWindow>,
    ) -> Vec<(String, DevWindow)> {
        let cfg = &self.cfg;
        let mut candidates = Vec::new();
        for (dev, d) in per {
            let entity = vocab::entity::device(host, dev);
            if !self.devs.contains_key(&entity) {
                self.by_host
                    .entry(host.to_string())
                    .or_default()
                    .insert(entity.clone());
            }
            let st = self.devs.entry(entity.clone()).or_default();
            st.class.clone_from(&d.class);
            st.at_ms = end_ms;
            if d.requests < cfg.min_requests {
                st.p50 = None;
                st.p99 = None;
                st.streak = 0;
                continue;
            }
            let max_s = d.max_ns as f64 / 1e9;
            // Quantiles from the histogram (never above the exact max);
            // from an older collector without one, the mean stands for p50.
            let (p50, p99) = if d.timed >= cfg.min_requests {
                let q = |p: f64| quantile_ns(&d.hist, p).map(|v| (v / 1e9).min(max_s));
                (q(0.5), q(0.99).filter(|_| d.timed >= cfg.min_requests_p99))
            } else {
                (Some(d.sum_ns as f64 / d.requests as f64 / 1e9), None)
            };
            st.p50 = p50;
            st.p99 = p99;
            candidates.push((entity, d));
        }
        candidates
    }
}

/// Per device: the window's block rows summed over ops and jobs.
fn per_device(w: &Window) -> HashMap<&str, DevWindow> {
    let mut per: HashMap<&str, DevWindow> = HashMap::new();
    for b in &w.block {
        let e = per.entry(b.device.as_str()).or_default();
        e.requests += b.requests;
        e.sum_ns += b.latency_sum_ns;
        e.max_ns = e.max_ns.max(b.latency_max_ns);
        e.bytes += b.bytes;
        for (i, c) in b.hist.iter().take(LAT_BUCKETS).enumerate() {
            e.hist[i] += c;
            e.timed += c;
        }
        if e.class.is_empty() {
            e.class.clone_from(&b.device_class);
        }
    }
    per
}

/// What a device was compared with: its class peers (median p50, p99,
/// devices; used when there are `min_peers`), or else its own history,
/// scaled by the fleet's common shift when enough devices have one.
struct Compared {
    peer_p50: f64,
    peer_p99: f64,
    n_peers: usize,
    by_peers: bool,
    by_fleet: bool,
}

/// Judges one device's latest quantiles; a finding once it has been slow
/// for `persist_windows` windows. Its own history learns from the window.
fn judge(
    cfg: &StorageConfig,
    st: &mut DevState,
    d: &DevWindow,
    peers: &Peers,
    entity: &str,
    jobs: &[String],
) -> Option<Finding> {
    let floor = cfg.floor(&st.class);
    let (peer_p50, peer_p99, n_peers) = peers
        .by_class
        .get(&st.class)
        .copied()
        .unwrap_or((0.0, 0.0, 0));
    let by_peers = n_peers >= cfg.min_peers;
    // Too few class peers: the own history judges, scaled by the fleet's
    // common shift when enough devices of any class have one (a load
    // change slows every device; a fault slows one).
    let by_fleet = !by_peers && peers.n_shift >= cfg.min_peers;
    let shift = |s: f64| if by_fleet { s.max(1.0) } else { 1.0 };
    let (shift50, shift99) = (shift(peers.shift50), shift(peers.shift99));
    // One quantile's verdict: above its floor, above its peers (when there
    // are enough) and above its own history (once it has one; with too few
    // peers, the own history is required).
    let slow = |x: Option<f64>, floor_ms: f64, peer: f64, own: &OwnBaseline, shift: f64| -> bool {
        let Some(x) = x else { return false };
        if x * 1e3 <= floor_ms {
            return false;
        }
        // Without an own history yet, peers alone must show twice the
        // margin: healthy devices of one class differ by up to ~2.5x
        // (models, firmware, fill level).
        let margin = if own.warm() { 1.0 } else { 2.0 };
        let above_peers = !by_peers || x > margin * cfg.peer_ratio * peer;
        let above_own = match own.value().filter(|_| own.warm()) {
            Some(b) => x > cfg.own_ratio * b * shift,
            None => by_peers,
        };
        above_peers && above_own
    };
    let slow50 = slow(st.p50, floor.p50_ms, peer_p50, &st.own_p50, shift50);
    let slow99 = slow(st.p99, floor.p99_ms, peer_p99, &st.own_p99, shift99);
    st.streak = if slow50 || slow99 { st.streak + 1 } else { 0 };
    // Own history learns from windows near it.
    let own = (st.own_p50.value(), st.own_p99.value(), st.own_p50.learnt());
    if let Some(x) = st.p50 {
        let near = st.own_p50.near(x, floor.p50_ms / 1e3);
        st.own_p50.learn(x, near);
    }
    if let Some(x) = st.p99 {
        let near = st.own_p99.near(x, floor.p99_ms / 1e3);
        st.own_p99.learn(x, near);
    }
    if st.streak < cfg.persist_windows {
        return None;
    }
    let compared = Compared {
        peer_p50,
        peer_p99,
        n_peers,
        by_peers,
        by_fleet,
    };
    let ev = evidence(cfg, st, d, &compared, peers, own);
    Some(
        Finding::new(IncidentKind::StorageLatency, entity, (0.7 + 0.05 * f64::from(st.streak.min(5))).min(0.95))
            .with_evidence_list(ev)
            .with_jobs(jobs)
            .with_runbook(format!("slow storage on {}: `iostat -x 1`, `nvme smart-log`, check the filesystem/target it backs (checkpoint writes)", crate::shell::quote(entity))),
    )
}

/// A slow device's evidence: its quantiles and floors, what it was
/// compared with, its own history as it was before this window (`own`:
/// p50, p99, windows learnt) and the window's requests.
fn evidence(
    cfg: &StorageConfig,
    st: &DevState,
    d: &DevWindow,
    c: &Compared,
    peers: &Peers,
    (own50, own99, learnt): (Option<f64>, Option<f64>, u32),
) -> Vec<String> {
    let floor = cfg.floor(&st.class);
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |s| format!("{:.2}", s * 1e3));
    let class = if st.class.is_empty() {
        "unclassified"
    } else {
        st.class.as_str()
    };
    let x50 = st.p50.unwrap_or(0.0);
    let n_peers = c.n_peers;
    let mut ev = vec![format!(
        "p50 {} ms, p99 {} ms ({class}); floors {} / {} ms",
        ms(st.p50),
        ms(st.p99),
        floor.p50_ms,
        floor.p99_ms
    )];
    if c.by_peers {
        ev.push(format!(
            "{:.0}x the median p50 {} ms (p99 {} ms) of {n_peers} {class} devices",
            if c.peer_p50 > 0.0 {
                x50 / c.peer_p50
            } else {
                f64::INFINITY
            },
            ms(Some(c.peer_p50)),
            ms(Some(c.peer_p99))
        ));
    } else {
        ev.push(format!("{n_peers} {class} devices are too few to compare with peers: judged against its own history"));
        if c.by_fleet {
            ev.push(format!(
                "fleet-wide shift over {} devices: p50 {:.1}x, p99 {:.1}x their own history (this device's threshold scaled by it)",
                peers.n_shift, peers.shift50, peers.shift99
            ));
        }
    }
    if let Some(b) = own50 {
        ev.push(format!(
            "own history p50 {} ms, p99 {} ms over {learnt} windows",
            ms(Some(b)),
            ms(own99)
        ));
    }
    ev.push(format!(
        "{} requests, {} bytes, max {:.1} ms this window",
        d.requests,
        d.bytes,
        d.max_ns as f64 / 1e6
    ));
    ev
}

impl StorageDetector {
    /// Forgets the devices of these hosts.
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.devs
            .retain(|e, _| !gone.contains(vocab::entity::host_of(e)));
        self.by_host.retain(|h, _| !gone.contains(h));
    }
}

/// The fresh devices' values: per class their p50s and p99s, and the
/// ratios of p50 and p99 to their own baselines.
#[derive(Default)]
struct Fresh {
    by_class: HashMap<String, (Vec<f64>, Vec<f64>)>,
    r50: Vec<f64>,
    r99: Vec<f64>,
}

/// The values of devices whose latest quantiles end at or after `fresh`:
/// O(devices).
fn fresh_values(devs: &HashMap<String, DevState>, fresh: i64) -> Fresh {
    let mut v = Fresh::default();
    for d in devs.values() {
        if d.at_ms < fresh {
            continue;
        }
        let ratio = |x: Option<f64>, own: &OwnBaseline| {
            let b = own.value().filter(|b| own.warm() && *b > 0.0)?;
            Some(x? / b)
        };
        if let Some(r) = ratio(d.p50, &d.own_p50) {
            v.r50.push(r);
        }
        if let Some(r) = ratio(d.p99, &d.own_p99) {
            v.r99.push(r);
        }
        if let Some(p50) = d.p50 {
            let e = v.by_class.entry(d.class.clone()).or_default();
            e.0.push(p50);
            if let Some(p99) = d.p99 {
                e.1.push(p99);
            }
        }
    }
    v
}

/// Class medians and the fleet shift of `v`; sharded, over the other
/// shards' histograms too (medians then exact to a bin).
fn peers_of(v: &Fresh, remote: Option<&super::fleet::StorageSummary>) -> Peers {
    let Some(r) = remote else {
        return Peers {
            by_class: v
                .by_class
                .iter()
                .map(|(c, (a, b))| (c.clone(), (median(a), median(b), a.len())))
                .collect(),
            shift50: median(&v.r50),
            shift99: median(&v.r99),
            n_shift: v.r50.len(),
        };
    };
    let mut by_class = ClassPeers::new();
    let classes: std::collections::BTreeSet<&String> =
        v.by_class.keys().chain(r.by_class.keys()).collect();
    for c in classes {
        let none = (Vec::new(), Vec::new());
        let (a, b) = v.by_class.get(c).unwrap_or(&none);
        let empty = super::fleet::ClassHist::default();
        let h = r.by_class.get(c).unwrap_or(&empty);
        let (h50, h99) = (h.p50.with(a), h.p99.with(b));
        by_class.insert(
            c.clone(),
            (h50.median(), h99.median(), h50.count() as usize),
        );
    }
    let (s50, s99) = (r.shift50.with(&v.r50), r.shift99.with(&v.r99));
    Peers {
        by_class,
        shift50: s50.median(),
        shift99: s99.median(),
        n_shift: s50.count() as usize,
    }
}
