//! The simulated cluster end to end (real streaming code, real gRPC on
//! loopback, the real engine): every injected fault raises exactly its
//! incident on the right entity; confounders raise none. Then the
//! simulator's physics (error counts per window from the BER, counter
//! saturation, flaps shorter than a window, latency histograms, ground-truth
//! visibility) and a `bench-detect --quick` run.
use proto::v1::Window;
use sim::{
    cluster::{nccl::RING, Cluster, ClusterSpec, LinkRate, StorageMix},
    detect::DetectArgs,
    faults, run, SimArgs,
};

use crate::scenario;
use scenario::args;

async fn opened(inject: &[&str]) -> Vec<(String, String)> {
    scenario::kinds_and_entities(&run(args(inject)).await.expect("sim runs"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_raises_its_incident_and_nothing_else() {
    let _turn = tests::one_file_at_a_time(file!());
    let faults = [
        (
            "ib-link-degrade@n005/mlx5_3/1",
            "ib_link_degraded",
            "n005/mlx5_3/1",
        ),
        (
            "ib-link-down@n002/mlx5_0/1",
            "ib_link_down",
            "n002/mlx5_0/1",
        ),
        (
            "ib-link-flap@n011/mlx5_7/1",
            "ib_link_flapping",
            "n011/mlx5_7/1",
        ),
        ("gpu-thermal@n009/gpu4", "gpu_thermal_throttle", "n009/gpu4"),
        ("gpu-power@n001/gpu2", "gpu_power_throttle", "n001/gpu2"),
        ("xid@n003/gpu6", "gpu_xid", "n003/gpu6"),
        ("ecc-dbe@n014/gpu0", "gpu_ecc", "n014/gpu0"),
        (
            "storage-stall@n007:factor=20",
            "storage_latency",
            "n007/sda",
        ),
        ("node-loss@n012", "node_lost", "n012"),
    ];
    let specs: Vec<&str> = faults.iter().map(|f| f.0).collect();
    let got = opened(&specs).await;
    let mut want: Vec<(String, String)> = faults
        .iter()
        .map(|f| (f.1.to_string(), f.2.to_string()))
        .collect();
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confounders_raise_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let got = opened(&[
        "job-end",
        "counter-reset@n004/mlx5_1/1",
        "collector-restart@n006",
        "congestion",
        "single-errors",
        "storage-fleet-slow",
    ])
    .await;
    assert_eq!(got, Vec::<(String, String)>::new());
}

/// A second team's job takes a time-sliced GPU the training job's rank uses:
/// one `interference` incident on that GPU naming `etl-batch` (team data)
/// as the aggressor and the training job as the victim, the straggling
/// rank and the job's slowdown joined to it; the same tenant saturating a
/// port without slowing anyone raises nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interference_names_the_aggressor_and_harmless_saturation_raises_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let long = |inject: &[&str]| SimArgs {
        duration: 70.0,
        onset: 35.0,
        ..args(inject)
    };
    let seen = run(long(&["interference-gpu@n009/gpu2:share=0.6"]))
        .await
        .expect("sim runs");
    let ids: std::collections::BTreeSet<&str> =
        seen.iter().map(|u| u.incident_id.as_str()).collect();
    assert_eq!(ids.len(), 1, "{seen:#?}");
    let last = seen.last().expect("an incident");
    assert_eq!(
        (last.kind.as_str(), last.entity.as_str()),
        ("interference", "n009/gpu2")
    );
    let ev = last.evidence.join("\n");
    assert!(ev.contains("aggressor job etl-batch (team data)"), "{ev}");
    assert!(
        ev.contains("victim job llm-pretrain (team research)"),
        "{ev}"
    );
    assert!(
        last.affected_jobs.iter().any(|j| j == "etl-batch")
            && last.affected_jobs.iter().any(|j| j == "llm-pretrain"),
        "{last:?}"
    );
    let quiet = run(long(&["aggressor-harmless@n004/mlx5_1/1:demand=1.6"]))
        .await
        .expect("sim runs");
    assert!(quiet.is_empty(), "{quiet:#?}");
}

use scenario::latest_updates as incidents;

/// The first `+N%` of the evidence line starting with `prefix`.
fn percent(u: &proto::v1::CandidateUpdate, prefix: &str) -> f64 {
    let line = u
        .evidence
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {u:#?}"));
    let after = line.split_once('+').expect("a +N%").1;
    after
        .split('%')
        .next()
        .unwrap_or("")
        .parse()
        .expect("a number")
}

/// A rank that stops issuing collectives: one `collective_hang` on its
/// host and the ring, naming exactly that rank, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nccl_hang_names_the_stalled_rank() {
    let _turn = tests::one_file_at_a_time(file!());
    let a = args(&["nccl-hang@n005/gpu3"]);
    let ring = Cluster::new(a.spec()).comm_id(RING);
    let got = incidents(a).await;
    assert_eq!(got.len(), 1, "{got:#?}");
    let u = &got[0];
    assert_eq!(
        (u.kind.as_str(), u.entity.clone()),
        ("collective_hang", format!("n005/nccl/{ring}"))
    );
    assert!(
        u.evidence[0].starts_with(&format!(
            "communicator {ring}: 1 rank(s) stopped at collective "
        )),
        "{u:#?}"
    );
    let stalled: Vec<&String> = u
        .evidence
        .iter()
        .filter(|l| l.starts_with("stalled rank "))
        .collect();
    assert_eq!(
        stalled,
        ["stalled rank 43 on n005 (pid 10003, gpu 3, job llm-pretrain rank 43)"]
    );
    assert_eq!(u.affected_jobs, ["llm-pretrain"]);
}

/// A rank computing 1.6x slower with no infrastructure cause: one
/// incident, the `straggler` naming it, which carries the job's slowdown
/// (every rank waits for it) instead of a second page. With OTLP step
/// times the job's step time is +58 %; without, the collectives' cadence,
/// which every rank shares, gives it (+59 % at 10 s windows) and the
/// rank's lag in issuing them names the rank; at 1 s windows the straggler
/// alone within 35 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nccl_slow_rank_with_and_without_otlp() {
    let _turn = tests::one_file_at_a_time(file!());
    let spec = "nccl-slow-rank@n009/gpu4:factor=1.6";
    let long = SimArgs {
        duration: 70.0,
        onset: 35.0,
        ..args(&[spec])
    };
    let joined = |got: &[proto::v1::CandidateUpdate], prefix: &str| -> f64 {
        let kinds: Vec<(&str, &str)> = got
            .iter()
            .map(|u| (u.kind.as_str(), u.entity.as_str()))
            .collect();
        // One incident id in all: the job's slowdown never pages alone.
        assert_eq!(kinds, [("straggler", "llm-pretrain/76")], "{got:#?}");
        let u = &got[0];
        let line = u
            .evidence
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {u:#?}"));
        assert!(
            line.ends_with("; every rank waits for its straggling rank 76"),
            "{line}"
        );
        assert_eq!(u.affected_jobs, ["llm-pretrain"]);
        percent(u, prefix)
    };
    let got = incidents(long.clone()).await;
    let p = joined(&got, "explains job llm-pretrain step time +");
    assert!((45.0..=70.0).contains(&p), "{p}");
    let no_otlp = SimArgs {
        window: 10.0,
        duration: 400.0,
        onset: 150.0,
        speed: 1000.0,
        no_otlp: true,
        ..args(&[spec])
    };
    let got = incidents(no_otlp).await;
    let p = joined(
        &got,
        "explains job llm-pretrain interval between NCCL collectives (its step time, inferred: no OTLP) +",
    );
    assert!((50.0..=70.0).contains(&p), "{p}");
    let rank = &got[0];
    assert!(
        rank.evidence[0]
            .starts_with("job llm-pretrain rank 76 (pid 10004, gpu 4) issues NCCL communicator "),
        "{rank:#?}"
    );
    let short = SimArgs {
        no_otlp: true,
        ..long
    };
    // At 1 s windows the cadence's change is not yet a job_slowdown within
    // 35 s, but the rank's issue lag names it.
    let got = incidents(short).await;
    let kinds: Vec<(&str, &str)> = got
        .iter()
        .map(|u| (u.kind.as_str(), u.entity.as_str()))
        .collect();
    assert_eq!(kinds, [("straggler", "llm-pretrain/76")], "{got:#?}");
}

/// No OTLP at all: a link under the ring degrades (BER 1e-6: the rank on
/// it retransmits, its step and so everyone's cadence doubles). One
/// incident names the link, its BER, the ring crossing it, and the job with
/// the step-time regression inferred from its collectives (+96 %).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_link_under_the_ring_names_the_job_without_otlp() {
    let _turn = tests::one_file_at_a_time(file!());
    let a = SimArgs {
        window: 10.0,
        duration: 400.0,
        onset: 150.0,
        speed: 1000.0,
        no_otlp: true,
        ..args(&["ib-link-degrade@n005/mlx5_3/1:ber=1e-6"])
    };
    let ring = Cluster::new(a.spec()).comm_id(RING);
    let got = incidents(a).await;
    assert_eq!(got.len(), 1, "{got:#?}");
    let u = &got[0];
    assert_eq!(
        (u.kind.as_str(), u.entity.as_str()),
        ("ib_link_degraded", "n005/mlx5_3/1")
    );
    assert!(u.evidence[0].starts_with("BER "), "{u:#?}");
    assert!(
        u.evidence.iter().any(|l| l
            == &format!(
                "NCCL communicator {ring} (128 of 128 ranks seen on 16 hosts, job llm-pretrain) has rank 43 here"
            )),
        "{u:#?}"
    );
    assert_eq!(u.affected_jobs, ["llm-pretrain"]);
    let p = percent(
        u,
        "explains job llm-pretrain interval between NCCL collectives (its step time, inferred: no OTLP) +",
    );
    assert!((85.0..=105.0).contains(&p), "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_injections_are_clear_errors() {
    let _turn = tests::one_file_at_a_time(file!());
    let e = run(args(&["meteor-strike"])).await.unwrap_err().to_string();
    assert!(e.contains("unknown fault kind \"meteor-strike\""), "{e}");
    let e = run(args(&["gpu-thermal@n999/gpu1"]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown node \"n999\""), "{e}");
    let e = format!(
        "{:#}",
        run(args(&["ib-link-degrade:ber=1e-9,rampp=60"]))
            .await
            .unwrap_err()
    );
    assert!(
        e.contains("unknown parameter \"rampp\" for ib-link-degrade (known: ber, ramp, at)"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        run(args(&["ib-link-degrade:ber=lots"])).await.unwrap_err()
    );
    assert!(e.contains("ber=\"lots\" is not a number"), "{e}");
    let e = format!(
        "{:#}",
        run(args(&["ib-link-flap:period=1,down=2"]))
            .await
            .unwrap_err()
    );
    assert!(e.contains("period=1 must be longer than down="), "{e}");
    let e = format!("{:#}", run(args(&["xid@n003/mlx5_1/1"])).await.unwrap_err());
    assert!(e.contains("does not fit this kind: it takes a GPU"), "{e}");
    let e = format!(
        "{:#}",
        run(args(&["storage-stall@n003/sdz"])).await.unwrap_err()
    );
    assert!(e.contains("n003 has no device \"sdz\" (it has sda)"), "{e}");
    let mut a = args(&[]);
    a.window = 0.0;
    let e = format!("{:#}", run(a).await.unwrap_err());
    assert!(e.contains("window length must be within"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_file_with_onsets() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-scn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("s.txt");
    std::fs::write(
        &f,
        "# two faults at different times\ngpu-thermal@n003/gpu1 at=4\nstorage-stall@n010:factor=30 at=12\n",
    )
    .unwrap();
    let mut a = args(&[]);
    a.scenario = Some(f.clone());
    a.duration = 20.0;
    let seen = run(a).await.expect("sim runs");
    let opened: Vec<(i64, String, String)> = seen
        .iter()
        .filter(|u| u.state == "opened")
        .map(|u| (u.ts_unix_ms, u.kind.clone(), u.entity.clone()))
        .collect();
    assert_eq!(opened.len(), 2, "{opened:?}");
    let thermal = opened
        .iter()
        .find(|o| o.1 == "gpu_thermal_throttle" && o.2 == "n003/gpu1")
        .expect("thermal");
    let storage = opened
        .iter()
        .find(|o| o.1 == "storage_latency" && o.2 == "n010/sda")
        .expect("storage");
    assert!(thermal.0 < storage.0, "onsets respected: {opened:?}");
    std::fs::write(&f, "gpu-thermal@n003/gpu1 at=soon\n").unwrap();
    let mut a = args(&[]);
    a.scenario = Some(f.clone());
    let e = format!("{:#}", run(a).await.unwrap_err());
    assert!(e.contains("scenario line 1: expected `at=SECONDS`"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn cluster(nodes: usize, window_s: f64, rate: LinkRate, storage: StorageMix, seed: u64) -> Cluster {
    Cluster::new(ClusterSpec {
        nodes,
        window_s,
        link_rate: rate,
        utilisation: 0.7,
        storage,
        seed,
        otlp_steps: true,
    })
}

fn inject(c: &Cluster, specs: &[&str]) -> Vec<faults::Fault> {
    let s: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
    faults::parse_all(&s, c, 1).expect("specs parse")
}

fn counter(w: &Window, hca: &str, name: &str) -> u64 {
    let p = w.ib_ports.iter().find(|p| p.hca == hca).expect("port");
    p.counters.get(name).copied().expect("counter")
}

fn state(w: &Window, hca: &str) -> u32 {
    w.ib_ports
        .iter()
        .find(|p| p.hca == hca)
        .expect("port")
        .state
}

/// BER 1e-12 on a 400 Gb/s port for 10 s: 4 errors per window on average.
#[test]
fn symbol_errors_follow_the_ber() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(8, 10.0, LinkRate::Ndr, StorageMix::Nvme, 3);
    let fs = inject(&c, &["ib-link-degrade@n002/mlx5_4/1:ber=1e-12,ramp=0,at=0"]);
    let windows = 3000;
    let (mut prev, mut prev_rcv, mut prev_data) = (0, 0, 0);
    let (mut sum, mut sum_rcv) = (0u64, 0u64);
    for _ in 0..windows {
        c.advance(&fs, 0.0);
        let w = c.window(2).expect("node up");
        let s = counter(&w, "mlx5_4", "symbol_error");
        let r = counter(&w, "mlx5_4", "port_rcv_errors");
        let d = counter(&w, "mlx5_4", "port_xmit_data");
        sum += s - prev;
        sum_rcv += r - prev_rcv;
        // 4-byte words: 50e9 B/s × 0.7 × 10 s ± 5 % jitter.
        let bytes = (d - prev_data) as f64 * 4.0;
        assert!((bytes / 3.5e11 - 1.0).abs() <= 0.051, "{bytes} bytes");
        (prev, prev_rcv, prev_data) = (s, r, d);
        assert_eq!(w.ib_ports[0].rate_bytes_per_sec, 50_000_000_000);
        assert_eq!(w.end_unix_ms - w.start_unix_ms, 10_000);
    }
    let mean = sum as f64 / windows as f64;
    // 4 from the fault, at most 0.04 from the base BER; standard error 0.037.
    assert!(
        (mean - 4.0).abs() < 0.2,
        "mean {mean} symbol errors per window"
    );
    // Corrupted packets: errors × utilisation × 0.5.
    let mean_rcv = sum_rcv as f64 / windows as f64;
    assert!(
        (mean_rcv - 1.4).abs() < 0.15,
        "mean {mean_rcv} receive errors per window"
    );
    // A healthy port of the same node: base BER ≤ 1e-14, ≤ 0.04 per window.
    let w = c.window(2).expect("node up");
    assert!(counter(&w, "mlx5_0", "symbol_error") < 300);
}

/// A fast degradation saturates the 16-bit counters, and they stay there.
#[test]
fn counters_saturate_at_their_iba_width() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(4, 30.0, LinkRate::Xdr, StorageMix::Nvme, 5);
    let fs = inject(&c, &["ib-link-degrade@n001/mlx5_0/1:ber=1e-8,ramp=0,at=0"]);
    let mut ler = Vec::new();
    for _ in 0..40 {
        c.advance(&fs, 0.0);
        let w = c.window(1).expect("node up");
        assert_eq!(counter(&w, "mlx5_0", "symbol_error"), 65_535);
        assert_eq!(counter(&w, "mlx5_0", "port_rcv_errors"), 65_535);
        assert_eq!(counter(&w, "mlx5_0", "link_downed"), 0);
        let l = counter(&w, "mlx5_0", "link_error_recovery");
        assert!(l <= 255);
        ler.push(l);
    }
    // ~24 recoveries a window: the 8-bit counter fills up and stays full.
    assert_eq!(*ler.last().expect("windows"), 255);
    assert!(ler.windows(2).all(|p| p[0] <= p[1]), "{ler:?}");
    // The fault's true count goes on: 1e-8 × 800e9 × 30 s per window.
    let excess = c.truth()[0].excess_errors as f64;
    assert!((excess / (40.0 * 2.4e5) - 1.0).abs() < 0.01, "{excess}");
}

/// A down shorter than a window: the state sampled at the window's end is
/// ACTIVE, only `link_downed` shows it. A longer one is seen DOWN.
#[test]
fn flaps_shorter_and_longer_than_a_window() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(4, 10.0, LinkRate::Hdr, StorageMix::Nvme, 9);
    let fs = inject(
        &c,
        &[
            "ib-link-flap@n000/mlx5_1/1:period=25,down=0.5,at=100",
            "ib-link-flap@n000/mlx5_2/1:period=60,down=25,at=100",
        ],
    );
    let mut downs = Vec::new();
    let mut long_down_seen = 0;
    for _ in 0..40 {
        c.advance(&fs, 0.0);
        let w = c.window(0).expect("node up");
        assert_eq!(state(&w, "mlx5_1"), 4, "short flap sampled ACTIVE");
        downs.push(counter(&w, "mlx5_1", "link_downed"));
        if state(&w, "mlx5_2") == 1 {
            long_down_seen += 1;
            let p = w.ib_ports.iter().find(|p| p.hca == "mlx5_2").expect("port");
            assert_eq!(p.phys_state, 2, "Polling while down");
        }
    }
    // Downs at 100, 125, …, 375 s: 12 within the 400 s.
    assert_eq!(downs[9], 0, "nothing before the onset");
    assert_eq!(downs[10], 1, "the first down in window 11 [100, 110)");
    assert_eq!(*downs.last().expect("windows"), 12);
    // Down 25 s of every 60 s: the window ends at 110, 120 (of [100, 125))…
    assert!(long_down_seen >= 10, "{long_down_seen}");
    // Second down of the first flap is at 125 s: window 13.
    assert_eq!(c.truth()[0].visible_window, Some(13));
}

/// The latency histogram: log2 buckets summing to the requests, a sum and a
/// maximum consistent with them, the device class on the row.
#[test]
fn latency_histograms_are_consistent() {
    let _turn = tests::one_file_at_a_time(file!());
    for (mix, classes) in [
        (StorageMix::Nvme, vec!["nvme"]),
        (StorageMix::Ssd, vec!["ssd"]),
        (StorageMix::Hdd, vec!["hdd"]),
        (StorageMix::Mixed, vec!["nvme", "ssd", "hdd"]),
    ] {
        for window_s in [1.0, 30.0] {
            let mut c = cluster(16, window_s, LinkRate::Ndr, mix, 11);
            for _ in 0..20 {
                c.advance(&[], 0.0);
                for n in 0..16 {
                    let w = c.window(n).expect("node up");
                    assert!(!w.block.is_empty());
                    for b in &w.block {
                        assert!(
                            classes.contains(&b.device_class.as_str()),
                            "{}",
                            b.device_class
                        );
                        assert_eq!(b.hist.iter().sum::<u64>(), b.requests, "{b:?}");
                        assert!(b.requests >= 5, "{b:?}");
                        assert_ne!(
                            *b.hist.last().expect("buckets"),
                            0,
                            "trailing zeros trimmed"
                        );
                        let top = b.hist.len() - 1;
                        let lo = b.hist.iter().position(|&x| x > 0).expect("a request");
                        assert!(
                            b.latency_max_ns >= 1 << top && b.latency_max_ns < 2 << top,
                            "{b:?}"
                        );
                        let mean = b.latency_sum_ns as f64 / b.requests as f64;
                        assert!(
                            mean >= (1u64 << lo) as f64 && mean < (2u64 << top) as f64,
                            "{b:?}"
                        );
                        // The median bucket sits at the class's latency.
                        let mut acc = 0;
                        let med = b
                            .hist
                            .iter()
                            .position(|&x| {
                                acc += x;
                                2 * acc >= b.requests
                            })
                            .expect("median");
                        let (lo_ms, hi_ms) = match b.device_class.as_str() {
                            "nvme" => (0.08, 0.2),
                            "ssd" => (0.2, 0.5),
                            _ => (4.0, 9.0),
                        };
                        let (b_lo, b_hi) = ((1u64 << med) as f64 / 1e6, (2u64 << med) as f64 / 1e6);
                        assert!(b_hi > lo_ms * 0.5 && b_lo < hi_ms * 1.6, "{b:?}");
                    }
                }
            }
        }
    }
}

/// Ground truth: a step to BER 1e-12 on NDR with 10 s windows (~4 errors a
/// window) is visible — its errors since the onset beyond what a link at the
/// reference BER (0.04 a window) would show — within 3 windows after its
/// onset window (over 200 seeds: 38 % in the onset window, 82 % by the next,
/// 98 % by the one after, all by the third).
#[test]
fn a_1e12_step_is_visible_within_three_windows() {
    let _turn = tests::one_file_at_a_time(file!());
    for seed in 1..=10 {
        let mut c = cluster(8, 10.0, LinkRate::Ndr, StorageMix::Nvme, seed);
        let fs = inject(&c, &["ib-link-degrade@n003/mlx5_3/1:ber=1e-12,ramp=0"]);
        for _ in 0..30 {
            c.advance(&fs, 120.0);
            for n in 0..8 {
                let _ = c.window(n);
            }
        }
        let t = &c.truth()[0];
        assert_eq!(t.onset_window, 13);
        let v = t.visible_window.expect("visible");
        assert!((13..=16).contains(&v), "seed {seed}: visible at {v}");
    }
}

/// Discrete faults are visible at their onset, a lost node 3 windows later;
/// confounders have no visible window.
#[test]
fn visibility_of_discrete_faults() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(8, 30.0, LinkRate::Hdr, StorageMix::Mixed, 2);
    let fs = inject(
        &c,
        &[
            "ib-link-down:at=95",
            "node-loss:at=300",
            "xid:at=300",
            "congestion:at=300",
        ],
    );
    c.advance(&fs, 0.0);
    let t = c.truth();
    assert_eq!((t[0].onset_window, t[0].visible_window), (4, Some(4)));
    assert_eq!((t[1].onset_window, t[1].visible_window), (11, Some(14)));
    assert_eq!(t[2].visible_window, Some(11));
    assert_eq!(t[3].visible_window, None);
}

/// Collector restart: a new instance, sequence from 1, one window missing.
#[test]
fn collector_restart_skips_a_window_and_restarts_the_sequence() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster(4, 10.0, LinkRate::Ndr, StorageMix::Nvme, 4);
    let fs = inject(&c, &["collector-restart@n001:at=50"]);
    let mut seen = Vec::new();
    for _ in 0..8 {
        c.advance(&fs, 0.0);
        if let Some(w) = c.window(1) {
            seen.push((w.seq, w.origin.expect("origin").instance));
        }
    }
    assert_eq!(seen.len(), 7);
    // Window 6 [50, 60) is missing; window 7 is the new instance's first.
    assert_eq!(seen[4], (5, "n001-sim-1".to_string()));
    assert_eq!(seen[5], (1, "n001-sim-2".to_string()));
}

/// `bench-detect --quick` runs the whole harness and writes its JSON (no
/// accuracy asserted here: the engine is being rewritten).
#[test]
fn bench_detect_quick_writes_json() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-bench-{}", std::process::id()));
    let out = dir.join("detect.json");
    let a = DetectArgs {
        quick: true,
        out: out.clone(),
        ..DetectArgs::default()
    };
    sim::detect::run(&a).expect("bench runs");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("json written")).expect("json");
    let runs = v["runs"].as_array().expect("runs");
    // 23 fault kinds (with ib-switch-degrade, gpu-thermal-host,
    // gpu-nvlink, nfs-slow and the three every-rank hangs), 2 without
    // OTLP and the 4 kernel-log XID faults at 3 window lengths, 12
    // confounders (with checkpoint, evaluation, job exit and cancelled
    // jobs) at 3.
    assert_eq!(runs.len(), 29 * 3 + 12 * 3, "{}", runs.len());
    assert!(!v["xid"]["by_kind"]["xid-crash-loop"].is_null());
    assert_eq!(v["scenarios"].as_u64(), Some(runs.len() as u64));
    assert_eq!(v["grid"]["quick"], true);
    for k in [
        "precision",
        "recall",
        "kinds",
        "by_kind_and_window",
        "confounders_by_window",
    ] {
        assert!(!v[k].is_null(), "{k} missing");
    }
    // The NCCL rows: a hang, the every-rank hangs by cause, a slow rank
    // with and without OTLP step times, a degrading link under a job
    // without them.
    for k in [
        "collective_hang",
        "collective_hang (dead-peer)",
        "collective_hang (port-down)",
        "collective_hang (unknown)",
        "straggler",
        "straggler (no OTLP)",
        "ib_link_degraded (no OTLP)",
    ] {
        let row = &v["kinds"][k];
        assert_eq!(row["runs"].as_u64(), Some(3), "{k}: {row}");
        assert!(row["named_correctly"].is_u64(), "{k}: {row}");
        assert!(!row["latency_from_onset_windows"].is_null(), "{k}: {row}");
    }
    assert_eq!(
        v["grid"]["no_otlp_kinds"],
        serde_json::json!(["ib-link-degrade", "nccl-slow-rank"])
    );
    // Every fault became visible within its run (the grid sizes runs so).
    assert_eq!(v["not_visible_within_run"].as_u64(), Some(0));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
