//! The simulated job's NCCL communicators (`Window.nccl`): one id per
//! communicator on every rank of every host, sequence numbers that agree in
//! a healthy run, a cadence that follows the slowest rank, hangs that
//! freeze exactly the stalled ranks with the others one collective ahead,
//! and what a collector restart or the job's end do to the rows.
use std::collections::{BTreeMap, BTreeSet};

use proto::v1::{NcclRank, Window};
use sim::cluster::{
    nccl::{RING, TREE},
    Cluster, ClusterSpec, GPUS,
};
use sim::faults;

fn cluster(nodes: usize, window_s: f64, otlp: bool) -> Cluster {
    Cluster::new(ClusterSpec {
        nodes,
        window_s,
        seed: 5,
        otlp_steps: otlp,
        ..ClusterSpec::default()
    })
}

fn inject(c: &Cluster, specs: &[&str]) -> Vec<faults::Fault> {
    let s: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    faults::parse_all(&s, c, 1).expect("specs parse")
}

/// One window of every node that is up.
fn step(c: &mut Cluster, fs: &[faults::Fault]) -> Vec<Window> {
    c.advance(fs, 0.0);
    let w = (0..c.nodes()).filter_map(|n| c.window(n)).collect();
    c.finish_step();
    w
}

/// The rows of one communicator in a window set, by rank.
fn of(ws: &[Window], id: &str) -> BTreeMap<i32, (String, NcclRank)> {
    let mut m = BTreeMap::new();
    for w in ws {
        let host = w.origin.as_ref().expect("origin").hostname.clone();
        for r in w.nccl.iter().filter(|r| r.comm == id) {
            assert!(
                m.insert(r.rank, (host.clone(), r.clone())).is_none(),
                "rank {} twice",
                r.rank
            );
        }
    }
    m
}

fn calls(r: &NcclRank) -> u64 {
    r.ops.iter().map(|o| o.calls).sum()
}

/// 32 nodes on two leaf switches: the ring has every rank (GPU g on
/// `mlx5_g/1`), the tree every node's GPU 0; every row of a communicator
/// carries its one id; the ranks' sequences agree within the one collective
/// in flight at a window's end; 4 AllReduces of 100 MB per ~1.015 s step.
#[test]
fn ring_and_tree_rows_agree_on_every_rank_across_leaves() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(32, 1.0, true);
    let (ring, tree) = (c.comm_id(RING), c.comm_id(TREE));
    assert_eq!(ring.len(), 16);
    assert!(ring.chars().all(|ch| ch.is_ascii_hexdigit()) && ring != tree);
    assert_eq!((c.leaf_of(0), c.leaf_of(31)), (0, 1));
    let mut agreed = 0;
    let mut prev: BTreeMap<i32, u64> = BTreeMap::new();
    let (mut span, mut n_calls) = (vec![0.0; 256], vec![0u64; 256]);
    let windows = 40;
    for k in 1..=windows {
        let ws = step(&mut c, &[]);
        assert!(ws.iter().all(|w| w.nccl.len() == GPUS + 1));
        let rows = of(&ws, &ring);
        assert_eq!(rows.len(), 256);
        for (&rank, (host, r)) in &rows {
            let (node, gpu) = (rank as usize / GPUS, rank as usize % GPUS);
            assert_eq!(host, &format!("n{node:03}"));
            assert_eq!(
                (r.nranks, r.device, r.pid),
                (256, gpu as i32, 10_000 + gpu as u32)
            );
            assert_eq!(
                (r.job.as_str(), r.job_rank),
                ("llm-pretrain", Some(rank as u32))
            );
            assert_eq!(r.hcas, vec![format!("mlx5_{gpu}/1")]);
            assert_eq!((r.init.as_str(), r.ended), ("ncclCommInitRank", false));
            // This window's calls are the sequence's growth, 100 MB each.
            assert_eq!(r.seq - prev.get(&rank).copied().unwrap_or(0), calls(r));
            assert!(r
                .ops
                .iter()
                .all(|o| o.op == "AllReduce" && o.bytes == o.calls * 100_000_000));
            prev.insert(rank, r.seq);
            if k > 1 {
                assert!(r.lag_s < 0.03, "{r:?}");
                assert_eq!(r.interval_s > 0.0, calls(r) > 0, "{r:?}");
                span[rank as usize] += r.interval_s * calls(r) as f64;
                n_calls[rank as usize] += calls(r);
            }
        }
        let seqs: BTreeSet<u64> = rows.values().map(|(_, r)| r.seq).collect();
        let (lo, hi) = (*seqs.first().unwrap(), *seqs.last().unwrap());
        assert!(hi - lo <= 1, "window {k}: {lo}..{hi}");
        agreed += usize::from(lo == hi);
        let t = of(&ws, &tree);
        assert_eq!(t.len(), 32);
        for (&rank, (host, r)) in &t {
            assert_eq!(host, &format!("n{rank:03}"));
            assert_eq!(
                (r.nranks, r.device, r.hcas.as_slice()),
                (32, 0, &["mlx5_0/1".to_string()][..])
            );
            assert!(r.ops.iter().all(|o| o.bytes == 8 * o.calls));
        }
        let tseq: BTreeSet<u64> = t.values().map(|(_, r)| r.seq).collect();
        assert!(tseq.len() <= 2, "{tseq:?}");
    }
    // A window's interval is the mean over its own collectives (a part of
    // a step in a 1 s window): over the run, a quarter of the slowest of
    // 256 ranks' steps (1 ± 1.5 %: 1.0149 s).
    for (s, n) in span.iter().zip(&n_calls) {
        assert!(
            (s / *n as f64 / 0.2537 - 1.0).abs() < 0.01,
            "{}",
            s / *n as f64
        );
    }
    println!("sequences equal at {agreed} of {windows} window ends");
    assert!(agreed >= windows * 3 / 4, "{agreed}");
    // 40 s of ~1.015 s steps: 39 full steps, 4 collectives each.
    let final_seq = prev[&0];
    assert!((156..=160).contains(&final_seq), "{final_seq}");
}

