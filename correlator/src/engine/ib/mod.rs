//! InfiniBand/RoCE link detectors, in physical units.
//!
//! - `ib_link_degraded`: a port's bit error rate (errors ÷ bits signalled:
//!   the link's rate × the time it was ACTIVE, idle or not, because physical
//!   errors happen on idle links too) is significantly above a reference
//!   BER, per counter family, by a Poisson test over the latest window and
//!   over the last `horizon_s` seconds (however many windows that is). The
//!   reference is the fabric's median BER, floored at `reference_ber` and
//!   capped at the absolute alarm line `alarm_ber`. Transport retries
//!   (`hw_counters`) are judged per packet against their own reference.
//!   Once degraded, a port stays degraded while its errors stay significant
//!   at the looser `clear_significance` (hysteresis), or while a counter it
//!   was judged on is saturated.
//! - `ib_link_down`: a port that was ACTIVE is not, or `link_downed` moved
//!   while both samples saw ACTIVE (a down and up shorter than the window).
//!   The incident stays open for `flap_horizon_s` after the down, so that a
//!   second down turns it into …
//! - `ib_link_flapping`: `flap_downs` downs within `flap_horizon_s`; the
//!   incident manager turns the open `ib_link_down` incident into this kind
//!   (same id).
//!
//! Counter semantics: a counter going down is a reset (that window of that
//! counter is unknown, never a negative or huge count); a legacy counter at
//! its maximum is saturated (its delta into the maximum is a lower bound,
//! afterwards it is unknown, never "no errors"); windows with a down are
//! left out of the BER (errors during link training are the down's symptom).
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use proto::v1::{IbPort, Window};

use super::{baseline::OwnBaseline, incidents::Finding, stats::median};

mod config;
mod counters;
mod extent;
mod history;
mod links;
#[cfg(test)]
mod tests;
mod topology;
mod verdict;

pub use config::IbConfig;
use counters::remember;
use history::{History, FAMILIES};
pub use topology::{parse_topology, Topology, TopologyError};

/// Physical-layer error counter families in `counters/` (IBA PortCounters).
pub const ERROR_COUNTERS: &[&str] = &[
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "port_rcv_remote_physical_errors",
    "excessive_buffer_overrun_errors",
];
const _: () = assert!(ERROR_COUNTERS.len() == FAMILIES);

/// Transport retransmit/timeout/sequence counters in `hw_counters/` (mlx5
/// and rxe names), judged per packet.
pub const HW_ERROR_COUNTERS: &[&str] = &[
    "local_ack_timeout_err",
    "retry_exceeded_err",
    "rnr_nak_retry_err",
    "out_of_seq_request",
    "packet_seq_err",
    "out_of_sequence",
    "duplicate_request",
    "rcvd_seq_err",
    "completer_retry_err",
];

/// IBA port state ACTIVE.
const ACTIVE: u32 = 4;

/// The entity of a port row: a host's HCA port `<host>/<hca>/<port>`, or a
/// switch's port `switch:<switch>/<port>` (the `[switches]` source's rows,
/// from whichever host polls the fabric).
pub fn port_entity(host: &str, p: &IbPort) -> String {
    if p.switch.is_empty() {
        vocab::entity::port(host, &p.hca, p.port)
    } else {
        vocab::entity::switch_port(&p.switch, p.port)
    }
}

#[derive(Debug, Default)]
struct PortState {
    counters: BTreeMap<String, u64>,
    hw: BTreeMap<String, u64>,
    state: Option<u32>,
    last_end_ms: Option<i64>,
    history: History,
    /// Window ends of downs (state transitions and `link_downed` moves).
    downs: VecDeque<i64>,
    /// Window end at which the port, ACTIVE before, was first seen not
    /// ACTIVE; cleared when it is ACTIVE again. A port down for good keeps
    /// its incident open whatever the flap horizon says.
    down_since_ms: Option<i64>,
    /// Counters seen at their maximum.
    saturated: BTreeSet<String>,
    /// Hysteresis: opened and not yet cleared.
    degraded: bool,
    /// Horizon BER estimate (max over families), for the fabric median.
    ber: Option<f64>,
    /// Horizon retries per packet, for the fabric median.
    retry_ratio: Option<f64>,
    /// Own history of retries per packet (windows with packets).
    own_retry: OwnBaseline,
    /// Transport retry counters that moved in the latest window.
    moved_hw: Vec<(String, u64)>,
    resets: u64,
}

/// Fabric baselines computed once per time slot: (slot end, median BER,
/// median retries per packet, ports with a BER, ports with a retry ratio).
type Fabric = (i64, f64, f64, usize, usize);

