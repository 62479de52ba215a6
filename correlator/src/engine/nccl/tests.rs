//! Hangs, rank bounds, inferred steps and evidence of the NCCL detector.
use super::*;
use proto::v1::{NcclOpCount, Origin};

/// A 1 s window of `host` ending at `end` (ms) with these NCCL rows.
pub(in crate::engine) fn window(host: &str, end: i64, ranks: Vec<NcclRank>) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            ..Default::default()
        }),
        start_unix_ms: end - 1000,
        end_unix_ms: end,
        nccl: ranks,
        ..Default::default()
    }
}

fn rank(comm: &str, rank: i32, pid: u32, seq: u64, last: i64, interval: f64) -> NcclRank {
    NcclRank {
        comm: comm.into(),
        nranks: 4,
        rank,
        device: rank,
        pid,
        job: "train".into(),
        job_rank: Some(rank as u32),
        hcas: vec![format!("mlx5_{rank}")],
        ops: vec![NcclOpCount {
            op: "AllReduce".into(),
            calls: 100,
            bytes: 400,
        }],
        seq,
        last_unix_ms: last,
        interval_s: interval,
        init: "ncclCommInitRank".into(),
        ended: false,
        ..Default::default()
    }
}

#[test]
fn a_stopped_rank_is_named_once_everyone_waits() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let c = "00000000000000aa";
    // Healthy: 100 collectives/s on two hosts, two ranks each.
    for t in 1..=5i64 {
        let end = t * 1000;
        for (h, base) in [("a", 0), ("b", 2)] {
            let rows = (0..2)
                .map(|i| {
                    rank(
                        c,
                        base + i,
                        10 + (base + i) as u32,
                        100 * t as u64,
                        end - 5,
                        0.01,
                    )
                })
                .collect();
            let (f, _) = d.observe(h, &window(h, end, rows));
            assert!(f.is_empty(), "healthy at {t}: {f:?}");
        }
    }
    // Rank 3 (host b) stops at 500; the others reach 501 and wait.
    let mut found = Vec::new();
    for t in 6..=8i64 {
        let end = t * 1000;
        let a = vec![
            rank(c, 0, 10, 501, 5010, 0.0),
            rank(c, 1, 11, 501, 5010, 0.0),
        ];
        let b = vec![
            rank(c, 2, 12, 501, 5010, 0.0),
            rank(c, 3, 13, 500, 4995, 0.0),
        ];
        found.extend(d.observe("a", &window("a", end, a)).0);
        found.extend(d.observe("b", &window("b", end, b)).0);
        if !found.is_empty() {
            assert_eq!(t, 7, "silent 1.99 s at t=7 > bound max(20 x 10 ms, 1 s)");
            break;
        }
    }
    let f = &found[0];
    assert_eq!(f.kind.as_str(), "collective_hang");
    assert_eq!(f.entity, format!("b/nccl/{c}"));
    assert!(
        f.evidence
            .iter()
            .any(|e| e.starts_with("stalled rank 3 on b (pid 13, gpu 3, job train rank 3)")),
        "{f:?}"
    );
    assert!(!f.evidence.iter().any(|e| e.starts_with("stalled rank 0")));
    assert_eq!(f.jobs, vec!["train".to_string()]);
    // It moves again: the hang's entity is evaluated (to resolve it).
    let rows = vec![
        rank(c, 2, 12, 600, 9990, 0.01),
        rank(c, 3, 13, 600, 9990, 0.01),
    ];
    let (f, ev) = d.observe("b", &window("b", 10_000, rows));
    assert!(f.is_empty());
    assert_eq!(ev, vec![format!("b/nccl/{c}")]);
}

