//! Engine cost and state from untrusted input stay within a stated budget
//! (debug build, one core of the 2-core CI VM, other tests running):
//!
//! * one window with 60,000 distinct step jobs: ≤ 2 s of engine CPU, and a
//!   real incident on another host right after it is not delayed;
//! * 100,000 hosts × 3 rounds of 1-second windows (300,000 windows): ≤ 60 s
//!   of engine CPU (linear: the third round costs under 3× the first; the
//!   first round has no rates yet) and ≤ 1.5 GiB of resident memory growth
//!   (measured on the dev VM: 2.5 + 5.3 + 4.8 s, +236 MiB);
//! * hosts that stop sending are forgotten after `limits.idle_forget_s` of
//!   event time, and their `node_lost` incidents resolve as stale.
use std::time::{Duration, Instant};

use crate::common;

use correlator::{
    engine::{config::LimitsConfig, DetectConfig, Engine},
    ingest::MAX_WINDOW_BYTES,
};
use proto::v1::{GpuSample, IbPort, StepTime, Window};

const T0: i64 = 1_800_000_000_000;

/// A plain host window: 1 IB port (active, counters moving) and 1 GPU.
fn host_window(host: &str, seq: u64, end_ms: i64) -> Window {
    let mut w = common::window(host, seq, end_ms);
    w.ib_ports = vec![IbPort {
        hca: "mlx5_0".into(),
        port: 1,
        state: 4,
        phys_state: 5,
        counters: [
            ("port_xmit_data".to_string(), seq * 1_000_000),
            ("port_rcv_data".to_string(), seq * 1_000_000),
            ("symbol_error".to_string(), 0),
        ]
        .into_iter()
        .collect(),
        ..IbPort::default()
    }];
    w.gpus = vec![GpuSample {
        index: 0,
        uuid: format!("GPU-{host}"),
        temp_c: Some(60),
        ..GpuSample::default()
    }];
    w
}

fn cpu() -> Duration {
    // Thread CPU time: other tests in this binary do not count.
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn a_window_with_60k_jobs_costs_little_and_delays_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    // A few real ranks of a real job first.
    for r in 0..8u32 {
        let mut w = common::window(&format!("r{r}"), 1, T0);
        w.steps = vec![StepTime {
            job: "train".into(),
            rank: r,
            seconds: 1.0,
            ..StepTime::default()
        }];
        e.ingest(&w);
    }
    let mut evil = common::window("evil", 1, T0);
    evil.steps = (0..60_000u32)
        .map(|j| StepTime {
            job: format!("job-{j}"),
            rank: j % 8,
            seconds: 1.0 + f64::from(j % 7),
            ..StepTime::default()
        })
        .collect();
    let c0 = cpu();
    let wall = Instant::now();
    e.ingest(&evil);
    let spent = cpu() - c0;
    assert!(
        spent < Duration::from_secs(2),
        "60k-job window cost {spent:?} of engine CPU ({:?} wall)",
        wall.elapsed()
    );
    assert!(
        e.dropped().get("jobs").copied().unwrap_or(0) > 0,
        "the jobs past limits.max_jobs_per_window are counted: {:?}",
        e.dropped()
    );
    // A real link going down on another host right after is raised at once.
    let c0 = cpu();
    let mut ups = e.ingest(&host_window("real", 1, T0));
    let mut w2 = host_window("real", 2, T0 + 1000);
    w2.ib_ports[0].state = 1;
    w2.ib_ports[0].phys_state = 3;
    for s in 3..=4 {
        ups.extend(e.ingest(&w2));
        w2 = Window {
            seq: s,
            start_unix_ms: w2.end_unix_ms,
            end_unix_ms: w2.end_unix_ms + 1000,
            ..w2
        };
    }
    assert!(cpu() - c0 < Duration::from_millis(500));
    assert!(
        ups.iter().any(|u| u.kind == "ib_link_down"),
        "{:?}",
        ups.iter().map(|u| &u.kind).collect::<Vec<_>>()
    );
}

/// `w` with rows `row(0), row(1), …` appended to the repeated field `tag`
/// (through `rows`) while the encoded window stays within the gRPC message
/// limit `serve` decodes: the largest window of that row kind a host can send.
fn fill<T: prost::Message>(
    w: &mut Window,
    tag: u32,
    rows: fn(&mut Window) -> &mut Vec<T>,
    row: impl Fn(u32) -> T,
) -> usize {
    let mut size = prost::Message::encoded_len(w);
    for i in 0.. {
        let r = row(i);
        let len = prost::encoding::message::encoded_len(tag, &r);
        if size + len > MAX_WINDOW_BYTES {
            break;
        }
        size += len;
        rows(w).push(r);
    }
    assert_eq!(prost::Message::encoded_len(w), size);
    rows(w).len()
}

