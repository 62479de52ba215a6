//! NVIDIA's real CUDA runtime (`libcudart.so.12` 12.9 from PyPI, installed by
//! `scripts/setup.sh` into `<target dir>/nvidia-venv`) over the stand-in
//! driver, under the real CUDA probes.
//!
//! cudart finds every driver entry point through `cuGetProcAddress_v2`,
//! picking versioned (`_v2`) and per-thread-default-stream (`_ptds`,
//! `_ptsz`) exports, and talks to the driver's private tables at
//! initialisation; the stand-in serves both as the real driver does and
//! traces (`FAKE_CUDA_TRACE`) every entry point cudart asked for and every
//! one it called. The workload (`tests/standins/cudart_workload.c`) runs
//! `cudaMalloc`, `cudaMemcpy` both ways (explicit kinds and
//! `cudaMemcpyDefault`), `cudaMemcpyAsync` on a created stream and on
//! `cudaStreamPerThread`, the `_ptds` / `_ptsz` runtime entry points,
//! device-to-device copies (`cudaMemcpy` / `cudaMemcpyAsync` /
//! `cudaMemcpy_ptds` / `cudaMemcpyAsync_ptsz` with
//! `cudaMemcpyDeviceToDevice`), peer copies between its two devices
//! (`cudaMemcpyPeer`, `cudaMemcpyPeerAsync`), `cudaStreamSynchronize`,
//! `cudaDeviceSynchronize` and `cudaFree` N times;
//! the collector's counts and bytes per call kind must be exact, and every
//! entry point cudart called in the probed families must be probed and
//! attached.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use collector::{
    cuda_lib::Search,
    probes::{table::CUDA_PROBES, ProbeOptions, ProbeState, Probes},
};
use collector_common::{cuda::call, stat};

/// Iterations of the workload.
const N: u64 = 7;
/// The byte sizes of `cudart_workload.c`.
const ALLOC: u64 = 65536;
const HTOD: u64 = 4096;
const DTOH: u64 = 2048;
const ASYNC_HTOD: u64 = 1000;
const ASYNC_DTOH: u64 = 3000;
const PT_HTOD: u64 = 512;
const PT_DTOH: u64 = 768;
const PTDS_HTOD: u64 = 1536;
const PTDS_DTOH: u64 = 1280;
const PTSZ_HTOD: u64 = 640;
const DFLT_HTOD: u64 = 200;
const DFLT_DTOH: u64 = 300;
const DFLT_ASYNC: u64 = 400;
const DFLT_PTDS: u64 = 600;
/// The device-to-device and peer chain: host → A → B → C → device 1 → D → E → F → host.
const CHAIN_HTOD: u64 = 2800;
const DTOD: u64 = 2500;
const ASYNC_DTOD: u64 = 2200;
const PEER: u64 = 1900;
const PEER_ASYNC: u64 = 1600;
const PTDS_DTOD: u64 = 1400;
const PTSZ_DTOD: u64 = 1200;
const CHAIN_DTOH: u64 = 1000;
/// Devices the stand-in reports (cudart queries each one at initialisation).
const DEVICES: u32 = 2;

/// `libcudart.so.12` from the `nvidia-cuda-runtime-cu12` wheel: in
/// `$FAULTLINE_NVIDIA_VENV`, else `<target dir>/nvidia-venv` (the target
/// dir from `CARGO_TARGET_DIR`, else this test's own, else the workspace's
/// `target/`). `None`, with a loud message, when missing outside CI.
fn real_cudart() -> Option<PathBuf> {
    const REL: &str = "lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12";
    let mut venvs: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("FAULTLINE_NVIDIA_VENV") {
        venvs.push(PathBuf::from(v));
    }
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        venvs.push(PathBuf::from(t).join("nvidia-venv"));
    }
    if let Some(t) = tests::bin("x").parent().and_then(Path::parent) {
        venvs.push(t.join("nvidia-venv"));
    }
    venvs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nvidia-venv"));
    let found = venvs.iter().find_map(|v| {
        let lib = v.join(REL);
        lib.exists().then_some(lib)
    });
    if found.is_none() {
        let msg = format!(
            "the real-cudart test needs NVIDIA's libcudart.so.12 (PyPI nvidia-cuda-runtime-cu12) at <venv>/{REL}; looked in {venvs:?}: run scripts/setup.sh"
        );
        if tests::in_ci() {
            panic!("{msg}");
        }
        eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    }
    found
}

