//! The findings of XID and SXid episodes ([`super::xid`]): evidence with a
//! count per code, the judgement and why, the catalogue's action as a mark
//! (`xid_catalog:<BUCKET>`), the action recommended (`xid_action:<BUCKET>`:
//! the catalogue's, or `RESET_GPU` for a suspected GPU) and the judgement
//! (`xid_judged:<class>`),
//! and a runbook for what was judged, never a GPU reset for an
//! application's fault.
use std::collections::BTreeMap;

use vocab::kind::IncidentKind;
use vocab::xid::{self, Action};

use crate::engine::incidents::Finding;

/// What an episode is judged, in rising order (a judgement only rises
/// within an episode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Judged {
    /// Application-class codes naming no process.
    ApplicationUnknown,
    Application,
    /// One GPU meeting an application-class code for unrelated jobs.
    HardwareSuspected,
    Hardware,
}

impl Judged {
    pub fn as_str(self) -> &'static str {
        match self {
            Judged::ApplicationUnknown => "application_unknown",
            Judged::Application => "application",
            Judged::HardwareSuspected => "hardware_suspected",
            Judged::Hardware => "hardware",
        }
    }
}

/// The episode's codes and the actions that matter.
pub(super) struct Summary<'a> {
    pub first_ms: i64,
    pub last_ms: i64,
    pub codes: &'a BTreeMap<u32, (u64, String)>,
    pub folded: &'a BTreeMap<u32, u64>,
    pub unattributed: u64,
    pub judged: Judged,
    /// (job, how it is shown) of who met its application-class codes.
    pub who: Vec<(String, String)>,
    pub reasons: &'a [String],
    pub unrelated: Option<usize>,
    /// The most severe catalogue action of its codes (of its hardware
    /// codes when it has any).
    pub action: Action,
    pub top: u32,
}

/// The power of ten a count has reached, from 10 on: a mark per decade
/// makes a growing burst or crash loop an `updated` at 10, 100, 1,000 …
/// events (its count refreshed), never one per event.
fn decade(n: u64) -> Option<u64> {
    (n >= 10).then(|| 10u64.pow(n.ilog10()))
}

fn codes_evidence(s: &Summary, sxid: bool) -> Vec<String> {
    let span = format!(
        "between {} and {}",
        vocab::time::utc(s.first_ms),
        vocab::time::utc(s.last_ms)
    );
    s.codes
        .iter()
        .map(|(code, (n, detail))| {
            if sxid {
                return format!("SXid {code} ×{n} {span}: {detail}");
            }
            let meaning = xid::lookup(*code).map_or("not in NVIDIA's Xid catalog", |e| e.1);
            let a = xid::action(*code);
            format!(
                "XID {code} ({meaning}) ×{n} {span}: NVIDIA's action {} ({}); message: {detail}",
                a.bucket(),
                a.what_to_do()
            )
        })
        .collect()
}

/// The incident of one GPU's XID episode: `app_xid` when judged the
/// application's, `gpu_xid` when the GPU is (a hardware code, or unrelated
/// jobs failing on it).
pub(super) fn gpu(entity: &str, s: &Summary, jobs: &[String]) -> Finding {
    let app = s.judged <= Judged::Application;
    let kind = if app {
        IncidentKind::AppXid
    } else {
        IncidentKind::GpuXid
    };
    let confidence = match (s.judged, s.action) {
        (Judged::ApplicationUnknown, _) => 0.5,
        (Judged::Application, _) => 0.6,
        (Judged::HardwareSuspected, _) => 0.8,
        (_, Action::RebootNode | Action::EccWorkflow | Action::NvlinkWorkflow) => 0.95,
        (_, Action::Unknown) => 0.75,
        (_, a) if a.is_hardware() => 0.9,
        _ => 0.6,
    };
    let mut f = Finding::new(kind, entity, confidence).with_evidence_list(codes_evidence(s, false));
    if !s.folded.is_empty() {
        let folded: Vec<String> = s
            .folded
            .iter()
            .map(|(c, n)| format!("XID {c} ×{n}"))
            .collect();
        f = f.with_evidence(format!(
            "followed by {} (a stopped process's channel, preemptive cleanup): follow-ons of the XIDs above, folded in",
            folded.join(", ")
        ));
    }
    if s.unattributed > 0 {
        f = f.with_evidence(format!(
            "{} of them name no process (NVML only, or pid 0): who met them is unknown, and counts alone never make them the GPU's",
            s.unattributed
        ));
    }
    if !s.who.is_empty() {
        let who: Vec<&str> = s.who.iter().map(|(_, w)| w.as_str()).collect();
        f = f.with_evidence(format!("met by {}", who.join(", ")));
    }
    f = f
        .with_evidence_list(s.reasons.to_vec())
        .with_evidence(format!(
            "judged {}; NVIDIA's action for XID {}: {}",
            s.judged.as_str(),
            s.top,
            s.action.bucket()
        ));
    let mut named: Vec<String> = s
        .who
        .iter()
        .filter(|(j, _)| !j.is_empty())
        .map(|(j, _)| j.clone())
        .collect();
    named.dedup();
    if !app {
        for j in jobs {
            if !named.contains(j) {
                named.push(j.clone());
            }
        }
    }
    f.jobs = named;
    for (c, (n, _)) in s.codes {
        f = f.with_mark(format!("xid:{c}"));
        if let Some(d) = decade(*n) {
            f = f.with_mark(format!("xid:{c}:{d}+"));
        }
    }
    if let Some(n) = s.unrelated {
        f = f.with_mark(format!("xid_unrelated_jobs:{n}"));
    }
    // What faultline recommends: the catalogue's action, but a GPU reset
    // when unrelated jobs failing on it make the GPU suspect.
    let recommended = if s.judged == Judged::HardwareSuspected {
        Action::ResetGpu
    } else {
        s.action
    };
    f.with_mark(format!("xid_catalog:{}", s.action.bucket()))
        .with_mark(format!("xid_action:{}", recommended.bucket()))
        .with_mark(format!("xid_judged:{}", s.judged.as_str()))
        .with_runbook(runbook(entity, s))
}