#[test]
fn ranks_are_bounded_over_all_communicators_and_counted() {
    let mut d = NcclDetector::new(NcclConfig {
        max_ranks_total: 10,
        ..NcclConfig::default()
    });
    // Three communicators of 4 ranks each: the third fits 2.
    for c in ["c1", "c2", "c3"] {
        let rows = (0..4)
            .map(|i| rank(c, i, 10 + i as u32, 5, 900, 0.1))
            .collect();
        d.observe("a", &window("a", 1000, rows));
    }
    assert_eq!(d.ranks, 10);
    assert_eq!(d.dropped, 2);
    // A host forgotten frees its ranks.
    d.forget_hosts(&HashSet::from(["a".to_string()]));
    assert_eq!(d.ranks, 0);
}

#[test]
fn all_ranks_silent_at_one_sequence_without_proof_below_is_not_a_hang() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let c = "00000000000000bb";
    for t in 1..=10i64 {
        let rows = (0..4)
            .map(|i| rank(c, i, 10 + i as u32, 500, 1000, 0.01))
            .collect();
        let (f, _) = d.observe("a", &window("a", t * 1000, rows));
        assert!(f.is_empty(), "a checkpoint pause at {t}: {f:?}");
    }
}

#[test]
fn inferred_steps_use_the_widest_communicator_and_yield_to_otlp() {
    let d = NcclDetector::new(NcclConfig::default());
    let mut wide = rank("w", 0, 10, 10, 1, 0.5);
    wide.nranks = 64;
    let mut tp = rank("t", 0, 10, 10, 1, 0.01);
    tp.nranks = 8;
    let w = window("a", 1000, vec![tp, wide]);
    let s = d.inferred_steps(&w);
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].seconds, s[0].hca.as_str()), (0.5, "mlx5_0"));
    assert_eq!(s[0].count, 100, "the window's collectives");
    // Point-to-point, one-sided and lifecycle calls are not the cadence.
    let mut busy = rank("w", 0, 10, 10, 1, 0.5);
    busy.nranks = 64;
    for op in ["Send", "PutSignal", "WaitSignal", "CommSuspend", "Gather"] {
        busy.ops.push(NcclOpCount {
            op: op.into(),
            calls: 7,
            bytes: 0,
        });
    }
    let s = d.inferred_steps(&window("a", 1000, vec![busy]));
    assert_eq!(s[0].count, 107, "AllReduce and Gather only");
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut w2 = window("a", 1000, vec![]);
    w2.steps.push(StepTime {
        job: "train".into(),
        ..Default::default()
    });
    d.observe("a", &w2);
    assert!(d.inferred_steps(&w).is_empty(), "OTLP wins");
}

#[test]
fn link_and_gpu_findings_name_the_communicators_crossing_them() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let rows = (0..2)
        .map(|i| rank("cc", i, 10 + i as u32, 5, 900, 0.1))
        .collect();
    d.observe("a", &window("a", 1000, rows));
    let mut f = vec![
        Finding::new(IncidentKind::IbLinkDegraded, "a/mlx5_1/1", 0.9),
        Finding::new(IncidentKind::GpuXid, "a/gpu0", 0.9),
        Finding::new(IncidentKind::IbLinkDegraded, "a/mlx5_7/1", 0.9),
    ];
    d.annotate(&mut f);
    assert!(
        f[0].evidence[0].contains("communicator cc")
            && f[0].evidence[0].ends_with("has rank 1 here"),
        "{:?}",
        f[0]
    );
    assert_eq!(f[0].jobs, vec!["train".to_string()]);
    assert!(f[1].evidence[0].ends_with("has rank 0 here"));
    assert!(f[2].evidence.is_empty() && f[2].jobs.is_empty());
}