/// All ports of the fabric.
#[derive(Debug, Default)]
pub struct IbDetector {
    cfg: IbConfig,
    ports: HashMap<String, PortState>,
    by_host: HashMap<String, Vec<String>>,
    /// Link names (both ends of a link report under one entity) and the
    /// switch each port is cabled to, from the fabric topology.
    topology: Topology,
    /// Flagged ports behind switches, for the fault's extent.
    extent: extent::Extent,
    fabric: super::slot_cache::SlotCache<Fabric>,
    /// The other shards' summaries, when sharded (docs/scale-out.md).
    remote: Option<std::sync::Arc<super::fleet::Remote>>,
}

impl IbDetector {
    /// Ports with state in the detector (all hosts).
    pub fn ports_tracked(&self) -> usize {
        self.ports.len()
    }

    /// A port's horizon BER estimate and retries per packet, as the tests
    /// last computed them (for the history's series).
    pub fn port_signals(&self, port: &str) -> Option<(Option<f64>, Option<f64>)> {
        self.ports.get(port).map(|s| (s.ber, s.retry_ratio))
    }

    pub fn new(cfg: IbConfig, topology: Topology) -> Self {
        Self {
            cfg,
            topology,
            ..Self::default()
        }
    }

    pub fn with_topology(topology: Topology) -> Self {
        Self::new(IbConfig::default(), topology)
    }

    /// Replaces the fabric topology (before the first window).
    pub fn set_topology(&mut self, topology: Topology) {
        self.topology = topology;
    }

    /// Forgets the ports of these hosts (and the switch ports they polled).
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        let polled: std::collections::HashSet<&String> = gone
            .iter()
            .filter_map(|h| self.by_host.get(h))
            .flatten()
            .collect();
        let polled: std::collections::HashSet<String> = polled.into_iter().cloned().collect();
        self.ports
            .retain(|e, _| !gone.contains(vocab::entity::host_of(e)) && !polled.contains(e));
        self.by_host.retain(|h, _| !gone.contains(h));
        self.extent
            .forget(|p| gone.contains(vocab::entity::host_of(p)));
    }

    /// Entities (ports) known on a host.
    pub fn entities_of(&self, host: &str) -> Vec<String> {
        self.by_host.get(host).cloned().unwrap_or_default()
    }

    /// The entity a port reports under: its link name when the topology
    /// knows it, else the port itself.
    pub fn entity_of(&self, port: &str) -> String {
        self.topology
            .link_of(port)
            .cloned()
            .unwrap_or_else(|| port.to_string())
    }

    /// Link names (from the topology) of a host's ports.
    pub fn links_of(&self, host: &str) -> Vec<String> {
        self.entities_of(host)
            .iter()
            .filter_map(|p| self.topology.link_of(p).cloned())
            .collect()
    }

    /// Entities not under the host that its ports report into (link names
    /// and the switches they are cabled to): the host's windows count
    /// towards their incidents' quiet period.
    pub fn evaluated(&self, host: &str) -> Vec<String> {
        let mut e = Vec::new();
        for p in self.by_host.get(host).into_iter().flatten() {
            e.extend(self.topology.link_of(p).cloned());
            e.extend(self.topology.parent_of(p).map(vocab::entity::switch));
        }
        e.sort();
        e.dedup();
        e
    }

    /// The ports' learnt retry baselines, by host: (entity, baseline).
    pub fn own_baselines(&self) -> Vec<(&str, &str, &OwnBaseline)> {
        let mut v = Vec::new();
        for (host, ports) in &self.by_host {
            for p in ports {
                if let Some(st) = self.ports.get(p).filter(|s| s.own_retry.learnt() > 0) {
                    v.push((host.as_str(), p.as_str(), &st.own_retry));
                }
            }
        }
        v
    }

    /// Gives a port its retry baseline back (a port this engine tracks).
    pub fn restore_baseline(&mut self, entity: &str, b: &OwnBaseline) -> bool {
        match self.ports.get_mut(entity) {
            Some(st) => {
                st.own_retry = b.clone();
                true
            }
            None => false,
        }
    }

    /// Sets the other shards' merged summaries (`None`: not sharded).
    pub fn set_remote(&mut self, remote: Option<std::sync::Arc<super::fleet::Remote>>) {
        self.remote = remote;
    }

    /// This detector's part of a shard's summary.
    pub fn summary(&self) -> super::fleet::IbSummary {
        let mut s = super::fleet::IbSummary {
            ports: self.ports.len() as u64,
            flagged: self.extent.flagged_counts(),
            ..Default::default()
        };
        for p in self.ports.values() {
            if let Some(b) = p.ber {
                s.ber.add(b);
            }
            if let Some(r) = p.retry_ratio {
                s.retry.add(r);
            }
        }
        s
    }

    /// Fabric medians, recomputed at most once per half window of event
    /// time (hosts' window ends differ by their clocks): O(ports) per slot.
    /// Sharded, over this shard's ports and the others' histograms.
    fn fabric(&mut self, end_ms: i64, len_ms: i64) -> Fabric {
        let ports = &self.ports;
        let remote = self.remote.as_deref().filter(|r| r.shards > 0);
        self.fabric.get(end_ms, len_ms, || {
            let bers: Vec<f64> = ports.values().filter_map(|s| s.ber).collect();
            let retries: Vec<f64> = ports.values().filter_map(|s| s.retry_ratio).collect();
            let Some(r) = remote else {
                return (
                    end_ms,
                    median(&bers),
                    median(&retries),
                    bers.len(),
                    retries.len(),
                );
            };
            let (hb, hr) = (r.ib.ber.with(&bers), r.ib.retry.with(&retries));
            (
                end_ms,
                hb.median(),
                hr.median(),
                hb.count() as usize,
                hr.count() as usize,
            )
        })
    }

    /// Times the fabric medians were recomputed.
    pub fn fabric_recomputed(&self) -> u64 {
        self.fabric.recomputed
    }

    /// Updates the host's ports from a window and returns findings for them.
    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        let len_ms = if w.start_unix_ms > 0 && w.end_unix_ms > w.start_unix_ms {
            w.end_unix_ms - w.start_unix_ms
        } else {
            1000
        };
        let mut findings = Vec::new();
        let mut names = Vec::new();
        // Ports whose tests ran this window: judged after the fabric medians
        // include this window's estimates.
        let mut judged: Vec<(String, u32)> = Vec::new();
        for p in &w.ib_ports {
            let entity = port_entity(host, p);
            names.push(entity.clone());
            let st = self.ports.entry(entity.clone()).or_default();
            let at = (w.end_unix_ms, len_ms);
            if st.observe(&self.cfg, &entity, p, at, jobs, &mut findings) {
                judged.push((entity, p.port));
            }
        }
        if !names.is_empty() {
            self.by_host.insert(host.to_string(), names);
        }
        if !judged.is_empty() {
            let fabric = self.fabric(w.end_unix_ms, len_ms);
            // Verbs completions in error on this host confirm a link problem.
            let verbs_errors: u64 = w
                .verbs
                .iter()
                .filter(|v| v.status != "IBV_WC_SUCCESS")
                .map(|v| v.count)
                .sum();
            for (entity, port) in judged {
                if let Some(f) = self.judge(&entity, port, fabric, verbs_errors, jobs) {
                    findings.push(f);
                }
            }
        }
        let tracked = self.ports.len();
        let end = w.end_unix_ms;
        let remote = self.remote.as_deref().map(|r| &r.ib);
        self.extent.group(
            &self.topology,
            (&self.cfg, remote),
            end,
            tracked,
            &mut findings,
        );
        for f in &mut findings {
            if let Some(link) = self.topology.link_of(&f.entity) {
                f.evidence.push(format!("reported by {}", f.entity));
                f.entity = link.clone();
            }
        }
        findings
    }
}

