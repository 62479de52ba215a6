//! `gpu_nvlink_errors`: a GPU's NVLink links judged against the fleet, the
//! way InfiniBand ports are (`engine::ib`): per link and counter (replays,
//! recoveries, flit and data CRC errors), errors per link-second, by a
//! one-sided Poisson scan over the latest window and over `nvlink_horizon_s`
//! against a reference rate: the fleet's median, floored at
//! `nvlink_reference_per_s` (healthy links count nothing, so the floor
//! governs a healthy fleet) and capped at `nvlink_alarm_per_s`. Once
//! degraded, a link stays degraded while its errors are significant at
//! `nvlink_clear_significance`; a window improbably quiet for the rate the
//! horizon measured restarts the horizon (the errors stopped).
//!
//! Counter semantics: cumulative since the driver loaded or the GPU was
//! reset; a counter lower than the previous window's is a reset (that
//! window of that counter is unknown, never negative).
//!
//! Memory: a fleet has 18 links per GPU, nearly all of them counting
//! nothing. A link keeps its last counters and since when it has been
//! watched; a history (the horizon in [`BUCKETS`] time buckets) only while
//! it has errors in the horizon or is degraded. When errors appear, the
//! error-free time it was watched before (up to the horizon) is restored
//! as exposure, so the rate is not overestimated.
use std::collections::{HashMap, HashSet, VecDeque};
use vocab::kind::IncidentKind;

use proto::v1::Window;

use super::GpuConfig;
use crate::engine::{incidents::Finding, slot_cache::SlotCache, stats, stats::median};

/// The counters of `NvLinkCounters`, in wire order.
pub const COUNTERS: [&str; 4] = ["replay", "recovery", "crc_flit", "crc_data"];
/// Links a GPU can have (`NVML_NVLINK_MAX_LINKS`): rows past it are
/// dropped and counted.
pub const MAX_LINKS: u32 = 18;
/// Time buckets the horizon is summed in.
const BUCKETS: i64 = 10;

/// One time bucket of a link's history: seconds watched and errors per
/// counter (a counter unknown in a window, e.g. reset, adds neither).
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    idx: i64,
    secs: [f32; 4],
    errors: [u32; 4],
}

impl Bucket {
    /// A window of `secs` with these errors (unknown counters add nothing).
    fn add(&mut self, secs: f64, errors: &[Option<u64>; 4]) {
        for (c, e) in errors.iter().enumerate() {
            if let Some(e) = *e {
                self.secs[c] += secs as f32;
                self.errors[c] =
                    self.errors[c].saturating_add(u32::try_from(e).unwrap_or(u32::MAX));
            }
        }
    }
}

/// A link's recent history: the latest window and the horizon's buckets.
#[derive(Debug, Default)]
struct History {
    window: (f64, [Option<u64>; 4]),
    buckets: VecDeque<Bucket>,
}

#[derive(Debug, Default)]
struct LinkState {
    last: [Option<u64>; 4],
    last_end_ms: Option<i64>,
    /// Watched without a gap longer than the horizon since (ms).
    watched_since_ms: i64,
    history: Option<Box<History>>,
    degraded: bool,
    /// Counters that went down in the latest window (bit per counter).
    reset: u8,
}

/// Errors and seconds of one counter: over the latest window and the horizon.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    window: (u64, f64),
    horizon: (u64, f64),
}

