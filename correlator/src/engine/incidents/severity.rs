//! Severity from the incident, not from its kind (docs/alerting.md, "The
//! severity table"): what the incident needs (the catalogue action of an
//! XID or ECC incident), whether it stops work, how many GPUs and jobs it
//! touches and whether a job is slowed. One table, rows tried in order, the
//! first that matches rates the incident; `[incidents.severity]` changes a
//! row's severity, pins a kind's, or moves the size thresholds.
//!
//! Evaluated on open and on every update; while the incident is open its
//! severity only rises (a page is not taken back because a job left the
//! link for a minute).
use std::collections::{BTreeMap, HashMap};

use proto::v1::Window;
use serde::{Deserialize, Serialize};

use crate::setting::InvalidSetting;

/// How urgently an incident needs a person.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Severity {
    /// Worth knowing; nobody needs to act now.
    #[default]
    Info,
    /// Needs an operator in working hours (or a user: an application fault).
    Warning,
    /// Pages: hardware to take out of service, or a large job hurt.
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 3] = [Severity::Info, Severity::Warning, Severity::Critical];

    /// The name on the wire, in labels and in the history.
    pub const fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// The order of a severity name (0 for an empty or unknown one), to take the
/// highest of several.
pub fn rank(s: &str) -> u8 {
    Severity::parse(s).map_or(0, |v| v as u8 + 1)
}

/// The rows of the table, in the order they are tried.
pub const RULES: [(&str, Severity, &str); 8] = [
    ("application", Severity::Warning, "app_xid (an XID judged the application's), and gpu_xid whose action is RESTART_APP (XID 94, a contained memory error): the application's fault; the user is told, the GPU stays in service"),
    ("informational", Severity::Info, "gpu_xid whose action is IGNORE or WORKFLOW_XID_45 (informational, a follow-on of another XID)"),
    ("hardware_action", Severity::Critical, "gpu_xid with any other action (RESET_GPU, RESTART_BM, the ECC and NVLink workflows, CHECK_MECHANICALS, CONTACT_SUPPORT, XID_154, unknown codes, a GPU off the bus) but UPDATE_SWFW; a fatal nvswitch_sxid; gpu_ecc whose action is DRAIN, RESET_GPU or RMA"),
    ("work_stopped", Severity::Critical, "node_lost, ib_link_down, ib_link_flapping, collective_hang: traffic or a job stopped"),
    ("large_job", Severity::Critical, "any other incident whose largest affected job holds at least large_job_gpus GPUs, or that touches at least many_jobs jobs"),
    ("job_affected", Severity::Warning, "any other incident with an affected job, or that slows one (straggler, job_slowdown, inference_latency, interference, or an incident that explains a slow rank)"),
    ("idle_shared", Severity::Warning, "no job on it: ib_link_degraded, gpu_nvlink_errors, a non-fatal nvswitch_sxid, storage_latency, nfs_latency, lustre_latency (shared paths the next job will use)"),
    ("idle", Severity::Info, "no job on it, anything else (a throttling idle GPU, gpu_ecc WATCH, UPDATE_SWFW)"),
];

/// `[incidents.severity]`: the table's knobs.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SeverityConfig {
    /// A job holding at least this many GPUs makes an incident under it
    /// critical (rule `large_job`).
    pub large_job_gpus: u32,
    /// An incident touching at least this many jobs is critical (rule
    /// `large_job`).
    pub many_jobs: u32,
    /// A rule's severity instead of the table's (`{ idle = "warning" }`).
    pub rules: BTreeMap<String, String>,
    /// A kind's severity whatever the table says (`{ gpu_power_throttle =
    /// "info" }`).
    pub kinds: BTreeMap<String, String>,
}

impl Default for SeverityConfig {
    fn default() -> Self {
        Self {
            large_job_gpus: 256,
            many_jobs: 4,
            rules: BTreeMap::new(),
            kinds: BTreeMap::new(),
        }
    }
}

impl SeverityConfig {
    /// Checks the thresholds, rule names, kinds and severity names.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.large_job_gpus == 0 {
            return Err(InvalidSetting::new(
                "incidents.severity.large_job_gpus",
                0,
                "must be at least 1",
            ));
        }
        if self.many_jobs == 0 {
            return Err(InvalidSetting::new(
                "incidents.severity.many_jobs",
                0,
                "must be at least 1",
            ));
        }
        let names: Vec<&str> = RULES.iter().map(|r| r.0).collect();
        let bad = |key: &'static str, k: &str, v: &str, why: String| InvalidSetting {
            key,
            value: format!("{k} = {v:?}"),
            why: why.into(),
        };
        let sev = "must be \"critical\", \"warning\" or \"info\"";
        for (k, v) in &self.rules {
            if !names.contains(&k.as_str()) {
                let why = format!(
                    "{k} is not a rule of the table: one of {}",
                    names.join(", ")
                );
                return Err(bad("incidents.severity.rules", k, v, why));
            }
            if Severity::parse(v).is_none() {
                return Err(bad("incidents.severity.rules", k, v, sev.into()));
            }
        }
        for (k, v) in &self.kinds {
            if vocab::kind::IncidentKind::parse(k).is_none() {
                let why = format!("{k} is not an incident kind (docs/detection.md lists them)");
                return Err(bad("incidents.severity.kinds", k, v, why));
            }
            if Severity::parse(v).is_none() {
                return Err(bad("incidents.severity.kinds", k, v, sev.into()));
            }
        }
        Ok(())
    }
}

/// What the table looks at.
#[derive(Clone, Debug, Default)]
pub struct Facts<'a> {
    pub kind: &'a str,
    /// The incident's marks (`xid_action:…`, `ecc_action:…`).
    pub marks: &'a [String],
    /// GPUs of its largest affected job (0: none known).
    pub gpus: u32,
    /// Affected jobs.
    pub jobs: usize,
    /// Whether it explains a slow rank or job.
    pub slowed: bool,
}

