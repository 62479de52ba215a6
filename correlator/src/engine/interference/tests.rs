use proto::v1::{JobUsage, Origin, StepTime, Window};

use super::*;
use crate::engine::workload::{Place, Symptom};
use vocab::kind::IncidentKind;

/// A 10 s window of host n001 ending at `k`·10 s: the victim "train"
/// (team research) and the other job "etl" (team data) on nvme0n1, with
/// their mean requests in flight, and train's step time.
fn window(k: i64, train: f64, etl: f64, step_s: f64) -> Window {
    let row = |job: &str, team: &str, in_flight: f64| JobUsage {
        job: job.into(),
        team: team.into(),
        resource_kind: "storage".into(),
        resource: "nvme0n1".into(),
        io_device_ns: (in_flight * 10e9) as u64,
        // Requests of 1 MiB at a fixed 2 ms: bytes follow the time in flight.
        io_bytes: (in_flight * 10e9 / 2e6) as u64 * (1 << 20),
        resource_util: train + etl,
        ..JobUsage::default()
    };
    Window {
        origin: Some(Origin {
            hostname: "n001".into(),
            ..Origin::default()
        }),
        seq: k as u64,
        start_unix_ms: (k - 1) * 10_000,
        end_unix_ms: k * 10_000,
        usage: vec![row("train", "research", train), row("etl", "data", etl)],
        steps: vec![StepTime {
            job: "train".into(),
            rank: 3,
            seconds: step_s,
            count: 5,
            device: 3,
            hca: "mlx5_3".into(),
            ..StepTime::default()
        }],
        ..Window::default()
    }
}

fn slowdown(since_k: i64, ratio: f64) -> Symptom {
    Symptom {
        kind: IncidentKind::JobSlowdown,
        job: "train".into(),
        entity: "train".into(),
        line: format!("step time ×{ratio}"),
        ratio,
        since_ms: since_k * 10_000,
        places: vec![Place {
            host: "n001".into(),
            rank: 3,
            device: 3,
            hca: "mlx5_3".into(),
        }],
    }
}

/// Runs 20 healthy windows, then 10 of `after` (train load, etl load, step
/// time), with `symptom` from the 25th window on; returns the findings.
fn run(after: (f64, f64, f64), symptom: bool) -> Vec<Finding> {
    run_with(InterferenceConfig::default(), 30, after, symptom)
}

fn run_with(
    cfg: InterferenceConfig,
    windows: i64,
    after: (f64, f64, f64),
    symptom: bool,
) -> Vec<Finding> {
    let mut d = InterferenceDetector::new(cfg);
    let mut out = Vec::new();
    for k in 1..=windows {
        let (t, e, s) = if k <= 20 { (0.3, 0.2, 1.0) } else { after };
        let sy = if symptom && k >= 25 {
            vec![slowdown(20, 1.6)]
        } else {
            Vec::new()
        };
        out = d.observe("n001", &window(k, t, e, s), &sy);
    }
    out
}

#[test]
fn another_tenant_saturating_the_device_is_named_as_the_aggressor() {
    // etl's load ×8 takes the device to 1.8 requests in flight; train does
    // the same I/O per step, so its rate falls as its step time rises.
    let f = run((0.3 / 1.6, 1.6, 1.6), true);
    assert_eq!(f.len(), 1, "{f:#?}");
    let f = &f[0];
    assert_eq!((f.kind, f.entity.as_str()), (KIND, "n001/nvme0n1"));
    assert_eq!(f.jobs, ["train", "etl"]);
    let ev = f.evidence.join("\n");
    assert!(
        ev.contains("aggressor job etl (team data): load 0.20 → 1.60"),
        "{ev}"
    );
    assert!(ev.contains("victim job train (team research)"), "{ev}");
    assert!(ev.contains("saturated"), "{ev}");
    assert!(
        f.confidence >= 0.8 && f.confidence <= 0.9,
        "{}",
        f.confidence
    );
}

#[test]
fn the_victims_own_change_is_not_interference() {
    // train reads twice the data per step (same rate, steps 1.6× longer)
    // and saturates the device itself; etl is steady.
    assert!(run((0.9, 0.2, 1.6), true).is_empty());
    // etl jumps too, but train's per-step usage rose with its slowdown.
    assert!(run((0.6, 1.6, 1.6), true).is_empty());
}

#[test]
fn a_saturating_job_that_slows_no_one_raises_nothing() {
    assert!(run((0.3, 1.6, 1.0), false).is_empty());
}

#[test]
fn an_aggressor_that_does_not_saturate_the_resource_is_not_the_cause() {
    // etl doubles but the device stays below one request in flight.
    assert!(run((0.3 / 1.6, 0.5, 1.6), true).is_empty());
}

#[test]
fn a_resource_the_victim_does_not_use_is_not_judged() {
    let mut d = InterferenceDetector::new(InterferenceConfig::default());
    let mut f = Vec::new();
    for k in 1..=30 {
        let e = if k <= 20 { 0.2 } else { 1.6 };
        let mut w = window(k, 0.3, e, 1.0);
        w.usage.retain(|u| u.job == "etl");
        w.usage[0].resource_util = e;
        f = d.observe("n001", &w, &[slowdown(20, 1.6)]);
    }
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn a_regression_longer_than_the_history_keeps_its_baseline() {
    // 8 windows of history, 60 windows of interference: the medians before
    // the onset were frozen when the victim's symptom was first judged.
    let cfg = InterferenceConfig {
        history: 8,
        ..InterferenceConfig::default()
    };
    let f = run_with(cfg, 80, (0.3 / 1.6, 1.6, 1.6), true);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(
        f[0].evidence.join("\n").contains("load 0.20 → 1.60"),
        "{f:#?}"
    );
}

#[test]
fn a_host_reporting_thousands_of_jobs_fills_only_its_own_share_of_series() {
    let cfg = InterferenceConfig {
        max_series: 1000,
        max_series_per_host: 600,
        ..InterferenceConfig::default()
    };
    let mut d = InterferenceDetector::new(cfg);
    // n666 reports 2,000 jobs on one device.
    let mut flood = window(1, 0.3, 0.2, 1.0);
    flood.origin = Some(Origin {
        hostname: "n666".into(),
        ..Origin::default()
    });
    flood.usage = (0..2000)
        .map(|j| JobUsage {
            job: format!("j{j}"),
            resource_kind: "storage".into(),
            resource: "nvme0n1".into(),
            io_device_ns: 1000,
            resource_util: 0.5,
            ..JobUsage::default()
        })
        .collect();
    d.observe("n666", &flood, &[]);
    assert_eq!(d.dropped, 1400);
    // Another host's two series still fit (the old shared cap was full).
    d.observe("n001", &window(1, 0.3, 0.2, 1.0), &[]);
    assert_eq!(d.dropped, 1400, "n001's series kept");
    assert_eq!(d.series, 602);
    // Forgetting the flooding host frees its share.
    d.forget_hosts(&std::collections::HashSet::from(["n666".to_string()]));
    assert_eq!(d.series, 2);
}