fn opts() -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: false,
        block_sample_every: 0,
        cuda: true,
        cuda_search: Search {
            configured: Some(tests::fake_libcuda()),
            ld_cache: false,
            proc_root: None,
            usual: vec![],
        },
        cuda_events_per_sec: 0,
        verbs: false,
        ..ProbeOptions::default()
    }
}

/// What the stand-in's `FAKE_CUDA_TRACE` file says.
#[derive(Debug, Default)]
struct Trace {
    /// (requested name, CUDA version, flags) → export handed out (`None`: not found).
    resolved: BTreeMap<(String, u32, u64), Option<String>>,
    /// Export → calls through the pointer cuGetProcAddress handed out.
    called: BTreeMap<String, u64>,
    /// Private tables asked for, by name ("unknown" for a UUID the stand-in has not).
    tables: Vec<String>,
}

impl Trace {
    fn parse(text: &str) -> Self {
        let mut t = Self::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["resolve", name, ver, flags, export, _status] => {
                    t.resolved.insert(
                        (
                            (*name).to_string(),
                            ver.parse().expect("version"),
                            flags.parse().expect("flags"),
                        ),
                        (*export != "-").then(|| (*export).to_string()),
                    );
                }
                ["call", export] => *t.called.entry((*export).to_string()).or_default() += 1,
                ["table", _uuid, "found", name] => t.tables.push((*name).to_string()),
                ["table", _uuid, "unknown"] => t.tables.push("unknown".into()),
                _ => {}
            }
        }
        t
    }

    fn export_for(&self, name: &str, version: u32, flags: u64) -> Option<&str> {
        self.resolved
            .get(&(name.to_string(), version, flags))
            .and_then(|e| e.as_deref())
    }
}

/// The driver entry-point families the CUDA probes cover: launches, copies,
/// synchronisation, allocation and free.
fn in_probed_family(export: &str) -> bool {
    (export.starts_with("cuLaunch") && !export.starts_with("cuLaunchHostFunc"))
        || export.starts_with("cuGraphLaunch")
        || export.starts_with("cuMemcpy")
        || export.contains("Synchronize")
        || export.starts_with("cuMemAlloc")
        || export.starts_with("cuMemFree")
}

fn run_workload(cudart: &Path, trace: &Path) -> u32 {
    let driver_dir = tests::fake_libcuda()
        .parent()
        .expect("stand-in dir")
        .to_path_buf();
    let _ = std::fs::remove_file(trace);
    let out = Command::new(tests::cudart_workload())
        .arg(cudart)
        .arg(N.to_string())
        .env("LD_LIBRARY_PATH", &driver_dir)
        .env("FAKE_CUDA_TRACE", trace)
        .env("FAKE_CUDA_DEVICES", DEVICES.to_string())
        .output()
        .expect("run cudart_workload");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cudart_workload failed ({}): {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("runtime 12090 devices {DEVICES}")),
        "{stdout}"
    );
    assert!(stdout.contains("done"), "{stdout}");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("ready "))
        .and_then(|p| p.trim().parse().ok())
        .expect("workload prints its pid")
}

