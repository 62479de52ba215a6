//! CUDA driver-API uprobes against the stand-in `libcuda.so.1` and a workload
//! that loads it with dlopen(), started after the probes were attached.
//! Counts, names, bytes and devices must be exact; durations within tolerance.
use std::{path::PathBuf, process::Command};

use collector::{
    cuda_lib::Search,
    probes::{
        entry::{EntryKind, Placement},
        ProbeOptions, ProbeState, Probes,
    },
};
use collector_common::{cuda::call, stat};

fn opts(lib: Option<PathBuf>) -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: false,
        block_sample_every: 0,
        cuda: true,
        cuda_search: Search {
            configured: lib,
            ld_cache: false,
            proc_root: None,
            usual: vec![],
        },
        cuda_events_per_sec: 0,
        verbs: false,
        ..ProbeOptions::default()
    }
}

fn run_workload(sync_us: u32, tokens: &[&str]) -> u32 {
    run_workload_on(&tests::fake_libcuda(), sync_us, tokens)
}

fn run_workload_on(lib: &std::path::Path, sync_us: u32, tokens: &[&str]) -> u32 {
    let out = Command::new(tests::cuda_workload())
        .arg(lib)
        .args(tokens)
        .env("FAKE_CUDA_SYNC_US", sync_us.to_string())
        .output()
        .expect("run cuda_workload");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "workload failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ready "))
        .and_then(|p| p.trim().parse().ok())
        .expect("workload prints its pid");
    assert!(stdout.contains("done"));
    pid
}

#[test]
fn cuda_probes_count_exactly_what_the_workload_did() {
    let _turn = tests::one_file_at_a_time(file!());
    exact_counts(&tests::fake_libcuda());
}

/// The same workload against a CET build of the stand-in: every function
/// starts `endbr64; push %rbp`, so the probes go 4 bytes in, onto the push
/// (see `collector::probes::entry`); counts, names, durations and the
/// launch arguments read from the stack must be exactly as at the entry.
#[test]
fn probes_past_endbr64_count_exactly_what_the_workload_did() {
    let _turn = tests::one_file_at_a_time(file!());
    let lib = tests::fake_libcuda_cet();
    for sym in [
        "cuLaunchKernel",
        "cuStreamSynchronize",
        "cuModuleGetFunction",
    ] {
        let code = collector::probes::entry::code_of(&lib, sym, 5).expect("read the stand-in");
        assert_eq!(
            code[..4],
            collector::probes::entry::ENDBR64,
            "{sym}: {code:x?}"
        );
        assert_eq!(code[4], 0x55, "{sym} then pushes %rbp: {code:x?}");
        assert_eq!(
            collector::probes::entry::placement_of(&lib, sym),
            Placement {
                skip: 4,
                kind: EntryKind::Push
            }
        );
    }
    // The stepped build starts `mov %rdi,%rax` (a register write): probed
    // at entry, single-stepped.
    assert_eq!(
        collector::probes::entry::placement_of(&tests::fake_libcuda_stepped(), "cuLaunchKernel"),
        Placement {
            skip: 0,
            kind: EntryKind::Stepped
        }
    );
    exact_counts(&lib);
}

/// The plain build's functions start by checking their arguments, `test
/// %rdi,%rdi; je …`, as compilers emit them: the probes go 3 bytes in, onto
/// the emulated jump (the `test` writes only the flags), and counts, names,
/// durations and the launch arguments (registers and stack) are exactly as
/// at entry; [`cuda_probes_count_exactly_what_the_workload_did`] runs the
/// workload on it.
#[test]
fn probes_past_an_argument_check_sit_on_the_emulated_jump() {
    let _turn = tests::one_file_at_a_time(file!());
    let lib = tests::fake_libcuda();
    let code = collector::probes::entry::code_of(&lib, "cuLaunchKernel", 5).expect("read");
    assert_eq!(code[..3], [0x48, 0x85, 0xff], "test %rdi,%rdi: {code:x?}");
    assert_eq!(code[3], 0x74, "then je: {code:x?}");
    assert_eq!(
        collector::probes::entry::placement_of(&lib, "cuLaunchKernel"),
        Placement {
            skip: 3,
            kind: EntryKind::Branch
        }
    );
}

