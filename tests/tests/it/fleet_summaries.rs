//! Sharded engines with mergeable summaries give one engine's verdicts.
//!
//! The simulated cluster's windows go to one engine, and to one engine per
//! leaf (a shard) which, before every slot, takes the others' summaries of
//! the slot before (as the shards do through JetStream, one window behind).
//! Each scenario's incidents — kind and entity, opened and resolved within
//! one window — must be the same. The same shards without summaries
//! differ where a verdict needs the rest of the fleet, which the switch
//! scenario shows (so the comparison can fail).
use std::collections::{BTreeMap, BTreeSet};

use correlator::engine::{fleet::Remote, DetectConfig, Engine};
use proto::v1::CandidateUpdate;
use sim::cluster::{topology, Cluster};

/// (kind, entity) → (opened ms, resolved ms) of its first episode.
type Episodes = BTreeMap<(String, String), (i64, Option<i64>)>;

fn episodes(ups: &[CandidateUpdate]) -> Episodes {
    let mut e = Episodes::new();
    for u in ups {
        let k = (u.kind.clone(), u.entity.clone());
        match u.state.as_str() {
            "opened" => {
                e.entry(k).or_insert((u.ts_unix_ms, None));
            }
            "resolved" => {
                if let Some(v) = e.get_mut(&k) {
                    v.1.get_or_insert(u.ts_unix_ms);
                }
            }
            _ => {}
        }
    }
    e
}

/// How the windows are judged.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    One,
    Shards,
    ShardsAlone,
}

/// The run's episodes under `mode`; the windows come from a 48-node
/// cluster (3 leaves) with `inject`.
fn run(inject: &[&str], mode: Mode) -> Episodes {
    let args = sim::SimArgs {
        nodes: 48,
        duration: 240.0,
        onset: 60.0,
        inject: inject.iter().map(|s| s.to_string()).collect(),
        ..sim::SimArgs::default()
    };
    let mut cluster = Cluster::new(args.spec());
    let faults = sim::faults::parse_all(&args.inject, &cluster, args.seed).expect("faults");
    let topo = correlator::engine::ib::parse_topology(&topology::ibnetdiscover(args.nodes))
        .expect("topology");
    let mut cfg = DetectConfig::default();
    // Simulated time is not this machine's.
    cfg.limits.max_future_s = 0.0;
    cfg.limits.max_past_s = 0.0;
    let n = if mode == Mode::One { 1 } else { 3 };
    let mut engines: Vec<Engine> = (0..n).map(|_| Engine::new(&cfg, topo.clone())).collect();
    let mut taken = vec![0u64; n];
    let mut ups = Vec::new();
    for _ in 0..(args.duration / args.window) as usize {
        cluster.advance(&faults, args.onset);
        if mode == Mode::Shards {
            let summaries: Vec<_> = (0..n)
                .map(|i| engines[i].summary(&i.to_string(), taken[i]))
                .collect();
            for (i, e) in engines.iter_mut().enumerate() {
                let others = summaries.iter().enumerate().filter(|(j, _)| *j != i);
                e.set_remote(Some(std::sync::Arc::new(Remote::of(
                    others.map(|(_, s)| s),
                ))));
            }
        }
        for node in 0..args.nodes {
            if let Some(w) = cluster.window(node) {
                let i = if n == 1 { 0 } else { cluster.leaf_of(node) };
                ups.extend(engines[i].ingest(&w));
                taken[i] += 1;
            }
        }
    }
    episodes(&ups)
}

/// Asserts `b` has `a`'s incidents, opened and resolved within a window.
fn same(a: &Episodes, b: &Episodes, what: &str) {
    let keys = |e: &Episodes| e.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(keys(b), keys(a), "{what}: the same incidents");
    for (k, (o1, r1)) in a {
        let (o2, r2) = b[k];
        assert!((o1 - o2).abs() <= 1000, "{what}: {k:?} opened {o1} vs {o2}");
        match (r1, r2) {
            (Some(x), Some(y)) => assert!((x - y).abs() <= 1000, "{what}: {k:?} resolved"),
            (None, None) => {}
            other => panic!("{what}: {k:?} resolved {other:?}"),
        }
    }
}

#[test]
fn a_switch_judged_against_the_whole_fabric_only_with_summaries() {
    let _turn = tests::one_file_at_a_time(file!());
    let inject = [
        "ib-link-degrade@n003/mlx5_2/1:ber=1e-10",
        "ib-switch-degrade@leaf01:ber=1e-10,ports=4",
        "single-errors",
    ];
    let one = run(&inject, Mode::One);
    same(&one, &run(&inject, Mode::Shards), "switch, with summaries");
    // Alone, leaf01's shard sees a clean rest of the fabric and pins the
    // four ports on the switch; the one engine counts n003's cable too.
    let alone = run(&inject, Mode::ShardsAlone);
    let switch = ("ib_link_degraded".to_string(), "switch:leaf01".to_string());
    assert!(!one.contains_key(&switch), "{one:?}");
    assert!(alone.contains_key(&switch), "{alone:?}");
}

#[test]
fn storage_class_medians_and_the_fleet_shift_across_shards() {
    let _turn = tests::one_file_at_a_time(file!());
    // One device stalls; later the whole fleet's storage slows (a shared
    // backend): the first is an incident, the second is not.
    let inject = [
        "storage-stall@n037/nvme0n1",
        "storage-fleet-slow:factor=5,at=150",
        "gpu-thermal@n040/gpu3",
    ];
    let one = run(&inject, Mode::One);
    assert!(
        one.keys()
            .any(|(k, e)| k == "storage_latency" && e == "n037/nvme0n1"),
        "{one:?}"
    );
    same(&one, &run(&inject, Mode::Shards), "storage, with summaries");
}

#[test]
fn a_slow_rank_judged_against_its_whole_job_across_shards() {
    let _turn = tests::one_file_at_a_time(file!());
    // The training job spans every leaf; a rank slows.
    let inject = ["nccl-slow-rank@n020/gpu2:factor=1.6"];
    let one = run(&inject, Mode::One);
    assert!(!one.is_empty(), "the slow rank is found: {one:?}");
    same(
        &one,
        &run(&inject, Mode::Shards),
        "a slow rank, with summaries",
    );
}
