//! XIDs judged application or hardware ([`super::xid`]): a crash loop
//! stays the application's, unrelated jobs failing on one GPU escalate,
//! follow-ons raise nothing alone, bursts are one finding with a count,
//! SXids land on the switch tray.
use super::*;
use proto::v1::Event;

const T0: i64 = 1_800_000_000_000;

/// An XID event on `h1/gpu<gpu>`, met by `who` (job, process, uid) when
/// given, from the kernel log; from NVML alone (no pid) when not.
fn ev(gpu: u32, code: i64, who: Option<(&str, &str, u32)>) -> Event {
    let mut e = Event {
        kind: vocab::EventKind::GpuXid.to_string(),
        entity: format!("h1/gpu{gpu}"),
        detail: format!("Xid {code}"),
        code,
        source: "nvml".into(),
        ..Default::default()
    };
    if let Some((job, process, uid)) = who {
        e.pid = 4242;
        e.job = job.into();
        e.process = process.into();
        e.uid = Some(uid);
        e.source = "kmsg".into();
    }
    e
}

/// A 10-second window of h1 ending at `ms` with 8 GPUs and `events`.
fn win(ms: i64, events: Vec<Event>) -> Window {
    Window {
        start_unix_ms: ms - 10_000,
        end_unix_ms: ms,
        gpus: (0..8)
            .map(|i| GpuSample {
                index: i,
                uuid: format!("GPU-{i}"),
                ..GpuSample::default()
            })
            .collect(),
        events: events
            .into_iter()
            .map(|mut e| {
                e.unix_ms = ms;
                e
            })
            .collect(),
        ..Window::default()
    }
}

fn xids(f: &[Finding]) -> Vec<&Finding> {
    f.iter()
        .filter(|f| matches!(f.kind.as_str(), "gpu_xid" | "app_xid" | "nvswitch_sxid"))
        .collect()
}

fn has_mark(f: &Finding, m: &str) -> bool {
    f.marks.iter().any(|x| x == m)
}

/// No GPU reset, node drain or reboot in what an application's incident
/// tells the operator.
fn no_hardware_action(f: &Finding) {
    for bad in ["nvidia-smi -r", "drain", "reboot", "RESET_GPU", "RMA"] {
        assert!(!f.runbook.contains(bad), "{bad} in {}", f.runbook);
    }
}

#[test]
fn a_gpu_off_the_bus_and_an_application_fault_get_different_actions() {
    let mut d = GpuDetector::default();
    let bus = d
        .observe("h1", &win(T0, vec![ev(0, 79, None)]), &[])
        .remove(0);
    let app = d.observe(
        "h1",
        &win(T0, vec![ev(1, 13, Some(("j1", "python3", 1000)))]),
        &[],
    );
    let app = xids(&app)
        .into_iter()
        .find(|f| f.entity == "h1/gpu1")
        .unwrap();
    assert_eq!(bus.kind.as_str(), "gpu_xid");
    assert!(
        bus.evidence[0].starts_with("XID 79 (GPU has fallen off the bus) ×1"),
        "{bus:?}"
    );
    assert!(
        bus.runbook.contains("drain the node and reboot it"),
        "{}",
        bus.runbook
    );
    assert!(has_mark(&bus, "xid_action:RESTART_BM") && has_mark(&bus, "xid_judged:hardware"));
    assert_eq!(app.kind.as_str(), "app_xid");
    assert!(has_mark(app, "xid_action:RESTART_APP") && has_mark(app, "xid_judged:application"));
    assert!(
        app.runbook
            .contains("the application crashed (job j1 (python3, uid 1000))"),
        "{}",
        app.runbook
    );
    assert_eq!(app.jobs, vec!["j1".to_string()]);
    no_hardware_action(app);
    assert!(bus.confidence > app.confidence);
    // An uncatalogued code says so, and is not blamed on a job.
    let odd = d.observe(
        "h1",
        &win(T0 + 10_000, vec![ev(3, 1, Some(("j1", "python3", 1000)))]),
        &[],
    );
    let odd = odd.iter().find(|f| f.entity == "h1/gpu3").unwrap();
    assert!(
        odd.evidence[0].contains("not in NVIDIA's Xid catalog"),
        "{odd:?}"
    );
    assert_eq!(odd.kind.as_str(), "gpu_xid");
}