/// `nccl-hang` on one rank: from its onset the rank issues nothing; the
/// others issue the collective it did not and wait there for good. The
/// truth names its host, the ring and exactly that rank; the job's OTLP
/// steps stop (no step completes).
#[test]
fn a_hang_freezes_exactly_the_injected_rank() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(8, 1.0, true);
    let fs = inject(&c, &["nccl-hang@n003/gpu5:at=5"]);
    let ring = c.comm_id(RING);
    let mut last = BTreeMap::new();
    for k in 1..=15u64 {
        let ws = step(&mut c, &fs);
        let rows = of(&ws, &ring);
        let steps: usize = ws.iter().map(|w| w.steps.len()).sum();
        if k <= 5 {
            assert_eq!(steps, 64, "window {k}");
        }
        if k >= 7 {
            assert_eq!(steps, 0, "window {k}: no step completes");
            let stalled = rows[&29].1.seq;
            for (&rank, (_, r)) in &rows {
                let want = if rank == 29 { stalled } else { stalled + 1 };
                assert_eq!(r.seq, want, "rank {rank} in window {k}");
                assert!(r.ops.is_empty() && r.interval_s == 0.0, "{r:?}");
                if let Some(s) = last.get(&rank) {
                    assert_eq!(r.seq, *s, "rank {rank} moved in window {k}");
                }
            }
        }
        last = rows.iter().map(|(k, (_, r))| (*k, r.seq)).collect();
    }
    let t = &c.truth()[0];
    assert_eq!(
        t.hang_entity.as_deref(),
        Some(format!("n003/nccl/{ring}").as_str())
    );
    assert_eq!(t.hang_holders, vec![("n003".to_string(), 29)]);
    assert_eq!(t.onset_window, 6);
    assert!(
        matches!(t.visible_window, Some(6 | 7)),
        "{:?}",
        t.visible_window
    );
}

