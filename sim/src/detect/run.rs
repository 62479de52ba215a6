//! One scenario through the engine: windows straight into
//! `Engine::default()`, every update watched for the expected incident, a
//! stand-in or a false alarm; then the run's outcome.
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
};

use anyhow::Result;
use proto::v1::CandidateUpdate;
use serde::Serialize;

use super::grid::{fnv, tail_windows, Scenario};
use crate::{
    cluster::{tenants::TENANT_JOB, topology, Cluster, ClusterSpec, Truth, JOB},
    faults::{self, Fault},
};
use correlator::engine::{config::DetectConfig, median, Engine};

/// An incident seen in a run.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Seen {
    pub id: String,
    pub kinds: Vec<String>,
    pub entity: String,
    pub first_window: u64,
    /// Carries the expected (kind, entity), or an accepted stand-in, at some point.
    pub expected: bool,
    /// Carries exactly the expected (kind, entity) at some point.
    pub exact: bool,
    /// The opening evidence, to say why a false alarm was raised.
    pub evidence: Vec<String>,
    /// Resolved into this incident (`explained by incident ID`): a port
    /// incident of a switch's fault before the switch's was opened.
    pub merged_into: Option<String>,
    /// On the fault's entity (whatever its kind or action).
    #[serde(skip)]
    pub on_entity: bool,
    /// Some update paged a hardware action ([`pages_hardware`]).
    pub hardware: bool,
    /// Updates it carried.
    pub updates: u64,
    /// Its latest severity (empty from a correlator without severities).
    pub severity: String,
}

#[derive(Clone, Debug, Serialize)]
pub(super) struct Outcome {
    pub scenario: Scenario,
    pub expected_kind: Option<String>,
    pub expected_entity: Option<String>,
    pub onset_window: u64,
    pub visible_window: Option<u64>,
    pub windows_run: u64,
    /// First window with an update of the expected kind on the entity (or
    /// an accepted stand-in).
    pub detected_window: Option<u64>,
    /// First window with the expected incident naming what physically
    /// happened.
    pub named_window: Option<u64>,
    /// Distinct incident ids carrying the expected kind on the entity.
    pub incidents_on_fault: u64,
    pub false_alarm_count: u64,
    /// False alarms by kind (`a>b`: an incident that changed kind).
    pub false_alarm_kinds: BTreeMap<String, u64>,
    /// The first few false alarms.
    pub false_alarms: Vec<Seen>,
    /// True errors the fault added beyond the base BER (degrading links).
    pub excess_errors: u64,
    /// The job's step time after the fault became visible over before the
    /// onset (medians), when the job ran through both.
    pub job_slowdown: Option<f64>,
    /// The job's slowdown was attached (`explains job …`) to the fault's
    /// incident / to another incident.
    pub joined_right: bool,
    pub joined_elsewhere: bool,
    /// A `job_slowdown` incident was opened (and stayed open: not superseded).
    pub own_job_slowdown: bool,
    /// The job's worst sustained step time over its pre-onset median.
    pub job_peak: f64,
    /// Confounder runs that slowed the job: `job_slowdown` incidents raised
    /// (true symptoms without an infrastructure fault, not false alarms).
    pub symptom_incidents: u64,
    /// `interference` incidents raised (distinct ids, any entity), and those
    /// on the expected entity whose evidence named the injected aggressor.
    pub interference_incidents: u64,
    pub interference_right: u64,
    /// Incidents resolved into the fault's own incident (the ports of a
    /// switch fault reported in its first window, before every host had
    /// reported it): part of the fault, not false alarms, counted here.
    pub merged_incidents: u64,
    /// What the fault's incident must recommend ([`faults::Class`]).
    pub expected_class: Option<faults::Class>,
    /// An application's fault paged a hardware action (a GPU reset, a
    /// drain, support, or critical severity): missed, and that incident is
    /// a false alarm.
    pub wrong_action: bool,
    /// Updates of the fault's incidents (a burst must not give thousands).
    pub updates_on_fault: u64,
    /// The latest severity of the fault's incident.
    pub severity_on_fault: Option<String>,
    pub seconds: f64,
}

