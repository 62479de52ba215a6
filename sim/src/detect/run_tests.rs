//! The XID rows' judgement of an incident's action, on updates written as
//! the engine writes them (before issue 48: `gpu_xid` escalated by count;
//! after: `app_xid` that becomes `gpu_xid`).
use proto::v1::CandidateUpdate;

use super::{Expect, Outcome, Watch};
use crate::{
    cluster::{Cluster, ClusterSpec, LinkRate, StorageMix},
    detect::grid::Scenario,
    faults,
};

const GPU: &str = "n001/gpu3";

fn update(kind: &str, state: &str, runbook: &str, severity: &str) -> CandidateUpdate {
    CandidateUpdate {
        incident_id: "inc-1".into(),
        state: state.into(),
        kind: kind.into(),
        entity: GPU.into(),
        runbook: runbook.into(),
        severity: severity.into(),
        ..CandidateUpdate::default()
    }
}

/// The engine before issue 48 on the third XID 13 within the hour: the
/// opening runbook kept, the escalation in the evidence, critical.
fn escalated(severity: &str) -> CandidateUpdate {
    let mut u = update("gpu_xid", "updated", OLD_APP, severity);
    u.evidence = vec![
        "XID 13 (Graphics Engine Exception; GPU-n001-3)".into(),
        "XID 13 3 times on this GPU within an hour: escalated to RESET_GPU (drain the GPU's jobs and reset it (`nvidia-smi -r`))".into(),
    ];
    u
}

/// The outcome of `spec` after `updates` (one per window from the onset).
fn judged(spec: &str, updates: &[CandidateUpdate]) -> Outcome {
    let mut c = Cluster::new(ClusterSpec {
        nodes: 2,
        ..ClusterSpec::default()
    });
    let fs = faults::parse_all(&[spec.to_string()], &c, 1).expect("spec");
    c.advance(&fs, 0.0);
    let s = Scenario {
        kind: "xid-crash-loop",
        confounder: false,
        window_s: 1.0,
        link_rate: LinkRate::Ndr,
        nodes: 2,
        utilisation: 0.5,
        storage: StorageMix::Nvme,
        seed: 1,
        noisy: false,
        otlp: true,
        inject: vec![spec.into()],
        onset_s: 0.0,
        max_windows: 10,
    };
    let f = &fs[0];
    let x = Expect {
        fault: Some(f),
        incident: f.expected(&c).map(|(k, e)| (k.to_string(), e)),
        aggressor: String::new(),
        class: f.kind.expected_class(),
    };
    let mut w = Watch::default();
    for (k, u) in updates.iter().enumerate() {
        w.observe(u, k as u64 + 1, &x, &c);
    }
    w.outcome(&s, x, &c, updates.len() as u64, 0.0)
}

const APP: &str = "XID 13 on n001/gpu3: the application crashed (job ft-debug); tell the job's owner; the GPU is healthy and stays in service";
/// Before issue 48: the third XID 13 within an hour escalated.
const ESCALATED: &str = "XID 13 on n001/gpu3: drain the GPU's jobs and reset it (`nvidia-smi -r`); `dmesg -T | grep -i xid`";
const OLD_APP: &str = "XID 13 on n001/gpu3: restart the application; the GPU is healthy (an application or CUDA bug); `dmesg -T | grep -i xid`";
const SUSPECT: &str = "XID 13 on n001/gpu3 for unrelated jobs: suspect the GPU: drain its jobs, run `dcgmi diag -r 3 -i 3`, reset it";

#[test]
fn a_crash_loop_that_pages_the_hardware_is_missed_and_a_false_alarm() {
    let spec = "xid-crash-loop@n001/gpu3";
    // Judged the application's throughout, at warning severity: detected.
    let o = judged(
        spec,
        &[
            update("app_xid", "opened", APP, "warning"),
            update("app_xid", "updated", APP, "warning"),
        ],
    );
    assert_eq!((o.detected_window, o.false_alarm_count), (Some(1), 0));
    assert!(!o.wrong_action);
    assert_eq!(o.updates_on_fault, 2);
    assert_eq!(o.severity_on_fault.as_deref(), Some("warning"));
    // The engine before issue 48: gpu_xid, escalated to a reset (in its
    // runbook, in its evidence alone, or by its severity alone).
    for last in [
        update("gpu_xid", "updated", ESCALATED, ""),
        escalated(""),
        update("gpu_xid", "updated", OLD_APP, "critical"),
    ] {
        let o = judged(spec, &[update("gpu_xid", "opened", OLD_APP, ""), last]);
        assert_eq!((o.detected_window, o.false_alarm_count), (None, 1));
        assert!(o.wrong_action);
    }
    // Its first XIDs, not yet escalated: not the application's incident
    // (another kind), not a page either.
    let o = judged(spec, &[update("gpu_xid", "opened", OLD_APP, "warning")]);
    assert_eq!((o.detected_window, o.false_alarm_count), (None, 0));
    // An application incident that becomes the GPU's, or pages critical.
    for last in [
        update("gpu_xid", "updated", SUSPECT, "warning"),
        update("app_xid", "updated", APP, "critical"),
    ] {
        let o = judged(spec, &[update("app_xid", "opened", APP, "warning"), last]);
        assert_eq!((o.detected_window, o.false_alarm_count), (None, 1));
    }
}

#[test]
fn a_bad_gpu_is_detected_when_its_incident_names_the_hardware() {
    let spec = "xid-bad-gpu@n001/gpu3";
    // Application first, then the same incident the GPU's.
    let o = judged(
        spec,
        &[
            update("app_xid", "opened", APP, "warning"),
            update("gpu_xid", "updated", SUSPECT, "warning"),
        ],
    );
    assert_eq!((o.detected_window, o.false_alarm_count), (Some(2), 0));
    assert_eq!(o.incidents_on_fault, 1);
    // Never escalated: missed, but no false alarm (the fault's own incident).
    let o = judged(spec, &[update("app_xid", "opened", APP, "warning")]);
    assert_eq!((o.detected_window, o.false_alarm_count), (None, 0));
    // The engine before issue 48: a reset once repeated.
    let o = judged(
        spec,
        &[
            update("gpu_xid", "opened", OLD_APP, ""),
            escalated("critical"),
        ],
    );
    assert_eq!((o.detected_window, o.false_alarm_count), (Some(2), 0));
}