impl LinkState {
    /// Takes one window's counters; whether the link has a history to judge.
    fn observe(&mut self, horizon_s: f64, end_ms: i64, len_ms: i64, now: [Option<u64>; 4]) -> bool {
        if self.last_end_ms.is_some_and(|p| end_ms <= p) {
            // A repeated or older window: already counted.
            return false;
        }
        let horizon_ms = (horizon_s * 1000.0) as i64;
        let secs = match self.last_end_ms {
            Some(p) => (end_ms - p) as f64 / 1000.0,
            None => len_ms as f64 / 1000.0,
        }
        .clamp(0.001, 3600.0);
        let first = self.last_end_ms.is_none();
        if first || self.last_end_ms.is_some_and(|p| end_ms - p > horizon_ms) {
            self.watched_since_ms = end_ms;
        }
        self.last_end_ms = Some(end_ms);
        self.reset = 0;
        let mut errors = [None; 4];
        for (c, e) in errors.iter_mut().enumerate() {
            *e = match (self.last[c], now[c]) {
                (Some(p), Some(n)) if n >= p => Some(n - p),
                (Some(_), Some(_)) => {
                    self.reset |= 1 << c;
                    None
                }
                _ => None,
            };
        }
        self.last = now;
        if first {
            return false;
        }
        let bucket_ms = (horizon_ms / BUCKETS).max(1);
        let idx = end_ms / bucket_ms;
        let moved = errors.iter().any(|e| e.is_some_and(|e| e > 0));
        if self.history.is_none() && (moved || self.degraded) {
            // Errors on a link that counted none: the error-free time it
            // was watched before this window (within the horizon) is
            // exposure too.
            let before = ((end_ms - self.watched_since_ms) as f64 / 1000.0 - secs)
                .clamp(0.0, (horizon_s - secs).max(0.0)) as f32;
            let mut h = History::default();
            if before > 0.0 {
                h.buckets.push_back(Bucket {
                    idx: idx - BUCKETS + 1,
                    secs: [before; 4],
                    errors: [0; 4],
                });
            }
            self.history = Some(Box::new(h));
        }
        let Some(h) = self.history.as_mut() else {
            return false;
        };
        h.window = (secs, errors);
        if h.buckets.back().is_none_or(|b| b.idx < idx) {
            h.buckets.push_back(Bucket {
                idx,
                ..Bucket::default()
            });
        }
        if let Some(b) = h.buckets.back_mut() {
            b.add(secs, &errors);
        }
        while h.buckets.front().is_some_and(|b| b.idx <= idx - BUCKETS) {
            h.buckets.pop_front();
        }
        if !self.degraded && h.buckets.iter().all(|b| b.errors == [0; 4]) {
            // Quiet for a horizon: no history needed.
            self.history = None;
            return false;
        }
        true
    }

    fn sums(&self, c: usize) -> Sums {
        let mut s = Sums::default();
        let Some(h) = &self.history else {
            return s;
        };
        for b in &h.buckets {
            s.horizon.0 += u64::from(b.errors[c]);
            s.horizon.1 += f64::from(b.secs[c]);
        }
        if let Some(e) = h.window.1[c] {
            s.window = (e, h.window.0);
        }
        s
    }

    /// Horizon errors per second, the most of its counters (0 without a
    /// history).
    fn rate(&self) -> f64 {
        (0..COUNTERS.len())
            .map(|c| {
                let (k, s) = self.sums(c).horizon;
                if s > 0.0 {
                    k as f64 / s
                } else {
                    0.0
                }
            })
            .fold(0.0, f64::max)
    }

    /// Restarts the horizon at the latest window (the errors stopped).
    fn restart(&mut self) {
        if let Some(h) = self.history.as_mut() {
            let (secs, errors) = h.window;
            let idx = h.buckets.back().map_or(0, |b| b.idx);
            h.buckets.clear();
            let mut b = Bucket {
                idx,
                ..Bucket::default()
            };
            b.add(secs, &errors);
            h.buckets.push_back(b);
        }
    }

    fn reset_names(&self) -> Vec<&'static str> {
        (0..COUNTERS.len())
            .filter(|c| self.reset & (1 << c) != 0)
            .map(|c| COUNTERS[c])
            .collect()
    }
}

/// Whether a rate stopped: the latest window's count is improbably low
/// (below `alpha`) for the rate the horizon measured.
fn stopped(s: &Sums, alpha: f64) -> bool {
    let ((kw, sw), (kh, sh)) = (s.window, s.horizon);
    if sw <= 0.0 || sh <= 0.0 {
        return false;
    }
    let expected = kh as f64 * sw / sh;
    (kw as f64) < expected && stats::poisson_cdf(kw, expected) < alpha
}

/// A degraded link's verdict.
#[derive(Clone, Debug)]
struct Verdict {
    link: u32,
    p: f64,
    opens: bool,
    line: String,
    ratio: f64,
}

/// The fleet's median link rate and how many links have one.
type Fleet = (f64, usize);

#[derive(Debug, Default)]
pub struct NvLinkDetector {
    cfg: GpuConfig,
    /// GPU entity → its links' state, by link number.
    gpus: HashMap<String, Vec<LinkState>>,
    fleet: SlotCache<Fleet>,
}

/// The median of `zeros` zeros and the (positive) `rates`: 0 when the
/// zeros are most of them (a healthy fleet, without allocating for them).
fn median_with_zeros(zeros: usize, rates: &[f64]) -> f64 {
    let n = zeros + rates.len();
    if n == 0 || zeros > n / 2 {
        return 0.0;
    }
    let mut v = vec![0.0; zeros];
    v.extend_from_slice(rates);
    median(&v)
}