/// Every call of the stepped build counts exactly too (probes at entry).
#[test]
fn probes_on_a_stepped_entry_count_exactly_what_the_workload_did() {
    let _turn = tests::one_file_at_a_time(file!());
    exact_counts(&tests::fake_libcuda_stepped());
}

fn exact_counts(lib: &std::path::Path) {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("cuda_probe") {
        return;
    }
    let run_workload = |sync_us: u32, tokens: &[&str]| run_workload_on(lib, sync_us, tokens);
    tests::runtime().block_on(async {
        let mut probes = Probes::load(&opts(Some(lib.to_path_buf()))).expect("load probes");
        let inactive: Vec<_> = probes
            .status()
            .iter()
            .filter(|s| s.name.starts_with("cu") && s.state != ProbeState::Attached)
            .collect();
        assert!(
            inactive.is_empty(),
            "every CUDA symbol attached: {inactive:?}"
        );
        assert!(probes.cuda_library().is_some());

        const SYNC_US: u32 = 20_000;
        let pid = run_workload(
            SYNC_US,
            &[
                "device:2",
                "func:gemm_kernel",
                "launch:50:4,2,1:128,1,1:1024",
                "func:softmax",
                "launch:7:1,1,1:32,1,1:0",
                "libkernel:lib_attention",
                "launchex:3:8,1,1:64,2,1:512",
                "coop:2:2,2,2:8,8,1:0",
                "graph:4",
                "htod:4096:3",
                "dtoh:65536:2",
                "memcpyasync:100:5",
                "htodasync:300:2",
                "dtohasync:700:1",
                // Device to device, and peer copies between the current
                // context (device 2) and device 3's primary context, through
                // the legacy and the per-thread-default-stream exports.
                "peerdev:3",
                "dtod:5000:3",
                "dtodptds:5100:1",
                "dtodasync:900:4",
                "dtodasyncptsz:950:2",
                "peer:7000:2",
                "peerptds:7100:1",
                "peerasync:1300:3",
                "peerasyncptsz:1350:1",
                "streamsync:3",
                "ctxsync:2",
                "eventsync:1",
                "create:5",
                "func:after_create",
                "launch:11:1,1,1:1,1,1:0",
            ],
        );
        // A second process on another device: per-process separation.
        let pid2 = run_workload(
            0,
            &["device:7", "func:gemm_kernel", "launch:9:1,1,1:1,1,1:0"],
        );
        assert_ne!(pid, pid2);

        let snap = probes.cuda_snapshot().expect("snapshot");
        let by_name = snap.launches_by_name(pid);
        let names: Vec<&String> = by_name.keys().collect();
        assert_eq!(
            names,
            ["after_create", "gemm_kernel", "lib_attention", "softmax"]
        );
        let g = &by_name["gemm_kernel"];
        assert_eq!(g.launches, 50);
        assert_eq!(g.blocks, 50 * 8);
        assert_eq!(g.threads, 50 * 8 * 128);
        assert_eq!(g.shared_mem_bytes, 50 * 1024);
        assert_eq!((g.last_grid, g.last_block), ([4, 2, 1], [128, 1, 1]));
        assert_eq!(by_name["softmax"].launches, 7);
        let a = &by_name["lib_attention"];
        assert_eq!(
            (a.launches, a.launches_ex, a.launches_cooperative),
            (5, 3, 2)
        );
        assert_eq!(a.shared_mem_bytes, 3 * 512);
        assert_eq!(a.threads, 3 * 8 * 128 + 2 * 8 * 64);
        assert_eq!(by_name["after_create"].launches, 11);

        // Devices: primary context of device 2, then cuCtxCreate on device 5.
        for (k, v) in snap.launches.iter().filter(|(k, _)| k.pid == pid) {
            let name = snap.kernel_name(k);
            let want = if name == "after_create" { 5 } else { 2 };
            assert_eq!(k.device, want, "{name}: {v:?}");
        }
        let other = snap.launches_by_name(pid2);
        assert_eq!(other.len(), 1);
        assert_eq!(other["gemm_kernel"].launches, 9);
        assert!(snap
            .launches
            .keys()
            .filter(|k| k.pid == pid2)
            .all(|k| k.device == 7));

        let c = |kind| snap.call_total(pid, kind);
        assert_eq!(c(call::GRAPH_LAUNCH).calls, 4);
        for (kind, calls, bytes) in [
            (call::MEMCPY_HTOD, 3, 3 * 4096),
            (call::MEMCPY_DTOH, 2, 2 * 65536),
            (call::MEMCPY_ASYNC, 5, 500),
            (call::MEMCPY_HTOD_ASYNC, 2, 600),
            (call::MEMCPY_DTOH_ASYNC, 1, 700),
            // `cuMemcpyDtoD_v2` 3 × 5000, `_ptds` 1 × 5100.
            (call::MEMCPY_DTOD, 4, 3 * 5000 + 5100),
            (call::MEMCPY_DTOD_ASYNC, 6, 4 * 900 + 2 * 950),
            (call::MEMCPY_PEER, 3, 2 * 7000 + 7100),
            (call::MEMCPY_PEER_ASYNC, 4, 3 * 1300 + 1350),
            // Each copy token allocates two buffers of its size, then frees them.
            (
                call::MEM_ALLOC,
                26,
                2 * (4096
                    + 65536
                    + 100
                    + 300
                    + 700
                    + 5000
                    + 5100
                    + 900
                    + 950
                    + 7000
                    + 7100
                    + 1300
                    + 1350),
            ),
            (call::MEM_FREE, 26, 0),
        ] {
            let s = c(kind);
            assert_eq!(
                (s.calls, s.bytes, s.errors),
                (calls, bytes, 0),
                "{}",
                call::name(kind)
            );
        }
        for kind in [
            call::MEMCPY_HTOD,
            call::MEMCPY_DTOH,
            call::MEMCPY_DTOD,
            call::MEMCPY_PEER,
            call::MEM_ALLOC,
        ] {
            assert_eq!(c(kind).timed, c(kind).calls, "{} timed", call::name(kind));
        }
        // Every copy counts on the calling thread's device (2), the peer
        // copies from and to device 3's context too.
        let copy_devices: std::collections::BTreeSet<i32> = snap
            .calls
            .keys()
            .filter(|k| k.pid == pid && call::is_copy(k.kind))
            .map(|k| k.device)
            .collect();
        assert_eq!(copy_devices, std::collections::BTreeSet::from([2]));
        for (kind, n) in [
            (call::STREAM_SYNC, 3),
            (call::CTX_SYNC, 2),
            (call::EVENT_SYNC, 1),
        ] {
            let s = c(kind);
            assert_eq!(
                (s.calls, s.timed, s.errors),
                (n, n, 0),
                "{}",
                call::name(kind)
            );
            let want = u64::from(SYNC_US) * 1000;
            // Each call sleeps SYNC_US; allow 150 ms of scheduling slack per call.
            assert!(
                s.dur_sum_ns >= n * want,
                "{}: {}",
                call::name(kind),
                s.dur_sum_ns
            );
            assert!(
                s.dur_sum_ns < n * (want + 150_000_000),
                "{}: {}",
                call::name(kind),
                s.dur_sum_ns
            );
            assert!(s.dur_max_ns >= want && s.dur_max_ns < want + 150_000_000);
        }
        let k = probes.kernel_stats().expect("kernel stats");
        assert_eq!(k[stat::CUDA_AGG_MAP_FULL as usize], 0);
        assert_eq!(k[stat::CUDA_UNMATCHED_RETURN as usize], 0);
        // gemm_kernel twice (two processes), softmax, lib_attention as CUkernel
        // and as CUfunction, after_create.
        assert_eq!(k[stat::CUDA_NAMES as usize], 6);

        // Prometheus series by job, rank and GPU: no pid or kernel label,
        // whose values grow without bound (they did before).
        let text = collector::cuda::render_prometheus(&snap, |p| {
            if p == pid {
                ("job7".into(), "3".into())
            } else {
                (String::new(), String::new())
            }
        });
        let launched: u64 = snap
            .launches
            .iter()
            .filter(|(k, _)| k.pid == pid && k.device == 2)
            .map(|(_, v)| v.launches)
            .sum();
        assert!(launched >= 50);
        let line = format!(
            "faultline_cuda_kernel_launches_total{{hpc_job=\"job7\",rank=\"3\",gpu=\"2\"}} {launched}\n"
        );
        assert!(text.contains(&line), "{text}");
        for (c, bytes) in [
            ("cuMemcpyDtoD", 3 * 5000 + 5100),
            ("cuMemcpyDtoDAsync", 4 * 900 + 2 * 950),
            ("cuMemcpyPeer", 2 * 7000 + 7100),
            ("cuMemcpyPeerAsync", 3 * 1300 + 1350),
        ] {
            let line = format!(
                "faultline_cuda_copy_bytes_total{{hpc_job=\"job7\",rank=\"3\",gpu=\"2\",call=\"{c}\"}} {bytes}\n"
            );
            assert!(text.contains(&line), "{text}");
        }
        assert!(
            !text.contains("pid=") && !text.contains("kernel="),
            "{text}"
        );

        // Both workloads have exited: their entries are pruned from the maps
        // (CUDA_LAUNCH_AGG is not LRU; nothing removed them before).
        let dead = std::collections::BTreeSet::from([pid, pid2]);
        let removed = probes.cuda_prune(&dead).expect("prune");
        assert!(removed >= 8, "{removed}");
        let after = probes.cuda_snapshot().expect("snapshot");
        assert!(after.launches.keys().all(|k| !dead.contains(&k.pid)));
        assert!(after.calls.keys().all(|k| !dead.contains(&k.pid)));
        assert!(after.names.keys().all(|(p, _)| !dead.contains(p)));
    });
}

