//! NCCL uprobes against the stand-in `libnccl.so.2` (NCCL's C ABI, ranks as
//! processes, started after the probes attached) and against NVIDIA's real
//! `libnccl.so.2` from the `nvidia-nccl-cu12` wheel. Counts and bytes per
//! communicator and op are exact, every rank computes the same communicator
//! id, and each rank's GPU is its creating thread's CUDA device.
use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use collector::{
    nccl::{self, RankState},
    nccl_lib,
    probes::{nccl::NCCL_APIS, ProbeOptions, ProbeState, Probes},
};
use collector_common::nccl::{op, OpKey};

fn opts(nccl: &Path) -> ProbeOptions {
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
        verbs: true,
        verbs_library: Some(tests::fake_verbs()),
        nccl: true,
        nccl_search: nccl_lib::Search {
            configured: vec![nccl.to_path_buf()],
            ld_cache: false,
            proc_root: None,
        },
        ..ProbeOptions::default()
    }
}

/// The HCA port the stand-in's rank on `device` binds its QPs to.
fn hca_port(device: i32) -> String {
    format!("mlx5_{device}/{}", 1 + device % 2)
}

struct Rank {
    child: Child,
    pid: u32,
    rank: i32,
    device: i32,
}

/// Starts one communicator's ranks (`nccl_workload … steps`) and waits for
/// each to print `ready`.
fn start_comm(
    dir: &Path,
    tag: &str,
    nranks: i32,
    first_device: i32,
    iters: u32,
    late: Option<(i32, u64)>,
) -> Vec<Rank> {
    let idfile = dir.join(format!("{tag}.id"));
    let mut ranks = Vec::new();
    let mut lines = Vec::new();
    for r in 0..nranks {
        let mut child = Command::new(tests::nccl_workload())
            .arg(tests::fake_nccl())
            .arg(tests::fake_libcuda())
            .arg(&idfile)
            .args([
                nranks.to_string(),
                r.to_string(),
                (first_device + r).to_string(),
            ])
            .args([iters.to_string(), "steps".into()])
            .env("FAKE_NCCL_SHM_DIR", dir)
            // NCCL's IB transport on the GPU's own HCA port (as on a DGX:
            // GPU i next to mlx5_i), through the stand-in libibverbs.
            .env("FAKE_NCCL_VERBS", tests::fake_verbs())
            .env("FAKE_NCCL_IB", hca_port(first_device + r).replace('/', ":"))
            .env("NCCL_IB_HCA", "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5")
            .env(
                "NCCL_WORKLOAD_LATE_US",
                late.filter(|l| l.0 == r).map_or(0, |l| l.1).to_string(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start nccl_workload");
        lines.push(tests::lines_of(&mut child));
        ranks.push(Rank {
            pid: child.id(),
            child,
            rank: r,
            device: first_device + r,
        });
    }
    for (rx, r) in lines.iter().zip(&ranks) {
        let l = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("rank {} never got ready: {e}", r.rank));
        assert_eq!(l, format!("ready pid={}", r.pid));
    }
    ranks
}

fn finish(ranks: &mut [Rank]) {
    for r in ranks.iter_mut() {
        let _ = r.child.stdin.as_mut().expect("stdin").write_all(b"\n");
    }
    for r in ranks.iter_mut() {
        let st = r.child.wait().expect("wait");
        assert!(st.success(), "rank {} exited {st}", r.rank);
    }
}

fn rank_of(all: &BTreeMap<(u32, u64), RankState>, pid: u32, init: &str) -> Vec<RankState> {
    all.values()
        .filter(|r| r.pid == pid && r.init == init)
        .cloned()
        .collect()
}

#[test]
fn nccl_probes_count_collectives_per_communicator_and_op_exactly() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_probe") {
        return;
    }
    let dir = tests::scratch_dir("nccl");
    tests::runtime().block_on(async {
        let mut probes = Probes::load(&opts(&tests::fake_nccl())).expect("load probes");
        let inactive: Vec<_> = probes
            .status()
            .iter()
            .filter(|s| s.name.starts_with("nccl") && s.state != ProbeState::Attached)
            .collect();
        assert!(inactive.is_empty(), "every NCCL API attached: {inactive:?}");
        assert_eq!(probes.nccl_libraries().len(), 1);

        // Two communicators: four ranks on GPUs 0-3, two ranks on GPUs 4-5.
        const A_ITERS: u64 = 5;
        const B_ITERS: u64 = 3;
        // Rank 2 of "a" issues every AlltoAll 200 ms after the others.
        const LATE_US: u64 = 200_000;
        let mut a = start_comm(&dir, "a", 4, 0, A_ITERS as u32, Some((2, LATE_US)));
        let mut b = start_comm(&dir, "b", 2, 4, B_ITERS as u32, None);

        let maps = probes.nccl_maps().expect("maps");
        let all = nccl::ranks(&maps, "host-a");
        let groups = nccl::groups(&maps);
        let mut ids = BTreeMap::new();
        for (ranks, iters, tag) in [(&a, A_ITERS, "a"), (&b, B_ITERS, "b")] {
            for r in ranks {
                let init = if r.rank % 2 == 0 {
                    "ncclCommInitRank"
                } else {
                    "ncclCommInitRankConfig"
                };
                let mine = rank_of(&all, r.pid, init);
                assert_eq!(mine.len(), 1, "rank {} of {tag}: {all:?}", r.rank);
                let m = &mine[0];
                assert_eq!(
                    (m.nranks, m.rank, m.device),
                    (ranks.len() as i32, r.rank, r.device),
                    "{tag} rank {}",
                    r.rank
                );
                ids.entry(tag).or_insert_with(Vec::new).push(m.comm.clone());
                // Every op: calls and count × datatype size, exactly.
                let want: BTreeMap<&str, (u64, u64)> = [
                    ("AllReduce", (iters, iters * 1024 * 4)),
                    ("AllGather", (iters, iters * 256 * 2)),
                    ("ReduceScatter", (iters, iters * 128 * 8)),
                    // ncclBroadcast, and ncclBcast through it.
                    ("Broadcast", (2 * iters, iters * (300 + 100 * 4))),
                    ("Reduce", (iters, iters * 64 * 8)),
                    ("AlltoAll", (iters, iters * 32 * 4)),
                    ("Send", (iters, iters * 10 * 2)),
                    ("Recv", (iters, iters * 10 * 2)),
                ]
                .into_iter()
                .collect();
                assert_eq!(m.ops, want, "{tag} rank {}", r.rank);
                assert_eq!(m.seq, 7 * iters, "collectives issued");
                assert!(!m.ended);
                assert_eq!(groups.get(&r.pid), Some(&(2 * iters, 2 * iters)));
                // The split by parity: one more communicator per rank.
                let split = rank_of(&all, r.pid, "ncclCommSplit");
                assert_eq!(split.len(), 1);
                assert_eq!(
                    split[0].ops,
                    [("AllReduce", (iters, iters * 16 * 4))]
                        .into_iter()
                        .collect()
                );
                assert_eq!(split[0].device, r.device);
                ids.entry(if r.rank % 2 == 0 { "a-even" } else { "a-odd" })
                    .or_insert_with(Vec::new)
                    .push(format!("{tag}:{}", split[0].comm));
            }
        }
        // Every rank of a communicator computes the same id; no two agree otherwise.
        for tag in ["a", "b"] {
            let v = &ids[tag];
            assert!(v.iter().all(|i| i == &v[0]), "{tag}: {v:?}");
            assert_eq!(v[0].len(), 16, "{v:?}");
        }
        assert_ne!(ids["a"][0], ids["b"][0]);
        let split_ids = |tag: &str, parity: &str| -> Vec<String> {
            ids[parity]
                .iter()
                .filter_map(|s| s.strip_prefix(&format!("{tag}:")).map(String::from))
                .collect()
        };
        let (ae, ao) = (split_ids("a", "a-even"), split_ids("a", "a-odd"));
        assert_eq!(ae.len(), 2);
        assert!(ae.iter().all(|i| i == &ae[0]) && ao.iter().all(|i| i == &ao[0]));
        assert_ne!(ae[0], ao[0]);
        assert_ne!(ae[0], ids["a"][0]);
        assert_ne!(
            split_ids("b", "a-even")[0],
            ae[0],
            "splits of another parent"
        );

        // Each rank's network: the one HCA port its QPs were bound to
        // (narrower than NCCL_IB_HCA's six HCAs), read by the verbs probe on
        // ibv_modify_qp; every QP went INIT → RTR → RTS.
        let ports = probes.verbs_qp_ports().expect("qp ports");
        let states = probes.verbs_snapshot().expect("verbs").qp_states;
        for r in a.iter().chain(&b) {
            let want: std::collections::BTreeSet<String> = [hca_port(r.device)].into();
            assert_eq!(ports.get(&r.pid), Some(&want), "rank on GPU {}", r.device);
            let n = |st: u32| {
                states
                    .iter()
                    .filter(|(k, _)| k.pid == r.pid && k.state == st)
                    .map(|(_, v)| *v)
                    .sum::<u64>()
            };
            assert!(
                n(1) >= 2 && n(1) == n(2) && n(2) == n(3),
                "QP states of {}",
                r.pid
            );
        }

        // The window rows carry the same numbers and the rank → GPU → HCA
        // port footprint; destroy marks the ranks ended.
        let env = vec!["mlx5_0".to_string(), "mlx5_1".to_string()];
        let rows = nccl::window_rows(&BTreeMap::new(), &all, nccl::realtime_offset_ns(), |pid| {
            nccl::Who {
                job: "j1".into(),
                rank: None,
                hcas: nccl::rank_hcas(ports.get(&pid), env.clone()),
            }
        });
        assert_eq!(rows.len(), 2 * 6);
        // Their series: never one twice (the splits' ranks included).
        tests::metrics::assert_unique_series(&nccl::render(&all, |_| "j1".into()));
        for row in &rows {
            let r = a.iter().chain(&b).find(|r| r.pid == row.pid).expect("rank");
            assert_eq!(row.device, r.device);
            assert_eq!(row.hcas, vec![hca_port(r.device)], "{row:?}");
        }
        // The ranks' lag at the last collective all of them issued (the
        // last AlltoAll, 7 × 5): the late rank 200 ms behind the first,
        // the others within a few ms of each other.
        let a_rows: Vec<_> = rows
            .iter()
            .filter(|x| x.comm == ids["a"][0] && x.init != "ncclCommSplit")
            .collect();
        assert_eq!(a_rows.len(), 4);
        let lags: Vec<(i32, f64)> = a_rows.iter().map(|x| (x.rank, x.lag_s)).collect();
        eprintln!("lag at collective {}: {lags:?}", 7 * A_ITERS);
        for row in &a_rows {
            assert_eq!(row.lag_seq, 7 * A_ITERS, "{row:?}");
            if row.rank == 2 {
                assert!(
                    (0.19..0.5).contains(&row.lag_s),
                    "the late rank: {} s",
                    row.lag_s
                );
            } else {
                assert!(row.lag_s < 0.05, "rank {}: {} s", row.rank, row.lag_s);
            }
        }
        assert!(
            a_rows.iter().any(|x| x.lag_s == 0.0),
            "the first to issue it"
        );
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        for r in &rows {
            assert!(
                (now_ms - r.last_unix_ms).abs() < 60_000,
                "last collective dated now: {r:?}"
            );
        }
        finish(&mut a);
        finish(&mut b);
        let maps = probes.nccl_maps().expect("maps");
        let all = nccl::ranks(&maps, "host-a");
        assert!(
            all.values()
                .filter(|r| r.init != "unknown")
                .all(|r| r.ended),
            "every communicator destroyed: {all:?}"
        );
        let dead = a.iter().chain(&b).map(|r| r.pid).collect();
        assert!(probes.nccl_prune(&dead).expect("prune") >= 12);
        assert!(probes.verbs_prune(&dead).expect("prune") >= 6 * 4);
        assert!(probes.verbs_qp_ports().expect("qp ports").is_empty());
        assert!(probes.nccl_maps().expect("maps").comms.is_empty());
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// NVIDIA's real `libnccl.so.2` (nvidia-nccl-cu12 2.32.3): every probed API
/// resolves, each once (`ncclX` and `pncclX` share an address), every probe
/// attaches at its placement, and calls through the real library are counted
/// with their arguments read right: without a GPU NCCL cannot create a
/// communicator, so the workload calls the collectives with a NULL one, which
/// NCCL refuses (ncclInvalidArgument) after the probe has fired.
#[test]
fn nccl_probes_attach_and_fire_on_nvidia_s_real_libnccl() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(real) = tests::nvidia_wheel_file("nccl/lib/libnccl.so.2") else {
        return;
    };
    let resolved = collector::probes::nccl::resolve(&real, NCCL_APIS).expect("parse libnccl");
    for (api, r) in NCCL_APIS.iter().zip(&resolved) {
        let (sym, _) = r.as_ref().unwrap_or_else(|e| panic!("{}: {e}", api.status));
        assert_eq!(
            sym,
            &format!("pnccl{}", api.name),
            "one address for both names"
        );
    }
    let placements: Vec<_> = collector::probes::entry::placements_of(
        &real,
        resolved
            .iter()
            .map(|r| r.as_ref().map(|(s, _)| s.as_str()).unwrap_or("")),
    )
    .into_iter()
    .collect();
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_probe real") {
        return;
    }
    tests::runtime().block_on(async {
        let probes = Probes::load(&opts(&real)).expect("load probes");
        for api in NCCL_APIS {
            let s = probes
                .status()
                .iter()
                .find(|s| s.name == api.status)
                .expect("status line");
            assert_eq!(s.state, ProbeState::Attached, "{}", api.status);
        }
        eprintln!(
            "real libnccl placements: {:?}",
            NCCL_APIS
                .iter()
                .zip(&placements)
                .map(|(a, p)| (a.name, p.skip, p.kind.name()))
                .collect::<Vec<_>>()
        );
        const ITERS: u64 = 40;
        let out = Command::new(tests::nccl_workload())
            .arg(&real)
            .args([
                "-",
                "/nonexistent",
                "1",
                "0",
                "0",
                &ITERS.to_string(),
                "nullcomm",
            ])
            .output()
            .expect("run nccl_workload");
        assert!(
            out.status.success(),
            "{} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let pid: u32 = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("ready pid="))
            .and_then(|p| p.parse().ok())
            .expect("pid");
        let maps = probes.nccl_maps().expect("maps");
        let got = |o: u32| {
            maps.ops
                .get(&OpKey {
                    pid,
                    op: o,
                    comm: 0,
                })
                .map(|s| (s.calls, s.bytes))
        };
        assert_eq!(got(op::ALL_REDUCE), Some((ITERS, ITERS * 1000 * 4)));
        assert_eq!(got(op::ALL_GATHER), Some((ITERS, ITERS * 10 * 2)));
        assert_eq!(
            got(op::REDUCE),
            Some((ITERS, ITERS * 64 * 8)),
            "comm on the stack"
        );
        assert_eq!(got(op::SEND), Some((ITERS, ITERS * 10 * 2)));
        assert_eq!(got(op::GROUP_START), Some((ITERS, 0)));
        assert_eq!(got(op::GROUP_END), Some((ITERS, 0)));
        assert!(
            maps.comms.keys().all(|(p, _)| *p != pid),
            "no communicator without a GPU"
        );
    });
}

/// Discovery finds the wheel's copy that a running Python process loaded.
#[test]
fn discovery_finds_the_wheel_copy_of_a_running_python() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(real) = tests::nvidia_wheel_file("nccl/lib/libnccl.so.2") else {
        return;
    };
    // .../site-packages/nvidia/nccl/lib/libnccl.so.2 → .../bin/python
    let venv: PathBuf = real.ancestors().nth(7).expect("venv").to_path_buf();
    let py = venv.join("bin/python");
    // A Python process of the venv loads NCCL as torch would (ctypes).
    let mut child = Command::new(&py)
        .args([
            "-c",
            "import sys, ctypes; ctypes.CDLL(sys.argv[1]); print('up', flush=True); sys.stdin.read()",
        ])
        .arg(&real)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let rx = tests::lines_of(&mut child);
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(30)).as_deref(),
        Ok("up")
    );
    let found = nccl_lib::discover(&nccl_lib::Search {
        configured: vec![],
        ld_cache: false,
        proc_root: Some(PathBuf::from("/proc")),
    })
    .expect("found");
    let _ = child.kill();
    let _ = child.wait();
    // The copy found opens the same file (its path may go through the
    // process's root, /proc/PID/root/…).
    let want = std::fs::canonicalize(&real).expect("canonical");
    assert!(
        found
            .iter()
            .any(|f| std::fs::canonicalize(&f.path).ok().as_ref() == Some(&want)),
        "{found:?}"
    );
}

