//! Hangs where every rank waits, end to end through the simulator's
//! windows and the correlator's engine: a dead peer, a downed port in the
//! footprint and an unknown cause raise one `collective_hang` on the job's
//! ring naming the culprit (or saying none is seen below); a checkpoint,
//! an evaluation pass and the job's processes exiting raise nothing.
use std::collections::BTreeMap;

use correlator::engine::Engine;
use proto::v1::CandidateUpdate;
use sim::cluster::{nccl::RING, Cluster, ClusterSpec};
use sim::faults;

/// 16 nodes, 1 s windows, the fault at 30 s of a `secs` run: every
/// incident by id (its latest update) and the window the hang was first
/// raised in.
fn run(spec: &str, secs: u64) -> (Cluster, BTreeMap<String, CandidateUpdate>, Option<u64>) {
    let mut c = Cluster::new(ClusterSpec {
        nodes: 16,
        window_s: 1.0,
        seed: 11,
        ..ClusterSpec::default()
    });
    let fs = faults::parse_all(&[spec.to_string()], &c, 1).expect("spec parses");
    let mut e = Engine::default();
    let mut by_id = BTreeMap::new();
    let mut first = None;
    for _ in 0..secs {
        c.advance(&fs, 30.0);
        for n in 0..c.nodes() {
            let Some(w) = c.window(n) else { continue };
            for u in e.ingest(&w) {
                if u.kind == "collective_hang" && first.is_none() {
                    first = Some(c.window_index());
                }
                by_id.insert(u.incident_id.clone(), u);
            }
        }
        c.finish_step();
    }
    (c, by_id, first)
}

fn kinds(by_id: &BTreeMap<String, CandidateUpdate>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = by_id
        .values()
        .map(|u| (u.kind.clone(), u.entity.clone()))
        .collect();
    v.sort();
    v
}

fn line<'a>(u: &'a CandidateUpdate, prefix: &str) -> &'a str {
    u.evidence
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {u:#?}"))
}

#[test]
fn a_dead_peer_is_named_on_the_ring() {
    let _turn = tests::one_file_at_a_time(file!());
    let (c, got, first) = run("nccl-hang-dead-peer@n006/gpu3", 60);
    let ring = c.comm_id(RING);
    assert_eq!(
        kinds(&got),
        [("collective_hang".to_string(), format!("n006/nccl/{ring}"))],
        "{got:#?}"
    );
    let u = got.values().next().expect("one");
    assert!(
        line(u, "culprit: ").starts_with(
            "culprit: rank 51 on n006 (pid 10003, gpu 3, job llm-pretrain rank 51) exited while the others wait in collective "
        ),
        "{u:#?}"
    );
    // 127 ranks wait, each in cuStreamSynchronize, each GPU at 100 %.
    let below = line(u, "below: ");
    assert!(
        below.starts_with("below: 127/127 ranks inside a CUDA call that has not returned (cuStreamSynchronize for "),
        "{below}"
    );
    assert!(below.contains("; 127/127 GPUs busy >= 90%"), "{below}");
    // Within the ring's bound (20 x its median interval, 0.15 s between
    // gradient buckets at 1 s windows: 3 s) and a window of it: the
    // collective in flight at 30 s, raised in window 34 (ends at 34 s).
    assert!(
        line(u, &format!("communicator {ring}: every rank waits in collective ")).contains(
            "(AllReduce); 127 live rank(s) silent 4.0 s (bound 3.0 s = max(20 x median interval 0.150 s, 1 s))"
        ),
        "{u:#?}"
    );
    assert_eq!(first, Some(34));
    assert_eq!(u.affected_jobs, ["llm-pretrain"]);
}