/// More kernels than a CPU has launch slots: the keys that find their slot
/// taken count in the hash map, every count stays exact, and a process's
/// slots are freed when it is pruned, zeroed, so the next process that
/// claims them starts from zero.
#[test]
fn launch_slots_overflow_into_the_hash_map_and_are_freed_with_their_process() {
    let _turn = tests::one_file_at_a_time(file!());
    const KERNELS: usize = 600;
    let _k = tests::kernel_lock();
    if !tests::require_bpf("cuda_slots") {
        return;
    }
    tests::runtime().block_on(async {
        let mut probes = Probes::load(&opts(Some(tests::fake_libcuda()))).expect("load probes");
        let tokens =
            |n: u32| -> Vec<String> {
                std::iter::once("device:0".to_string())
                    .chain((0..KERNELS).flat_map(|i| {
                        [format!("func:k{i}"), format!("launch:{n}:2,1,1:32,1,1:64")]
                    }))
                    .collect()
            };
        let run = |n: u32| {
            let t = tokens(n);
            run_workload(0, &t.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let check = |probes: &Probes, pid: u32, n: u64| {
            let snap = probes.cuda_snapshot().expect("snapshot");
            let by_name = snap.launches_by_name(pid);
            assert_eq!(by_name.len(), KERNELS);
            for (name, v) in &by_name {
                assert_eq!(
                    (v.launches, v.blocks, v.threads, v.shared_mem_bytes),
                    (n, 2 * n, 2 * 32 * n, 64 * n),
                    "{name}"
                );
            }
        };
        let pid = run(3);
        check(&probes, pid, 3);
        let in_slots: std::collections::BTreeSet<_> = probes
            .launch_slot_keys()
            .into_iter()
            .filter(|k| k.pid == pid)
            .collect();
        // 256 slots per CPU: a random map of 600 keys to one CPU's slots
        // claims ~232 of them; the other ~370 keys count only in the hash map.
        assert!(
            in_slots.len() >= 150 && in_slots.len() < KERNELS,
            "{} of {KERNELS} keys in slots",
            in_slots.len()
        );

        let dead = std::collections::BTreeSet::from([pid]);
        let removed = probes.cuda_prune(&dead).expect("prune");
        assert!(removed as usize >= KERNELS, "{removed}");
        assert!(probes.launch_slot_keys().iter().all(|k| k.pid != pid));

        // A slot freed without zeroing would add the first run's 3 here.
        let pid2 = run(5);
        check(&probes, pid2, 5);
        assert!(probes.launch_slot_keys().iter().any(|k| k.pid == pid2));
    });
}

#[test]
fn missing_libcuda_is_reported_and_other_probes_keep_working() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("cuda_missing") {
        return;
    }
    tests::runtime().block_on(async {
        let mut o = opts(None);
        o.exec = true;
        o.cuda_search.usual = vec![PathBuf::from("/nonexistent/libcuda.so.1")];
        let probes = Probes::load(&o).expect("load without libcuda");
        assert!(probes.is_attached("sched_process_exec"));
        let cuda = probes
            .status()
            .iter()
            .find(|s| s.name == "cuda")
            .expect("cuda status");
        let ProbeState::Inactive(why) = &cuda.state else {
            panic!("{cuda:?}")
        };
        assert!(
            why.starts_with("CUDA probes inactive: libcuda.so.1 not found (looked in")
                && why.contains("/nonexistent/libcuda.so.1"),
            "{why}"
        );
        assert!(probes.cuda_library().is_none());
    });
}

#[test]
fn per_event_stream_is_rate_limited_and_every_drop_counted() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("cuda_stream") {
        return;
    }
    tests::runtime().block_on(async {
        const PER_SEC: u32 = 20;
        let mut o = opts(Some(tests::fake_libcuda()));
        o.cuda_events_per_sec = PER_SEC;
        let mut probes = Probes::load(&o).expect("load probes");
        // The ring the agent drains when `[cuda] events_per_sec` > 0.
        let mut ring =
            collector::probes::drain::EventDrain::<collector::cuda::probe::CudaEvent>::take(
                &mut probes,
                true,
            )
            .expect("cuda ring")
            .expect("taken when streaming");
        let before = probes.kernel_stats().unwrap();
        let pid = run_workload(0, &["device:1", "func:k", "launch:100:2,1,1:64,1,1:0"]);
        let after = probes.kernel_stats().unwrap();
        let events = ring.take_ready();
        assert_eq!(ring.total, events.len() as u64);
        let d = |i: u32| after[i as usize] - before[i as usize];
        let ours: Vec<_> = events.iter().filter(|e| e.pid == pid).collect();
        assert_eq!(
            ours.len(),
            events.len(),
            "only the workload uses the stand-in"
        );
        assert_eq!(ours.len() as u64, d(stat::CUDA_EVENTS));
        assert_eq!(d(stat::CUDA_RING_FULL), 0);
        // Every launch is either streamed or counted as rate-limited.
        assert_eq!(
            d(stat::CUDA_EVENTS) + d(stat::CUDA_EVENTS_RATE_LIMITED),
            100
        );
        let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        assert!(ours.len() as u64 >= u64::from(PER_SEC), "{}", ours.len());
        assert!(
            ours.len() as u64 <= u64::from(PER_SEC) * ncpu,
            "{}",
            ours.len()
        );
        for e in &ours {
            assert_eq!(e.data.kind, call::LAUNCH_KERNEL);
            assert_eq!(e.data.device, 1);
            assert_eq!((e.data.grid, e.data.block), ([2, 1, 1], [64, 1, 1]));
            assert_ne!(e.data.func, 0);
        }
        assert!(ours.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    });
}

/// Bounded-overhead mode against a launch-heavy stand-in (4 threads, each
/// launch followed by 80 µs of CPU) on the stepped build, whose entries are
/// single-stepped and cannot be probed past (9–14 µs a trap on this VM, the
/// worst case): its launch traps cost more than the budget (3 %), so the
/// controller duty-cycles the launch probes, and the scaled launch count of
/// the process stays within the stated error of the truth the stand-in
/// prints. The stated error is 10 % where traps take about a tenth of a
/// process's CPU while attached (README): the attached share is counted
/// exactly; the detached share's estimate rests on the trap share, from the
/// per-hit cost calibrated on an entry of the probe's own kind
/// (single-stepped here). 80 µs launches put the stand-in where a
/// bare-metal launch-heavy process is (a ~1 µs trap on a few-µs launch);
/// with 10 µs launches the traps take half its CPU and the estimate's
/// sensitivity to the calibration doubles (`faultline-bench launch --entry
/// stepped` shows that regime).
#[test]
fn sampled_launch_counts_on_a_stepped_entry_are_within_the_stated_error() {
    let _turn = tests::one_file_at_a_time(file!());
    sampled_counts_within(&tests::fake_libcuda_stepped(), 80_000, 0.10);
}

/// The launch-heavy case (10 µs launches, about 190k launches/s
/// across the 4 threads) on the plain build: the launch probe sits on the
/// emulated `je` after the argument check, calibrated as a branch, so traps
/// take under a tenth of the process's CPU and the count is within 5 %.
#[test]
fn sampled_launch_counts_past_an_argument_check_are_within_5_percent() {
    let _turn = tests::one_file_at_a_time(file!());
    sampled_counts_within(&tests::fake_libcuda(), 10_000, 0.05);
}

/// The same on the CET build: the launch probe sits on the prologue's
/// emulated `push`, calibrated as such.
#[test]
fn sampled_launch_counts_on_a_cet_build_are_within_5_percent() {
    let _turn = tests::one_file_at_a_time(file!());
    sampled_counts_within(&tests::fake_libcuda_cet(), 10_000, 0.05);
}

/// The stepped build: every launch pays a single-stepped trap, about as
/// much CPU as the launch's own 10 µs, so the per-hit cost's uncertainty
/// (calibrated 5.0–6.3 µs where the stand-in paid 6.0–6.7 µs under load)
/// moves the scaled count by more than 5 %: the controller must either hit
/// 5 % or mark the counts approximate (it did not, and read 0.78–0.81).
#[test]
fn sampled_launch_counts_on_single_stepped_entries_are_within_5_percent_or_marked_approximate() {
    let _turn = tests::one_file_at_a_time(file!());
    sampled_counts_within(&tests::fake_libcuda_stepped(), 10_000, 0.05);
}

/// Runs the storm under the controller; the estimate must be within the
/// error bound the controller stated while sampled, and within `max_err`
/// of the truth unless it marked the counts approximate.
fn sampled_counts_within(lib: &std::path::Path, work_ns: u64, max_err: f64) {
    use std::time::{Duration, Instant};

    use collector::cuda::launch_control::LaunchController;
    let _k = tests::kernel_lock();
    if !tests::require_bpf("cuda_sampled") {
        return;
    }
    tests::runtime().block_on(async {
        let mut probes = Probes::load(&opts(Some(lib.to_path_buf()))).expect("load probes");
        assert!(probes.has_launch_probes());
        let mut ctl = LaunchController::calibrating(
            0.03,
            Duration::from_millis(500),
            std::path::Path::new("/proc"),
            probes.launch_entry_kind().expect("a launch probe"),
        )
        .expect("uprobe hit cost");
        eprintln!("uprobe hit cost {:.0} ns", ctl.hit_cost_s() * 1e9);
        let mut child = Command::new(tests::launch_storm())
            .arg(lib)
            .args(["4".to_string(), "8".to_string(), work_ns.to_string()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("launch_storm");
        let lines = tests::lines_of(&mut child);
        let pid: u32 = lines
            .recv_timeout(Duration::from_secs(10))
            .ok()
            .and_then(|l| l.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()))
            .expect("ready line");
        let launches_of = |s: &collector::cuda::CudaSnapshot| -> u64 {
            s.launches
                .iter()
                .filter(|(k, _)| k.pid == pid)
                .map(|(_, v)| v.launches)
                .sum()
        };
        let first = probes.cuda_snapshot().expect("snapshot");
        let mut fractions = Vec::new();
        let mut approximate = false;
        let mut stated = 0.0f64;
        let mut next_window = Instant::now() + Duration::from_millis(1000);
        let last = loop {
            // Exited, not yet reaped: its final CPU time is still readable,
            // as a dead process's is until its parent reaps it.
            let exited = collector::probes::bench::child_exited_unreaped(pid);
            let now = Instant::now();
            if exited || now >= next_window {
                let snap = probes.cuda_snapshot().expect("snapshot");
                let iv = probes.launch_interval();
                eprintln!(
                    "window: attached {:.4} s of {:.3} s raw {:?} frac {} est {}",
                    iv.attached_s,
                    iv.secs,
                    iv.raw_launches.get(&pid),
                    snap.launch_fraction,
                    launches_of(&snap)
                );
                fractions.push(ctl.fraction());
                // The bound it stated while sampled (before it measured a
                // rate change, it says the rate is unmeasured: approximate).
                if ctl.fraction() < 1.0 {
                    approximate |= ctl.approximate();
                    stated = stated.max(ctl.error_bound());
                }
                // Sampled is never reported as 0 (the wire's "exact").
                assert!(snap.launch_fraction > 0.0, "{}", snap.launch_fraction);
                next_window = now + Duration::from_millis(1000);
                if exited {
                    break snap;
                }
                continue;
            }
            let t = ctl.next_event(probes.launch_probes_attached());
            if t <= now {
                ctl.on_event(&mut probes).expect("controller event");
            } else {
                std::thread::sleep(t.min(next_window) - now);
            }
        };
        child.wait().expect("reaping launch_storm");
        let truth: u64 = std::iter::from_fn(|| lines.recv_timeout(Duration::from_secs(5)).ok())
            .find_map(|l| {
                l.strip_prefix("launches ")
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .expect("launches line");
        let estimate = launches_of(&last) - launches_of(&first);
        let err = (estimate as f64 - truth as f64).abs() / truth as f64;
        eprintln!(
            "truth {truth} estimate {estimate} error {:.2}% approximate {approximate} (stated bound {:.1}%, terms {:?}) fractions {fractions:?}",
            err * 100.0,
            stated * 100.0,
            ctl.bound_terms()
        );
        // The bound stated must hold, approximate or not.
        assert!(
            err <= stated + 1e-6,
            "estimate {estimate} vs truth {truth}: error {:.1}% outside the stated bound {:.1}%",
            err * 100.0,
            stated * 100.0
        );
        // Duty-cycled: a tenth or more of the time is estimated, not
        // counted, so the error above is the sampled estimate's. Where the
        // attached share settles follows the calibrated hit cost: on the
        // emulated entries 0.72-0.76 at 412-429 ns and 0.77-0.81 at
        // 399-400 ns (one build to the next, measured side by side here), so
        // a bar at 0.75 tested the calibration's third digit, not the duty
        // cycle.
        assert!(
            fractions.iter().any(|&f| f < 0.9),
            "the controller duty-cycled the launch probes: {fractions:?}"
        );
        assert!(last.launch_fraction <= 1.0);
        assert!(
            err <= max_err || approximate,
            "estimate {estimate} vs truth {truth}: error {:.1}% > {:.0}%, not marked approximate",
            err * 100.0,
            max_err * 100.0
        );
    });
}

/// Bounded mode's per-hit cost is calibrated on an entry of the launch
/// probe's own kind. A single-stepped entry pays a second trap (`#DB`) an
/// emulated one does not, so it costs more on any x86-64 kernel (12× on
/// this VM, 0.8 against 9.6 µs); the calibration of each kind must show it,
/// and the CET stand-in's launch probe (on its prologue's `push`) must be
/// calibrated as emulated.
#[test]
fn hit_cost_is_calibrated_on_the_launch_probes_own_kind() {
    let _turn = tests::one_file_at_a_time(file!());
    use collector::cuda::HitCalibrator;
    let _k = tests::kernel_lock();
    if !tests::require_bpf("cuda_calibration") {
        return;
    }
    let cost = |kind: EntryKind| {
        let mut c = HitCalibrator::new(kind).expect("calibrator");
        // The median of three measurements of 7 rounds each.
        let mut v: Vec<f64> = (0..3)
            .map(|_| c.measure(500, 7).expect("measure"))
            .collect();
        v.sort_by(f64::total_cmp);
        v[1]
    };
    let ns: Vec<(EntryKind, f64)> = EntryKind::ALL.iter().map(|&k| (k, cost(k))).collect();
    eprintln!("hit cost by entry kind, ns: {ns:?}");
    let of = |k: EntryKind| ns.iter().find(|(x, _)| *x == k).map_or(0.0, |(_, c)| *c);
    // Every probed entry costs something: the trap is there.
    assert!(ns.iter().all(|(_, c)| *c > 50.0), "{ns:?}");
    // Emulated entries cost well under a single-stepped one.
    for k in [EntryKind::Push, EntryKind::Nop, EntryKind::Branch] {
        assert!(of(k) < 0.8 * of(EntryKind::Stepped), "{k:?}: {ns:?}");
    }
    tests::runtime().block_on(async {
        let probes = Probes::load(&opts(Some(tests::fake_libcuda_cet()))).expect("load probes");
        assert_eq!(probes.launch_entry_kind(), Some(EntryKind::Push));
        drop(probes);
        let probes = Probes::load(&opts(Some(tests::fake_libcuda()))).expect("load probes");
        assert_eq!(probes.launch_entry_kind(), Some(EntryKind::Branch));
        drop(probes);
        let probes = Probes::load(&opts(Some(tests::fake_libcuda_stepped()))).expect("load probes");
        assert_eq!(probes.launch_entry_kind(), Some(EntryKind::Stepped));
    });
}
