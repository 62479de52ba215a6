//! XIDs through the whole engine (issue 48): a crash loop is one
//! application incident and never a reset; one GPU failing unrelated jobs
//! escalates (same incident); cancelled jobs' XID 43/45 raise nothing;
//! an XID 95 burst is one incident within the engine's time budget; an
//! SXid is an incident on the switch tray naming the node's GPUs.
use std::time::{Duration, Instant};

use crate::common;

use correlator::engine::{DetectConfig, Engine};
use proto::v1::{CandidateUpdate, Event, GpuSample, Window};

const T0: i64 = 1_800_000_000_000;

/// A 10-second window of `host` with 8 healthy GPUs and `events`.
fn win(host: &str, seq: u64, events: Vec<Event>) -> Window {
    let end = T0 + seq as i64 * 10_000;
    let mut w = common::window(host, seq, end);
    w.start_unix_ms = end - 10_000;
    w.gpus = (0..8)
        .map(|i| GpuSample {
            index: i,
            uuid: format!("GPU-{host}-{i}"),
            temp_c: Some(60),
            sm_clock_mhz: Some(1980),
            sm_clock_max_mhz: Some(1980),
            ..GpuSample::default()
        })
        .collect();
    w.events = events
        .into_iter()
        .map(|mut e| {
            e.unix_ms = end - 1;
            e
        })
        .collect();
    w
}

/// XID `code` on `host`/gpu`gpu`, from the kernel log with its job.
fn xid(host: &str, gpu: u32, code: i64, job: &str, process: &str, uid: u32) -> Event {
    Event {
        kind: "gpu_xid".into(),
        entity: format!("{host}/gpu{gpu}"),
        detail: format!("NVRM: Xid (PCI:0000:3b:00): {code}, pid=4242, name={process}"),
        code,
        pid: 4242,
        process: process.into(),
        job: job.into(),
        uid: Some(uid),
        source: "kmsg".into(),
        ..Event::default()
    }
}

fn of_kinds<'a>(u: &'a [CandidateUpdate], kinds: &[&str]) -> Vec<&'a CandidateUpdate> {
    u.iter()
        .filter(|u| kinds.contains(&u.kind.as_str()))
        .collect()
}

const XID_KINDS: &[&str] = &["gpu_xid", "app_xid", "nvswitch_sxid"];

fn no_hardware_action(u: &CandidateUpdate) {
    for bad in ["nvidia-smi -r", "drain", "reboot", "RESET_GPU", "RMA"] {
        assert!(!u.runbook.contains(bad), "{bad} in {}", u.runbook);
    }
}

/// XID 13 × 20 in ten minutes (one every 30 s, each with its XID 45
/// clean-up) from one job on one GPU: one `app_xid` incident, opened
/// once, never escalated, never a reset; it resolves once the loop stops.
#[test]
fn a_crash_loop_is_one_application_incident() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut all = Vec::new();
    for k in 0..150u64 {
        let ev = if k % 3 == 0 && k < 60 {
            vec![
                xid("n1", 2, 13, "train-7", "python3", 1000),
                xid("n1", 2, 45, "train-7", "python3", 1000),
            ]
        } else {
            vec![]
        };
        all.extend(e.ingest(&win("n1", k + 1, ev)));
    }
    let u = of_kinds(&all, XID_KINDS);
    let states: Vec<(&str, &str)> = u
        .iter()
        .map(|u| (u.state.as_str(), u.kind.as_str()))
        .collect();
    // Updated once, when the count reached 10 (its evidence refreshed);
    // never escalated; resolved 10 minutes (xid_hold_s) and the quiet
    // period after the loop stopped.
    assert_eq!(
        states,
        [
            ("opened", "app_xid"),
            ("updated", "app_xid"),
            ("resolved", "app_xid")
        ],
        "{u:#?}"
    );
    assert!(u.iter().all(|x| x.incident_id == u[0].incident_id));
    let opened = u[0];
    assert!(u.iter().all(|x| x.severity == "warning"), "{u:#?}");
    assert_eq!(opened.entity, "n1/gpu2");
    assert_eq!(opened.affected_jobs, vec!["train-7".to_string()]);
    assert!(
        opened
            .runbook
            .contains("the application crashed (job train-7 (python3, uid 1000))"),
        "{}",
        opened.runbook
    );
    no_hardware_action(opened);
    // The update counts the loop (10 by then) and its folded clean-ups.
    let last = u[1];
    assert!(
        last.evidence[0].starts_with("XID 13 (Graphics Engine Exception) ×10 "),
        "{:?}",
        last.evidence
    );
    assert!(
        last.evidence
            .iter()
            .any(|e| e.starts_with("followed by XID 45 ×10 ")),
        "{:?}",
        last.evidence
    );
    for x in &u {
        no_hardware_action(x);
    }
}

