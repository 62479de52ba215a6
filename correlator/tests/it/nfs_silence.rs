//! A fault is not resolved by silence (issue 48 item 6): 8 hosts mount
//! filer1:/home (400 READs and 40 GETATTRs per 10 s window); the filer turns
//! 10x slower, then a wave of jobs stops all traffic to it for 10 minutes
//! (the hosts keep sending windows: their background revalidation is 5
//! GETATTRs a window, below `min_ops`, or nothing at all). Before, the
//! incident resolved 4 windows into the pause and a second one opened when
//! traffic came back to the same slow filer.
use correlator::engine::{DetectConfig, Engine};
use proto::v1::{CandidateUpdate, CudaProc, NfsOp, Origin, Window};

const LEN_MS: i64 = 10_000;
const T0: i64 = 1_700_000_000_000;
const HOSTS: usize = 8;
/// Slow from slot 6; the pause is slots 12..72 (10 minutes).
const SLOW_FROM: i64 = 6;
const PAUSE: std::ops::Range<i64> = 12..72;

/// What the hosts' mounts carry in a slot.
#[derive(Clone, Copy, PartialEq)]
enum Traffic {
    /// The jobs' I/O at `factor` × the healthy RTT.
    Busy(f64),
    /// 5 GETATTRs at `factor` × (revalidation while the jobs are gone).
    Idle(f64),
    /// No NFS rows at all.
    Silent,
}

fn window(i: usize, k: i64, t: Traffic) -> Window {
    let row = |op: &str, ops: u64, rtt: f64, factor: f64| NfsOp {
        server: "filer1".into(),
        export: "/home".into(),
        mountpoint: "/home".into(),
        fstype: "nfs4".into(),
        op: op.into(),
        ops,
        rtt_ms_sum: (ops as f64 * rtt * factor).round() as u64,
        exe_ms_sum: (ops as f64 * (rtt * factor + 0.1)).round() as u64,
        ..NfsOp::default()
    };
    let read_ms = 2.0 + 0.05 * i as f64;
    let (nfs, cuda) = match t {
        Traffic::Busy(f) => (
            vec![row("READ", 400, read_ms, f), row("GETATTR", 40, 0.3, f)],
            vec![CudaProc {
                job: format!("job-{}", i / 2),
                ..CudaProc::default()
            }],
        ),
        Traffic::Idle(f) => (vec![row("GETATTR", 5, 0.3, f)], Vec::new()),
        Traffic::Silent => (Vec::new(), Vec::new()),
    };
    Window {
        origin: Some(Origin {
            hostname: format!("n{i:03}"),
            ..Origin::default()
        }),
        seq: k as u64 + 1,
        start_unix_ms: T0 + k * LEN_MS,
        end_unix_ms: T0 + (k + 1) * LEN_MS,
        nfs,
        cuda,
        ..Window::default()
    }
}

/// `slots` slots of every host; `traffic(slot)` for all of them. The
/// `nfs_latency` updates with their slot.
fn run(
    cfg: &DetectConfig,
    slots: i64,
    traffic: impl Fn(i64) -> Traffic,
) -> Vec<(i64, CandidateUpdate)> {
    let mut e = Engine::new(cfg, Default::default());
    let mut out = Vec::new();
    for k in 0..slots {
        for i in 0..HOSTS {
            for u in e.ingest(&window(i, k, traffic(k))) {
                if u.kind == "nfs_latency" {
                    out.push((k, u));
                }
            }
        }
    }
    out
}

fn states(out: &[(i64, CandidateUpdate)], state: &str) -> Vec<i64> {
    out.iter()
        .filter(|(_, u)| u.state == state)
        .map(|(k, _)| *k)
        .collect()
}

fn ids(out: &[(i64, CandidateUpdate)]) -> std::collections::BTreeSet<String> {
    out.iter().map(|(_, u)| u.incident_id.clone()).collect()
}

/// Slow before and after the pause, healthy from `healthy_from`.
fn fault(pause: Traffic, healthy_from: i64) -> impl Fn(i64) -> Traffic {
    move |k| {
        if PAUSE.contains(&k) {
            pause
        } else if (SLOW_FROM..healthy_from).contains(&k) {
            Traffic::Busy(10.0)
        } else {
            Traffic::Busy(1.0)
        }
    }
}

