//! InfiniBand link detectors: `ib_link_degraded` (error counters rising
//! relative to traffic and to the fabric's other ports), `ib_link_down`
//! (a port that was active is not), `ib_link_flapping` (repeated down/up).
//!
//! Confounders handled here: counter resets (a counter going down makes that
//! window unknown, never a negative or huge rate), collector restarts (entity
//! state is keyed by port name, counters continue), cluster-wide shifts (a port
//! must stand out from the fabric's median by a robust margin), job ends
//! (no traffic, no errors: nothing), one-off single errors (a minimum count
//! for consecutive windows).
use std::collections::{BTreeMap, HashMap, VecDeque};

use proto::v1::Window;

use collector::ib::counters::state_name;

use super::{baseline::OwnBaseline, incidents::Finding, mad, median};

/// Error counters in `counters/` (IBA PortCounters).
pub const ERROR_COUNTERS: &[&str] = &[
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "port_rcv_remote_physical_errors",
    "excessive_buffer_overrun_errors",
];

/// Retransmit/timeout counters in `hw_counters/` (mlx5 and rxe names).
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

/// Minimum errors per window for a port to count as erroring (one-off single
/// errors are normal on large fabrics).
pub const MIN_ERRORS: u64 = 3;
/// A port's error rate must exceed the fabric median by this many MADs …
pub const MAD_FACTOR: f64 = 6.0;
/// … and by this factor.
pub const RATIO_FACTOR: f64 = 10.0;
/// Floor of the error rate (errors per GB) below which nothing is anomalous.
pub const RATE_FLOOR: f64 = 0.5;
/// Down transitions within `FLAP_WINDOWS` windows that make a link flapping.
pub const FLAP_TRANSITIONS: usize = 3;
pub const FLAP_WINDOWS: usize = 30;

/// A port with errors this window: (entity, errors, errors/GB, counters that moved).
type Erroring = (String, u64, f64, Vec<(String, u64)>);

#[derive(Debug, Default)]
struct PortState {
    counters: BTreeMap<String, u64>,
    hw: BTreeMap<String, u64>,
    state: Option<u32>,
    /// Latest error rate (errors per GB of traffic), `None` when unknown.
    rate: Option<f64>,
    last_errors: u64,
    /// Consecutive erroring windows.
    streak: u32,
    /// Window indexes of ACTIVE→not-ACTIVE transitions (bounded).
    downs: VecDeque<u64>,
    windows: u64,
    resets: u64,
    /// Own history: error rates of windows with traffic.
    own: OwnBaseline,
}

/// With fewer peers than this, a port is judged against its own history.
pub const MIN_PEERS: usize = 4;

/// All ports of the fabric.
#[derive(Debug, Default)]
pub struct IbDetector {
    ports: HashMap<String, PortState>,
    by_host: HashMap<String, Vec<String>>,
    /// Port entity → link name, from the fabric topology: both ends of a
    /// link report under one entity.
    topology: HashMap<String, String>,
    /// Peer summary (window end, median, MAD, ports) computed once per window
    /// time slot, not once per host: O(ports) per slot.
    peers: Option<(i64, f64, f64, usize)>,
}

/// Parses a topology file: one link per line, `LINK ENDPOINT [ENDPOINT]`,
/// endpoints as `<host>/<hca>/<port>`; `#` comments.
pub fn parse_topology(text: &str) -> Result<HashMap<String, String>, String> {
    let mut map = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let link = parts
            .next()
            .ok_or_else(|| format!("line {}: empty", i + 1))?;
        let ends: Vec<&str> = parts.collect();
        if ends.is_empty() || ends.len() > 2 {
            return Err(format!(
                "line {}: expected `LINK ENDPOINT [ENDPOINT]`, got {line:?}",
                i + 1
            ));
        }
        for e in ends {
            if e.split('/').count() != 3 {
                return Err(format!(
                    "line {}: endpoint {e:?} is not <host>/<hca>/<port>",
                    i + 1
                ));
            }
            if let Some(prev) = map.insert(e.to_string(), link.to_string()) {
                return Err(format!(
                    "line {}: endpoint {e} already belongs to link {prev}",
                    i + 1
                ));
            }
        }
    }
    Ok(map)
}

fn delta_sum(
    prev: &BTreeMap<String, u64>,
    cur: &std::collections::HashMap<String, u64>,
    names: &[&str],
) -> Option<(u64, Vec<(String, u64)>)> {
    let mut total = 0u64;
    let mut moved = Vec::new();
    for n in names {
        let (Some(&c), Some(&p)) = (cur.get(*n), prev.get(*n)) else {
            continue;
        };
        if c < p {
            return None; // reset: this window is unknown
        }
        if c > p {
            moved.push(((*n).to_string(), c - p));
        }
        total += c - p;
    }
    Some((total, moved))
}