/// XID 13 × 20 in ten minutes from one job on one GPU (was: escalated to
/// `RESET_GPU` at the third): the application's all along.
#[test]
fn a_crash_loop_of_one_job_stays_the_applications() {
    let mut d = GpuDetector::default();
    let mut last = None;
    for k in 0..60 {
        // 10-second windows; an XID 13 every 30 s (20 in 10 minutes).
        let events = if k % 3 == 0 {
            vec![
                ev(2, 13, Some(("train-7", "python3", 1000))),
                ev(2, 45, Some(("train-7", "python3", 1000))),
            ]
        } else {
            vec![]
        };
        let f = d.observe("h1", &win(T0 + k * 10_000, events), &[]);
        let f = xids(&f);
        assert_eq!(f.len(), 1, "window {k}: one finding while the loop lives");
        assert_eq!(f[0].kind.as_str(), "app_xid", "window {k}: {:?}", f[0]);
        assert!(!has_mark(f[0], "xid_judged:hardware_suspected"));
        no_hardware_action(f[0]);
        last = Some(f[0].clone());
    }
    let last = last.unwrap();
    assert!(
        last.evidence[0].starts_with("XID 13 (Graphics Engine Exception) ×20 between"),
        "{:?}",
        last.evidence
    );
    assert!(
        last.evidence
            .iter()
            .any(|e| e.starts_with("followed by XID 45 ×20")),
        "{:?}",
        last.evidence
    );
    assert!(
        last.evidence
            .iter()
            .any(|e| e.contains("only job train-7 (python3, uid 1000) met XID 13")),
        "{:?}",
        last.evidence
    );
    // 600 s (xid_hold_s) after the last XID the episode ends.
    let quiet = d.observe("h1", &win(T0 + 570_000 + 600_001, vec![]), &[]);
    assert!(xids(&quiet).is_empty(), "{quiet:?}");
}

/// The same code from three unrelated jobs on one GPU: hardware suspected
/// from the second, the jobs named.
#[test]
fn unrelated_jobs_failing_on_one_gpu_escalate() {
    let mut d = GpuDetector::default();
    let jobs = [
        ("a-1", "python3", 1000),
        ("b-2", "lmp", 2000),
        ("c-3", "python3", 3000),
    ];
    let mut got = Vec::new();
    for (k, who) in jobs.iter().enumerate() {
        let f = d.observe(
            "h1",
            &win(T0 + k as i64 * 300_000, vec![ev(5, 31, Some(*who))]),
            &[],
        );
        got.push(xids(&f)[0].clone());
    }
    assert_eq!(got[0].kind.as_str(), "app_xid");
    assert_eq!(got[1].kind.as_str(), "gpu_xid");
    let f = &got[2];
    assert_eq!(f.kind.as_str(), "gpu_xid");
    assert!(
        has_mark(f, "xid_judged:hardware_suspected"),
        "{:?}",
        f.marks
    );
    assert!(
        has_mark(f, "xid_catalog:RESTART_APP") && has_mark(f, "xid_action:RESET_GPU"),
        "the catalogue's action stays exposed beside the recommendation"
    );
    let why = f
        .evidence
        .iter()
        .find(|e| e.starts_with("hardware suspected"))
        .unwrap();
    assert!(
        why.contains("for 3 unrelated jobs")
            && why.contains("job a-1")
            && why.contains("job b-2")
            && why.contains("job c-3"),
        "{why}"
    );
    assert!(
        f.runbook.contains("nvidia-smi -r -i 5") && f.runbook.contains("dcgmi diag"),
        "{}",
        f.runbook
    );
    assert_eq!(f.jobs, vec!["a-1".to_string(), "b-2".into(), "c-3".into()]);
    // Another GPU is not touched.
    let other = d.observe(
        "h1",
        &win(T0 + 900_000, vec![ev(6, 31, Some(("d-4", "x", 4000)))]),
        &[],
    );
    assert_eq!(
        other
            .iter()
            .find(|f| f.entity == "h1/gpu6")
            .unwrap()
            .kind
            .as_str(),
        "app_xid"
    );
}

