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

use proto::v1::Window;

use vocab::ib::{state_name, COUNTERS};

use super::{baseline::OwnBaseline, config::IbConfig, incidents::Finding, median, stats};

/// Physical-layer error counter families in `counters/` (IBA PortCounters).
pub const ERROR_COUNTERS: &[&str] = &[
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "local_link_integrity_errors",
    "port_rcv_remote_physical_errors",
    "excessive_buffer_overrun_errors",
];
const FAMILIES: usize = 6;

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
/// Bound of a port's sample history (the horizon is in seconds; this caps
/// it for very short windows).
const MAX_SAMPLES: usize = 3600;
/// Bound of a port's remembered downs.
const MAX_DOWNS: usize = 64;

/// Saturation value of a legacy counter (`2^bits - 1`), `None` for 64-bit.
fn saturation(name: &str) -> Option<u64> {
    COUNTERS
        .iter()
        .find(|c| c.file == name)
        .filter(|c| c.bits < 64)
        .map(|c| (1u64 << c.bits) - 1)
}

/// One window of one port, as the tests need it.
#[derive(Clone, Debug, Default)]
struct Sample {
    secs: f64,
    /// Bits signalled while ACTIVE (rate × seconds), 0 when unknown.
    bits: f64,
    /// Errors per physical family; `None` when unknown (reset, saturated,
    /// missing).
    errors: [Option<u64>; FAMILIES],
    /// Transport retries and packets, when both are known.
    retries: Option<(u64, u64)>,
    /// Bytes sent and received, when known, and the link's rate.
    bytes: Option<u64>,
    rate_bytes: u64,
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

/// Sums of a port's samples over the horizon and over its latest window.
#[derive(Debug, Default)]
struct Sums {
    /// Per family: (errors, bits) over the horizon, and the latest window's.
    horizon: [(u64, f64); FAMILIES],
    window: [(u64, f64); FAMILIES],
    retries_h: (u64, u64),
    retries_w: (u64, u64),
    secs: f64,
    window_secs: f64,
}

/// A port's samples over the horizon with their running totals, so each
/// window costs O(families), not O(samples).
#[derive(Debug, Default)]
struct History {
    samples: VecDeque<Sample>,
    secs: f64,
    errors: [(u64, f64); FAMILIES],
    retries: (u64, u64),
}

impl History {
    fn apply(&mut self, x: &Sample, sign: bool) {
        let add = |a: u64, b: u64| if sign { a + b } else { a.saturating_sub(b) };
        let addf = |a: f64, b: f64| if sign { a + b } else { (a - b).max(0.0) };
        self.secs = addf(self.secs, x.secs);
        for f in 0..FAMILIES {
            if let (Some(e), true) = (x.errors[f], x.bits > 0.0) {
                self.errors[f] = (add(self.errors[f].0, e), addf(self.errors[f].1, x.bits));
            }
        }
        if let Some((r, p)) = x.retries {
            self.retries = (add(self.retries.0, r), add(self.retries.1, p));
        }
    }

    /// Appends a sample and drops the oldest ones beyond the horizon
    /// (keeping the shortest suffix that spans it).
    fn push(&mut self, x: Sample, horizon_s: f64) {
        if self.samples.len() == MAX_SAMPLES {
            if let Some(old) = self.samples.pop_front() {
                self.apply(&old, false);
            }
        }
        self.apply(&x, true);
        self.samples.push_back(x);
        while self.samples.len() > 1
            && self
                .samples
                .front()
                .is_some_and(|s| self.secs - s.secs >= horizon_s)
        {
            if let Some(old) = self.samples.pop_front() {
                self.apply(&old, false);
            }
        }
    }