#[test]
fn real_cudart_over_the_stand_in_is_counted_exactly() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("real_cudart") {
        return;
    }
    let Some(cudart) = real_cudart() else { return };
    let trace_path =
        std::env::temp_dir().join(format!("faultline-cudart-trace-{}.txt", std::process::id()));
    tests::runtime().block_on(async {
        let probes = Probes::load(&opts()).expect("load probes");
        let status: BTreeMap<&str, ProbeState> = probes
            .status()
            .iter()
            .map(|s| (s.name, s.state.clone()))
            .collect();
        let pid = run_workload(&cudart, &trace_path);
        let trace = Trace::parse(&std::fs::read_to_string(&trace_path).expect("trace file"));
        let _ = std::fs::remove_file(&trace_path);

        // cudart really went through cuGetProcAddress and the private tables.
        assert!(
            trace.resolved.len() > 300,
            "{} resolved",
            trace.resolved.len()
        );
        for table in [
            "CUDART_INTERFACE",
            "TOOLS_RUNTIME_CALLBACK_HOOKS",
            "CONTEXT_LOCAL_STORAGE",
            "INTEGRITY_CHECK",
        ] {
            assert!(
                trace.tables.iter().any(|t| t == table),
                "{table}: {trace:?}"
            );
        }
        // The stand-in hands out what the real driver would: the version
        // picks the `_v2` export, the per-thread flag the `_ptds`/`_ptsz` one.
        for (name, version, flags, want) in [
            ("cuMemcpyHtoD", 3020, 0, "cuMemcpyHtoD_v2"),
            ("cuMemcpyHtoD", 7000, 2, "cuMemcpyHtoD_v2_ptds"),
            ("cuMemcpyDtoHAsync", 3020, 0, "cuMemcpyDtoHAsync_v2"),
            ("cuMemcpyDtoHAsync", 7000, 2, "cuMemcpyDtoHAsync_v2_ptsz"),
            ("cuMemcpy", 4000, 0, "cuMemcpy"),
            ("cuMemcpy", 7000, 2, "cuMemcpy_ptds"),
            ("cuStreamSynchronize", 2000, 0, "cuStreamSynchronize"),
            ("cuStreamSynchronize", 7000, 2, "cuStreamSynchronize_ptsz"),
            ("cuLaunchKernel", 4000, 0, "cuLaunchKernel"),
            ("cuLaunchKernel", 7000, 2, "cuLaunchKernel_ptsz"),
            ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
            ("cuMemcpyDtoD", 3020, 0, "cuMemcpyDtoD_v2"),
            ("cuMemcpyDtoD", 7000, 2, "cuMemcpyDtoD_v2_ptds"),
            ("cuMemcpyDtoDAsync", 3020, 0, "cuMemcpyDtoDAsync_v2"),
            ("cuMemcpyDtoDAsync", 7000, 2, "cuMemcpyDtoDAsync_v2_ptsz"),
            ("cuMemcpyPeer", 4000, 0, "cuMemcpyPeer"),
            ("cuMemcpyPeer", 7000, 2, "cuMemcpyPeer_ptds"),
            ("cuMemcpyPeerAsync", 4000, 0, "cuMemcpyPeerAsync"),
            ("cuMemcpyPeerAsync", 7000, 2, "cuMemcpyPeerAsync_ptsz"),
            ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
        ] {
            assert_eq!(
                trace.export_for(name, version, flags),
                Some(want),
                "{name} {version} {flags}"
            );
        }

        // Every entry point in the probed families that cudart called, and
        // every one the stand-in handed out, is in the probe table and attached.
        let probe_of = |export: &str| CUDA_PROBES.iter().find(|p| p.symbol == export);
        let handed_out: BTreeSet<&str> = trace
            .resolved
            .values()
            .flatten()
            .map(String::as_str)
            .filter(|e| in_probed_family(e))
            .collect();
        for export in handed_out
            .iter()
            .copied()
            .chain(trace.called.keys().map(String::as_str))
            .filter(|e| in_probed_family(e))
        {
            assert!(probe_of(export).is_some(), "{export} is not probed");
            assert_eq!(
                status.get(export),
                Some(&ProbeState::Attached),
                "{export} attached"
            );
        }
        let called: BTreeSet<&str> = trace
            .called
            .keys()
            .map(String::as_str)
            .filter(|e| in_probed_family(e))
            .collect();
        assert_eq!(
            called,
            BTreeSet::from([
                "cuCtxSynchronize",
                "cuMemAlloc_v2",
                "cuMemFree_v2",
                "cuMemcpy",
                "cuMemcpyAsync",
                "cuMemcpyDtoDAsync_v2",
                "cuMemcpyDtoDAsync_v2_ptsz",
                "cuMemcpyDtoD_v2",
                "cuMemcpyDtoD_v2_ptds",
                "cuMemcpyDtoHAsync_v2",
                "cuMemcpyDtoH_v2",
                "cuMemcpyDtoH_v2_ptds",
                "cuMemcpyHtoDAsync_v2",
                "cuMemcpyHtoDAsync_v2_ptsz",
                "cuMemcpyHtoD_v2",
                "cuMemcpyHtoD_v2_ptds",
                "cuMemcpyPeer",
                "cuMemcpyPeerAsync",
                "cuMemcpy_ptds",
                "cuStreamSynchronize",
                "cuStreamSynchronize_ptsz",
            ]),
            "entry points cudart 12.9 called for the workload: {:?}",
            trace.called
        );

        // Exact counts and bytes per call kind.
        let snap = probes.cuda_snapshot().expect("snapshot");
        let c = |kind| snap.call_total(pid, kind);
        for (kind, calls, bytes) in [
            // One per iteration, and the peer buffer on device 1.
            (call::MEM_ALLOC, N + 1, (N + 1) * ALLOC),
            (call::MEM_FREE, N + 1, 0),
            // cudaMemcpy H2D → cuMemcpyHtoD_v2 (twice: the first copy and
            // the chain's), cudaMemcpy_ptds H2D → cuMemcpyHtoD_v2_ptds.
            (
                call::MEMCPY_HTOD,
                3 * N,
                N * (HTOD + CHAIN_HTOD + PTDS_HTOD),
            ),
            (
                call::MEMCPY_DTOH,
                3 * N,
                N * (DTOH + CHAIN_DTOH + PTDS_DTOH),
            ),
            // cudaMemcpy D2D → cuMemcpyDtoD_v2, cudaMemcpy_ptds D2D → cuMemcpyDtoD_v2_ptds.
            (call::MEMCPY_DTOD, 2 * N, N * (DTOD + PTDS_DTOD)),
            // cudaMemcpyAsync D2D on the created stream → cuMemcpyDtoDAsync_v2,
            // cudaMemcpyAsync_ptsz D2D on stream 0 → cuMemcpyDtoDAsync_v2_ptsz.
            (call::MEMCPY_DTOD_ASYNC, 2 * N, N * (ASYNC_DTOD + PTSZ_DTOD)),
            // cudaMemcpyPeer → cuMemcpyPeer, cudaMemcpyPeerAsync → cuMemcpyPeerAsync.
            (call::MEMCPY_PEER, N, N * PEER),
            (call::MEMCPY_PEER_ASYNC, N, N * PEER_ASYNC),
            // cudaMemcpyDefault: two through cuMemcpy, one through cuMemcpy_ptds.
            (call::MEMCPY, 3 * N, N * (DFLT_HTOD + DFLT_DTOH + DFLT_PTDS)),
            (call::MEMCPY_ASYNC, N, N * DFLT_ASYNC),
            // Created stream and cudaStreamPerThread (handle 2) through the
            // legacy export, stream 0 from cudaMemcpyAsync_ptsz through `_ptsz`.
            (
                call::MEMCPY_HTOD_ASYNC,
                3 * N,
                N * (ASYNC_HTOD + PT_HTOD + PTSZ_HTOD),
            ),
            (call::MEMCPY_DTOH_ASYNC, 2 * N, N * (ASYNC_DTOH + PT_DTOH)),
            // Created stream four times, cudaStreamPerThread, and stream 0
            // from cudaStreamSynchronize_ptsz twice.
            (call::STREAM_SYNC, 7 * N, 0),
            // cudaDeviceSynchronize.
            (call::CTX_SYNC, N, 0),
            (call::EVENT_SYNC, 0, 0),
            (call::LAUNCH_KERNEL, 0, 0),
            (call::GRAPH_LAUNCH, 0, 0),
        ] {
            let s = c(kind);
            assert_eq!(
                (s.calls, s.bytes, s.errors),
                (calls, bytes, 0),
                "{}",
                call::name(kind)
            );
        }
        // The blocking ones are timed, each one.
        for kind in [
            call::MEM_ALLOC,
            call::MEMCPY_HTOD,
            call::MEMCPY_DTOH,
            call::MEMCPY,
            call::MEMCPY_DTOD,
            call::MEMCPY_PEER,
            call::STREAM_SYNC,
            call::CTX_SYNC,
        ] {
            assert_eq!(c(kind).timed, c(kind).calls, "{} timed", call::name(kind));
        }
        // The trace agrees call for call: per kind, the calls cudart made
        // through the probed exports are the calls counted.
        let mut traced_by_kind: BTreeMap<u32, u64> = BTreeMap::new();
        for (export, n) in &trace.called {
            if let Some(p) = probe_of(export).filter(|p| p.entry == "cuda_enter") {
                *traced_by_kind.entry(p.cookie as u32).or_default() += n;
            }
        }
        for (kind, n) in &traced_by_kind {
            assert_eq!(
                c(*kind).calls,
                *n,
                "{} against the trace",
                call::name(*kind)
            );
        }
        // alloc, free, HtoD, DtoH, cuMemcpy, cuMemcpyAsync, HtoDAsync,
        // DtoHAsync, stream sync, context sync, DtoD, DtoDAsync, peer, peer
        // async per iteration; the peer buffer's alloc and free once.
        assert_eq!(
            traced_by_kind.values().sum::<u64>(),
            N * (1 + 1 + 3 + 3 + 3 + 1 + 3 + 2 + 7 + 1 + 2 + 2 + 1 + 1) + 2
        );
        // Every call is on the device cudart made current: device 0 (its
        // primary context), but the peer buffer's allocation, made after
        // cudaSetDevice(1). The peer copies run with device 0 current (cudart
        // does not switch for them) and count there; so does the peer
        // buffer's free, made after cudaSetDevice(0).
        let on = |device: i32| -> BTreeMap<u32, (u64, u64)> {
            snap.calls
                .iter()
                .filter(|(k, _)| k.pid == pid && k.device == device)
                .map(|(k, v)| (k.kind, (v.calls, v.bytes)))
                .collect()
        };
        let devices: BTreeSet<i32> = snap
            .calls
            .keys()
            .filter(|k| k.pid == pid)
            .map(|k| k.device)
            .collect();
        assert_eq!(devices, BTreeSet::from([0, 1]), "{:?}", snap.calls);
        assert_eq!(
            on(1),
            BTreeMap::from([(call::MEM_ALLOC, (1, ALLOC))]),
            "device 1"
        );
        let dev0 = on(0);
        assert_eq!(dev0[&call::MEMCPY_PEER], (N, N * PEER));
        assert_eq!(dev0[&call::MEMCPY_PEER_ASYNC], (N, N * PEER_ASYNC));
        assert_eq!(dev0[&call::MEM_FREE], (N + 1, 0));

        // The window row carries every copy's bytes (host and device
        // alike), which is what usage charges the job.
        let all_copies = N
            * (HTOD
                + CHAIN_HTOD
                + PTDS_HTOD
                + DTOH
                + CHAIN_DTOH
                + PTDS_DTOH
                + DFLT_HTOD
                + DFLT_DTOH
                + DFLT_PTDS
                + DFLT_ASYNC
                + ASYNC_HTOD
                + PT_HTOD
                + PTSZ_HTOD
                + ASYNC_DTOH
                + PT_DTOH
                + DTOD
                + PTDS_DTOD
                + ASYNC_DTOD
                + PTSZ_DTOD
                + PEER
                + PEER_ASYNC);
        let mut ids = collector::identity::IdentityCache::new("/nonexistent", 8);
        let before = collector::cuda::CudaSnapshot::empty(snap.taken);
        let rows: BTreeMap<(u32, i32), u64> = collector::cuda::wire::rows(&before, &snap, &mut ids)
            .into_iter()
            .filter(|r| r.pid == pid)
            .map(|r| ((r.pid, r.device), r.copy_bytes))
            .collect();
        assert_eq!(
            rows,
            BTreeMap::from([((pid, 0), all_copies), ((pid, 1), 0)])
        );
        // The Prometheus series: one `call` per direction, bytes exact.
        let text = collector::cuda::render_prometheus(&snap, |p| {
            if p == pid {
                ("j".into(), "0".into())
            } else {
                (String::new(), String::new())
            }
        });
        for (c, calls, bytes) in [
            ("cuMemcpyDtoD", 2 * N, N * (DTOD + PTDS_DTOD)),
            ("cuMemcpyDtoDAsync", 2 * N, N * (ASYNC_DTOD + PTSZ_DTOD)),
            ("cuMemcpyPeer", N, N * PEER),
            ("cuMemcpyPeerAsync", N, N * PEER_ASYNC),
        ] {
            let l = format!("hpc_job=\"j\",rank=\"0\",gpu=\"0\",call=\"{c}\"");
            assert!(
                text.contains(&format!("faultline_cuda_calls_total{{{l}}} {calls}\n")),
                "{c}: {text}"
            );
            assert!(
                text.contains(&format!("faultline_cuda_copy_bytes_total{{{l}}} {bytes}\n")),
                "{c}: {text}"
            );
        }
        let k = probes.kernel_stats().expect("kernel stats");
        assert_eq!(k[stat::CUDA_UNMATCHED_RETURN as usize], 0);
        assert_eq!(k[stat::CUDA_AGG_MAP_FULL as usize], 0);
    });
}