impl NvLinkDetector {
    pub fn new(cfg: GpuConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// Links with state (all hosts).
    pub fn tracked(&self) -> usize {
        self.gpus.values().map(Vec::len).sum()
    }

    pub fn forget_hosts(&mut self, gone: &HashSet<String>) {
        self.gpus
            .retain(|g, _| !gone.contains(vocab::entity::host_of(g)));
    }

    /// The reference rate: the fleet median (with enough links), floored
    /// and capped; and its basis in words. O(links) once per time slot.
    fn reference(&mut self, end_ms: i64, len_ms: i64) -> (f64, String) {
        let gpus = &self.gpus;
        let (med, n) = self.fleet.get(end_ms, len_ms, || {
            let mut zeros = 0usize;
            let mut rates = Vec::new();
            for l in gpus.values().flatten().filter(|l| l.last_end_ms.is_some()) {
                match l.rate() {
                    r if r > 0.0 => rates.push(r),
                    _ => zeros += 1,
                }
            }
            (median_with_zeros(zeros, &rates), zeros + rates.len())
        });
        let cfg = &self.cfg;
        if n >= cfg.nvlink_min_peers && med > cfg.nvlink_reference_per_s {
            let r = med.min(cfg.nvlink_alarm_per_s);
            (
                r,
                format!(
                    "fleet median over {n} links, capped at {:.0e}",
                    cfg.nvlink_alarm_per_s
                ),
            )
        } else {
            (
                cfg.nvlink_reference_per_s,
                format!("floor; fleet median {med:.1e} over {n} links"),
            )
        }
    }

    /// Updates the host's links from a window; a finding per GPU with a
    /// degraded link.
    pub fn observe(&mut self, host: &str, w: &Window, jobs: &[String]) -> Vec<Finding> {
        let len_ms = if w.start_unix_ms > 0 && w.end_unix_ms > w.start_unix_ms {
            w.end_unix_ms - w.start_unix_ms
        } else {
            1000
        };
        let mut judged: Vec<GpuLinks> = Vec::new();
        let mut over = 0usize;
        for g in w.gpus.iter().filter(|g| !g.lost && !g.nvlink.is_empty()) {
            let mut gl = GpuLinks {
                index: g.index,
                entity: vocab::entity::gpu(host, g.index),
                uuid: g.uuid.clone(),
                links: Vec::new(),
                resets: Vec::new(),
            };
            let mut seen = Vec::new();
            for l in &g.nvlink {
                if l.link >= MAX_LINKS || seen.contains(&l.link) {
                    over += 1;
                    continue;
                }
                seen.push(l.link);
                let links = self.gpus.entry(gl.entity.clone()).or_default();
                let i = l.link as usize;
                if links.len() <= i {
                    links.resize_with(i + 1, LinkState::default);
                }
                let st = &mut links[i];
                let now = [l.replay, l.recovery, l.crc_flit, l.crc_data];
                if st.observe(self.cfg.nvlink_horizon_s, w.end_unix_ms, len_ms, now) {
                    gl.links.push(l.link);
                }
                if st.reset != 0 {
                    gl.resets.push(format!("NVLink {}: {} went down this window (driver reload or GPU reset): that window is unknown, not counted", l.link, st.reset_names().join(", ")));
                }
            }
            if !gl.links.is_empty() {
                judged.push(gl);
            }
        }
        if over > 0 {
            metrics::counter!("faultline_engine_dropped_total", "what" => "nvlinks")
                .increment(over as u64);
        }
        if judged.is_empty() {
            return Vec::new();
        }
        let reference = self.reference(w.end_unix_ms, len_ms);
        let mut out = Vec::new();
        for gl in judged {
            let bad: Vec<Verdict> = gl
                .links
                .iter()
                .filter_map(|&link| self.judge(&gl.entity, link, reference.0))
                .collect();
            if !bad.is_empty() {
                out.push(finding(host, &gl, bad, &reference, jobs, &self.cfg));
            }
        }
        out
    }

    /// A link's tests: each counter's scan (window and horizon) against
    /// `reference`, Bonferroni over the counters judged. A counter whose
    /// errors stopped this window is left out; when nothing significant
    /// is left, the horizon restarts at this window.
    fn judge(&mut self, entity: &str, link: u32, reference: f64) -> Option<Verdict> {
        let cfg = &self.cfg;
        let st = self.gpus.get_mut(entity)?.get_mut(link as usize)?;
        let mut best: Option<(f64, usize, Sums)> = None;
        let (mut judged, mut gone) = (0usize, 0usize);
        for c in 0..COUNTERS.len() {
            let s = st.sums(c);
            if s.horizon.1 <= 0.0 {
                continue;
            }
            judged += 1;
            let (p, _) = stats::scan_test(
                s.window.0,
                reference * s.window.1,
                s.horizon.0,
                reference * s.horizon.1,
                cfg.nvlink_significance,
            );
            if stopped(&s, cfg.nvlink_clear_significance) {
                gone += usize::from(p < cfg.nvlink_clear_significance);
                continue;
            }
            if best.is_none_or(|b| p < b.0) {
                best = Some((p, c, s));
            }
        }
        let best = best.map(|(p, c, s)| ((p * judged as f64).min(1.0), c, s));
        if best.is_none_or(|b| b.0 >= cfg.nvlink_clear_significance) && gone > 0 {
            // The errors stopped: the horizon restarts at this window.
            st.restart();
        }
        let (p, c, s) = best?;
        let opens = p < cfg.nvlink_significance;
        let holds = st.degraded && p < cfg.nvlink_clear_significance;
        if !(opens || holds) {
            st.degraded = false;
            return None;
        }
        st.degraded = true;
        let (kh, sh) = s.horizon;
        let rate = kh as f64 / sh;
        let (lo, hi) = stats::poisson_interval(kh, 0.05);
        let mut line = format!(
            "NVLink {link}: {} {kh} errors in {sh:.0} s = {rate:.2e} per s (95% interval {:.1e}–{:.1e}), this window +{}; tail probability {p:.1e} vs significance {:.0e}",
            COUNTERS[c],
            lo / sh,
            hi / sh,
            s.window.0,
            cfg.nvlink_significance,
        );
        if !opens {
            line.push_str(&format!(
                " (held: still significant at {:.0e})",
                cfg.nvlink_clear_significance
            ));
        }
        // Every counter that moved this window.
        let moved: Vec<String> = (0..COUNTERS.len())
            .filter_map(|i| {
                let e = st.history.as_ref()?.window.1[i].filter(|&e| e > 0)?;
                Some(format!("{} +{e}", COUNTERS[i]))
            })
            .collect();
        if !moved.is_empty() {
            line.push_str(&format!("; this window {}", moved.join(", ")));
        }
        Some(Verdict {
            link,
            p,
            opens,
            line,
            ratio: (rate / reference).max(1.0),
        })
    }
}

/// A GPU's links judged this window, and its counters that reset.
struct GpuLinks {
    index: u32,
    entity: String,
    uuid: String,
    links: Vec<u32>,
    resets: Vec<String>,
}

/// The GPU's finding: its degraded links, the reference, the runbook with
/// NVIDIA's NVLink workflow.
fn finding(
    host: &str,
    gl: &GpuLinks,
    bad: Vec<Verdict>,
    (reference, basis): &(f64, String),
    jobs: &[String],
    cfg: &GpuConfig,
) -> Finding {
    use vocab::xid::Action;
    let ratio = bad.iter().map(|v| v.ratio).fold(1.0, f64::max);
    let opens = bad.iter().any(|v| v.opens);
    let p = bad.iter().map(|v| v.p).fold(1.0, f64::min);
    let confidence =
        (0.7 + 0.1 * ratio.log10().min(2.0) + if opens { 0.05 } else { 0.0 }).min(0.95);
    let links: Vec<String> = bad.iter().map(|v| v.link.to_string()).collect();
    let mut f = Finding::new(IncidentKind::GpuNvlinkErrors, &gl.entity, confidence).with_evidence(format!(
        "{}: NVLink errors above the reference on link(s) {} (most significant: tail probability {p:.1e})",
        gl.uuid,
        links.join(", ")
    ));
    for v in &bad {
        f = f
            .with_evidence(v.line.clone())
            .with_mark(format!("nvlink:{}", v.link));
    }
    let shown = crate::shell::quote(host);
    let index = gl.index;
    let workflow = Action::NvlinkWorkflow;
    f.with_evidence(format!(
        "reference {reference:.1e} errors per link-second ({basis}), alarm line {:.0e}; healthy links count no CRC errors, replays or recoveries",
        cfg.nvlink_alarm_per_s
    ))
    .with_evidence_list(gl.resets.clone())
    .with_jobs(jobs)
    .with_runbook(format!(
        "NVLink errors on {shown} GPU {index} link(s) {}: `nvidia-smi nvlink -e -i {index}` for each link's error counters, `nvidia-smi nvlink -s -i {index}` for link state; `dmesg -T | grep -i xid` for XID 74; NVIDIA's XID workflow {}: {}; errors that continue after the reset mean the GPU baseboard or NVSwitch tray needs service",
        links.join(", "),
        workflow.bucket(),
        workflow.what_to_do()
    ))
}
