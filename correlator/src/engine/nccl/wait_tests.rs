//! Every rank waiting at one sequence: hangs proven from below with their
//! culprit, pauses (checkpoint, evaluation, job end) that raise nothing,
//! and split communicators' rank and size.
use super::{tests::window, *};
use proto::v1::{BlockStat, CudaProc, Event, GpuSample, IbPort, NcclOpCount, Origin};

const C: &str = "00000000000000cc";
const HOSTS: [&str; 2] = ["a", "b"];

/// What the job does after its healthy first 5 s (every rank at collective 501).
#[derive(Clone, Copy, PartialEq)]
enum After {
    /// Rank 3's process exits; the others block and spin.
    DeadPeer,
    /// Port `b/mlx5_1/1` (rank 3's) goes down; everyone blocks and spins.
    PortDown,
    /// Everyone blocks and spins; nothing else to see.
    Unknown,
    /// GPU `b/gpu1` (rank 3's) reports XID 79; everyone blocks and spins.
    Xid,
    /// GPUs idle, the job writes, nothing blocks.
    Checkpoint,
    /// Kernels keep launching, GPUs busy, nothing blocks.
    Eval,
    /// Every rank's process exits.
    JobEnd,
}

fn row(rank: i32, t: i64, after: Option<After>) -> Option<NcclRank> {
    let end = t * 1000;
    let healthy = after.is_none();
    let exits = match after {
        Some(After::JobEnd) => true,
        Some(After::DeadPeer) => rank == 3,
        _ => false,
    };
    // The exit row comes once (at t = 6); then the rank has no rows.
    if exits && t > 6 {
        return None;
    }
    let blocks = matches!(
        after,
        Some(After::DeadPeer | After::PortDown | After::Unknown | After::Xid)
    ) && !exits;
    Some(NcclRank {
        comm: C.into(),
        nranks: 4,
        rank,
        device: rank % 2,
        pid: 10 + rank as u32,
        job: "train".into(),
        job_rank: Some(rank as u32),
        hcas: vec![format!("mlx5_{}/1", rank % 2)],
        ops: if healthy {
            vec![NcclOpCount {
                op: "AllReduce".into(),
                calls: 100,
                bytes: 400,
            }]
        } else {
            Vec::new()
        },
        seq: if healthy { 100 * t as u64 } else { 501 },
        last_unix_ms: if healthy { end - 5 } else { 5010 },
        interval_s: if healthy { 0.01 } else { 0.0 },
        init: "ncclCommInitRank".into(),
        exited: exits,
        blocked_call: if blocks {
            "cuStreamSynchronize".into()
        } else {
            String::new()
        },
        blocked_s: if blocks {
            (end - 5010) as f64 / 1000.0
        } else {
            0.0
        },
        ..Default::default()
    })
}