/// One GPU meeting XID 31 for three unrelated jobs (other executables and
/// users), ten minutes apart: the application incident of the first
/// becomes the GPU's (same incident, `updated` to `gpu_xid`) naming all.
#[test]
fn one_gpu_failing_unrelated_jobs_escalates() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let jobs = [
        ("a-1", "python3", 1000),
        ("b-2", "lmp", 2000),
        ("c-3", "namd2", 3000),
    ];
    let mut all = Vec::new();
    for k in 0..120u64 {
        let ev = match k {
            0 | 60 | 119 => {
                let (j, p, u) = jobs[(k / 59) as usize];
                vec![xid("n1", 5, 31, j, p, u)]
            }
            _ => vec![],
        };
        all.extend(e.ingest(&win("n1", k + 1, ev)));
    }
    let u = of_kinds(&all, XID_KINDS);
    let states: Vec<(&str, &str)> = u
        .iter()
        .map(|u| (u.state.as_str(), u.kind.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("opened", "app_xid"),
            ("updated", "gpu_xid"),
            ("updated", "gpu_xid")
        ],
        "{u:#?}"
    );
    assert!(u
        .iter()
        .all(|x| x.incident_id == u[0].incident_id && x.entity == "n1/gpu5"));
    assert_eq!(u[0].severity, "warning");
    assert_eq!(u[1].severity, "critical");
    let last = u[2];
    let why = last
        .evidence
        .iter()
        .find(|e| e.starts_with("hardware suspected"))
        .unwrap();
    assert!(why.contains("for 3 unrelated jobs"), "{why}");
    for j in ["a-1", "b-2", "c-3"] {
        assert!(
            last.affected_jobs.contains(&j.to_string()),
            "{j}: {:?}",
            last.affected_jobs
        );
    }
    assert!(
        last.runbook.contains("nvidia-smi -r -i 5"),
        "{}",
        last.runbook
    );
}

/// 200 jobs cancelled one after another across 8 GPUs: each leaves an
/// XID 43 and an XID 45; none raises anything.
#[test]
fn cancelled_jobs_raise_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut all = Vec::new();
    for k in 0..200u32 {
        let job = format!("cancel-{k}");
        let g = k % 8;
        let ev = vec![
            xid("n1", g, 43, &job, "python3", 1000 + k % 7),
            xid("n1", g, 45, &job, "python3", 1000 + k % 7),
        ];
        all.extend(e.ingest(&win("n1", u64::from(k) + 1, ev)));
    }
    assert!(of_kinds(&all, XID_KINDS).is_empty(), "{all:#?}");
}

