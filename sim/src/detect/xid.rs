//! The kernel-log XID and SXid rows (issue 48): per fault kind, runs
//! detected with the right action, application faults that paged the
//! hardware, updates per fault (a burst must stay one incident with few
//! updates), the severities the incidents carried; and the cancelled jobs'
//! false alarms.
use std::collections::BTreeMap;

use serde_json::json;

use super::run::Outcome;

/// The row suffix of an XID fault kind (its rows stand apart from the
/// `xid` fault's `gpu_xid`).
pub(super) fn tag(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "xid-crash-loop" => " (crash loop)",
        "xid-bad-gpu" => " (unrelated jobs)",
        "xid-burst" => " (burst)",
        "nvswitch-sxid" => " (SXid)",
        _ => return None,
    })
}

#[derive(Default, serde::Serialize)]
pub(super) struct Row {
    pub runs: u64,
    pub detected: u64,
    pub missed: u64,
    /// An application's fault paged a hardware action.
    pub wrong_action: u64,
    pub false_alarms: u64,
    pub incidents_per_fault_max: u64,
    pub updates_per_fault_max: u64,
    /// Latency from the visible window, in windows (max).
    pub from_visible_max: Option<i64>,
    /// Severities of the fault's incident (or of the false alarms' runs).
    pub severities: BTreeMap<String, u64>,
    /// False alarms by kind.
    pub false_alarm_kinds: BTreeMap<String, u64>,
}

#[derive(Default)]
pub(super) struct XidTally {
    pub rows: BTreeMap<&'static str, Row>,
}

impl XidTally {
    pub fn of(outcomes: &[Outcome]) -> Self {
        let mut t = Self::default();
        for o in outcomes {
            let k = o.scenario.kind;
            if tag(k).is_none() && k != "xid-cancelled-jobs" {
                continue;
            }
            let r = t.rows.entry(k).or_default();
            r.runs += 1;
            r.false_alarms += o.false_alarm_count;
            for (kind, n) in &o.false_alarm_kinds {
                *r.false_alarm_kinds.entry(kind.clone()).or_default() += n;
            }
            if o.scenario.confounder {
                continue;
            }
            match (o.detected_window, o.visible_window) {
                (Some(d), v) => {
                    r.detected += 1;
                    if let Some(v) = v {
                        let l = d as i64 - v as i64;
                        r.from_visible_max = Some(r.from_visible_max.map_or(l, |m| m.max(l)));
                    }
                }
                (None, _) => r.missed += 1,
            }
            r.wrong_action += u64::from(o.wrong_action);
            r.incidents_per_fault_max = r.incidents_per_fault_max.max(o.incidents_on_fault);
            r.updates_per_fault_max = r.updates_per_fault_max.max(o.updates_on_fault);
            let sev = match o.severity_on_fault.as_deref() {
                None => "no incident",
                Some("") => "none",
                Some(s) => s,
            };
            *r.severities.entry(sev.to_string()).or_default() += 1;
        }
        t
    }

    pub fn print(&self) {
        if self.rows.is_empty() {
            return;
        }
        println!("| XID fault | runs | detected (right action) | missed | application fault paged as hardware | false alarms | incidents per fault, max | updates per fault, max | severity |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for (k, r) in &self.rows {
            let sev: Vec<String> = r
                .severities
                .iter()
                .map(|(s, n)| format!("{s} ×{n}"))
                .collect();
            println!(
                "| {k} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.runs,
                r.detected,
                r.missed,
                r.wrong_action,
                r.false_alarms,
                r.incidents_per_fault_max,
                r.updates_per_fault_max,
                sev.join(", ")
            );
        }
        println!();
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "by_kind": self.rows,
            "rule": "xid-crash-loop: detected when an app_xid incident on the GPU never paged the hardware (no gpu_xid whose runbook is a hardware action, no critical severity); one that did is a false alarm and the fault missed (wrong_action). xid-bad-gpu and xid-burst: detected when a gpu_xid on the GPU recommends a hardware action (its runbook is none of RESTART_APP, IGNORE, WORKFLOW_XID_45, UNKNOWN); the GPU's incidents before the escalation are the fault's own, not false alarms; visible for xid-bad-gpu: the second unrelated job's death. nvswitch-sxid: nvswitch_sxid on host/nvswitch/<pci>. xid-cancelled-jobs: a confounder, every incident a false alarm",
        })
    }
}