impl PortState {
    /// Takes one window's snapshot of the port (the window ends at `at.0`
    /// and lasts `at.1` ms): its downs and link findings into `findings`,
    /// and a sample for the error tests. Whether the tests should judge it
    /// (ACTIVE, no down: a window with a down is the down's; its errors,
    /// from link training, are a symptom, not a degradation).
    fn observe(
        &mut self,
        cfg: &IbConfig,
        entity: &str,
        p: &IbPort,
        (end_ms, len_ms): (i64, i64),
        jobs: &[String],
        findings: &mut Vec<Finding>,
    ) -> bool {
        let first = self.counters.is_empty() && self.hw.is_empty();
        let secs = match self.last_end_ms {
            Some(prev) if end_ms > prev => (end_ms - prev) as f64 / 1000.0,
            _ => len_ms as f64 / 1000.0,
        }
        .clamp(0.001, 3600.0);
        self.last_end_ms = Some(end_ms);
        let downs = self.count_downs(cfg, p, first, end_ms);
        findings.extend(self.link_finding(cfg, entity, p, &downs, jobs));
        self.state = Some(p.state);
        let mut judge = false;
        if !first {
            let signalling = downs.count == 0 && downs.was_active && downs.is_active;
            let sample = self.sample(p, secs, signalling);
            self.history.push(sample, cfg.horizon_s);
            let s = self.history.sums();
            self.ber = (0..FAMILIES)
                .filter(|&f| s.horizon[f].1 > 0.0)
                .map(|f| s.horizon[f].0 as f64 / s.horizon[f].1)
                .reduce(f64::max);
            self.retry_ratio =
                (s.retries_h.1 > 0).then(|| s.retries_h.0 as f64 / s.retries_h.1 as f64);
            judge = downs.is_active && downs.count == 0;
        }
        remember(&mut self.counters, &p.counters);
        remember(&mut self.hw, &p.hw_counters);
        judge
    }
}