/// An incident that detects the fault without being its expected one: a
/// slow rank's job slowing (all a job without OTLP step times can show),
/// a hang raised on another of the job's communicators.
fn stand_in(f: &Fault, c: &Cluster, u: &CandidateUpdate) -> bool {
    use faults::Kind;
    match f.kind {
        Kind::NcclSlowRank { .. } => u.kind == "job_slowdown" && u.entity == JOB,
        Kind::NcclHang | Kind::NcclHangDeadPeer | Kind::NcclHangUnknown => {
            u.kind == "collective_hang"
        }
        // The downed port's own incident is the fault too.
        Kind::NcclHangPortDown => {
            u.kind == "collective_hang"
                || (u.kind == "ib_link_down" && u.entity == faults::target_name(c, &f.target))
        }
        _ => false,
    }
}

/// NVIDIA's actions that are not the hardware's: an incident whose runbook
/// says one of these recommends no hardware action.
const NOT_HARDWARE: [vocab::xid::Action; 4] = [
    vocab::xid::Action::RestartApp,
    vocab::xid::Action::Ignore,
    vocab::xid::Action::FollowOther,
    vocab::xid::Action::Unknown,
];

/// Whether an XID update pages the hardware: critical severity, or a
/// `gpu_xid` whose runbook is not one of NVIDIA's application or
/// informational actions (a GPU reset, a drain, a reboot, support) or
/// whose evidence escalates it to one (the engine before issue 48 kept the
/// opening runbook and said `escalated to RESET_GPU (…)`); an `app_xid` is
/// the application's by its kind.
fn pages_hardware(u: &CandidateUpdate) -> bool {
    use vocab::xid::Action;
    if u.severity == "critical" {
        return true;
    }
    if u.kind != vocab::IncidentKind::GpuXid.as_str() {
        return false;
    }
    let escalated = u.evidence.iter().any(|l| {
        l.contains("escalated to")
            && [
                Action::ResetGpu,
                Action::RebootNode,
                Action::ContactSupport,
                Action::EccWorkflow,
                Action::NvlinkWorkflow,
            ]
            .iter()
            .any(|a| l.contains(a.what_to_do()))
    });
    escalated
        || !NOT_HARDWARE
            .iter()
            .any(|a| u.runbook.contains(a.what_to_do()))
}

/// Whether a hang where every rank waits names its culprit: the dead
/// rank, the downed port, or no cause at all.
fn names_culprit(f: &Fault, c: &Cluster, u: &CandidateUpdate) -> Option<bool> {
    use faults::{Kind, Target};
    let culprits: Vec<&String> = u
        .evidence
        .iter()
        .filter(|l| l.starts_with("culprit: "))
        .collect();
    let want = match (&f.kind, &f.target) {
        (Kind::NcclHangDeadPeer, &Target::Gpu { node, gpu }) => format!(
            "culprit: rank {} on {} ",
            node * crate::cluster::GPUS + gpu,
            c.node_name(node)
        ),
        (Kind::NcclHangPortDown, t @ Target::Port { .. }) => {
            format!("culprit: port {} of ", faults::target_name(c, t))
        }
        (Kind::NcclHangUnknown, _) => {
            return Some(
                culprits.is_empty()
                    && u.evidence
                        .iter()
                        .any(|l| l.ends_with("; no cause seen below")),
            )
        }
        _ => return None,
    };
    Some(culprits.len() == 1 && culprits[0].starts_with(&want))
}

/// Whether the expected incident names what physically happened: a hang
/// exactly the ranks holding the others up (`stalled rank R on HOST`); a
/// link, GPU or host every NCCL communicator with a rank there (`NCCL
/// communicator ID …`).
fn names_it(f: &Fault, c: &Cluster, u: &CandidateUpdate) -> bool {
    if let Some(named) = names_culprit(f, c, u) {
        return named;
    }
    if f.kind == faults::Kind::NcclHang {
        let Some(t) = c.truth().first() else {
            return false;
        };
        let mut want: Vec<String> = t
            .hang_holders
            .iter()
            .map(|(h, r)| format!("stalled rank {r} on {h} "))
            .collect();
        let mut got: Vec<String> = u
            .evidence
            .iter()
            .filter(|l| l.starts_with("stalled rank "))
            .filter_map(|l| l.split_once('(').map(|(head, _)| head.to_string()))
            .collect();
        want.sort();
        got.sort();
        return !want.is_empty() && want == got;
    }
    let annotated =
        u.kind.starts_with("ib_link") || u.kind.starts_with("gpu_") || u.kind == "node_lost";
    !annotated
        || c.comms_crossing(&f.target).iter().all(|id| {
            let line = format!("NCCL communicator {id} ");
            u.evidence.iter().any(|l| l.starts_with(&line))
        })
}