#[test]
fn a_rank_seen_on_one_port_is_named_on_that_port_only() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut r = rank("pp", 0, 10, 5, 900, 0.1);
    r.hcas = vec!["mlx5_1/2".into()];
    d.observe("a", &window("a", 1000, vec![r]));
    let mut f = vec![
        Finding::new(IncidentKind::IbLinkDegraded, "a/mlx5_1/2", 0.9),
        Finding::new(IncidentKind::IbLinkDegraded, "a/mlx5_1/1", 0.9),
    ];
    d.annotate(&mut f);
    assert!(f[0].evidence[0].contains("communicator pp"), "{:?}", f[0]);
    assert!(f[1].evidence.is_empty(), "the HCA's other port: {:?}", f[1]);
    let s = d.inferred_steps(&window(
        "a",
        2000,
        vec![{
            let mut r = rank("pp", 0, 10, 6, 1900, 0.1);
            r.hcas = vec!["mlx5_1/2".into()];
            r
        }],
    ));
    assert_eq!(s[0].hca, "mlx5_1", "a step's HCA is the device");
}

#[test]
fn the_inspector_s_bandwidth_is_quoted_next_to_the_rank_on_that_gpu() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut w = window("a", 1000, vec![rank("cc", 1, 11, 5, 900, 0.1)]);
    let perf = |device: i32, op: &str, points: u32| NcclPerf {
        device,
        comm_name: "DP Group 0".into(),
        nranks: 4,
        op: op.into(),
        message_size: "4-5GB".into(),
        points,
        exec_us: 9498.47,
        busbw_gbs: 301.5,
        ..Default::default()
    };
    w.nccl_perf = vec![
        perf(1, "AllReduce", 40),
        perf(1, "AllGather", 2),
        perf(2, "AllReduce", 9),
    ];
    d.observe("a", &w);
    let mut f = vec![Finding::new(
        IncidentKind::IbLinkDegraded,
        "a/mlx5_1/1",
        0.9,
    )];
    d.annotate(&mut f);
    assert_eq!(f[0].evidence.len(), 2, "{:?}", f[0].evidence);
    assert_eq!(
        f[0].evidence[1],
        "NCCL Inspector on a GPU1: AllReduce 4-5GB at 301.5 GB/s bus bandwidth, 9.498 ms each (40 ops, 4 ranks, comm DP Group 0)"
    );
    d.forget_hosts(&["a".to_string()].into());
    assert!(d.perf.is_empty());
}

/// A communicator of 2,048 ranks (256 hosts × 8) that keeps issuing is not
/// walked at all (each verdict is O(ranks): per window that made a slot of
/// a 100,000-rank ring O(ranks²)); once one rank stops and the others wait,
/// the communicator is judged again and the hang found as before.
#[test]
fn a_moving_communicator_is_not_walked_and_a_stopped_one_still_is() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let c = "00000000000000bb";
    let host = |h: usize| format!("n{h:03}");
    let rows = |h: usize, seq: u64, last: i64| -> Vec<NcclRank> {
        (0..8)
            .map(|g| {
                let r = (h * 8 + g) as i32;
                let mut x = rank(c, r, 1000 + r as u32, seq, last, 0.01);
                x.nranks = 2048;
                x
            })
            .collect()
    };
    for t in 1..=5i64 {
        let end = t * 1000;
        for h in 0..256 {
            let (f, _) = d.observe(
                &host(h),
                &window(&host(h), end, rows(h, 100 * t as u64, end - 5)),
            );
            assert!(f.is_empty(), "healthy at {t}: {f:?}");
        }
    }
    assert_eq!(d.judged, 0, "every window's own ranks were moving");
    // Host n017 stops at 500; the others reach 501 and wait there.
    let mut found = Vec::new();
    for t in 6..=8i64 {
        let end = t * 1000;
        for h in 0..256 {
            let r = if h == 17 {
                rows(h, 500, 4995)
            } else {
                rows(h, 501, 5010)
            };
            found.extend(d.observe(&host(h), &window(&host(h), end, r)).0);
        }
        if !found.is_empty() {
            break;
        }
    }
    assert!(d.judged > 0);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind.as_str(), "collective_hang");
    assert_eq!(found[0].entity, format!("n017/nccl/{c}"));
}