/// Host `h`'s window at second `t`.
fn host_window(h: usize, t: i64, after: Option<After>) -> Window {
    let host = HOSTS[h];
    let ranks: Vec<i32> = vec![2 * h as i32, 2 * h as i32 + 1];
    let nccl: Vec<NcclRank> = ranks.iter().filter_map(|&r| row(r, t, after)).collect();
    let alive = |r: i32| nccl.iter().any(|x| x.rank == r && !x.exited);
    let spin = matches!(
        after,
        Some(After::DeadPeer | After::PortDown | After::Unknown | After::Xid)
    );
    let gpus = ranks
        .iter()
        .map(|&r| GpuSample {
            index: (r % 2) as u32,
            util_gpu_pct: Some(match after {
                None | Some(After::Eval) => 97,
                Some(After::Checkpoint | After::JobEnd) => 0,
                _ if !alive(r) => 0,
                _ if spin => 100,
                _ => 0,
            }),
            ..Default::default()
        })
        .collect();
    let cuda = ranks
        .iter()
        .filter(|&&r| alive(r))
        .map(|&r| CudaProc {
            pid: 10 + r as u32,
            device: r % 2,
            job: "train".into(),
            launches: if matches!(after, None | Some(After::Eval)) {
                2400
            } else {
                0
            },
            ..Default::default()
        })
        .collect();
    // 12.5 GB/s per port while the job trains; nearly nothing after.
    let busy = after.is_none() || after == Some(After::Eval);
    let words = |t: i64| -> u64 {
        let secs = if busy { t } else { 5 };
        (5 + secs as u64) * 3_125_000_000
    };
    let ib_ports = (0..2)
        .map(|i| {
            let down = after == Some(After::PortDown) && h == 1 && i == 1;
            let mut counters = std::collections::HashMap::new();
            counters.insert("port_xmit_data".to_string(), words(t) + t as u64);
            counters.insert("port_rcv_data".to_string(), words(t));
            IbPort {
                hca: format!("mlx5_{i}"),
                port: 1,
                state: if down { 1 } else { 4 },
                counters,
                ..Default::default()
            }
        })
        .collect();
    let events = if after == Some(After::Xid) && h == 1 && t == 6 {
        vec![Event {
            unix_ms: 5500,
            kind: vocab::EventKind::GpuXid.as_str().into(),
            entity: vocab::entity::gpu(host, 1),
            code: 79,
            ..Default::default()
        }]
    } else {
        Vec::new()
    };
    let block = vec![BlockStat {
        device: "nvme0n1".into(),
        op: "write".into(),
        job: "train".into(),
        bytes: if after == Some(After::Checkpoint) {
            4_000_000_000
        } else {
            10_000_000
        },
        requests: 100,
        ..Default::default()
    }];
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            ..Default::default()
        }),
        start_unix_ms: t * 1000 - 1000,
        end_unix_ms: t * 1000,
        nccl,
        gpus,
        cuda,
        ib_ports: if after == Some(After::JobEnd) {
            Vec::new()
        } else {
            ib_ports
        },
        events,
        block,
        ..Default::default()
    }
}

/// Five healthy seconds, then `after` for `secs` seconds: every finding
/// with the second it came in.
fn run(after: After, secs: i64) -> Vec<(i64, Finding)> {
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut out = Vec::new();
    for t in 1..=5 + secs {
        let a = (t > 5).then_some(after);
        for (h, host) in HOSTS.iter().enumerate() {
            let (f, _) = d.observe(host, &host_window(h, t, a));
            out.extend(f.into_iter().map(|f| (t, f)));
        }
    }
    out
}

fn has(f: &Finding, prefix: &str) -> bool {
    f.evidence.iter().any(|e| e.starts_with(prefix))
}

#[test]
fn a_dead_peer_is_named_when_every_rank_waits() {
    let found = run(After::DeadPeer, 10);
    let (t, f) = found.first().expect("a hang");
    // Silent 1.99 s at t = 7 against a bound of max(20 x 10 ms, 1 s).
    assert_eq!(*t, 7);
    assert_eq!(f.kind.as_str(), "collective_hang");
    assert_eq!(f.entity, format!("b/nccl/{C}"));
    assert!(
        has(f, "culprit: rank 3 on b (pid 13, gpu 1, job train rank 3) exited while the others wait in collective 501"),
        "{:?}",
        f.evidence
    );
    assert!(
        has(
            f,
            &format!(
                "communicator {C}: every rank waits in collective 501 (AllReduce); 3 live rank(s)"
            )
        ),
        "{:?}",
        f.evidence
    );
    assert!(has(f, "below: 3/3 ranks inside a CUDA call that has not returned (cuStreamSynchronize for 2.0 s); 3/3 GPUs busy >= 90%"), "{:?}", f.evidence);
    // One entity for the whole hang.
    assert!(found.iter().all(|(_, g)| g.entity == f.entity));
}