/// What a run has seen so far, update by update.
#[derive(Default)]
struct Watch {
    /// Incident id → what it carried.
    seen: BTreeMap<String, Seen>,
    detected: Option<u64>,
    named: Option<u64>,
    joined_right: bool,
    joined_elsewhere: bool,
    job_slowdown_ids: BTreeSet<String>,
    interference_ids: BTreeSet<String>,
    interference_right: BTreeSet<String>,
}

/// What a run expects: the fault (first injected), its incident (kind,
/// entity) as known in this window, the aggressor's evidence line.
struct Expect<'a> {
    fault: Option<&'a Fault>,
    incident: Option<(String, String)>,
    aggressor: String,
    class: Option<faults::Class>,
}

impl Watch {
    /// One update in window `k`.
    fn observe(&mut self, u: &CandidateUpdate, k: u64, x: &Expect, c: &Cluster) {
        let on_entity = x.incident.as_ref().is_some_and(|(_, ee)| u.entity == *ee);
        let hardware = pages_hardware(u);
        let class_ok = match x.class {
            None => true,
            Some(faults::Class::Hardware) => hardware,
            Some(faults::Class::Application) => !hardware,
        };
        let hit = class_ok
            && x.incident
                .as_ref()
                .is_some_and(|(ek, ee)| u.kind == *ek && u.entity == *ee);
        let accepted = hit || x.fault.is_some_and(|f| stand_in(f, c, u));
        if accepted && self.detected.is_none() {
            self.detected = Some(k);
        }
        if hit && self.named.is_none() && x.fault.is_some_and(|f| names_it(f, c, u)) {
            self.named = Some(k);
        }
        let explains_job = u
            .evidence
            .iter()
            .any(|l| l.starts_with(&format!("explains job {JOB}")));
        if explains_job && u.kind != "job_slowdown" {
            if hit {
                self.joined_right = true;
            } else {
                self.joined_elsewhere = true;
            }
        }
        if u.kind == vocab::IncidentKind::Interference.as_str() {
            self.interference_ids.insert(u.incident_id.clone());
            if hit && u.evidence.iter().any(|l| l.starts_with(&x.aggressor)) {
                self.interference_right.insert(u.incident_id.clone());
            }
        }
        if u.kind == vocab::IncidentKind::JobSlowdown.as_str() {
            if u.state == "opened" {
                self.job_slowdown_ids.insert(u.incident_id.clone());
            } else if u.state == vocab::UpdateState::Resolved.as_str()
                && u.evidence
                    .iter()
                    .any(|l| l.starts_with("explained by incident"))
            {
                self.job_slowdown_ids.remove(&u.incident_id);
            }
        }
        let inc = self
            .seen
            .entry(u.incident_id.clone())
            .or_insert_with(|| Seen {
                id: u.incident_id.clone(),
                kinds: Vec::new(),
                entity: u.entity.clone(),
                first_window: k,
                expected: false,
                exact: false,
                evidence: u.evidence.clone(),
                merged_into: None,
                on_entity: false,
                hardware: false,
                updates: 0,
                severity: String::new(),
            });
        inc.on_entity |= on_entity;
        inc.hardware |= hardware;
        inc.updates += 1;
        inc.severity.clone_from(&u.severity);
        if u.state == vocab::UpdateState::Resolved.as_str() {
            inc.merged_into = u.evidence.iter().find_map(|l| {
                l.strip_prefix("explained by incident ")
                    .and_then(|r| r.split_once(' '))
                    .map(|(id, _)| id.to_string())
            });
        }
        if !inc.kinds.contains(&u.kind) {
            inc.kinds.push(u.kind.clone());
        }
        inc.expected |= accepted;
        inc.exact |= hit;
    }