/// A whole host stalls: every one of its ranks stops at its onset; the
/// ranks holding the others up (the truth's holders) are some of them and
/// sit one collective behind everybody else.
#[test]
fn a_host_hang_freezes_its_ranks_only() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(8, 1.0, true);
    let fs = inject(&c, &["nccl-hang@n002:at=5.3"]);
    let ring = c.comm_id(RING);
    let mut at_onset = BTreeMap::new();
    let mut rows = BTreeMap::new();
    for k in 1..=15 {
        rows = of(&step(&mut c, &fs), &ring);
        if k == 6 {
            at_onset = rows.clone();
        }
    }
    let t = &c.truth()[0];
    let holders: BTreeSet<i32> = t.hang_holders.iter().map(|h| h.1).collect();
    assert!(
        !holders.is_empty() && holders.iter().all(|r| (16..24).contains(r)),
        "{holders:?}"
    );
    assert!(t.hang_holders.iter().all(|h| h.0 == "n002"));
    let lo = rows.values().map(|(_, r)| r.seq).min().unwrap();
    for (&rank, (_, r)) in &rows {
        if (16..24).contains(&rank) {
            assert_eq!(r.seq, at_onset[&rank].1.seq, "stalled rank {rank} moved");
        }
        let want = if holders.contains(&rank) { lo } else { lo + 1 };
        assert!(
            holders.contains(&rank) || (16..24).contains(&rank) || r.seq == want,
            "{rank}: {r:?}"
        );
        if holders.contains(&rank) {
            assert_eq!(r.seq, lo);
        }
    }
}

/// Mean ring interval and per-rank lag over the windows `from..`.
fn cadence(
    c: &mut Cluster,
    fs: &[faults::Fault],
    windows: u64,
    from: u64,
) -> (f64, BTreeMap<i32, f64>) {
    let ring = c.comm_id(RING);
    let (mut sum, mut n) = (0.0, 0.0);
    let mut lag: BTreeMap<i32, f64> = BTreeMap::new();
    for k in 1..=windows {
        let rows = of(&step(c, fs), &ring);
        if k >= from {
            for (&rank, (_, r)) in &rows {
                sum += r.interval_s;
                n += 1.0;
                let l = lag.entry(rank).or_default();
                *l = l.max(r.lag_s);
            }
        }
    }
    (sum / n, lag)
}

/// One rank computes 1.5x slower: every rank's cadence stretches 1.5x
/// (collectives wait for it), and it lags the first rank of its host by
/// 0.225 x its 1 s compute at every collective.
#[test]
fn a_slow_rank_stretches_everyones_cadence_and_lags() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(8, 10.0, true);
    let (before, _) = cadence(&mut c, &[], 10, 2);
    let mut c = cluster(8, 10.0, true);
    let fs = inject(&c, &["nccl-slow-rank@n001/gpu2:factor=1.5,at=0"]);
    let (after, lag) = cadence(&mut c, &fs, 10, 2);
    println!(
        "interval {before:.4} s healthy, {after:.4} s with the slow rank; lag {:.3} s",
        lag[&10]
    );
    // Healthy: a quarter of the slowest of 64 ranks' 1 ± 1.5 % s; slowed:
    // of the slow rank's 1.5 x (1 ± 1.5 %) s.
    assert!((before / 0.2537 - 1.0).abs() < 0.01, "{before}");
    assert!((after / 0.375 - 1.0).abs() < 0.01, "{after}");
    assert!((0.21..0.24).contains(&lag[&10]), "{lag:?}");
    assert!(
        lag.iter()
            .filter(|(r, _)| **r != 10)
            .all(|(_, l)| *l < 0.03),
        "{lag:?}"
    );
}

/// A degraded link (BER 1e-6: the rank's transfers retransmit, its step
/// doubles) stretches every rank's cadence 2x; the rank on it does not lag
/// (it issues its collectives on time, they complete late).
#[test]
fn a_degraded_link_stretches_everyones_cadence_without_a_lag() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(8, 10.0, true);
    let (before, _) = cadence(&mut c, &[], 10, 2);
    let mut c = cluster(8, 10.0, true);
    let fs = inject(&c, &["ib-link-degrade@n002/mlx5_6/1:ber=1e-6,at=0"]);
    let (after, lag) = cadence(&mut c, &fs, 10, 2);
    println!("interval {before:.4} s healthy, {after:.4} s with the link");
    assert!((after / 0.5 - 1.0).abs() < 0.01, "{after}");
    assert!(lag.values().all(|l| *l < 0.03), "{lag:?}");
}

