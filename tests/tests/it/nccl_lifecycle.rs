//! NCCL ranks over their life, with the real probes and the stand-in
//! `libnccl.so.2` (whose `ncclCommSplit` ranks members as NCCL does): split
//! communicators get their parent, colour, key, parent rank and, with every
//! member on this host, NCCL's rank and size; `/metrics` never has one
//! series twice; a rank sitting in a CUDA driver call says which and for how
//! long; a rank's last counts stay on `/metrics` after its process exits,
//! then fold into its job's totals.
use std::{
    collections::BTreeMap,
    io::Write as _,
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use collector::{
    nccl,
    probes::{ProbeOptions, Probes},
};

fn opts() -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: false,
        cuda: true,
        cuda_search: collector::cuda_lib::Search {
            configured: Some(tests::fake_libcuda()),
            ld_cache: false,
            proc_root: None,
            usual: vec![],
        },
        verbs: false,
        nccl: true,
        nccl_search: collector::nccl_lib::Search {
            configured: vec![tests::fake_nccl()],
            ld_cache: false,
            proc_root: None,
        },
        ..ProbeOptions::default()
    }
}

struct Rank {
    child: Child,
    lines: mpsc::Receiver<String>,
    pid: u32,
    rank: i32,
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the `nranks` ranks of one communicator in steps mode (`iters`
/// iterations, then a split), rank i with the environment `env(i)`, and
/// waits for each to print `ready`.
fn start(
    dir: &Path,
    nranks: i32,
    iters: u32,
    env: impl Fn(i32) -> Vec<(&'static str, String)>,
) -> Vec<Rank> {
    let idfile = dir.join("comm.id");
    let mut ranks: Vec<Rank> = (0..nranks)
        .map(|r| {
            let mut child = Command::new(tests::nccl_workload())
                .arg(tests::fake_nccl())
                .arg(tests::fake_libcuda())
                .arg(&idfile)
                .args([nranks.to_string(), r.to_string(), r.to_string()])
                .args([iters.to_string(), "steps".into()])
                .env("FAKE_NCCL_SHM_DIR", dir)
                .envs(env(r))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start nccl_workload");
            Rank {
                lines: tests::lines_of(&mut child),
                pid: child.id(),
                child,
                rank: r,
            }
        })
        .collect();
    for r in &mut ranks {
        let l = r
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("rank {} never got ready: {e}", r.rank));
        assert_eq!(l, format!("ready pid={}", r.pid));
    }
    ranks
}

/// Lets every rank destroy its communicators and exit; each must succeed.
fn finish(ranks: &mut [Rank]) {
    for r in ranks.iter_mut() {
        let _ = r.child.stdin.as_mut().expect("stdin").write_all(b"\n");
    }
    for r in ranks.iter_mut() {
        let st = r.child.wait().expect("wait");
        assert!(st.success(), "rank {} exited {st}", r.rank);
    }
}

#[test]
fn split_ranks_carry_nccl_s_rank_and_size_and_no_series_is_exported_twice() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl split") {
        return;
    }
    let dir = tests::scratch_dir("nccl-split");
    // Five ranks split in two colours: colour 0 = parent ranks 0 and 3 with
    // keys 9 and -1 (3 first); colour 1 = ranks 1, 2, 4 with keys 5, 5, 1
    // (4 first, then 1 and 2 by parent rank).
    const PARTS: [(i32, i32); 5] = [(0, 9), (1, 5), (1, 5), (0, -1), (1, 1)];
    const WANT: [(i32, i32); 5] = [(1, 2), (1, 3), (2, 3), (0, 2), (0, 3)];
    const ITERS: u64 = 2;
    tests::runtime().block_on(async {
        let probes = Probes::load(&opts()).expect("load probes");
        let mut ranks = start(&dir, 5, ITERS as u32, |r| {
            let (c, k) = PARTS[r as usize];
            vec![("NCCL_WORKLOAD_SPLIT", format!("{c}:{k}"))]
        });
        // The stand-in's own answer (ncclCommUserRank / ncclCommCount).
        for r in &ranks {
            let l = r
                .lines
                .recv_timeout(Duration::from_secs(10))
                .expect("split line");
            let (want_rank, want_n) = WANT[r.rank as usize];
            assert_eq!(l, format!("split rank={want_rank} nranks={want_n}"));
        }
        let maps = probes.nccl_maps().expect("maps");
        let all = nccl::ranks(&maps, "host-a");
        let parent = |pid: u32| {
            all.values()
                .find(|x| x.pid == pid && x.init != "ncclCommSplit")
                .expect("parent rank")
                .clone()
        };
        let p0 = parent(ranks[0].pid);
        assert_eq!((p0.nranks, p0.rank), (5, 0));
        let mut split_ids = BTreeMap::new();
        for r in &ranks {
            let s: Vec<_> = all
                .values()
                .filter(|x| x.pid == r.pid && x.init == "ncclCommSplit")
                .collect();
            assert_eq!(s.len(), 1, "rank {}: {all:?}", r.rank);
            let s = s[0];
            let (c, k) = PARTS[r.rank as usize];
            let (want_rank, want_n) = WANT[r.rank as usize];
            assert_eq!(
                (s.parent.as_str(), s.color, s.key, s.parent_rank),
                (p0.comm.as_str(), c, k, r.rank),
                "rank {}",
                r.rank
            );
            assert_eq!((s.rank, s.nranks), (want_rank, want_n), "rank {}", r.rank);
            assert_eq!(s.ops.get("AllReduce"), Some(&(ITERS, ITERS * 16 * 4)));
            split_ids
                .entry(c)
                .or_insert_with(Vec::new)
                .push(s.comm.clone());
        }
        assert_eq!(split_ids.len(), 2);
        for ids in split_ids.values() {
            assert!(ids.iter().all(|i| i == &ids[0]), "{ids:?}");
        }
        assert_ne!(split_ids[&0][0], split_ids[&1][0]);
        // The wire rows carry the same.
        let rows = nccl::window_rows(&BTreeMap::new(), &all, nccl::realtime_offset_ns(), |_| {
            nccl::Who {
                job: "j".into(),
                rank: None,
                hcas: vec![],
            }
        });
        for r in &ranks {
            let row = rows
                .iter()
                .find(|x| x.pid == r.pid && x.init == "ncclCommSplit")
                .expect("split row");
            let (c, k) = PARTS[r.rank as usize];
            let (want_rank, want_n) = WANT[r.rank as usize];
            assert_eq!(
                (
                    row.parent.as_str(),
                    row.color,
                    row.key,
                    row.parent_rank,
                    row.rank,
                    row.nranks
                ),
                (p0.comm.as_str(), c, k, r.rank, want_rank, want_n)
            );
        }
        let text = nccl::render(&all, |_| "j".into());
        tests::metrics::assert_unique_series(&text);
        // Seen from a host that has only ranks 0, 1 and 2 of the parent (3
        // and 4 elsewhere): the split ranks stay -1 here (the correlator
        // computes them), and their series still differ.
        let mut partial = maps.clone();
        let away = [ranks[3].pid, ranks[4].pid];
        partial.comms.retain(|k, _| !away.contains(&k.0));
        partial.ops.retain(|k, _| !away.contains(&k.pid));
        let some = nccl::ranks(&partial, "host-a");
        let splits: Vec<_> = some
            .values()
            .filter(|x| x.init == "ncclCommSplit")
            .collect();
        assert_eq!(splits.len(), 3);
        for s in &splits {
            assert_eq!((s.rank, s.nranks), (-1, -1), "{s:?}");
            assert!(s.parent_rank >= 0 && s.parent_rank < 3);
        }
        let text = nccl::render(&some, |_| "j".into());
        tests::metrics::assert_unique_series(&text);
        let split_series = tests::metrics::samples(&text)
            .filter(|s| {
                s.name == "faultline_nccl_calls_total"
                    && s.labels.iter().any(|(k, v)| *k == "rank" && v == "-1")
            })
            .count();
        assert_eq!(split_series, 3, "{text}");
        finish(&mut ranks);

        // A rank that passes NCCL_SPLIT_NOCOLOR joins nothing: three ranks,
        // colours 0, NOCOLOR, 0, keys 0, 0, -5: parent rank 2 first.
        let dir2 = dir.join("nocolor");
        std::fs::create_dir_all(&dir2).expect("tmp");
        const NOCOLOR: [(i32, i32); 3] = [(0, 0), (-1, 0), (0, -5)];
        let mut ranks = start(&dir2, 3, ITERS as u32, |r| {
            let (c, k) = NOCOLOR[r as usize];
            vec![("NCCL_WORKLOAD_SPLIT", format!("{c}:{k}"))]
        });
        for (r, want) in [(0, "split rank=1 nranks=2"), (2, "split rank=0 nranks=2")] {
            let l = ranks[r]
                .lines
                .recv_timeout(Duration::from_secs(10))
                .expect("split line");
            assert_eq!(l, want, "stand-in rank {r}");
        }
        let all = nccl::ranks(&probes.nccl_maps().expect("maps"), "host-a");
        let split_of = |pid: u32| -> Vec<(i32, i32)> {
            all.values()
                .filter(|x| x.pid == pid && x.init == "ncclCommSplit")
                .map(|x| (x.rank, x.nranks))
                .collect()
        };
        assert_eq!(split_of(ranks[0].pid), vec![(1, 2)]);
        assert_eq!(split_of(ranks[1].pid), vec![], "NOCOLOR: no communicator");
        assert_eq!(split_of(ranks[2].pid), vec![(0, 2)]);
        tests::metrics::assert_unique_series(&nccl::render(&all, |_| "j".into()));
        finish(&mut ranks);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_rank_inside_a_cuda_sync_shows_the_call_and_its_age() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl blocked call") {
        return;
    }
    let dir = tests::scratch_dir("nccl-blocked");
    const SYNC_S: f64 = 3.0;
    tests::runtime().block_on(async {
        let probes = Probes::load(&opts()).expect("load probes");
        let mut ranks = start(&dir, 1, 1, |_| {
            vec![
                ("NCCL_WORKLOAD_SYNC_AFTER_READY", "1".into()),
                ("FAKE_CUDA_SYNC_US", format!("{}", (SYNC_S * 1e6) as u64)),
            ]
        });
        let entered = Instant::now();
        let pid = ranks[0].pid;
        let blocked_now = || {
            let (calls, truncated) = probes.cuda_in_flight(1 << 16).expect("in flight");
            assert!(!truncated);
            let now = collector::probes::clock_ns(libc::CLOCK_MONOTONIC);
            nccl::blocked(calls.iter().map(|c| (c.pid, c.kind, c.start_ns)), now)
                .get(&pid)
                .copied()
        };
        std::thread::sleep(Duration::from_millis(1500));
        let b = blocked_now().expect("inside cuStreamSynchronize");
        let waited = entered.elapsed().as_secs_f64();
        eprintln!("blocked {b:?} after {waited:.3} s");
        assert_eq!(b.0, "cuStreamSynchronize");
        // Entered just after "ready" was printed: its age is the time since,
        // less the line's trip to this test.
        assert!(
            b.1 <= waited + 0.01 && b.1 >= waited - 0.3,
            "{b:?} vs {waited}"
        );
        // The row says so.
        let maps = probes.nccl_maps().expect("maps");
        let mut all = nccl::ranks(&maps, "h");
        for r in all.values_mut() {
            r.blocked = blocked_now();
        }
        let rows = nccl::window_rows(&all, &all, 0, |_| nccl::Who {
            job: String::new(),
            rank: None,
            hcas: vec![],
        });
        assert!(!rows.is_empty());
        for row in &rows {
            assert_eq!(row.blocked_call, "cuStreamSynchronize");
            assert!((1.4..SYNC_S).contains(&row.blocked_s), "{row:?}");
        }
        // Once the call returned, nothing is in flight.
        let l = ranks[0]
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("synced");
        assert_eq!(l, "synced");
        assert!(entered.elapsed().as_secs_f64() >= SYNC_S - 0.3);
        assert_eq!(blocked_now(), None);
        finish(&mut ranks);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// The collector's metrics address from its output (`metrics on http://…`).
fn metrics_addr(col: &mpsc::Receiver<String>) -> String {
    loop {
        let l = col
            .recv_timeout(Duration::from_secs(30))
            .expect("collector output");
        if let Some(a) = l.strip_prefix("metrics on http://") {
            return a.trim_end_matches("/metrics").to_string();
        }
    }
}

/// The NCCL rows of every window the collector recorded so far.
fn recorded_rows(record: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|w| w["nccl"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// A scrape, checked for series exported twice.
fn scrape(addr: &str) -> String {
    let text = tests::metrics::scrape(addr).expect("scrape");
    tests::metrics::assert_unique_series(&text);
    text
}

/// `faultline_nccl_calls_total` of `pid`'s ranks (the rank_info series
/// name the pid) by (comm, rank, op).
fn rank_calls(text: &str, pid: u32) -> BTreeMap<(String, String, String), f64> {
    let samples: Vec<_> = tests::metrics::samples(text).collect();
    let label = |s: &tests::metrics::Sample<'_>, k: &str| {
        s.labels
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mine: Vec<(String, String)> = samples
        .iter()
        .filter(|s| s.name == "faultline_nccl_rank_info" && label(s, "pid") == pid.to_string())
        .map(|s| (label(s, "comm"), label(s, "rank")))
        .collect();
    samples
        .iter()
        .filter(|s| s.name == "faultline_nccl_calls_total")
        .map(|s| {
            (
                (label(s, "comm"), label(s, "rank"), label(s, "op")),
                s.value,
            )
        })
        .filter(|((c, r, _), _)| mine.contains(&(c.clone(), r.clone())))
        .collect()
}

#[test]
fn a_rank_s_last_counts_stay_on_metrics_after_it_exits_then_fold_into_its_job() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl exited rank") {
        return;
    }
    let dir = tests::scratch_dir("nccl-exit");
    const RETAIN_S: f64 = 4.0;
    const ITERS: u64 = 3;
    let cfg = dir.join("collector.toml");
    std::fs::write(&cfg, format!("[nccl]\nretain_exited_s = {RETAIN_S}\n")).expect("config");
    let ib = tests::FakeIb::new("nccl-exit");
    let mut col = tests::KillOnDrop(
        Command::new(tests::bin("faultline-collector"))
            .arg("--config")
            .arg(&cfg)
            .args(["--window", "1", "--duration", "120", "--quiet"])
            .args(["--no-nvml", "--no-block", "--no-otlp", "--no-verbs"])
            .arg("--cuda-library")
            .arg(tests::fake_libcuda())
            .arg("--nccl-library")
            .arg(tests::fake_nccl())
            .args(["--metrics-addr", "127.0.0.1:0"])
            .arg("--sysfs-root")
            .arg(ib.root())
            .arg("--record")
            .arg(dir.join("windows.jsonl"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("collector"),
    );
    let lines = tests::lines_of(&mut col.0);
    let addr = metrics_addr(&lines);
    tests::wait_window(&lines, 1);
    // Two ranks of job 4242; rank 0 then sits 2.5 s in cuStreamSynchronize.
    let mut ranks = start(&dir, 2, ITERS as u32, |r| {
        let mut e = vec![("SLURM_JOB_ID", "4242".to_string())];
        if r == 0 {
            e.push(("NCCL_WORKLOAD_SYNC_AFTER_READY", "1".into()));
            e.push(("FAKE_CUDA_SYNC_US", "2500000".into()));
        }
        e
    });
    let pids: Vec<u32> = ranks.iter().map(|r| r.pid).collect();
    // Per rank: every op of ITERS iterations on the parent, ITERS
    // all-reduces on the split.
    let per_rank = |op: &str| -> f64 {
        let n = ITERS as f64;
        match op {
            "Broadcast" => 2.0 * n,
            _ => n,
        }
    };
    let want_parent: BTreeMap<&str, f64> = [
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "Broadcast",
        "Reduce",
        "AlltoAll",
        "Send",
        "Recv",
    ]
    .into_iter()
    .map(|o| (o, per_rank(o)))
    .collect();
    let counted = |text: &str, pid: u32| -> f64 { rank_calls(text, pid).values().sum() };
    let full: f64 = want_parent.values().sum::<f64>() + ITERS as f64;
    let t0 = Instant::now();
    let mut live = String::new();
    while t0.elapsed() < Duration::from_secs(20) {
        live = scrape(&addr);
        if pids.iter().all(|p| counted(&live, *p) == full) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for p in &pids {
        assert_eq!(counted(&live, *p), full, "pid {p}: {live}");
    }
    let live_series = rank_calls(&live, pids[0]).len() + rank_calls(&live, pids[1]).len();
    // While rank 0 sits in its sync, /metrics says so (one gauge per
    // communicator of that process, none for rank 1).
    let mut blocked_gauges = 0;
    let synced = loop {
        if let Ok(l) = ranks[0].lines.try_recv() {
            break l;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "never synced");
        let text = scrape(&addr);
        blocked_gauges = blocked_gauges.max(
            tests::metrics::samples(&text)
                .filter(|s| {
                    s.name == "faultline_nccl_blocked_seconds"
                        && s.labels
                            .iter()
                            .any(|(k, v)| *k == "call" && v == "cuStreamSynchronize")
                })
                .count(),
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(synced, "synced");
    assert_eq!(blocked_gauges, 2, "rank 0's two communicators");
    // Both ranks exit; their last counts stay for RETAIN_S.
    finish(&mut ranks);
    let exited_at = Instant::now();
    // Once the collector has sent both ranks' last rows (exited), their
    // series are still there, with the same counts.
    let record = dir.join("windows.jsonl");
    while recorded_rows(&record)
        .iter()
        .filter(|r| r["exited"].as_bool() == Some(true))
        .count()
        < 4
    {
        assert!(
            exited_at.elapsed() < Duration::from_secs(20),
            "no exited rows"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = scrape(&addr);
    assert!(
        exited_at.elapsed().as_secs_f64() < RETAIN_S,
        "scraped within the retention"
    );
    for p in &pids {
        assert_eq!(
            rank_calls(&after, *p),
            rank_calls(&live, *p),
            "pid {p}'s series after its exit"
        );
    }
    let job_total = |text: &str, op: &str| {
        tests::metrics::value(
            text,
            "faultline_nccl_job_calls_total",
            &[("hpc_job", "4242"), ("op", op)],
        )
    };
    assert_eq!(
        job_total(&after, "AllReduce"),
        Some(2.0 * 2.0 * ITERS as f64)
    );
    // Past the retention: the rank series are gone, the job's totals stay,
    // equal to the sum of the ranks' last counts.
    let t1 = Instant::now();
    let mut folded = String::new();
    while t1.elapsed() < Duration::from_secs(20) {
        folded = scrape(&addr);
        if pids.iter().all(|p| rank_calls(&folded, *p).is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        exited_at.elapsed().as_secs_f64() >= RETAIN_S,
        "kept for the retention"
    );
    for p in &pids {
        assert!(rank_calls(&folded, *p).is_empty(), "{folded}");
    }
    for op in want_parent.keys() {
        let sum: f64 = pids
            .iter()
            .map(|p| {
                rank_calls(&live, *p)
                    .iter()
                    .filter(|((_, _, o), _)| o == op)
                    .map(|(_, v)| v)
                    .sum::<f64>()
            })
            .sum();
        assert_eq!(job_total(&folded, op), Some(sum), "{op}: {folded}");
    }
    assert_eq!(
        job_total(&folded, "AllReduce"),
        Some(2.0 * 2.0 * ITERS as f64)
    );
    eprintln!(
        "{live_series} rank series while alive, {} after the retention; job totals kept",
        rank_calls(&folded, pids[0]).len() + rank_calls(&folded, pids[1]).len()
    );
    // The wire: each rank's last row says exited, and rank 0's rows while
    // it sat in the sync name the call.
    let rows = recorded_rows(&record);
    for p in &pids {
        let mine: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r["pid"].as_u64() == Some(u64::from(*p)))
            .collect();
        let exited: Vec<_> = mine
            .iter()
            .filter(|r| r["exited"].as_bool() == Some(true))
            .collect();
        assert_eq!(exited.len(), 2, "one last row per communicator: {mine:?}");
        assert!(
            mine.last()
                .is_some_and(|r| r["exited"].as_bool() == Some(true)),
            "the exited rows are the last"
        );
    }
    let blocked: Vec<f64> = rows
        .iter()
        .filter(|r| r["pid"].as_u64() == Some(u64::from(pids[0])))
        .filter(|r| r["blocked_call"].as_str() == Some("cuStreamSynchronize"))
        .filter_map(|r| r["blocked_s"].as_f64())
        .collect();
    eprintln!("rank 0 blocked_s per row: {blocked:?}");
    assert!(!blocked.is_empty(), "rows inside the sync");
    let longest = blocked.iter().copied().fold(0.0, f64::max);
    assert!(
        (1.4..=2.5).contains(&longest),
        "a 2.5 s sync seen at 1 s windows: {longest}"
    );
    assert!(rows
        .iter()
        .filter(|r| r["pid"].as_u64() == Some(u64::from(pids[1])))
        .all(|r| r["blocked_call"].as_str().unwrap_or("").is_empty()));
    drop(col);
    let _ = std::fs::remove_dir_all(&dir);
}