    /// The run's outcome after `k` windows of scenario `s`.
    fn outcome(self, s: &Scenario, x: Expect, c: &Cluster, k: u64, seconds: f64) -> Outcome {
        let truth = c.truth()[0].clone();
        let (job_slowdown, job_peak) = job_effect(&c.job_steps, &truth, s.window_s);
        let wl = DetectConfig::default().workload;
        let slowed = job_peak >= 1.0 + wl.min_slowdown;
        let mut seen = self.seen;
        let mut symptom_incidents = 0u64;
        seen.retain(|_, i| {
            let keep = !(slowed && s.confounder && i.kinds == ["job_slowdown"]);
            symptom_incidents += u64::from(!keep);
            keep
        });
        // An application's fault: an incident on its entity that paged the
        // hardware is a false alarm and the fault is missed; a hardware
        // fault: the entity's incidents before the escalation are its own.
        let class = x.class;
        let mut wrong_action = false;
        for i in seen.values_mut() {
            if class == Some(faults::Class::Application) && i.on_entity && i.hardware {
                (i.expected, i.exact, wrong_action) = (false, false, true);
            }
        }
        let (on_fault, false_alarms): (Vec<Seen>, Vec<Seen>) = seen.into_values().partition(|i| {
            i.expected || (class.is_some() && i.on_entity && !(i.hardware && wrong_action))
        });
        let (detected, named) = if wrong_action {
            (None, None)
        } else {
            (self.detected, self.named)
        };
        let updates_on_fault = on_fault.iter().filter(|i| i.exact).map(|i| i.updates).sum();
        let severity_on_fault = on_fault
            .iter()
            .find(|i| i.exact)
            .map(|i| i.severity.clone());
        let exact_ids: Vec<&str> = on_fault
            .iter()
            .filter(|i| i.exact)
            .map(|i| i.id.as_str())
            .collect();
        let (merged, mut false_alarms): (Vec<Seen>, Vec<Seen>) =
            false_alarms.into_iter().partition(|i| {
                i.merged_into
                    .as_deref()
                    .is_some_and(|m| exact_ids.contains(&m))
            });
        let incidents_on_fault = on_fault.iter().filter(|i| i.exact).count() as u64;
        false_alarms.sort_by_key(|f| f.first_window);
        let mut false_alarm_kinds: BTreeMap<String, u64> = BTreeMap::new();
        for f in &false_alarms {
            *false_alarm_kinds.entry(f.kinds.join(">")).or_default() += 1;
        }
        let false_alarm_count = false_alarms.len() as u64;
        false_alarms.truncate(10);
        let expected = x.incident;
        Outcome {
            expected_kind: expected.as_ref().map(|e| e.0.clone()),
            expected_entity: expected.map(|e| e.1),
            onset_window: truth.onset_window,
            visible_window: truth.visible_window,
            windows_run: k,
            detected_window: detected,
            named_window: named,
            incidents_on_fault,
            false_alarm_count,
            false_alarm_kinds,
            false_alarms,
            excess_errors: truth.excess_errors,
            job_slowdown,
            joined_right: self.joined_right,
            joined_elsewhere: self.joined_elsewhere,
            own_job_slowdown: !self.job_slowdown_ids.is_empty(),
            job_peak,
            symptom_incidents,
            interference_incidents: self.interference_ids.len() as u64,
            interference_right: self.interference_right.len() as u64,
            merged_incidents: merged.len() as u64,
            expected_class: class,
            wrong_action,
            updates_on_fault,
            severity_on_fault,
            seconds,
            scenario: s.clone(),
        }
    }
}