fn runbook(entity: &str, s: &Summary) -> String {
    let gpu = crate::shell::quote(entity);
    let index = entity.rsplit("/gpu").next().unwrap_or("0");
    let code = s.top;
    let look = "`dmesg -T | grep -i xid` for its pid, process and neighbours (NVIDIA's Xid catalog: docs.nvidia.com/deploy/xid-errors)";
    match s.judged {
        Judged::Application => {
            let who: Vec<&str> = s.who.iter().map(|(_, w)| w.as_str()).collect();
            format!(
                "XID {code} on {gpu}: the application crashed ({}); tell the job's owner: their process faulted (an application or CUDA bug: an illegal address, a bad kernel; `compute-sanitizer` finds it); the GPU is healthy and stays in service; {look}",
                who.join(", ")
            )
        }
        Judged::ApplicationUnknown => format!(
            "XID {code} on {gpu} named no process: find the job that used this GPU then (the scheduler, `nvidia-smi --query-compute-apps=pid,process_name --format=csv`) and tell its owner; the kernel-log source attributes XIDs to jobs; on this alone the GPU stays in service; {look}"
        ),
        Judged::HardwareSuspected => format!(
            "XID {code} on {gpu} for unrelated jobs: suspect the GPU: drain its jobs, run `dcgmi diag -r 3 -i {index}`, reset it (`nvidia-smi -r -i {index}`); if it recurs for other jobs after the reset, RMA; {look}"
        ),
        Judged::Hardware if code == 94 => format!(
            "XID 94 on {gpu}: a contained memory error: restart the application that met it; the GPU keeps running; a row remap is pending until the next reset (`nvidia-smi -q -d ROW_REMAPPER -i {index}`): reset it at its next drain; {look}"
        ),
        Judged::Hardware => format!(
            "XID {code} on {gpu}: {}; {look}, `nvidia-smi -q -i {index}`",
            s.action.what_to_do()
        ),
    }
}

/// Whether an SXid's message says it is fatal (the driver writes
/// `Fatal` or `Non-fatal` after the code).
fn fatal(detail: &str) -> bool {
    let d = detail.to_ascii_lowercase();
    d.contains("fatal") && !d.contains("non-fatal") && !d.contains("nonfatal")
}

/// The incident of one NVSwitch's SXid episode, on the switch tray, naming
/// the node's GPUs.
pub(super) fn sxid(entity: &str, s: &Summary, gpus: &[String], jobs: &[String]) -> Finding {
    let host = vocab::entity::host_of(entity);
    let pci = entity.rsplit('/').next().unwrap_or(entity);
    let any_fatal = s.codes.values().any(|(_, d)| fatal(d));
    let mut f = Finding::new(IncidentKind::NvswitchSxid, entity, if any_fatal { 0.9 } else { 0.7 })
        .with_evidence_list(codes_evidence(s, true))
        .with_evidence(if gpus.is_empty() {
            format!("the GPUs behind it: unknown (no GPU of {host} has reported yet)")
        } else {
            format!(
                "the GPUs behind it: {} (the window does not say which GPUs hang off which NVSwitch: the node's GPUs are named)",
                gpus.join(", ")
            )
        })
        .with_jobs(jobs)
        .with_mark(format!("sxid:{}", if any_fatal { "fatal" } else { "non_fatal" }));
    if any_fatal {
        // The GPUs and NVSwitches of the node are reset (the severity
        // table reads this as a hardware action).
        f = f.with_mark("xid_action:RESET_GPU".into());
    }
    for (c, (n, _)) in s.codes {
        f = f.with_mark(format!("sxid:{c}"));
        if let Some(d) = decade(*n) {
            f = f.with_mark(format!("sxid:{c}:{d}+"));
        }
    }
    let shown = crate::shell::quote(host);
    let pci_q = crate::shell::quote(pci);
    f.with_runbook(if any_fatal {
        format!("fatal SXid on NVSwitch {pci_q} of {shown}: drain the node's GPUs, then reset its GPUs and NVSwitches (`nvidia-smi -r`, or reboot the node) and check the fabric manager (`systemctl status nvidia-fabricmanager`, `journalctl -u nvidia-fabricmanager`); `dmesg -T | grep -i sxid` for the link it names; if it recurs, the switch tray needs service")
    } else {
        format!("non-fatal SXid on NVSwitch {pci_q} of {shown}: the fabric keeps running; `dmesg -T | grep -i sxid` for the link it names and `journalctl -u nvidia-fabricmanager`; watch for a repeat or a fatal SXid, and the NVLink errors of the GPUs behind it")
    })
}