    fn last(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// Forgets every sample but the latest: the rate changed there (the
    /// errors stopped), and the horizon judges only the present regime.
    fn restart(&mut self) {
        let keep = self.samples.pop_back();
        *self = History::default();
        if let Some(x) = keep {
            self.apply(&x, true);
            self.samples.push_back(x);
        }
    }

    fn sums(&self) -> Sums {
        let mut s = Sums {
            horizon: self.errors,
            retries_h: self.retries,
            secs: self.secs,
            ..Sums::default()
        };
        if let Some(x) = self.last() {
            s.window_secs = x.secs;
            for f in 0..FAMILIES {
                if let (Some(e), true) = (x.errors[f], x.bits > 0.0) {
                    s.window[f] = (e, x.bits);
                }
            }
            if let Some(r) = x.retries {
                s.retries_w = r;
            }
        }
        s
    }
}

/// The link's rate over the horizon (bits per second) of family `f`, so
/// that `bits / rate` is the seconds the family was known.
fn horizon_secs(s: &Sums, f: usize) -> f64 {
    let (_, bh) = s.horizon[f];
    let (_, bw) = s.window[f];
    let secs = s.window_secs;
    if bw > 0.0 && secs > 0.0 {
        // The family's bits over the horizon at this window's bit rate.
        bh / (bw / secs)
    } else {
        // No rate this window (the counter saturated or reset): the
        // horizon's length, not its bits.
        s.secs
    }
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
    /// Port entity → link name, from the fabric topology: both ends of a
    /// link report under one entity.
    topology: HashMap<String, String>,
    fabric: super::slot_cache::SlotCache<Fabric>,
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

/// Delta of one counter between snapshots: `None` when either side is
/// missing or it went down (reset).
fn delta(prev: &BTreeMap<String, u64>, cur: &HashMap<String, u64>, name: &str) -> Option<u64> {
    let (c, p) = (cur.get(name)?, prev.get(name)?);
    c.checked_sub(*p)
}

/// Makes `prev` this window's counters. A port reports the same counter
/// names every window, so the values are overwritten in place (no key
/// allocated); a changed name set is copied whole.
fn remember(prev: &mut BTreeMap<String, u64>, cur: &HashMap<String, u64>) {
    if prev.len() == cur.len() {
        let mut hit = 0;
        for (k, v) in cur {
            if let Some(p) = prev.get_mut(k) {
                *p = *v;
                hit += 1;
            }
        }
        if hit == cur.len() {
            return;
        }
    }
    *prev = cur.iter().map(|(k, v)| (k.clone(), *v)).collect();
}

/// Sum of the deltas of `names` present on both sides; `None` on a reset
/// of any of them or when none is present.
fn delta_sum(
    prev: &BTreeMap<String, u64>,
    cur: &HashMap<String, u64>,
    names: &[&str],
) -> Option<u64> {
    let mut total = None;
    for n in names {
        if let (Some(c), Some(p)) = (cur.get(*n), prev.get(*n)) {
            total = Some(total.unwrap_or(0) + c.checked_sub(*p)?);
        }
    }
    total
}

/// `1.2e-12` style.
fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else {
        format!("{x:.1e}")
    }
}

/// What one port's tests found this window.
struct Verdict {
    /// Smallest doubled tail probability over the tests, and the family
    /// (or "transport retries") it came from.
    p: f64,
    source: String,
    evidence: Vec<String>,
    /// BER estimate of the most significant physical family.
    ber: Option<f64>,
    reference: f64,
}

/// Whether a rate has demonstrably stopped: the latest window's count is
/// improbably low (below `alpha`) for the rate the horizon measured, so the
/// horizon's evidence is history, not the link's present. A port whose
/// errors stopped does not stay open for the horizon; a port with sparse
/// errors (a few an hour) never looks stopped in one window.
fn stopped(k_window: u64, exp_window: f64, k_horizon: u64, exp_horizon: f64, alpha: f64) -> bool {
    if exp_horizon <= 0.0 || exp_window <= 0.0 {
        return false;
    }
    let expected = k_horizon as f64 * exp_window / exp_horizon;
    (k_window as f64) < expected && stats::poisson_cdf(k_window, expected) < alpha
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

    pub fn new(cfg: IbConfig, topology: HashMap<String, String>) -> Self {
        Self {
            cfg,
            topology,
            ..Self::default()
        }
    }

    pub fn with_topology(topology: HashMap<String, String>) -> Self {
        Self::new(IbConfig::default(), topology)
    }

    /// Forgets the ports of these hosts.
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.ports.retain(|e, _| !gone.contains(super::host_of(e)));
        self.by_host.retain(|h, _| !gone.contains(h));
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

    /// Fabric medians, recomputed at most once per half window of event
    /// time (hosts' window ends differ by their clocks): O(ports) per slot.
    fn fabric(&mut self, end_ms: i64, len_ms: i64) -> Fabric {
        let ports = &self.ports;
        self.fabric.get(end_ms, len_ms, || {
            let bers: Vec<f64> = ports.values().filter_map(|s| s.ber).collect();
            let retries: Vec<f64> = ports.values().filter_map(|s| s.retry_ratio).collect();
            (
                end_ms,
                median(&bers),
                median(&retries),
                bers.len(),
                retries.len(),
            )
        })
    }

    /// Times the fabric medians were recomputed.
    pub fn fabric_recomputed(&self) -> u64 {
        self.fabric.recomputed
    }

    /// Updates the host's ports from a window and returns findings for them.
    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        let cfg = self.cfg.clone();
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
            let entity = format!("{host}/{}/{}", p.hca, p.port);
            names.push(entity.clone());
            let st = self.ports.entry(entity.clone()).or_default();
            let first = st.counters.is_empty() && st.hw.is_empty();
            let secs = match st.last_end_ms {
                Some(prev) if w.end_unix_ms > prev => (w.end_unix_ms - prev) as f64 / 1000.0,
                _ => len_ms as f64 / 1000.0,
            }
            .clamp(0.001, 3600.0);
            st.last_end_ms = Some(w.end_unix_ms);

            // Downs: a transition seen by state sampling, or link_downed
            // moving (which also reveals downs shorter than the window).
            let was_active = st.state == Some(ACTIVE);
            let is_active = p.state == ACTIVE;
            let transition = u64::from(was_active && !is_active);
            let downed = if first {
                0
            } else {
                delta(&st.counters, &p.counters, "link_downed").unwrap_or(0)
            };
            let downs = transition.max(downed.min(MAX_DOWNS as u64));
            for _ in 0..downs {
                if st.downs.len() == MAX_DOWNS {
                    st.downs.pop_front();
                }
                st.downs.push_back(w.end_unix_ms);
            }
            let horizon_ms = (cfg.flap_horizon_s * 1000.0) as i64;
            while st
                .downs
                .front()
                .is_some_and(|&d| w.end_unix_ms - d > horizon_ms)
            {
                st.downs.pop_front();
            }
            let hca = crate::shell::quote(&p.hca);
            let runbook_cable = format!("check the cable and switch port of {hca} port {}: `ibstat {hca} {}`, `mlxlink -d {hca} -p {}`, switch logs", p.port, p.port, p.port);
            if st.downs.len() >= cfg.flap_downs {
                findings.push(
                    Finding::new("ib_link_flapping", &entity, 0.9)
                        .with_evidence(format!(
                            "{} downs in the last {:.0} s (link_downed and state sampling); state now {}",
                            st.downs.len(), cfg.flap_horizon_s, state_name(p.state)
                        ))
                        .with_jobs(jobs)
                        .with_runbook(format!("a flapping link usually means a bad cable or transceiver: `mlxlink -d {hca} -p {} -m`, replace the cable", p.port)),
                );
            } else if !is_active && (transition > 0 || !st.downs.is_empty() || was_active) {
                findings.push(
                    Finding::new("ib_link_down", &entity, 0.95)
                        .with_evidence(format!(
                            "state {} (phys_state {}){}",
                            state_name(p.state),
                            p.phys_state,
                            if transition > 0 { ", was ACTIVE" } else { "" }
                        ))
                        .with_jobs(jobs)
                        .with_runbook(runbook_cable.clone()),
                );
            } else if !st.downs.is_empty() {
                // Up again (or down and up within the window): the incident
                // stays open through the flap horizon, so a second down is
                // the same incident.
                let evidence = if downs > 0 && is_active {
                    format!("link_downed +{downed} while both samples saw ACTIVE: down and up within the window")
                } else {
                    format!(
                        "ACTIVE again; {} down(s) in the last {:.0} s, watching for flaps",
                        st.downs.len(),
                        cfg.flap_horizon_s
                    )
                };
                findings.push(
                    Finding::new("ib_link_down", &entity, 0.7)
                        .with_evidence(evidence)
                        .with_jobs(jobs)
                        .with_runbook(runbook_cable.clone()),
                );
            }
            st.state = Some(p.state);

            if !first {
                let mut sample = Sample {
                    secs,
                    ..Sample::default()
                };
                // Bits signalled while ACTIVE: windows with a down are the
                // down's, not the BER's.
                let rate_bits = p.rate_bytes_per_sec as f64 * 8.0;
                if downs == 0 && was_active && is_active && rate_bits > 0.0 {
                    sample.bits = rate_bits * secs;
                }
                let mut reset = false;
                for (f, name) in ERROR_COUNTERS.iter().enumerate() {
                    let (Some(&c), Some(&prev)) = (p.counters.get(*name), st.counters.get(*name))
                    else {
                        continue;
                    };
                    let max = saturation(name);
                    if c < prev {
                        reset = true;
                        st.saturated.remove(*name);
                        continue;
                    }
                    if max == Some(c) {
                        let newly = st.saturated.insert((*name).to_string());
                        // Into the maximum: a lower bound, still evidence.
                        // Stuck at it: unknown.
                        if newly && c > prev {
                            sample.errors[f] = Some(c - prev);
                        }
                        continue;
                    }
                    st.saturated.remove(*name);
                    sample.errors[f] = Some(c - prev);
                }
                let retries = delta_sum(&st.hw, &p.hw_counters, HW_ERROR_COUNTERS);
                st.moved_hw = HW_ERROR_COUNTERS
                    .iter()
                    .filter_map(|n| {
                        delta(&st.hw, &p.hw_counters, n)
                            .filter(|&d| d > 0)
                            .map(|d| ((*n).to_string(), d))
                    })
                    .collect();
                let packets = delta_sum(
                    &st.counters,
                    &p.counters,
                    &["port_xmit_packets", "port_rcv_packets"],
                )
                .filter(|&n| n > 0)
                .or_else(|| delta_sum(&st.hw, &p.hw_counters, &["sent_pkts", "rcvd_pkts"]));
                match (retries, packets) {
                    (Some(r), Some(pk)) if pk > 0 => sample.retries = Some((r, pk)),
                    (None, _) if !p.hw_counters.is_empty() && !st.hw.is_empty() => reset = true,
                    _ => {}
                }
                if reset {
                    st.resets += 1;
                }
                // Traffic (data counters are in 4-byte words), for evidence;
                // unknown when a 32-bit legacy data counter (no extended
                // counters on this HCA) stopped at its maximum.
                let stuck = ["port_xmit_data", "port_rcv_data"]
                    .iter()
                    .any(|n| p.counters.get(*n) == Some(&u64::from(u32::MAX)));
                sample.bytes = delta_sum(
                    &st.counters,
                    &p.counters,
                    &["port_xmit_data", "port_rcv_data"],
                )
                .filter(|_| !stuck)
                .map(|words| words.saturating_mul(4));
                sample.rate_bytes = p.rate_bytes_per_sec;
                st.history.push(sample, cfg.horizon_s);
                let s = st.history.sums();
                st.ber = (0..FAMILIES)
                    .filter(|&f| s.horizon[f].1 > 0.0)
                    .map(|f| s.horizon[f].0 as f64 / s.horizon[f].1)
                    .reduce(f64::max);
                st.retry_ratio =
                    (s.retries_h.1 > 0).then(|| s.retries_h.0 as f64 / s.retries_h.1 as f64);
                // A window with a down is the down's: its errors (link
                // training) are a symptom, not a degradation.
                if is_active && downs == 0 {
                    judged.push((entity.clone(), p.port));
                }
            }
            remember(&mut st.counters, &p.counters);
            remember(&mut st.hw, &p.hw_counters);
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
        for f in &mut findings {
            if let Some(link) = self.topology.get(&f.entity) {
                f.evidence.push(format!("reported by {}", f.entity));
                f.entity = link.clone();
            }
        }
        findings
    }