#[test]
fn a_downed_port_in_the_footprint_is_the_culprit() {
    let found = run(After::PortDown, 4);
    let (t, f) = found.first().expect("a hang");
    assert_eq!(*t, 7);
    assert_eq!(f.entity, format!("b/nccl/{C}"));
    assert!(
        has(f, "culprit: port b/mlx5_1/1 of rank 3 on b (pid 13, gpu 1, job train rank 3) is down (state 1)"),
        "{:?}",
        f.evidence
    );
    // The ports' traffic collapsed (2 of 4 ports here: every port of both hosts).
    assert!(has(f, "below: 4/4 ranks"), "{:?}", f.evidence);
    assert!(
        f.evidence
            .iter()
            .any(|e| e.contains("4/4 HCA ports' traffic collapsed")),
        "{:?}",
        f.evidence
    );
}

#[test]
fn a_gpu_with_an_xid_is_the_culprit() {
    let found = run(After::Xid, 4);
    let (_, f) = found.first().expect("a hang");
    assert_eq!(f.entity, format!("b/nccl/{C}"));
    assert!(
        has(f, "culprit: GPU b/gpu1 of rank 3 on b"),
        "{:?}",
        f.evidence
    );
    assert!(f.evidence.iter().any(|e| e.ends_with("had XID 79")));
}

#[test]
fn an_open_link_incident_is_the_culprit() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let open = |k: &'static str, e: &str| k == "ib_link_degraded" && e == "a/mlx5_0/1";
    let mut found = Vec::new();
    for t in 1..=8 {
        let a = (t > 5).then_some(After::Unknown);
        for (h, host) in HOSTS.iter().enumerate() {
            found.extend(d.observe_with(host, &host_window(h, t, a), &open).0);
        }
    }
    let f = found.first().expect("a hang");
    assert_eq!(f.entity, format!("a/nccl/{C}"));
    assert!(has(f, "culprit: port a/mlx5_0/1 of rank 0 on a (pid 10, gpu 0, job train rank 0) has an open ib_link_degraded incident"), "{:?}", f.evidence);
}

#[test]
fn no_visible_cause_says_so() {
    let found = run(After::Unknown, 4);
    let (t, f) = found.first().expect("a hang");
    assert_eq!(*t, 7);
    assert_eq!(f.entity, format!("a/nccl/{C}"));
    assert!(has(
        f,
        "every rank waits in collective 501; no cause seen below"
    ));
    assert!(!f.evidence.iter().any(|e| e.starts_with("culprit:")));
    assert!(f.confidence < 0.8);
    // Moving again resolves it: the entity is evaluated.
    let mut d = NcclDetector::new(NcclConfig::default());
    for t in 1..=8 {
        let a = (t > 5).then_some(After::Unknown);
        for (h, host) in HOSTS.iter().enumerate() {
            d.observe(host, &host_window(h, t, a));
        }
    }
    let (f, ev) = d.observe("a", &host_window(0, 9, None));
    assert!(f.is_empty());
    assert_eq!(ev, vec![format!("a/nccl/{C}")]);
}

#[test]
fn checkpoint_evaluation_and_job_end_raise_nothing() {
    for (after, what) in [
        (After::Checkpoint, "checkpoint"),
        (After::Eval, "evaluation"),
        (After::JobEnd, "job end"),
    ] {
        let found = run(after, 30);
        assert!(found.is_empty(), "{what}: {:?}", found.first());
    }
}

#[test]
fn the_blocked_call_alone_is_proof_without_gpu_samples() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut found = Vec::new();
    for t in 1..=8 {
        let a = (t > 5).then_some(After::Unknown);
        for (h, host) in HOSTS.iter().enumerate() {
            let mut w = host_window(h, t, a);
            w.gpus.clear();
            found.extend(d.observe(host, &w).0);
        }
    }
    // b at 7 (a at 7 saw b's ranks silent 0.99 s only), then a and b at 8.
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(has(&found[0], "below: 4/4 ranks inside a CUDA call that has not returned (cuStreamSynchronize for 2.0 s); 0/4 GPUs busy"));
}