impl IbDetector {
    pub fn with_topology(topology: HashMap<String, String>) -> Self {
        Self {
            topology,
            ..Self::default()
        }
    }

    /// Entities (ports) known on a host.
    pub fn entities_of(&self, host: &str) -> Vec<String> {
        self.by_host.get(host).cloned().unwrap_or_default()
    }

    /// The entity a port reports under: its link name when the topology
    /// knows it, else the port itself.
    pub fn entity_of(&self, port: &str) -> String {
        self.topology
            .get(port)
            .cloned()
            .unwrap_or_else(|| port.to_string())
    }

    /// Link names (from the topology) of a host's ports.
    pub fn links_of(&self, host: &str) -> Vec<String> {
        self.entities_of(host)
            .iter()
            .filter_map(|p| self.topology.get(p).cloned())
            .collect()
    }

    /// Updates the host's ports from a window and returns findings for them.
    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        let mut evidence_errors: Vec<Erroring> = Vec::new();
        let mut findings = Vec::new();
        let mut names = Vec::new();
        for p in &w.ib_ports {
            let entity = format!("{host}/{}/{}", p.hca, p.port);
            names.push(entity.clone());
            let st = self.ports.entry(entity.clone()).or_default();
            st.windows += 1;
            let first = st.counters.is_empty() && st.hw.is_empty();
            // Link state.
            if let Some(prev) = st.state {
                if prev == 4 && p.state != 4 {
                    st.downs.push_back(st.windows);
                    findings.push(Finding::new("ib_link_down", &entity, 0.95)
                        .with_evidence(format!("state ACTIVE -> {} (phys_state {})", state_name(p.state), p.phys_state))
                        .with_jobs(jobs)
                        .with_runbook(format!("check the cable and switch port of {} port {}: `ibstat {} {}`, `mlxlink -d {} -p {}`, switch logs", p.hca, p.port, p.hca, p.port, p.hca, p.port)));
                }
            }
            if p.state != 4 && st.state.is_some_and(|s| s != 4) && !st.downs.is_empty() {
                // still down: keep the incident alive
                findings.push(
                    Finding::new("ib_link_down", &entity, 0.95)
                        .with_evidence(format!("state {} since window", state_name(p.state)))
                        .with_jobs(jobs),
                );
            }
            while st
                .downs
                .front()
                .is_some_and(|&d| st.windows - d > FLAP_WINDOWS as u64)
            {
                st.downs.pop_front();
            }
            if st.downs.len() >= FLAP_TRANSITIONS {
                findings.push(
                    Finding::new("ib_link_flapping", &entity, 0.9)
                        .with_evidence(format!("{} down transitions in the last {FLAP_WINDOWS} windows", st.downs.len()))
                        .with_jobs(jobs)
                        .with_runbook(format!("a flapping link usually means a bad cable or transceiver: `mlxlink -d {} -p {} -m`, replace the cable", p.hca, p.port)),
                );
            }
            st.state = Some(p.state);
            // Error counters relative to traffic.
            if !first {
                let errs = delta_sum(&st.counters, &p.counters, ERROR_COUNTERS);
                let hw = delta_sum(&st.hw, &p.hw_counters, HW_ERROR_COUNTERS);
                let traffic = delta_sum(
                    &st.counters,
                    &p.counters,
                    &["port_rcv_data", "port_xmit_data"],
                );
                match (errs, hw, traffic) {
                    (Some((e, mut moved)), Some((h, hmoved)), Some((t, _))) => {
                        moved.extend(hmoved);
                        let total = e + h;
                        let gb = (t as f64 * 4.0) / 1e9;
                        // Without counters/ traffic (rxe), use packets from hw_counters.
                        let gb = if gb > 0.0 {
                            gb
                        } else {
                            delta_sum(&st.hw, &p.hw_counters, &["sent_pkts", "rcvd_pkts"])
                                .map_or(0.0, |(pk, _)| pk as f64 * 4096.0 / 1e9)
                        };
                        let rate = total as f64 / gb.max(0.001);
                        st.rate = Some(rate);
                        // Own history learns from windows with traffic that stay
                        // near it (all of them while warming up).
                        if gb > 0.0 {
                            let near = total < MIN_ERRORS || st.own.near(rate, RATE_FLOOR);
                            st.own.learn(rate, near);
                        }
                        st.last_errors = total;
                        if total >= MIN_ERRORS {
                            st.streak += 1;
                            evidence_errors.push((entity.clone(), total, rate, moved));
                        } else {
                            st.streak = 0;
                        }
                    }
                    _ => {
                        st.resets += 1;
                        st.rate = None;
                        st.streak = 0;
                    }
                }
            }
            st.counters = p.counters.iter().map(|(k, v)| (k.clone(), *v)).collect();
            st.hw = p.hw_counters.iter().map(|(k, v)| (k.clone(), *v)).collect();
        }
        if !names.is_empty() {
            self.by_host.insert(host.to_string(), names);
        }
        // Peer comparison over the latest rate of every port of the fabric.
        if !evidence_errors.is_empty() {
            let (m, d, n_rates) = match self.peers {
                Some((ts, m, d, n)) if ts == w.end_unix_ms => (m, d, n),
                _ => {
                    let rates: Vec<f64> = self.ports.values().filter_map(|s| s.rate).collect();
                    let m = median(&rates);
                    let d = mad(&rates, m);
                    self.peers = Some((w.end_unix_ms, m, d, rates.len()));
                    (m, d, rates.len())
                }
            };
            let peer_threshold = (m + MAD_FACTOR * d).max(m * RATIO_FACTOR).max(RATE_FLOOR);
            // Verbs completions in error on this host confirm a link problem.
            let verbs_errors: u64 = w
                .verbs
                .iter()
                .filter(|v| v.status != "IBV_WC_SUCCESS")
                .map(|v| v.count)
                .sum();
            for (entity, total, rate, moved) in evidence_errors {
                let Some(st) = self.ports.get(&entity) else {
                    continue;
                };
                let (streak, baseline, history) = (st.streak, st.own.value(), st.own.learnt());
                // Against peers when there are enough, else against the port's own
                // history once it has one.
                let by_peers = n_rates >= MIN_PEERS;
                let threshold = if by_peers {
                    peer_threshold
                } else if !st.own.warm() {
                    continue;
                } else {
                    st.own.threshold(RATIO_FACTOR, RATE_FLOOR)
                };
                if rate <= threshold || streak < 2 {
                    continue;
                }

                let ratio = if m > 0.0 { rate / m } else { f64::INFINITY };
                let confirmed = if verbs_errors > 0 { 0.05 } else { 0.0 };
                let confidence = (0.6
                    + 0.1 * (rate / threshold).log10().max(0.0)
                    + 0.05 * f64::from(streak.min(4))
                    + confirmed)
                    .min(0.99);
                let mut ev: Vec<String> = moved
                    .iter()
                    .map(|(n, v)| format!("{n} +{v} this window"))
                    .collect();
                ev.push(if !by_peers {
                    let b = baseline.unwrap_or(0.0);
                    if b > 0.0 {
                        format!("{rate:.1} errors/GB, {:.0}x this port's own baseline ({b:.2}/GB over {history} windows); {n_rates} ports are too few to compare with peers", rate / b)
                    } else {
                        format!("{rate:.1} errors/GB while this port's own baseline is 0 ({history} windows); {n_rates} ports are too few to compare with peers")
                    }
                } else if ratio.is_finite() {
                    format!("{rate:.1} errors/GB, {ratio:.0}x the fabric median ({m:.2}/GB over {} ports)", n_rates)
                } else {
                    format!("{rate:.1} errors/GB while the fabric median is 0 ({} ports)", n_rates)
                });
                ev.push(format!(
                    "{total} errors/window for {streak} consecutive windows"
                ));
                if let (true, Some(b)) = (by_peers, baseline) {
                    ev.push(format!("own baseline {b:.2} errors/GB"));
                }
                if verbs_errors > 0 {
                    ev.push(format!(
                        "{verbs_errors} verbs work completions in error on this host this window"
                    ));
                }
                let (hca, port) = entity
                    .rsplit_once('/')
                    .and_then(|(a, p)| {
                        a.rsplit_once('/')
                            .map(|(_, h)| (h.to_string(), p.to_string()))
                    })
                    .unwrap_or_default();
                findings.push(
                    Finding::new("ib_link_degraded", &entity, confidence)
                        .with_evidence_list(ev)
                        .with_jobs(jobs)
                        .with_runbook(format!("link error rate rising: `perfquery -x` on {hca} port {port}, `mlxlink -d {hca} -p {port} -c` for BER and FEC, `ibdiagnet` for the far end; drain the node and replace the cable if BER keeps rising")),
                );
            }
        }
        for f in &mut findings {
            if let Some(link) = self.topology.get(&f.entity) {
                f.evidence.push(format!("reported by {}", f.entity));
                f.entity = link.clone();
            }
        }
        findings
    }
}