#[test]
fn a_downed_port_in_the_footprint_is_named() {
    let _turn = tests::one_file_at_a_time(file!());
    let (c, got, _) = run("nccl-hang-port-down@n009/mlx5_5/1", 60);
    let ring = c.comm_id(RING);
    let hang: Vec<&CandidateUpdate> = got
        .values()
        .filter(|u| u.kind == "collective_hang")
        .collect();
    assert_eq!(hang.len(), 1, "{got:#?}");
    assert_eq!(hang[0].entity, format!("n009/nccl/{ring}"));
    assert_eq!(
        line(hang[0], "culprit: "),
        "culprit: port n009/mlx5_5/1 of rank 77 on n009 (pid 10005, gpu 5, job llm-pretrain rank 77) is down (state 1)"
    );
    // The link's own incident is the only other one.
    let others: Vec<(String, String)> = got
        .values()
        .filter(|u| u.kind != "collective_hang")
        .map(|u| (u.kind.clone(), u.entity.clone()))
        .collect();
    assert_eq!(
        others,
        [("ib_link_down".to_string(), "n009/mlx5_5/1".to_string())]
    );
}

#[test]
fn no_cause_below_says_so() {
    let _turn = tests::one_file_at_a_time(file!());
    let (c, got, _) = run("nccl-hang-unknown", 60);
    let ring = c.comm_id(RING);
    assert_eq!(
        kinds(&got),
        [("collective_hang".to_string(), format!("n000/nccl/{ring}"))],
        "{got:#?}"
    );
    let u = got.values().next().expect("one");
    let every = line(u, "every rank waits in collective ");
    assert!(every.ends_with("; no cause seen below"), "{every}");
    assert!(!u.evidence.iter().any(|l| l.starts_with("culprit: ")));
    // Every HCA port of the ring's footprint went quiet.
    assert!(
        line(u, "below: ").contains("128/128 HCA ports' traffic collapsed"),
        "{u:#?}"
    );
}

#[test]
fn checkpoint_evaluation_and_job_exit_raise_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    for spec in [
        "nccl-checkpoint:duration=120",
        "nccl-eval:duration=120",
        "nccl-job-exit:gap=60",
    ] {
        let (_, got, _) = run(spec, 200);
        assert!(got.is_empty(), "{spec}: {got:#?}");
    }
}

/// The pauses are what the windows say they are: a checkpoint's GPUs idle
/// with the job writing, an evaluation's kernels launching, and exiting
/// processes' last rows marked `exited`.
#[test]
fn the_pauses_show_below_what_they_are() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = Cluster::new(ClusterSpec {
        nodes: 4,
        window_s: 1.0,
        seed: 11,
        ..ClusterSpec::default()
    });
    let specs = [
        "nccl-checkpoint:duration=20,at=10".to_string(),
        "nccl-eval:duration=20,at=40".to_string(),
        "nccl-job-exit:gap=30,at=70".to_string(),
    ];
    let fs = faults::parse_all(&specs, &c, 1).expect("specs parse");
    let mut exited = 0;
    for k in 1..=80u64 {
        c.advance(&fs, 0.0);
        let w = c.window(0).expect("node 0");
        let util = w.gpus[0].util_gpu_pct.unwrap_or(0);
        let launches: u64 = w.cuda.iter().map(|x| x.launches).sum();
        let blocked = w.nccl.iter().filter(|r| !r.blocked_call.is_empty()).count();
        assert_eq!(blocked, 0, "nothing blocks at {k}");
        match k {
            15..=29 => assert_eq!((util, launches), (0, 0), "checkpoint at {k}"),
            45..=59 => assert!(util == 90 && launches > 0, "evaluation at {k}"),
            5..=9 | 33..=39 => assert!(util == 97 && launches > 0, "training at {k}"),
            _ => {}
        }
        if (15..=29).contains(&k) {
            let written: u64 = w.block.iter().map(|b| b.bytes).sum();
            assert!(written > 0, "the checkpoint writes at {k}");
        }
        exited += w.nccl.iter().filter(|r| r.exited).count();
        if k > 72 {
            assert!(w.nccl.is_empty(), "no rows after the exits at {k}");
        }
        c.finish_step();
    }
    // Node 0's eight processes, one row each for the ring, GPU 0's for the tree too.
    assert_eq!(exited, 9);
}