#[test]
fn a_communicator_with_no_cadence_seen_is_not_judged() {
    let mut d = NcclDetector::new(NcclConfig::default());
    for t in 1..=20 {
        for (h, host) in HOSTS.iter().enumerate() {
            let mut w = host_window(h, t, Some(After::Unknown));
            for r in &mut w.nccl {
                r.init = "unknown".into();
            }
            let (f, _) = d.observe(host, &w);
            assert!(f.is_empty(), "no interval ever seen: {f:?}");
        }
    }
}

/// A split member's row: parent `p`, colour, key, rank in the parent.
fn member(comm: &str, pid: u32, parent_rank: i32, color: i32, key: i32) -> NcclRank {
    NcclRank {
        comm: comm.into(),
        nranks: -1,
        rank: -1,
        device: parent_rank % 2,
        pid,
        seq: 3,
        last_unix_ms: 900,
        interval_s: 0.1,
        init: "ncclCommSplit".into(),
        parent: "00000000000000aa".into(),
        color,
        key,
        parent_rank,
        ..Default::default()
    }
}

fn parent(rank: i32, pid: u32) -> NcclRank {
    NcclRank {
        comm: "00000000000000aa".into(),
        nranks: 4,
        rank,
        device: rank % 2,
        pid,
        seq: 10,
        last_unix_ms: 900,
        interval_s: 0.1,
        init: "ncclCommInitRank".into(),
        ..Default::default()
    }
}

#[test]
fn split_communicators_get_their_rank_and_size_once_every_member_is_seen() {
    let mut d = NcclDetector::new(NcclConfig::default());
    // Parent of 4 ranks over hosts a (ranks 0, 1) and b (2, 3). Colour 7:
    // parent ranks 0 and 3, keys 5 and 1 (so 3 comes first); colour 9:
    // parent ranks 1 and 2, equal keys (parent rank decides).
    let (x, y) = ("00000000000000c7", "00000000000000c9");
    let a = vec![
        parent(0, 10),
        parent(1, 11),
        member(x, 10, 0, 7, 5),
        member(y, 11, 1, 9, 0),
    ];
    d.observe("a", &window("a", 1000, a.clone()));
    // Host b not seen yet: nobody can be placed.
    assert!(d.comms[x]
        .ranks
        .values()
        .all(|r| r.rank == -1 && r.nranks == -1));
    let b = vec![
        parent(2, 12),
        parent(3, 13),
        member(y, 12, 2, 9, 0),
        member(x, 13, 3, 7, 1),
    ];
    d.observe("b", &window("b", 1000, b));
    fn place(d: &NcclDetector, c: &str, h: &str, pid: u32) -> (i32, i32) {
        let r = &d.comms[c].ranks[&(h.to_string(), pid)];
        (r.rank, r.nranks)
    }
    assert_eq!(place(&d, x, "b", 13), (0, 2), "key 1 before key 5");
    assert_eq!(place(&d, x, "a", 10), (1, 2));
    assert_eq!(
        place(&d, y, "a", 11),
        (0, 2),
        "equal keys: parent rank 1 before 2"
    );
    assert_eq!(place(&d, y, "b", 12), (1, 2));
    // The next window of a (rows still -1) keeps the places.
    d.observe("a", &window("a", 2000, a));
    assert_eq!(place(&d, x, "a", 10), (1, 2));
    // And the footprint says so.
    let mut f = vec![Finding::new(IncidentKind::GpuXid, "a/gpu0", 0.9)];
    d.annotate(&mut f);
    assert!(
        f[0].evidence.iter().any(|e| e.starts_with(&format!(
            "NCCL communicator {x} (2 of 2 ranks seen on 2 hosts, job ) has rank 1 here"
        ))),
        "{:?}",
        f[0].evidence
    );
}