/// The largest window the message limit allows, of each row kind (rows
/// small and distinct: the most of them, each a new job, rank, port or
/// event), costs at most 1 s of engine CPU in a debug build, twice in a row
/// (the second meets the state the first left); every kind is clipped to
/// its cap (counted), and a real link going down on another host right
/// after is raised at once. Before every row kind had a cap, 60,000 usage
/// rows cost ~15 s (the interference detector scanned the window's rows
/// once per series). Measured on the 2-core dev VM: at most ~0.2 s a window.
#[test]
fn the_largest_window_of_every_row_kind_costs_little() {
    let _turn = tests::one_file_at_a_time(file!());
    use proto::v1::{
        BlockStat, CudaProc, Event, JobUsage, NcclPerf, NcclRank, VerbsCompletions, WorkloadSample,
    };
    type Build = fn(&mut Window) -> (usize, &'static str);
    let kinds: [(&str, Build); 12] = [
        ("ib_ports", |w| {
            let n = fill(
                w,
                5,
                |w| &mut w.ib_ports,
                |i| IbPort {
                    hca: format!("h{i}"),
                    port: 1,
                    state: 1,
                    ..IbPort::default()
                },
            );
            (n, "entities")
        }),
        ("gpus", |w| {
            let n = fill(
                w,
                6,
                |w| &mut w.gpus,
                |i| GpuSample {
                    index: i,
                    lost: true,
                    ..GpuSample::default()
                },
            );
            (n, "entities")
        }),
        ("block", |w| {
            let n = fill(
                w,
                7,
                |w| &mut w.block,
                |i| BlockStat {
                    device: format!("d{i}"),
                    requests: 1,
                    latency_sum_ns: 1_000_000_000,
                    ..BlockStat::default()
                },
            );
            (n, "entities")
        }),
        ("cuda", |w| {
            let n = fill(
                w,
                8,
                |w| &mut w.cuda,
                |i| CudaProc {
                    pid: i,
                    job: format!("j{}", i % 512),
                    launches: 1,
                    errors: 1,
                    ..CudaProc::default()
                },
            );
            (n, "cuda")
        }),
        ("verbs", |w| {
            let n = fill(
                w,
                9,
                |w| &mut w.verbs,
                |i| VerbsCompletions {
                    pid: i,
                    qp: i,
                    status: "err".into(),
                    count: 1,
                    job: format!("j{}", i % 512),
                },
            );
            (n, "verbs")
        }),
        ("events", |w| {
            let n = fill(
                w,
                10,
                |w| &mut w.events,
                |i| Event {
                    kind: "gpu_xid".into(),
                    entity: format!("evil/gpu{i}"),
                    code: 79,
                    ..Event::default()
                },
            );
            (n, "events")
        }),
        ("foreign events", |w| {
            let n = fill(
                w,
                10,
                |w| &mut w.events,
                |i| Event {
                    kind: "gpu_xid".into(),
                    entity: format!("real/gpu{i}"),
                    code: 79,
                    ..Event::default()
                },
            );
            (n, "foreign")
        }),
        ("steps", |w| {
            let n = fill(
                w,
                12,
                |w| &mut w.steps,
                |i| StepTime {
                    job: format!("j{}", i % 512),
                    rank: i,
                    seconds: 1.0 + f64::from(i % 7),
                    ..StepTime::default()
                },
            );
            (n, "ranks")
        }),
        ("workload", |w| {
            let n = fill(
                w,
                13,
                |w| &mut w.workload,
                |i| WorkloadSample {
                    job: format!("j{}", i % 512),
                    rank: i32::try_from(i).unwrap_or(0),
                    signal: "ttft_seconds".into(),
                    model: "m".into(),
                    count: 1,
                    sum: 0.1,
                    ..WorkloadSample::default()
                },
            );
            (n, "workload")
        }),
        ("nccl", |w| {
            let n = fill(
                w,
                14,
                |w| &mut w.nccl,
                |i| NcclRank {
                    comm: format!("{i:x}"),
                    nranks: 8,
                    rank: i32::try_from(i % 8).unwrap_or(0),
                    pid: i,
                    job: format!("j{}", i % 512),
                    seq: 1,
                    ..NcclRank::default()
                },
            );
            (n, "ranks")
        }),
        ("nccl_perf", |w| {
            let n = fill(
                w,
                15,
                |w| &mut w.nccl_perf,
                |i| NcclPerf {
                    comm_name: format!("c{i}"),
                    job: format!("j{}", i % 512),
                    points: 1,
                    exec_us: 1.0,
                    ..NcclPerf::default()
                },
            );
            (n, "nccl_perf")
        }),
        ("usage", |w| {
            let n = fill(
                w,
                50,
                |w| &mut w.usage,
                |i| JobUsage {
                    job: format!("j{}", i % 512),
                    resource_kind: "gpu".into(),
                    resource: (i / 512 % 8).to_string(),
                    gpu_busy_seconds: 1.0,
                    resource_util: 0.95,
                    ..JobUsage::default()
                },
            );
            (n, "usage")
        }),
    ];
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut ups = e.ingest(&host_window("real", 1, T0));
    for (seq, (kind, build)) in (1u64..).zip(kinds) {
        let mut w = common::window("evil", 2 * seq - 1, T0 + 2000 * seq as i64);
        let (rows, what) = build(&mut w);
        let before = e.dropped().get(what).copied().unwrap_or(0);
        let mut spent = Vec::new();
        for k in 0..2 {
            w.seq += k;
            w.start_unix_ms += 1000 * k as i64;
            w.end_unix_ms += 1000 * k as i64;
            let c0 = cpu();
            e.ingest(&w);
            spent.push(cpu() - c0);
        }
        eprintln!("{kind}: {rows} rows: {spent:?} of engine CPU");
        assert!(rows > 400_000, "{kind}: only {rows} rows fit");
        for s in &spent {
            assert!(
                *s < Duration::from_secs(1),
                "{kind}: a window of {rows} rows cost {spent:?} of engine CPU"
            );
        }
        assert!(
            e.dropped().get(what).copied().unwrap_or(0) > before,
            "{kind}: rows past the cap are counted as {what}: {:?}",
            e.dropped()
        );
    }
    // A real link going down on another host right after is raised at once.
    let c0 = cpu();
    let mut w = host_window("real", 2, T0 + 30_000);
    w.ib_ports[0].state = 1;
    w.ib_ports[0].phys_state = 3;
    for s in 3..=4 {
        ups.extend(e.ingest(&w));
        w = Window {
            seq: s,
            start_unix_ms: w.end_unix_ms,
            end_unix_ms: w.end_unix_ms + 1000,
            ..w
        };
    }
    assert!(cpu() - c0 < Duration::from_millis(500));
    assert!(
        ups.iter()
            .any(|u| u.kind == "ib_link_down" && u.entity == "real/mlx5_0/1"),
        "{:?}",
        ups.iter().map(|u| (&u.kind, &u.entity)).collect::<Vec<_>>()
    );
}

/// The interference detector's cost is linear in a window's usage rows,
/// caps aside: n distinct jobs on one GPU, two windows each. It scanned the
/// window's rows once per series: 10,000 rows cost 1.04 s and 40,000 cost
/// 18.6 s (both windows, debug build, dev VM); now 40,000 cost about 4× what
/// 10,000 do (0.07 s and 0.28 s).
#[test]
fn usage_rows_cost_linear_time() {
    let _turn = tests::one_file_at_a_time(file!());
    use proto::v1::JobUsage;
    let cfg = DetectConfig {
        limits: LimitsConfig {
            max_rows_per_window: 1 << 30,
            max_jobs_per_window: 1 << 30,
            ..LimitsConfig::default()
        },
        ..DetectConfig::default()
    };
    let mut spent = Vec::new();
    for n in [10_000u32, 40_000] {
        let mut e = Engine::new(&cfg, Default::default());
        let mut w = common::window("n1", 1, T0);
        w.usage = (0..n)
            .map(|i| JobUsage {
                job: format!("j{i}"),
                resource_kind: "gpu".into(),
                resource: "0".into(),
                gpu_busy_seconds: 1.0,
                resource_util: 0.95,
                ..JobUsage::default()
            })
            .collect();
        let c0 = cpu();
        e.ingest(&w);
        w.seq = 2;
        w.end_unix_ms += 1000;
        e.ingest(&w);
        spent.push(cpu() - c0);
    }
    eprintln!("usage rows 10k, 40k: {spent:?}");
    assert!(spent[1] < Duration::from_secs(2), "{spent:?}");
    assert!(spent[1] < spent[0] * 8, "superlinear: {spent:?}");
}

#[test]
fn a_hundred_thousand_hosts_cost_linear_time_and_bounded_memory() {
    let _turn = tests::one_file_at_a_time(file!());
    let hosts = 100_000usize;
    let cfg = DetectConfig {
        limits: LimitsConfig {
            idle_forget_s: 600.0,
            ..LimitsConfig::default()
        },
        ..DetectConfig::default()
    };
    let mut e = Engine::new(&cfg, Default::default());
    let names: Vec<String> = (0..hosts).map(|h| format!("n{h:06}")).collect();
    let rss0 = rss_kib();
    let mut rounds = Vec::new();
    for round in 1..=3u64 {
        let c0 = cpu();
        for (h, n) in names.iter().enumerate() {
            // Ends staggered over the second, as real collectors are.
            let end = T0 + round as i64 * 1000 + (h % 1000) as i64;
            e.ingest(&host_window(n, round, end));
        }
        rounds.push(cpu() - c0);
    }
    let total: Duration = rounds.iter().sum();
    let grown_mib = rss_kib().saturating_sub(rss0) / 1024;
    eprintln!("100k hosts: rounds {rounds:?}, total {total:?}, RSS +{grown_mib} MiB");
    assert!(total < Duration::from_secs(60), "rounds {rounds:?}");
    assert!(
        rounds[2] < rounds[0] * 3,
        "later rounds cost about what the first did: {rounds:?}"
    );
    assert!(grown_mib < 1536, "RSS grew {grown_mib} MiB");
    assert_eq!(e.hosts(), hosts);
}

#[test]
fn silent_hosts_are_forgotten_and_their_node_lost_resolves_as_stale() {
    let _turn = tests::one_file_at_a_time(file!());
    let cfg = DetectConfig {
        limits: LimitsConfig {
            idle_forget_s: 60.0,
            ..LimitsConfig::default()
        },
        ..DetectConfig::default()
    };
    let mut e = Engine::new(&cfg, Default::default());
    let names: Vec<String> = (0..1000).map(|h| format!("n{h:04}")).collect();
    for s in 1..=3u64 {
        for n in &names {
            e.ingest(&host_window(n, s, T0 + s as i64 * 1000));
        }
    }
    // 400 hosts go silent (spoofed names that never come back, or dead
    // nodes); 600 keep sending for 2 minutes of event time.
    let (mut opened, mut stale) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    );
    for s in 4..=123u64 {
        for n in names.iter().take(600) {
            for u in e.ingest(&host_window(n, s, T0 + s as i64 * 1000)) {
                if u.kind != "node_lost" {
                    continue;
                }
                if u.state == "opened" {
                    opened.insert(u.entity.clone());
                }
                if u.state == "resolved" && u.evidence.iter().any(|l| l.starts_with("stale:")) {
                    stale.insert(u.entity.clone());
                }
            }
        }
    }
    assert_eq!(opened.len(), 400, "the silent hosts were reported lost");
    assert_eq!(
        stale, opened,
        "every node_lost of a forgotten host resolved as stale"
    );
    assert!(e.open().is_empty(), "{:?}", e.open().first());
    assert_eq!(e.hosts(), 600, "the silent hosts are forgotten");
}