/// One user's resubmitted script (new job ids, one executable, one uid) is
/// related: still the application's. A job whose fault follows it to other
/// GPUs does not count against this one.
#[test]
fn related_jobs_and_a_fault_that_follows_its_job_stay_the_applications() {
    let mut d = GpuDetector::default();
    for k in 0..4 {
        let job = format!("sweep-{k}");
        let f = d.observe(
            "h1",
            &win(
                T0 + k * 60_000,
                vec![ev(0, 13, Some((&job, "python3", 1000)))],
            ),
            &[],
        );
        assert_eq!(xids(&f)[0].kind.as_str(), "app_xid", "{f:?}");
    }
    let mut d = GpuDetector::default();
    // Job m-1 crashes on GPUs 1, 2 and 3; then job n-2 (another user) on 1.
    let crash: Vec<Event> = (1..4)
        .map(|g| ev(g, 13, Some(("m-1", "bad", 1000))))
        .collect();
    d.observe("h1", &win(T0, crash), &[]);
    let f = d.observe(
        "h1",
        &win(T0 + 60_000, vec![ev(1, 13, Some(("n-2", "good", 2000)))]),
        &[],
    );
    let g1 = f.iter().find(|f| f.entity == "h1/gpu1").unwrap();
    assert_eq!(g1.kind.as_str(), "app_xid", "{g1:?}");
    // GPU 3 met it last: by then it had followed the job to 3 GPUs.
    let g3 = f.iter().find(|f| f.entity == "h1/gpu3").unwrap();
    assert!(
        g3.evidence
            .iter()
            .any(|e| e.contains("met XID 13 on 3 GPUs") && e.contains("it follows the job")),
        "{:?}",
        g3.evidence
    );
}

/// 200 cancelled jobs: each an XID 43 and 45 (a killed process's channel
/// stopped, cleaned up), on all 8 GPUs: nothing.
#[test]
fn cancelled_jobs_raise_nothing() {
    let mut d = GpuDetector::default();
    for k in 0..200u32 {
        let job = format!("cancel-{k}");
        let who = Some((job.as_str(), "python3", 1000 + k));
        let f = d.observe(
            "h1",
            &win(
                T0 + i64::from(k) * 20_000,
                vec![ev(k % 8, 43, who), ev(k % 8, 45, who)],
            ),
            &[],
        );
        assert!(xids(&f).is_empty(), "job {k}: {f:?}");
    }
    // An XID 45 alone, without attribution: nothing either.
    let f = d.observe("h1", &win(T0 + 5_000_000, vec![ev(0, 45, None)]), &[]);
    assert!(xids(&f).is_empty());
}

/// NVML-only XIDs (no pid): application-unknown however many.
#[test]
fn unattributed_application_xids_are_never_escalated_on_counts() {
    let mut d = GpuDetector::default();
    for k in 0..30 {
        let f = d.observe(
            "h1",
            &win(T0 + k * 60_000, vec![ev(4, 13, None)]),
            &["j9".to_string()],
        );
        let f = xids(&f)[0].clone();
        assert_eq!(f.kind.as_str(), "app_xid");
        assert!(
            has_mark(&f, "xid_judged:application_unknown"),
            "{:?}",
            f.marks
        );
        no_hardware_action(&f);
        assert!(f.jobs.is_empty(), "no job named without attribution");
    }
}