/// The job's step time after the fault became visible over before the onset
/// (medians, when the job ran through both); and its worst sustained step
/// time (median over `min_persist_s`) over its pre-onset median: a
/// confounder that really slowed the job (congestion) makes `job_slowdown`
/// a true symptom, not a false alarm.
fn job_effect(steps: &[f64], truth: &Truth, window_s: f64) -> (Option<f64>, f64) {
    let on = truth.onset_window as usize;
    let vis = truth.visible_window.map_or(on, |v| v as usize);
    let job_slowdown = (on >= 3 && steps.len() > vis + 3)
        .then(|| median(&steps[vis..]) / median(&steps[..on]).max(1e-9));
    let wl = DetectConfig::default().workload;
    let on = on.min(steps.len());
    let k = ((wl.min_persist_s / window_s).ceil() as usize).max(3);
    let before = median(&steps[..on]).max(1e-9);
    let job_peak = if on >= 3 {
        steps[on..]
            .windows(k)
            .map(|x| median(x) / before)
            .fold(0.0, f64::max)
    } else {
        0.0
    };
    (job_slowdown, job_peak)
}

/// Runs one scenario through the engine and scores it.
fn run_one(s: &Scenario) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let spec = ClusterSpec {
        nodes: s.nodes,
        window_s: s.window_s,
        link_rate: s.link_rate,
        utilisation: s.utilisation,
        storage: s.storage,
        seed: s.seed * 1_000_003 + fnv(&s.inject.join(" ")) % 1_000_000,
        otlp_steps: s.otlp,
    };
    let mut c = Cluster::new(spec.clone());
    let fs = faults::parse_all(&s.inject, &c, spec.seed)?;
    let mut e = Engine::default();
    e.ib.set_topology(
        correlator::engine::ib::parse_topology(&topology::ibnetdiscover(s.nodes))
            .map_err(|err| anyhow::anyhow!("the simulated fabric's topology: {err}"))?,
    );
    let mut watch = Watch::default();
    let mut x = Expect {
        fault: fs.first(),
        incident: None,
        aggressor: format!("aggressor job {TENANT_JOB} "),
        class: fs.first().and_then(|f| f.kind.expected_class()),
    };
    let tail = tail_windows(s.window_s);
    let acting = fs.first().map_or(0, |f| {
        c.window_of(f.onset.unwrap_or(s.onset_s) + f.kind.active_s())
    });
    let mut k = 0;
    while k < s.max_windows {
        c.advance(&fs, s.onset_s);
        k = c.window_index();
        // A hang's entity is physical fact once the others wait.
        x.incident = x.fault.and_then(|f| f.expected(&c)).map(|(kd, en)| {
            let hang = c.truth().first().and_then(|t| t.hang_entity.clone());
            (kd.to_string(), hang.unwrap_or(en))
        });
        for n in 0..s.nodes {
            let Some(w) = c.window(n) else {
                continue;
            };
            for u in e.ingest(&w) {
                watch.observe(&u, k, &x, &c);
            }
        }
        c.finish_step();
        // Fault runs end `tail` windows after the fault became visible;
        // confounder runs last until their effect is over and a tail more.
        // A fault that keeps acting (a crash loop, jobs failing one after
        // another) runs through its last act and the tail.
        let visible = c.truth()[0].visible_window;
        if !s.confounder && visible.is_some_and(|v| k >= v.max(acting) + tail) {
            break;
        }
    }
    Ok(watch.outcome(s, x, &c, k, started.elapsed().as_secs_f64()))
}

/// Runs the scenarios on `jobs` threads, biggest first; results in grid order.
pub(super) fn run_all(scenarios: &[Scenario], jobs: usize, progress: bool) -> Result<Vec<Outcome>> {
    let mut order: Vec<usize> = (0..scenarios.len()).collect();
    order.sort_by(|&a, &b| scenarios[b].cost().total_cmp(&scenarios[a].cost()));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Outcome>>>> =
        Mutex::new((0..scenarios.len()).map(|_| None).collect());
    std::thread::scope(|sc| {
        for _ in 0..jobs.max(1) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&idx) = order.get(i) else {
                    break;
                };
                let r = run_one(&scenarios[idx]);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if progress && (d.is_multiple_of(50) || d == scenarios.len()) {
                    eprintln!("bench-detect: {d}/{} scenarios", scenarios.len());
                }
                if let Ok(mut g) = results.lock() {
                    g[idx] = Some(r);
                }
            });
        }
    });
    let results = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a worker panicked"))?;
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("scenario not run"))))
        .collect()
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