/// A host that renames its ports every window cannot grow the engine's
/// per-entity state past `limits.max_entities_per_host`: 10 windows × 100
/// new ports with a cap of 256 leave 256 ports known and 744 rows counted
/// as dropped; a port it already had keeps being judged.
#[test]
fn a_host_renaming_its_ports_stays_within_its_entity_cap() {
    let _turn = tests::one_file_at_a_time(file!());
    let cfg = DetectConfig {
        limits: LimitsConfig {
            max_entities_per_host: 256,
            ..LimitsConfig::default()
        },
        ..DetectConfig::default()
    };
    let mut e = Engine::new(&cfg, Default::default());
    for seq in 1..=10u64 {
        let mut w = host_window("n1", seq, T0 + seq as i64 * 1000);
        let first = w.ib_ports[0].clone();
        w.ib_ports = (0..100)
            .map(|i| IbPort {
                hca: format!("fake{seq}_{i}"),
                ..first.clone()
            })
            .chain(std::iter::once(first.clone()))
            .collect();
        e.ingest(&w);
    }
    // 1 real port + 1 GPU + 254 fake ports admitted in the first windows.
    assert_eq!(e.ib.ports_tracked(), 255);
    assert_eq!(e.dropped().get("entities").copied(), Some(1000 - 254));
    // The host's own port is still in every window the engine judged.
    assert!(e.ib.entities_of("n1").iter().any(|p| p.contains("mlx5_0")));
}