/// 94 (contained: restart the application) and 95 (uncontained: reset).
#[test]
fn contained_and_uncontained_memory_errors_act_differently() {
    let mut d = GpuDetector::default();
    let f = d.observe(
        "h1",
        &win(
            T0,
            vec![
                ev(0, 94, Some(("j", "p", 1))),
                ev(1, 95, Some(("j", "p", 1))),
            ],
        ),
        &[],
    );
    let c = f.iter().find(|f| f.entity == "h1/gpu0").unwrap();
    let u = f.iter().find(|f| f.entity == "h1/gpu1").unwrap();
    assert_eq!((c.kind.as_str(), u.kind.as_str()), ("gpu_xid", "gpu_xid"));
    assert!(has_mark(c, "xid_action:RESTART_APP") && has_mark(c, "xid_judged:hardware"));
    assert!(
        c.runbook.contains("restart the application") && !c.runbook.contains("nvidia-smi -r"),
        "{}",
        c.runbook
    );
    assert!(has_mark(u, "xid_action:RESET_GPU"));
    assert!(
        u.runbook.contains("reset it (`nvidia-smi -r`)"),
        "{}",
        u.runbook
    );
}

/// 10,000 XID 95 events in one window, and one event with count 10,000:
/// one finding with the count each.
#[test]
fn a_burst_is_one_finding_with_a_count() {
    for events in [vec![ev(3, 95, None); 10_000], {
        let mut e = ev(3, 95, None);
        e.count = 10_000;
        vec![e]
    }] {
        let mut d = GpuDetector::default();
        let f = d.observe("h1", &win(T0, events), &[]);
        let f = xids(&f);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].evidence[0].starts_with("XID 95 (Uncontained memory error) ×10000"),
            "{:?}",
            f[0].evidence
        );
    }
}

/// An SXid: an incident on the switch tray naming the node's GPUs.
#[test]
fn an_sxid_is_an_incident_on_the_switch_tray() {
    let mut d = GpuDetector::default();
    let e = Event {
        kind: vocab::EventKind::NvswitchSxid.to_string(),
        entity: vocab::entity::nvswitch("h1", "0000:07:00.0"),
        detail: "Fatal, Link 32 egress non-posted PRIV error".into(),
        code: 12028,
        source: "kmsg".into(),
        ..Default::default()
    };
    let f = d.observe("h1", &win(T0, vec![e]), &[]);
    let f = xids(&f);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].kind.as_str(), f[0].entity.as_str()),
        ("nvswitch_sxid", "h1/nvswitch/0000:07:00.0")
    );
    let gpus = f[0]
        .evidence
        .iter()
        .find(|e| e.starts_with("the GPUs behind it"))
        .unwrap();
    assert!(
        gpus.contains("h1/gpu0, h1/gpu1")
            && gpus.contains("h1/gpu7")
            && gpus.contains("the node's GPUs are named"),
        "{gpus}"
    );
    assert!(has_mark(f[0], "sxid:fatal") && has_mark(f[0], "sxid:12028"));
    assert!(
        f[0].runbook.contains("nvidia-fabricmanager"),
        "{}",
        f[0].runbook
    );
    // Another host cannot name h1's switch through its own window.
    let mut e2 = Event {
        kind: vocab::EventKind::NvswitchSxid.to_string(),
        entity: "h1/nvswitch/0000:08:00.0".into(),
        code: 1,
        ..Default::default()
    };
    e2.detail = "Non-fatal".into();
    assert!(xids(&d.observe("h2", &win(T0, vec![e2]), &[])).is_empty());
}

/// XID state stays bounded: 64 entities a host; hosts forgotten.
#[test]
fn xid_state_is_bounded_and_forgotten() {
    let mut d = GpuDetector::default();
    let events: Vec<Event> = (0..500).map(|g| ev(g, 79, None)).collect();
    let f = d.observe("h1", &win(T0, events), &[]);
    assert_eq!(xids(&f).len(), 64);
    assert_eq!(d.xid.tracked().0, 64);
    d.forget_hosts(&["h1".to_string()].into_iter().collect());
    assert_eq!(d.xid.tracked().0, 0);
}