/// Without OTLP the job sends no step times; its collectives still show.
#[test]
fn without_otlp_only_the_collectives_show_the_steps() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(4, 1.0, false);
    for _ in 0..5 {
        let ws = step(&mut c, &[]);
        assert!(ws
            .iter()
            .all(|w| w.steps.is_empty() && w.nccl.len() == GPUS + 1));
    }
}

/// A restarted collector never saw the communicators' creation: its ranks
/// carry `h:<pid>:<handle>` ids and counts since the restart. The job's end
/// destroys the communicators (one `ended` row each); the next run of the
/// job creates new ones, with new ids, from sequence 0.
#[test]
fn collector_restart_and_job_end() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(4, 10.0, true);
    let fs = inject(
        &c,
        &["collector-restart@n001:at=50", "job-end:gap=60,at=100"],
    );
    let old = c.comm_id(RING);
    for k in 1..=20u64 {
        c.advance(&fs, 0.0);
        let ws: Vec<Window> = (0..4).filter_map(|n| c.window(n)).collect();
        c.finish_step();
        let n1 = ws
            .iter()
            .find(|w| w.origin.as_ref().unwrap().hostname == "n001");
        match k {
            6 => assert!(n1.is_none(), "the restart's window is missing"),
            7..=10 => {
                let rows = &n1.expect("n001").nccl;
                assert_eq!(rows.len(), GPUS + 1);
                for r in rows {
                    assert!(r.comm.starts_with(&format!("h:{}:", r.pid)), "{r:?}");
                    assert_eq!(
                        (r.nranks, r.rank, r.device, r.init.as_str()),
                        (-1, -1, -1, "unknown")
                    );
                }
                if k == 7 {
                    // Counted from the new instance's first window: one 10 s window.
                    let r = rows.iter().find(|r| r.pid == 10_003).unwrap();
                    assert_eq!(r.seq, calls(r));
                    assert!((38..=41).contains(&r.seq), "{r:?}");
                }
                let others = of(&ws, &old);
                assert_eq!(others.len(), 24, "the other hosts still know the ring");
            }
            11 => {
                // [100, 110): destroyed at 100.
                let rows = of(&ws, &old);
                assert_eq!(rows.len(), 24);
                assert!(rows.values().all(|(_, r)| r.ended));
            }
            // The job is gone until 160.
            12..=16 => assert!(ws.iter().all(|w| w.nccl.is_empty()), "window {k}"),
            18..=20 => {
                let new = c.comm_id(RING);
                assert_ne!(new, old);
                let rows = of(&ws, &new);
                assert_eq!(rows.len(), 32, "n001's collector saw this one created");
                assert!(
                    rows.values().all(|(_, r)| r.seq <= 4 * 40 * (k - 16)),
                    "window {k}"
                );
            }
            _ => {}
        }
    }
}

#[test]
fn nccl_faults_take_a_rank_or_a_host() {
    let _turn = tests::one_file_at_a_time(file!());
    let c = cluster(4, 1.0, true);
    let s = vec!["nccl-hang@n001/mlx5_1/1".to_string()];
    let e = format!("{:#}", faults::parse_all(&s, &c, 1).unwrap_err());
    assert!(
        e.contains("it takes a rank by its GPU like n017/gpu5, or a host like n017"),
        "{e}"
    );
    let s = vec!["nccl-slow-rank@n001/gpu2:factor=0.5".to_string()];
    let e = format!("{:#}", faults::parse_all(&s, &c, 1).unwrap_err());
    assert!(e.contains("factor=0.5 must be ≥ 1"), "{e}");
    let f = inject(&c, &["nccl-slow-rank@n001/gpu2", "nccl-hang@n003"]);
    assert_eq!(f[0].describe(), "nccl-slow-rank@n001/gpu2:factor=1.6");
    assert_eq!(
        f[0].expected(&c),
        Some(("straggler", "llm-pretrain/10".to_string()))
    );
    assert_eq!(
        f[1].expected(&c),
        Some(("collective_hang", format!("n003/nccl/{}", c.comm_id(RING))))
    );
}