#[test]
fn a_fault_across_a_ten_minute_pause_is_one_incident_resolved_by_healthy_traffic() {
    let _turn = tests::one_file_at_a_time(file!());
    for pause in [Traffic::Idle(10.0), Traffic::Silent] {
        // Still slow for 4 slots after the pause, healthy from slot 76.
        let out = run(&DetectConfig::default(), 90, fault(pause, 76));
        assert_eq!(states(&out, "opened"), [7], "{out:#?}");
        assert_eq!(ids(&out).len(), 1, "one incident: {out:#?}");
        assert!(out.iter().all(|(_, u)| u.entity == "nfs:filer1:/home"));
        // Resolved by the healthy traffic: 2 quiet windows and 30 s after
        // the last slow one (slot 75), not during the pause.
        assert_eq!(states(&out, "resolved"), [79], "{out:#?}");
    }
}

#[test]
fn a_fault_that_went_away_during_the_pause_resolves_once_traffic_is_healthy() {
    let _turn = tests::one_file_at_a_time(file!());
    for pause in [Traffic::Idle(1.0), Traffic::Silent] {
        let out = run(&DetectConfig::default(), 80, fault(pause, PAUSE.start));
        assert_eq!(states(&out, "opened"), [7], "{out:#?}");
        // At the first healthy slot after the pause: the windows of n000
        // and n001 are the 2 quiet windows (and 30 s have long passed).
        assert_eq!(states(&out, "resolved"), [72], "{out:#?}");
        assert_eq!(ids(&out).len(), 1);
    }
}

#[test]
fn a_pause_longer_than_the_horizon_resolves_after_it() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut cfg = DetectConfig::default();
    cfg.nfs.unobserved_hold_s = 300.0;
    for pause in [Traffic::Idle(10.0), Traffic::Silent] {
        let out = run(&cfg, 80, fault(pause, 76));
        // The last RPCs ended with slot 11 (at T0 + 120 s); the hold ends
        // 300 s later, with slot 41 (ending at T0 + 420 s), whose first two
        // host windows are the quiet period.
        let resolved = states(&out, "resolved");
        assert_eq!(resolved.first(), Some(&41), "{out:#?}");
        // Traffic back on a still slow filer is then a new incident, at its
        // first window (the hosts' slow streaks were not broken by silence).
        assert_eq!(states(&out, "opened"), [7, 72], "{out:#?}");
    }
}

#[test]
fn a_host_side_fault_across_the_pause_is_one_incident() {
    let _turn = tests::one_file_at_a_time(file!());
    // n003 alone 10x slower; every host pauses.
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut out = Vec::new();
    for k in 0..90 {
        for i in 0..HOSTS {
            let t = if PAUSE.contains(&k) {
                Traffic::Idle(if i == 3 { 10.0 } else { 1.0 })
            } else if i == 3 && (SLOW_FROM..76).contains(&k) {
                Traffic::Busy(10.0)
            } else {
                Traffic::Busy(1.0)
            };
            for u in e.ingest(&window(i, k, t)) {
                if u.kind == "nfs_latency" {
                    out.push((k, u));
                }
            }
        }
    }
    assert!(
        out.iter().all(|(_, u)| u.entity == "n003/nfs:filer1:/home"),
        "{out:#?}"
    );
    assert_eq!(states(&out, "opened"), [7], "{out:#?}");
    assert_eq!(ids(&out).len(), 1);
    // n003's own windows: healthy from slot 76, 30 s after its last slow
    // window (75) at slot 78.
    assert_eq!(states(&out, "resolved"), [78], "{out:#?}");
}

#[test]
fn the_horizon_is_a_checked_config_key() {
    let _turn = tests::one_file_at_a_time(file!());
    let c = correlator::config::parse("[detect.nfs]\nunobserved_hold_s = 600\n", "c.toml")
        .expect("valid");
    assert_eq!(c.nfs.unobserved_hold_s, 600.0);
    assert_eq!(DetectConfig::default().nfs.unobserved_hold_s, 3600.0);
    let e = correlator::config::parse("[detect.nfs]\nunobserved_hold_s = -1\n", "c.toml")
        .expect_err("negative");
    assert!(e.to_string().contains("nfs.unobserved_hold_s"), "{e}");
}
