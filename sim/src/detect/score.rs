//! Scoring: runs tallied per kind, window length, link rate and storage
//! fleet; joining (a fault's job slowdown attached to its incident) and
//! interference (the aggressor named) over the runs.
use std::collections::BTreeMap;

use serde_json::json;

use super::run::Outcome;
use crate::faults::fmt_value;
use correlator::engine::config::DetectConfig;

/// Nearest-rank percentile of signed values.
pub(super) fn pct(v: &[i64], p: f64) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    Some(s[i])
}

#[derive(Default)]
pub(super) struct Cell {
    pub runs: u64,
    pub tp: u64,
    /// Detected with the expected incident naming what happened.
    pub named: u64,
    pub fn_: u64,
    pub fa: u64,
    pub not_visible: u64,
    /// Latency from onset / visible, in windows.
    pub from_onset: Vec<i64>,
    pub from_visible: Vec<i64>,
    pub named_from_onset: Vec<i64>,
    pub incidents: Vec<u64>,
    pub fa_kinds: BTreeMap<String, u64>,
    /// Confounder runs: `job_slowdown` raised for a real slowdown.
    pub symptoms: u64,
}

impl Cell {
    pub fn add(&mut self, o: &Outcome) {
        self.runs += 1;
        self.fa += o.false_alarm_count;
        self.symptoms += o.symptom_incidents;
        for (k, n) in &o.false_alarm_kinds {
            *self.fa_kinds.entry(k.clone()).or_default() += n;
        }
        if o.scenario.confounder {
            return;
        }
        if o.visible_window.is_none() {
            self.not_visible += 1;
        }
        match o.detected_window {
            Some(d) => {
                self.tp += 1;
                self.from_onset.push(d as i64 - o.onset_window as i64);
                if let Some(v) = o.visible_window {
                    self.from_visible.push(d as i64 - v as i64);
                }
            }
            None => self.fn_ += 1,
        }
        if let Some(d) = o.named_window {
            self.named += 1;
            self.named_from_onset.push(d as i64 - o.onset_window as i64);
        }
        self.incidents.push(o.incidents_on_fault);
    }

    pub fn precision(&self) -> Option<f64> {
        (self.tp + self.fa > 0).then(|| self.tp as f64 / (self.tp + self.fa) as f64)
    }

    pub fn recall(&self) -> Option<f64> {
        (self.tp + self.fn_ > 0).then(|| self.tp as f64 / (self.tp + self.fn_) as f64)
    }

    pub fn ipf(&self) -> (f64, u64) {
        let n = self.incidents.len().max(1) as f64;
        (
            self.incidents.iter().sum::<u64>() as f64 / n,
            self.incidents.iter().copied().max().unwrap_or(0),
        )
    }

    pub fn json(&self, w: Option<f64>) -> serde_json::Value {
        let secs = |v: Option<i64>| match (v, w) {
            (Some(v), Some(w)) => Some(v as f64 * w),
            _ => None,
        };
        let (ipf_mean, ipf_max) = self.ipf();
        json!({
            "runs": self.runs, "detected": self.tp, "named_correctly": self.named, "missed": self.fn_, "false_alarms": self.fa,
            "not_visible_within_run": self.not_visible,
            "precision": self.precision(), "recall": self.recall(),
            "latency_from_onset_windows": {"median": pct(&self.from_onset, 0.5), "p95": pct(&self.from_onset, 0.95)},
            "latency_from_onset_s": {"median": secs(pct(&self.from_onset, 0.5)).map(|s| s + w.unwrap_or(0.0)), "p95": secs(pct(&self.from_onset, 0.95)).map(|s| s + w.unwrap_or(0.0))},
            "latency_from_visible_windows": {"median": pct(&self.from_visible, 0.5), "p95": pct(&self.from_visible, 0.95)},
            "latency_from_visible_s": {"median": secs(pct(&self.from_visible, 0.5)), "p95": secs(pct(&self.from_visible, 0.95))},
            "latency_named_from_onset_windows": {"median": pct(&self.named_from_onset, 0.5), "p95": pct(&self.named_from_onset, 0.95)},
            "incidents_per_fault_mean": ipf_mean, "incidents_per_fault_max": ipf_max,
            "false_alarm_kinds": self.fa_kinds,
        })
    }
}