/// A library that appears after the probes were loaded (a job's venv
/// created later): the periodic rescan finds it in the job's maps and
/// attaches, and the job's collectives are counted from then on.
#[test]
fn a_library_that_appears_after_start_is_attached_by_the_rescan() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_rescan") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("faultline-nccl-late-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let lib_dir = dir.join("venv/lib/python3/site-packages/nvidia/nccl/lib");
    std::fs::create_dir_all(&lib_dir).expect("tmp");
    tests::runtime().block_on(async {
        let search = nccl_lib::Search {
            configured: vec![],
            ld_cache: false,
            proc_root: Some(PathBuf::from("/proc")),
        };
        let mut o = opts(&tests::fake_nccl());
        o.nccl_search = search.clone();
        let mut probes = Probes::load(&o).expect("load probes");
        let before = probes.nccl_libraries().to_vec();
        // The job's own copy, made after the probes loaded.
        let late = lib_dir.join("libnccl.so.2");
        std::fs::copy(tests::fake_nccl(), &late).expect("copy");
        let late = std::fs::canonicalize(&late).expect("canonical");
        assert!(!before.contains(&late));
        let mut child = Command::new(tests::nccl_workload())
            .arg(&late)
            .arg("-")
            .arg(dir.join("comm.id"))
            .args(["1", "0", "0", "0", "loop", "2000"])
            .env("FAKE_NCCL_SHM_DIR", &dir)
            .stdout(Stdio::piped())
            .spawn()
            .expect("rank");
        let rx = tests::lines_of(&mut child);
        let ready = rx.recv_timeout(Duration::from_secs(30)).expect("ready");
        assert_eq!(ready, format!("ready pid={}", child.id()));
        let pid = child.id();
        let calls = |p: &Probes| -> u64 {
            p.nccl_maps()
                .expect("maps")
                .ops
                .iter()
                .filter(|(k, _)| k.pid == pid)
                .map(|(_, v)| v.calls)
                .sum()
        };
        assert_eq!(calls(&probes), 0, "not attached yet");
        let added = probes.nccl_rescan(&search);
        assert_eq!(added, vec![late.clone()]);
        assert!(probes.nccl_libraries().contains(&late));
        assert!(probes.nccl_rescan(&search).is_empty(), "attached once");
        let t0 = std::time::Instant::now();
        while calls(&probes) < 10 && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let n = calls(&probes);
        let _ = child.kill();
        let _ = child.wait();
        assert!(n >= 10, "collectives after the rescan: {n}");
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// One rank of `nccl_workload … api232` (NCCL 2.32's newer entry points on
/// a communicator of `nranks`), started after the probes attached.
struct Rank232 {
    child: Child,
    pid: u32,
    rank: i32,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Rank232 {
    fn expect_line(&self, want: &str) {
        let l = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("rank {}: no {want:?}: {e}", self.rank));
        assert_eq!(l, want, "rank {}", self.rank);
    }

    fn go_on(&mut self) {
        let _ = self
            .child
            .stdin
            .as_mut()
            .expect("stdin")
            .write_all(b"\n")
            .and_then(|()| self.child.stdin.as_mut().expect("stdin").flush());
    }
}

/// The api232 calls of one iteration (`nccl_workload.c`, `api232_step`):
/// op → (calls, bytes) per iteration. The `*Config` collectives count under
/// their plain op, each call once.
fn api232_step_ops() -> BTreeMap<&'static str, (u64, u64)> {
    [
        // AllReduceConfig(512 float32) + AllReduce(8 float32).
        ("AllReduce", (2, 512 * 4 + 8 * 4)),
        ("Broadcast", (1, 200)),
        // ReduceConfig: comm the 7th argument (stack), config the 9th.
        ("Reduce", (1, 48 * 8)),
        ("AllGather", (1, 128 * 2)),
        ("ReduceScatter", (1, 96 * 8)),
        ("AlltoAll", (1, 24 * 4)),
        // Gather + GatherConfig (40 float16), Scatter + ScatterConfig (20 int32).
        ("Gather", (2, 2 * 40 * 2)),
        ("Scatter", (2, 2 * 20 * 4)),
        // PutSignal(64 uint8): comm the 10th argument.
        ("PutSignal", (1, 64)),
        ("Signal", (1, 0)),
        ("WaitSignal", (1, 0)),
    ]
    .into_iter()
    .collect()
}

/// Collectives per api232 iteration (their calls advance `seq`).
const API232_COLLECTIVES: u64 = 11;

/// NCCL 2.32's newer entry points on the stand-in (their real C ABI): every
/// `*Config` collective, Gather/Scatter, the one-sided calls, and the
/// communicator lifecycle (suspend/resume, shrink, grow, finalize, revoke),
/// counted exactly per communicator and op, each call once; a shrunk and a
/// grown communicator are recorded as new communicators with one id per
/// communicator on every rank, the shrunk one with its real rank and size;
/// finalize, revoke and suspend end the communicator they name.
#[test]
fn nccl_2_32_entry_points_are_counted_exactly_on_the_stand_in() {
    let _turn = tests::one_file_at_a_time(file!());
    use collector_common::nccl::{end, init};
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_probe 2.32") {
        return;
    }
    let dir = tests::scratch_dir("nccl232");
    tests::runtime().block_on(async {
        let mut probes = Probes::load(&opts(&tests::fake_nccl())).expect("load probes");
        for api in NCCL_APIS {
            let s = probes
                .status()
                .iter()
                .find(|s| s.name == api.status)
                .expect("status line");
            assert_eq!(s.state, ProbeState::Attached, "{}", api.status);
        }
        const N: i32 = 3;
        const ITERS: u64 = 4;
        let idfile = dir.join("c.id");
        let mut ranks: Vec<Rank232> = (0..N)
            .map(|r| {
                let mut child = Command::new(tests::nccl_workload())
                    .arg(tests::fake_nccl())
                    .arg(tests::fake_libcuda())
                    .arg(&idfile)
                    .args([N.to_string(), r.to_string(), r.to_string()])
                    .args([ITERS.to_string(), "api232".into()])
                    .env("FAKE_NCCL_SHM_DIR", &dir)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("start nccl_workload");
                let lines = tests::lines_of(&mut child);
                Rank232 {
                    pid: child.id(),
                    child,
                    rank: r,
                    lines,
                }
            })
            .collect();
        for r in &ranks {
            r.expect_line(&format!("ready pid={}", r.pid));
        }
        let step = api232_step_ops();
        let kind_of = |maps: &nccl::NcclMaps, pid: u32, kind: u32| -> Vec<(u64, u32)> {
            maps.comms
                .iter()
                .filter(|((p, _), i)| *p == pid && i.kind == kind)
                .map(|((_, h), i)| (*h, i.ended))
                .collect()
        };
        let maps = probes.nccl_maps().expect("maps");
        let all = nccl::ranks(&maps, "host-a");
        let mut ids: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in &ranks {
            let init = if r.rank % 2 == 0 {
                "ncclCommInitRank"
            } else {
                "ncclCommInitRankConfig"
            };
            let parent = rank_of(&all, r.pid, init);
            assert_eq!(parent.len(), 1, "rank {}: {all:?}", r.rank);
            let p = &parent[0];
            let mut want: BTreeMap<&str, (u64, u64)> = step
                .iter()
                .map(|(k, (c, b))| (*k, (c * ITERS, b * ITERS)))
                .collect();
            // Suspended and resumed once; shrunk (all but the last rank)
            // and grown once, counted on the parent.
            want.insert("CommSuspend", (1, 0));
            want.insert("CommResume", (1, 0));
            want.insert("DevCommCreate", (1, 0));
            want.insert("CommGrow", (1, 0));
            if r.rank != N - 1 {
                want.insert("CommShrink", (1, 0));
            }
            assert_eq!(p.ops, want, "rank {}", r.rank);
            assert_eq!(p.seq, API232_COLLECTIVES * ITERS, "collectives issued");
            assert!(!p.ended, "resumed: live again");
            ids.entry("parent").or_default().push(p.comm.clone());

            let grown = rank_of(&all, r.pid, "ncclCommGrow");
            assert_eq!(grown.len(), 1, "rank {}", r.rank);
            assert_eq!((grown[0].nranks, grown[0].rank), (N + 1, -1));
            assert_eq!(
                grown[0].ops,
                [("AllReduce", (ITERS, ITERS * 4 * 4))]
                    .into_iter()
                    .collect()
            );
            assert_eq!(grown[0].seq, ITERS);
            ids.entry("grown").or_default().push(grown[0].comm.clone());

            let shrunk = rank_of(&all, r.pid, "ncclCommShrink");
            if r.rank == N - 1 {
                assert!(shrunk.is_empty(), "the excluded rank shrinks nothing");
                continue;
            }
            assert_eq!(shrunk.len(), 1, "rank {}", r.rank);
            // The last rank excluded: the others keep their ranks.
            assert_eq!((shrunk[0].nranks, shrunk[0].rank), (N - 1, r.rank));
            assert_eq!(
                shrunk[0].ops,
                [("AllReduce", (ITERS, ITERS * 16 * 4))]
                    .into_iter()
                    .collect()
            );
            ids.entry("shrunk")
                .or_default()
                .push(shrunk[0].comm.clone());
        }
        for (tag, v) in &ids {
            assert!(v.iter().all(|i| i == &v[0]), "{tag}: {v:?}");
            assert_eq!(v[0].len(), 16, "{tag}: {v:?}");
        }
        assert_eq!(ids["shrunk"].len(), (N - 1) as usize);
        assert_ne!(ids["parent"][0], ids["shrunk"][0]);
        assert_ne!(ids["parent"][0], ids["grown"][0]);
        assert_ne!(ids["shrunk"][0], ids["grown"][0]);

        // The window rows carry the same counts and bytes.
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
                .find(|x| x.pid == r.pid && x.comm == ids["parent"][0])
                .expect("parent row");
            let got: BTreeMap<&str, (u64, u64)> = row
                .ops
                .iter()
                .map(|o| (o.op.as_str(), (o.calls, o.bytes)))
                .collect();
            assert_eq!(got["AllReduce"], (2 * ITERS, ITERS * (512 * 4 + 8 * 4)));
            assert_eq!(got["PutSignal"], (ITERS, ITERS * 64));
            assert_eq!(got["Gather"], (2 * ITERS, ITERS * 160));
            assert_eq!(row.seq, API232_COLLECTIVES * ITERS);
        }

        // Finalize (parent), revoke (grown), suspend (shrunk).
        for r in &mut ranks {
            r.go_on();
        }
        for r in &ranks {
            r.expect_line("ended");
        }
        let maps = probes.nccl_maps().expect("maps");
        for r in &ranks {
            let parent = [init::INIT_RANK, init::INIT_RANK_CONFIG]
                .iter()
                .flat_map(|k| kind_of(&maps, r.pid, *k))
                .collect::<Vec<_>>();
            assert_eq!(parent.len(), 1);
            assert_eq!(parent[0].1, end::FINALIZED, "rank {}", r.rank);
            let fin = maps.ops.get(&OpKey {
                pid: r.pid,
                op: op::COMM_FINALIZE,
                comm: parent[0].0,
            });
            assert_eq!(fin.map(|s| s.calls), Some(1));
            let grown = kind_of(&maps, r.pid, init::GROW);
            assert_eq!(
                grown.iter().map(|g| g.1).collect::<Vec<_>>(),
                [end::REVOKED]
            );
            let shrunk = kind_of(&maps, r.pid, init::SHRINK);
            let want: &[u32] = if r.rank == N - 1 {
                &[]
            } else {
                &[end::SUSPENDED]
            };
            assert_eq!(shrunk.iter().map(|g| g.1).collect::<Vec<_>>(), want);
        }
        let all = nccl::ranks(&maps, "host-a");
        assert!(
            all.values()
                .filter(|x| ranks.iter().any(|r| r.pid == x.pid))
                .all(|x| x.ended),
            "finalized, revoked and suspended communicators issue nothing: {all:?}"
        );

        for r in &mut ranks {
            r.go_on();
        }
        for r in &mut ranks {
            r.expect_line("done");
            let st = r.child.wait().expect("wait");
            assert!(st.success(), "rank {} exited {st}", r.rank);
        }
        let maps = probes.nccl_maps().expect("maps");
        for r in &ranks {
            assert!(
                maps.comms
                    .iter()
                    .filter(|((p, _), _)| *p == r.pid)
                    .all(|(_, i)| i.ended == end::DESTROYED),
                "destroyed last"
            );
        }
        let dead = ranks.iter().map(|r| r.pid).collect();
        assert!(probes.nccl_prune(&dead).expect("prune") > 0);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// NVIDIA's real `libnccl.so.2` (2.32.3): NCCL 2.32's newer entry points
/// (every `*Config` collective, Gather/Scatter, the one-sided calls, the
/// lifecycle calls, shrink, grow and `ncclDevCommCreate`) fire and read their arguments: the
/// workload calls each with a NULL communicator (no GPU here), and every
/// call is counted once under the plain op with count × datatype size, the
/// communicator read as 0 from its register or stack slot (`ncclPutSignal`'s
/// neighbouring stack arguments are nonzero, so a misread slot would show;
/// the stand-in test checks every slot with real communicators). A shrink of a
/// NULL communicator crashes NCCL 2.32.3 (it reads the parent unchecked):
/// the workload makes it in a child, whose probe fired before the crash.
#[test]
fn nccl_2_32_entry_points_fire_on_nvidia_s_real_libnccl() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(real) = tests::nvidia_wheel_file("nccl/lib/libnccl.so.2") else {
        return;
    };
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_probe real 2.32") {
        return;
    }
    tests::runtime().block_on(async {
        let mut probes = Probes::load(&opts(&real)).expect("load probes");
        for api in NCCL_APIS {
            let s = probes
                .status()
                .iter()
                .find(|s| s.name == api.status)
                .expect("status line");
            assert_eq!(s.state, ProbeState::Attached, "{}", api.status);
        }
        const ITERS: u64 = 20;
        let out = Command::new(tests::nccl_workload())
            .arg(&real)
            .args([
                "-",
                "/nonexistent",
                "1",
                "0",
                "0",
                &ITERS.to_string(),
                "nullcomm232",
            ])
            .output()
            .expect("run nccl_workload");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let field = |prefix: &str| -> u32 {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|p| p.split_whitespace().next())
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("{prefix} in {stdout}"))
        };
        let pid = field("ready pid=");
        let shrinker = field("shrink pid=");
        assert!(stdout.contains("signal=11"), "{stdout}");
        let maps = probes.nccl_maps().expect("maps");
        let got: BTreeMap<&str, (u64, u64)> = maps
            .ops
            .iter()
            .filter(|(k, _)| k.pid == pid)
            .map(|(k, v)| {
                assert_eq!(k.comm, 0, "{} on a NULL communicator", op::name(k.op));
                (op::name(k.op), (v.calls, v.bytes))
            })
            .collect();
        let mut want: BTreeMap<&str, (u64, u64)> = api232_step_ops()
            .into_iter()
            .map(|(k, (c, b))| (k, (c * ITERS, b * ITERS)))
            .collect();
        for o in [
            "CommFinalize",
            "CommRevoke",
            "CommSuspend",
            "CommResume",
            "CommGrow",
            "DevCommCreate",
        ] {
            want.insert(o, (ITERS, 0));
        }
        assert_eq!(got, want);
        assert_eq!(
            maps.ops
                .get(&OpKey {
                    pid: shrinker,
                    op: op::COMM_SHRINK,
                    comm: 0,
                })
                .map(|s| (s.calls, s.bytes)),
            Some((1, 0)),
            "the shrink's probe fired before NCCL crashed"
        );
        assert!(
            maps.comms.keys().all(|(p, _)| *p != pid && *p != shrinker),
            "no communicator without a GPU"
        );
        let dead = [pid, shrinker].into_iter().collect();
        assert!(probes.nccl_prune(&dead).expect("prune") > 0);
    });
}