    /// Runs a port's tests on its history; a finding when it is (or stays)
    /// degraded.
    fn judge(
        &mut self,
        entity: &str,
        port: u32,
        fabric: Fabric,
        verbs_errors: u64,
        jobs: &[String],
    ) -> Option<Finding> {
        let cfg = &self.cfg;
        let st = self.ports.get_mut(entity)?;
        let s = st.history.sums();
        let (_, fabric_ber, fabric_retry, n_ber, n_retry) = fabric;
        let by_peers_ber = n_ber >= cfg.min_peers;
        let reference = if by_peers_ber {
            fabric_ber.max(cfg.reference_ber)
        } else {
            cfg.reference_ber
        }
        .min(cfg.alarm_ber);
        let mut best: Option<Verdict> = None;
        let mut gone = 0u32;
        // Families whose errors stopped this window are left out (counted
        // when their horizon still holds significant errors).
        let mut consider = |v: Verdict, stop: bool| {
            if stop {
                if v.p < cfg.clear_significance {
                    gone += 1;
                }
                return;
            }
            if best.as_ref().is_none_or(|b| v.p < b.p) {
                best = Some(v);
            }
        };
        for (f, name) in ERROR_COUNTERS.iter().enumerate() {
            let (kh, bh) = s.horizon[f];
            let (kw, bw) = s.window[f];
            if bh <= 0.0 {
                continue;
            }
            let (p, _) = stats::scan_test(kw, reference * bw, kh, reference * bh, cfg.significance);
            let ber = kh as f64 / bh;
            let (lo, hi) = stats::poisson_interval(kh, 0.05);
            consider(Verdict {
                p,
                source: (*name).to_string(),
                evidence: vec![format!(
                    "BER {} (95% interval {}–{}) from {name}: {kh} errors in {:.0} s at the link's rate; this window +{kw} (BER {})",
                    sci(ber),
                    sci(lo / bh),
                    sci(hi / bh),
                    horizon_secs(&s, f),
                    sci(if bw > 0.0 { kw as f64 / bw } else { 0.0 }),
                )],
                ber: Some(ber),
                reference,
            }, stopped(kw, bw, kh, bh, cfg.clear_significance));
        }
        // Transport retries per packet: against the fabric, the port's own
        // history (links noisy when healthy) and the configured reference.
        let own_warm = st.own_retry.warm();
        let by_peers_retry = n_retry >= cfg.min_peers;
        if s.retries_w.1 > 0 && (by_peers_retry || own_warm) {
            let mut retry_ref = cfg.retry_reference_per_packet;
            let mut basis = format!("reference {}", sci(retry_ref));
            if by_peers_retry && fabric_retry * cfg.own_history_factor > retry_ref {
                retry_ref = fabric_retry * cfg.own_history_factor;
                basis = format!(
                    "{:.0}x the fabric median {} over {n_retry} ports",
                    cfg.own_history_factor,
                    sci(fabric_retry)
                );
            }
            if let Some(b) = st.own_retry.value().filter(|_| own_warm) {
                if b * cfg.own_history_factor > retry_ref {
                    retry_ref = b * cfg.own_history_factor;
                    basis = format!(
                        "{:.0}x this port's own baseline {} over {} windows",
                        cfg.own_history_factor,
                        sci(b),
                        st.own_retry.learnt()
                    );
                }
            }
            let (rw, pw) = s.retries_w;
            let (rh, ph) = s.retries_h;
            let (p, _) = stats::scan_test(
                rw,
                retry_ref * pw as f64,
                rh,
                retry_ref * ph as f64,
                cfg.significance,
            );
            consider(Verdict {
                p,
                source: "transport retries".into(),
                evidence: vec![format!(
                    "transport retries {} per packet this window ({rw} in {pw} packets; {rh} in {ph} over {:.0} s) against {} per packet ({basis})",
                    sci(rw as f64 / pw as f64),
                    s.secs,
                    sci(retry_ref)
                )],
                ber: None,
                reference: retry_ref,
            }, stopped(rw, pw as f64, rh, ph as f64, cfg.clear_significance));
        }
        // Own retry history learns from this window when it was near it.
        if let Some((r, pk)) = st.history.last().and_then(|x| x.retries) {
            let ratio = r as f64 / pk as f64;
            let near = st.own_retry.near(ratio, cfg.retry_reference_per_packet);
            st.own_retry.learn(ratio, near);
        }
        let saturated: Vec<String> = st
            .saturated
            .iter()
            .filter(|n| ERROR_COUNTERS.contains(&n.as_str()))
            .cloned()
            .collect();
        if best.as_ref().is_none_or(|b| b.p >= cfg.clear_significance) && gone > 0 {
            // Every significant error family stopped: the horizon restarts
            // here, so its past errors neither hold nor reopen the port.
            st.history.restart();
        }
        let verdict = best?;
        let opens = verdict.p < cfg.significance;
        let holds = st.degraded && (verdict.p < cfg.clear_significance || !saturated.is_empty());
        if !(opens || holds) {
            st.degraded = false;
            return None;
        }
        st.degraded = true;
        let ratio = verdict
            .ber
            .map_or(0.0, |b| (b / verdict.reference).max(1.0).log10());
        let confidence = (0.6
            + 0.1 * ratio.min(3.0)
            + if verbs_errors > 0 { 0.05 } else { 0.0 }
            + if opens { 0.05 } else { 0.0 })
        .min(0.99);
        let mut ev = verdict.evidence;
        if verdict.ber.is_some() {
            ev.push(format!(
                "reference BER {} ({}), alarm line {}; tail probability {} vs significance {}",
                sci(verdict.reference),
                if by_peers_ber && fabric_ber > cfg.reference_ber {
                    format!("fabric median over {n_ber} ports")
                } else {
                    format!(
                        "floor; fabric median {} over {n_ber} ports",
                        sci(fabric_ber)
                    )
                },
                sci(cfg.alarm_ber),
                sci(verdict.p),
                sci(cfg.significance),
            ));
        } else {
            ev.push(format!(
                "tail probability {} vs significance {}",
                sci(verdict.p),
                sci(cfg.significance)
            ));
        }
        if !opens {
            ev.push(format!(
                "still significant at {} (hysteresis), most in {}",
                sci(cfg.clear_significance),
                verdict.source
            ));
        }
        let last = st.history.last();
        // One line per counter that moved, `name +N this window`.
        for (f, n) in ERROR_COUNTERS.iter().enumerate() {
            if let Some(e) = last.and_then(|x| x.errors[f]).filter(|&e| e > 0) {
                ev.push(format!("{n} +{e} this window"));
            }
        }
        for (n, d) in &st.moved_hw {
            ev.push(format!("{n} +{d} this window"));
        }
        for n in &saturated {
            ev.push(format!(
                "{n} saturated at {}: errors since are not counted (a lower bound, not zero); clear the counters (`perfquery -R`) to measure again",
                saturation(n).unwrap_or(0)
            ));
        }
        if let Some(x) = last {
            if let Some(b) = x.bytes {
                let per_s = b as f64 / x.secs;
                let util = if x.rate_bytes > 0 {
                    format!(
                        " ({:.0}% of the link's {:.0} Gb/s each way)",
                        50.0 * per_s / x.rate_bytes as f64,
                        x.rate_bytes as f64 * 8e-9
                    )
                } else {
                    String::new()
                };
                ev.push(format!(
                    "traffic {:.2} GB/s sent + received this window{util}",
                    per_s / 1e9
                ));
            }
        }
        if verbs_errors > 0 {
            ev.push(format!(
                "{verbs_errors} verbs work completions in error on this host this window"
            ));
        }
        let hca = entity
            .rsplit_once('/')
            .and_then(|(a, _)| a.rsplit_once('/').map(|(_, h)| h.to_string()))
            .unwrap_or_default();
        let mut finding = Finding::new("ib_link_degraded", entity, confidence);
        for n in &saturated {
            finding = finding.with_mark(format!("saturated:{n}"));
        }
        Some(
            finding
                .with_evidence_list(ev)
                .with_jobs(jobs)
                .with_runbook({
                    let hca = crate::shell::quote(&hca);
                    format!("link errors above the reference: `perfquery -x` on {hca} port {port}, `mlxlink -d {hca} -p {port} -c` for BER and FEC, `ibdiagnet` for the far end; drain the node and replace the cable if BER keeps rising")
                }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembered_counters_equal_the_latest_window_even_when_names_change() {
        let cur = |kv: &[(&str, u64)]| -> HashMap<String, u64> {
            kv.iter().map(|(k, v)| ((*k).to_string(), *v)).collect()
        };
        let mut prev = BTreeMap::new();
        for w in [
            cur(&[("symbol_error", 1), ("link_downed", 0)]),
            cur(&[("symbol_error", 5), ("link_downed", 2)]),
            // Same count, one name swapped: the old name must not linger.
            cur(&[("symbol_error", 6), ("port_rcv_errors", 3)]),
            cur(&[("symbol_error", 7)]),
        ] {
            remember(&mut prev, &w);
            let want: BTreeMap<String, u64> = w.into_iter().collect();
            assert_eq!(prev, want);
        }
    }

    #[test]
    fn running_totals_equal_a_recount_of_the_kept_samples() {
        let mut h = History::default();
        for i in 0..500u64 {
            let mut x = Sample {
                secs: 1.0 + (i % 3) as f64,
                bits: if i % 7 == 0 { 0.0 } else { 4e11 },
                retries: (i % 5 != 0).then_some((i % 4, 1000 + i)),
                ..Sample::default()
            };
            x.errors[0] = (i % 11 != 0).then_some(i % 6);
            x.errors[2] = Some(i % 2);
            h.push(x, 60.0);
            let kept = &h.samples;
            let secs: f64 = kept.iter().map(|s| s.secs).sum();
            assert!((h.secs - secs).abs() < 1e-9);
            // The kept suffix spans the horizon and no shorter one does.
            assert!(secs >= 60.0 || kept.len() as u64 == i + 1);
            assert!(secs - kept[0].secs < 60.0);
            for f in [0, 2] {
                let e: u64 = kept
                    .iter()
                    .filter(|s| s.bits > 0.0)
                    .filter_map(|s| s.errors[f])
                    .sum();
                assert_eq!(h.sums().horizon[f].0, e);
            }
            let r: u64 = kept.iter().filter_map(|s| s.retries).map(|r| r.0).sum();
            assert_eq!(h.sums().retries_h.0, r);
        }
    }

    #[test]
    fn the_horizon_is_told_in_seconds_even_without_a_rate_this_window() {
        let mut s = Sums {
            secs: 60.0,
            window_secs: 10.0,
            ..Sums::default()
        };
        // 1.2e13 bits over the horizon at 2e11 bits/s: 60 s.
        s.horizon[0] = (5, 1.2e13);
        s.window[0] = (1, 2e12);
        assert!((horizon_secs(&s, 0) - 60.0).abs() < 1e-9);
        // Saturated this window: no bits, and the evidence said 1.2e13 s.
        s.window[0] = (0, 0.0);
        assert_eq!(horizon_secs(&s, 0), 60.0);
    }

    #[test]
    fn saturation_values_follow_the_counter_widths() {
        assert_eq!(saturation("symbol_error"), Some(65_535));
        assert_eq!(saturation("link_error_recovery"), Some(255));
        assert_eq!(saturation("local_link_integrity_errors"), Some(15));
    }
}