fn action<'a>(marks: &'a [String], prefix: &str) -> Option<&'a str> {
    marks.iter().rev().find_map(|m| m.strip_prefix(prefix))
}

/// The rule that rates these facts (its name).
fn rule(cfg: &SeverityConfig, f: &Facts) -> &'static str {
    match (f.kind, action(f.marks, "xid_action:")) {
        ("gpu_xid", Some("RESTART_APP")) | ("app_xid", _) => return "application",
        ("gpu_xid", Some("IGNORE" | "WORKFLOW_XID_45")) => return "informational",
        ("gpu_xid", Some("UPDATE_SWFW")) => {}
        ("gpu_xid", _) | ("nvswitch_sxid", Some("RESET_GPU")) => return "hardware_action",
        _ => {}
    }
    if f.kind == "gpu_ecc"
        && matches!(
            action(f.marks, "ecc_action:"),
            Some("DRAIN" | "RESET_GPU" | "RMA")
        )
    {
        return "hardware_action";
    }
    if matches!(
        f.kind,
        "node_lost" | "ib_link_down" | "ib_link_flapping" | "collective_hang"
    ) {
        return "work_stopped";
    }
    if f.gpus >= cfg.large_job_gpus || f.jobs >= cfg.many_jobs as usize {
        return "large_job";
    }
    let slows = matches!(
        f.kind,
        "straggler" | "job_slowdown" | "inference_latency" | "interference"
    );
    if f.jobs > 0 || f.slowed || slows {
        return "job_affected";
    }
    if matches!(
        f.kind,
        "ib_link_degraded"
            | "gpu_nvlink_errors"
            | "nvswitch_sxid"
            | "storage_latency"
            | "nfs_latency"
            | "lustre_latency"
    ) {
        return "idle_shared";
    }
    "idle"
}

/// The severity of these facts and the rule (or `kind`) that gave it.
pub fn judge(cfg: &SeverityConfig, f: &Facts) -> (Severity, &'static str) {
    if let Some(s) = cfg.kinds.get(f.kind).and_then(|s| Severity::parse(s)) {
        return (s, "kind");
    }
    let r = rule(cfg, f);
    let base = RULES
        .iter()
        .find(|x| x.0 == r)
        .map_or(Severity::Warning, |x| x.1);
    let s = cfg
        .rules
        .get(r)
        .and_then(|s| Severity::parse(s))
        .unwrap_or(base);
    (s, r)
}

/// A job is forgotten after this long (its windows' event time) without a
/// row naming it.
const SIZE_HORIZON_MS: i64 = 600_000;
/// Bounds: jobs sized, hosts per job.
const MAX_JOBS: usize = 10_000;
const MAX_HOSTS: usize = 8192;

#[derive(Debug, Default)]
struct Size {
    /// Largest communicator the job's NCCL ranks reported.
    nranks: u32,
    /// Host → distinct CUDA devices its processes use there.
    per_host: HashMap<String, u32>,
    last_ms: i64,
}

/// How many GPUs each job holds, from the windows' own rows: the largest
/// NCCL communicator a rank of it reported, or the CUDA devices its
/// processes use across hosts, whichever is more. Bounded; a job unseen
/// for [`SIZE_HORIZON_MS`] is forgotten.
#[derive(Debug, Default)]
pub struct JobSizes {
    jobs: HashMap<String, Size>,
}

impl JobSizes {
    /// Learns one window's rows (`host` is its origin).
    pub fn observe(&mut self, host: &str, w: &Window) {
        let now = w.end_unix_ms;
        let mut devices: HashMap<&str, Vec<i32>> = HashMap::new();
        for c in w.cuda.iter().filter(|c| !c.job.is_empty() && c.device >= 0) {
            let d = devices.entry(c.job.as_str()).or_default();
            if !d.contains(&c.device) {
                d.push(c.device);
            }
        }
        for n in w.nccl.iter().filter(|n| !n.job.is_empty()) {
            if let Some(s) = self.entry(&n.job, now) {
                s.nranks = s.nranks.max(u32::try_from(n.nranks).unwrap_or(0));
            }
        }
        for (job, d) in devices {
            if let Some(s) = self.entry(job, now) {
                if s.per_host.len() < MAX_HOSTS || s.per_host.contains_key(host) {
                    s.per_host.insert(host.to_string(), d.len() as u32);
                }
            }
        }
        if self.jobs.len() >= MAX_JOBS {
            self.jobs.retain(|_, s| now - s.last_ms <= SIZE_HORIZON_MS);
        }
    }

    fn entry(&mut self, job: &str, now: i64) -> Option<&mut Size> {
        if !self.jobs.contains_key(job) {
            if self.jobs.len() >= MAX_JOBS {
                self.jobs.retain(|_, s| now - s.last_ms <= SIZE_HORIZON_MS);
            }
            if self.jobs.len() >= MAX_JOBS {
                metrics::counter!(crate::telemetry::ENGINE_DROPPED.name, "what" => "job_sizes")
                    .increment(1);
                return None;
            }
        }
        let s = self.jobs.entry(job.to_string()).or_default();
        s.last_ms = s.last_ms.max(now);
        Some(s)
    }

    /// GPUs `job` holds (0: unknown).
    pub fn gpus(&self, job: &str) -> u32 {
        self.jobs
            .get(job)
            .map_or(0, |s| s.nranks.max(s.per_host.values().sum::<u32>()))
    }

    /// Forgets the hosts' devices (hosts the engine forgot as idle).
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        for s in self.jobs.values_mut() {
            s.per_host.retain(|h, _| !gone.contains(h));
        }
    }
}