#[test]
fn a_narrower_communicator_of_the_same_processes_is_left_to_the_wider_one() {
    // A 2-rank communicator of ranks 0 and 2's processes (as a tree over
    // the hosts' first GPUs) goes quiet with the 4-rank one: one hang.
    let narrow = "00000000000000dd";
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut found = Vec::new();
    for t in 1..=12 {
        let a = (t > 5).then_some(After::Unknown);
        for (h, host) in HOSTS.iter().enumerate() {
            let mut w = host_window(h, t, a);
            let mut n = w.nccl[0].clone();
            n.comm = narrow.into();
            n.nranks = 2;
            n.rank = h as i32;
            w.nccl.push(n);
            found.extend(d.observe(host, &w).0);
        }
    }
    assert!(!found.is_empty());
    assert!(
        found.iter().all(|f| f.entity == format!("a/nccl/{C}")),
        "{:?}",
        found.iter().map(|f| &f.entity).collect::<Vec<_>>()
    );
}

/// Every rank waits (`Unknown` below) while `drop` removes host b's whole
/// window (`true`) or only rank 3's rows (`false`) from 7 s on.
fn run_losing(whole_host: bool) -> Vec<(i64, Finding)> {
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut out = Vec::new();
    for t in 1..=12 {
        let a = (t > 5).then_some(After::Unknown);
        for (h, host) in HOSTS.iter().enumerate() {
            let mut w = host_window(h, t, a);
            if h == 1 && t >= 7 {
                if whole_host {
                    continue;
                }
                w.nccl.retain(|r| r.rank != 3);
            }
            out.extend(d.observe(host, &w).0.into_iter().map(|f| (t, f)));
        }
    }
    out
}

#[test]
fn a_rank_whose_host_went_silent_is_the_culprit() {
    let found = run_losing(true);
    let (t, f) = found.first().expect("a hang");
    // Host b's last window ended at 6 s: silent for three of its windows
    // (and the 1 s bound) at 9 s; until then its ranks count as waiting,
    // silent 0.99 s on their own clock.
    assert_eq!(*t, 9);
    assert_eq!(f.entity, format!("b/nccl/{C}"));
    assert!(
        has(
            f,
            "culprit: rank 2 on b (pid 12, gpu 0, job train rank 2) is on a host that went silent"
        ),
        "{:?}",
        f.evidence
    );
    assert!(has(f, "below: 2/2 ranks"), "{:?}", f.evidence);
}

#[test]
fn a_rank_whose_rows_stopped_while_its_host_reports_is_the_culprit() {
    let found = run_losing(false);
    // At 7 s every rank has been silent past the bound and rank 3's rows
    // are one window late only: a hang with no cause seen yet, on the
    // first waiting host.
    let (t, f) = found.first().expect("a hang");
    assert_eq!(*t, 7);
    assert_eq!(f.entity, format!("a/nccl/{C}"));
    assert!(has(
        f,
        "every rank waits in collective 501; no cause seen below"
    ));
    // Two windows after its latest row (at 6 s) the rank is named, on the
    // same incident's entity.
    let (t, f) = found
        .iter()
        .find(|(_, f)| has(f, "culprit: "))
        .expect("a culprit");
    assert_eq!(*t, 8);
    assert_eq!(f.entity, format!("a/nccl/{C}"));
    assert!(
        has(f, "culprit: rank 3 on b (pid 13, gpu 1, job train rank 3) stopped reporting while its host still reports"),
        "{:?}",
        f.evidence
    );
}

#[test]
fn a_host_s_rows_below_nccl_are_bounded_and_counted() {
    let mut d = NcclDetector::new(NcclConfig::default());
    let mut w = host_window(0, 1, None);
    w.gpus = (0..70)
        .map(|i| GpuSample {
            index: i,
            util_gpu_pct: Some(50),
            ..Default::default()
        })
        .collect();
    d.observe("a", &w);
    assert_eq!(d.below["a"].util.len(), 64);
    assert_eq!(d.dropped_below, 6);
}