pub(super) fn optf(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// `median / p95` in windows and seconds (`plus` seconds added: the window
/// in which the alarm is raised counts from the onset).
pub(super) fn lat(v: &[i64], w: f64, plus: f64) -> String {
    match (pct(v, 0.5), pct(v, 0.95)) {
        (Some(m), Some(p)) => format!(
            "{m} / {p} ({} / {} s)",
            fmt_value(m as f64 * w + plus),
            fmt_value(p as f64 * w + plus)
        ),
        _ => "-".into(),
    }
}

/// Key of a window length (ms, for ordering).
pub(super) fn wkey(w: f64) -> u64 {
    (w * 1000.0).round() as u64
}

/// Every run tallied: per (kind, window), kind, (confounder, window),
/// (link fault, rate), storage fleet, and in total.
#[derive(Default)]
pub(super) struct Tally {
    pub by_kind_w: BTreeMap<(String, u64), Cell>,
    pub by_kind: BTreeMap<String, Cell>,
    pub by_conf_w: BTreeMap<(String, u64), Cell>,
    pub by_rate: BTreeMap<(String, &'static str), Cell>,
    pub by_storage: BTreeMap<&'static str, Cell>,
    pub total: Cell,
}

impl Tally {
    pub fn of(outcomes: &[Outcome]) -> Self {
        let mut t = Self::default();
        for o in outcomes {
            let s = &o.scenario;
            t.total.add(o);
            if s.confounder {
                t.by_conf_w
                    .entry((s.kind.to_string(), wkey(s.window_s)))
                    .or_default()
                    .add(o);
                continue;
            }
            let mut k = o.expected_kind.clone().unwrap_or_default();
            // Every rank waits: one row per cause.
            if let Some(cause) = s.kind.strip_prefix("nccl-hang-") {
                k.push_str(&format!(" ({cause})"));
            }
            if !s.otlp {
                k.push_str(" (no OTLP)");
            }
            // The XID faults' rows apart from the `xid` fault's.
            if let Some(tag) = super::xid::tag(s.kind) {
                k.push_str(tag);
            }
            t.by_kind_w
                .entry((k.clone(), wkey(s.window_s)))
                .or_default()
                .add(o);
            t.by_kind.entry(k.clone()).or_default().add(o);
            if k.starts_with("ib_") {
                t.by_rate.entry((k, s.link_rate.name())).or_default().add(o);
            }
            if s.kind == "storage-stall" {
                t.by_storage.entry(s.storage.name()).or_default().add(o);
            }
        }
        t
    }

    /// Confounder-only runs and their false alarms.
    pub fn confounders(&self) -> (u64, u64) {
        (
            self.by_conf_w.values().map(|c| c.runs).sum(),
            self.by_conf_w.values().map(|c| c.fa).sum(),
        )
    }

    /// (precision, recall) over every run.
    pub fn overall(&self) -> (f64, f64) {
        let (tp, fn_, fa) = (self.total.tp, self.total.fn_, self.total.fa);
        let precision = if tp + fa > 0 {
            tp as f64 / (tp + fa) as f64
        } else {
            0.0
        };
        let recall = if tp + fn_ > 0 {
            tp as f64 / (tp + fn_) as f64
        } else {
            0.0
        };
        (precision, recall)
    }
}

/// Joining, by fault: fault runs (not job-slow) that were detected and whose
/// fault slowed the job by at least the configured `min_slowdown`: [runs,
/// attached to the fault's incident, attached elsewhere, not attached,
/// separate `job_slowdown` left open].
pub(super) struct Joining {
    pub min_slow: f64,
    pub by_fault: BTreeMap<String, [u64; 5]>,
    pub accuracy: Option<f64>,
    pub right: u64,
    pub runs: u64,
}

impl Joining {
    pub fn of(outcomes: &[Outcome]) -> Self {
        let min_slow = 1.0 + DetectConfig::default().workload.min_slowdown;
        let mut by_fault: BTreeMap<String, [u64; 5]> = BTreeMap::new();
        for o in outcomes {
            let s = &o.scenario;
            // No infrastructure cause to join to.
            let no_cause = matches!(s.kind, "job-slow" | "nccl-slow-rank");
            if s.confounder || no_cause || o.detected_window.is_none() {
                continue;
            }
            if !o.job_slowdown.is_some_and(|r| r >= min_slow) {
                continue;
            }
            let e = by_fault.entry(s.label()).or_default();
            e[0] += 1;
            e[1] += u64::from(o.joined_right);
            e[2] += u64::from(o.joined_elsewhere);
            e[3] += u64::from(!o.joined_right && !o.joined_elsewhere);
            e[4] += u64::from(o.own_job_slowdown);
        }
        let jt: [u64; 5] = by_fault.values().fold([0; 5], |mut a, v| {
            for i in 0..5 {
                a[i] += v[i];
            }
            a
        });
        Self {
            min_slow,
            by_fault,
            accuracy: (jt[0] > 0).then(|| jt[1] as f64 / jt[0] as f64),
            right: jt[1],
            runs: jt[0],
        }
    }
}

/// Interference: recall over the interference fault runs (detected with
/// the aggressor named), precision over every interference incident of
/// every run (a confounder's or another fault's is a false one).
#[derive(Default)]
pub(super) struct Interference {
    pub runs: u64,
    pub detected: u64,
    pub named: u64,
    pub all: u64,
    pub right: u64,
    pub in_confounders: u64,
}

impl Interference {
    pub fn of(outcomes: &[Outcome]) -> Self {
        let mut i = Self::default();
        for o in outcomes {
            i.all += o.interference_incidents;
            i.right += o.interference_right;
            if o.expected_kind.as_deref() == Some("interference") {
                i.runs += 1;
                i.detected += u64::from(o.detected_window.is_some());
                i.named += u64::from(o.interference_right > 0);
            } else if o.scenario.confounder {
                i.in_confounders += o.interference_incidents;
            }
        }
        i
    }

    pub fn recall(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.named as f64 / self.runs as f64)
    }

    pub fn precision(&self) -> Option<f64> {
        (self.all > 0).then(|| self.right as f64 / self.all as f64)
    }
}