/// An XID 95 burst: 10,000 events in one window (the default per-window
/// cap judges 1,024 of them and counts the rest as dropped), 10,000 with
/// the cap raised, and one event with count 10,000: one incident each,
/// within the engine's budget (debug build: under 2 s of engine time for
/// the window, as `engine_budget.rs` allows a 60,000-job window).
#[test]
fn an_xid_95_burst_is_one_incident_within_budget() {
    let _turn = tests::one_file_at_a_time(file!());
    let burst = |n: usize, count: u64| {
        let mut x = xid("n1", 3, 95, "", "", 0);
        x.pid = 0;
        x.uid = None;
        x.count = count;
        vec![x; n]
    };
    let mut raised = DetectConfig::default();
    raised.limits.max_events_per_window = 10_000;
    for (cfg, events, shown) in [
        (DetectConfig::default(), burst(10_000, 0), 1024),
        (raised, burst(10_000, 0), 10_000),
        (DetectConfig::default(), burst(1, 10_000), 10_000),
    ] {
        let mut e = Engine::new(&cfg, Default::default());
        e.ingest(&win("n1", 1, vec![]));
        let t = Instant::now();
        let u = e.ingest(&win("n1", 2, events));
        let took = t.elapsed();
        let mut later = Vec::new();
        for k in 3..10 {
            later.extend(e.ingest(&win("n1", k, vec![])));
        }
        let u = of_kinds(&u, XID_KINDS);
        assert_eq!(u.len(), 1, "{u:#?}");
        assert_eq!(
            (u[0].state.as_str(), u[0].kind.as_str()),
            ("opened", "gpu_xid")
        );
        let want = format!("XID 95 (Uncontained memory error) ×{shown} ");
        assert!(u[0].evidence[0].starts_with(&want), "{:?}", u[0].evidence);
        assert!(
            of_kinds(&later, XID_KINDS).is_empty(),
            "no updates: {later:#?}"
        );
        assert!(took < Duration::from_secs(2), "{took:?}");
        eprintln!("burst of {shown}: {took:?}");
    }
}

/// An SXid on an NVSwitch: an incident on the switch tray naming the
/// node's GPUs.
#[test]
fn an_sxid_is_an_incident_on_the_switch_tray() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    e.ingest(&win("n1", 1, vec![]));
    let s = Event {
        kind: vocab::EventKind::NvswitchSxid.as_str().into(),
        entity: vocab::entity::nvswitch("n1", "0000:07:00.0"),
        detail: "Fatal, Link 32 egress non-posted PRIV error (First)".into(),
        code: 12028,
        source: "kmsg".into(),
        ..Event::default()
    };
    let u = e.ingest(&win("n1", 2, vec![s]));
    let u = of_kinds(&u, XID_KINDS);
    assert_eq!(u.len(), 1, "{u:#?}");
    assert_eq!(
        (u[0].kind.as_str(), u[0].entity.as_str()),
        ("nvswitch_sxid", "n1/nvswitch/0000:07:00.0")
    );
    let gpus = u[0]
        .evidence
        .iter()
        .find(|e| e.starts_with("the GPUs behind it"))
        .unwrap();
    let want: Vec<String> = (0..8).map(|i| format!("n1/gpu{i}")).collect();
    assert!(gpus.contains(&want.join(", ")), "{gpus}");
    assert!(u[0].runbook.contains("fatal SXid"), "{}", u[0].runbook);
    assert_eq!(u[0].severity, "critical");
}

/// NVML-only XID 13s (no pid), 30 of them in an hour: one application
/// incident (owner unknown), never escalated on counts alone.
#[test]
fn unattributed_xids_are_held_as_application_unknown() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut all = Vec::new();
    for k in 0..360u64 {
        let ev = if k % 12 == 0 {
            vec![Event {
                kind: "gpu_xid".into(),
                entity: "n1/gpu0".into(),
                code: 13,
                source: "nvml".into(),
                ..Event::default()
            }]
        } else {
            vec![]
        };
        all.extend(e.ingest(&win("n1", k + 1, ev)));
    }
    let u = of_kinds(&all, XID_KINDS);
    let states: Vec<(&str, &str)> = u
        .iter()
        .map(|u| (u.state.as_str(), u.kind.as_str()))
        .collect();
    // Updated once as the count reached 10, never escalated.
    assert_eq!(
        states,
        [("opened", "app_xid"), ("updated", "app_xid")],
        "{u:#?}"
    );
    assert!(u.iter().all(|x| x.incident_id == u[0].incident_id));
    assert!(
        u[0].evidence.iter().any(|e| e.contains("name no process")),
        "{:?}",
        u[0].evidence
    );
    for x in &u {
        no_hardware_action(x);
        assert!(x.affected_jobs.is_empty(), "{:?}", x.affected_jobs);
    }
}
