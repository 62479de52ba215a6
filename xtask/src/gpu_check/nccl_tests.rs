//! Tests of the real-NCCL part that need no GPU: the workload's account, the
//! collector's rows and console lines, the checks, the library search and
//! the skip path.
use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde_json::{json, Map};

use super::{
    cuda::parse_record,
    nccl::*,
    nccl_find::*,
    nccl_part::{judge, parse_devices, plan, Part, Plan},
    report::{table, Check, Outcome, Report},
    Args, NCCL_WORKLOAD_C,
};

/// `nccl_workload run … 2 1024 0` on one GPU, as it prints.
const NCCL_OUT: &str = "\
pid 5151
cudart_version 12090
driver_version 12080
cuda_devices 1
nccl_version 23203
nranks 1
rank 0 device 0
op 0 AllReduce 2 8192
op 0 Broadcast 2 8192
op 0 Reduce 2 8192
op 0 AllGather 2 8192
op 0 ReduceScatter 2 8192
op 0 AlltoAll 2 8192
op 0 Gather 2 8192
op 0 Scatter 2 8192
op 0 Send 2 8192
op 0 Recv 2 8192
group GroupStart 2
group GroupEnd 2
verify ok
done
";

const COMM: &str = "9f3c2a7710e4b5d1";

fn row(ops: &[(&str, u64)], seq: u64, ended: bool, exited: bool) -> serde_json::Value {
    json!({"comm": COMM, "nranks": 1, "rank": 0, "device": 0, "pid": 5151, "job": "",
           "hcas": [], "seq": seq, "init": "ncclCommInitAll", "ended": ended, "exited": exited,
           "ops": ops.iter().map(|(op, c)| json!({"op": op, "calls": c, "bytes": c * 4096}))
                .collect::<Vec<_>>()})
}

/// Three windows: the ops split across the first two, the destroy and the
/// exit in the third; another process's rank beside them.
fn record() -> String {
    let other = json!({"comm": "h:7:55", "nranks": -1, "rank": -1, "device": 3, "pid": 7,
        "seq": 9, "init": "unknown", "ops": [{"op": "AllReduce", "calls": 9, "bytes": 9}]});
    let w1 = json!({"seq": 1, "nccl": [
        row(&[("AllReduce", 1), ("Broadcast", 1), ("Reduce", 1), ("AllGather", 1),
              ("ReduceScatter", 1), ("AlltoAll", 1), ("Gather", 1), ("Scatter", 1),
              ("Send", 1), ("Recv", 1)], 8, false, false),
        other]});
    let w2 = json!({"seq": 2, "nccl": [
        row(&[("AllReduce", 1), ("Broadcast", 1), ("Reduce", 1), ("AllGather", 1),
              ("ReduceScatter", 1), ("AlltoAll", 1), ("Gather", 1), ("Scatter", 1),
              ("Send", 1), ("Recv", 1)], 16, false, false)]});
    let w3 = json!({"seq": 3, "nccl": [row(&[], 16, true, true)]});
    format!("{w1}\n{w2}\n{w3}\n")
}

fn console() -> String {
    let ops = "AllGather=1/4096B AllReduce=1/4096B AlltoAll=1/4096B Broadcast=1/4096B \
               Gather=1/4096B Recv=1/4096B Reduce=1/4096B ReduceScatter=1/4096B \
               Scatter=1/4096B Send=1/4096B";
    let mut s = String::new();
    for api in [
        "ncclCommInitAll",
        "ncclCommDestroy",
        "ncclAllReduce",
        "ncclBroadcast",
        "ncclReduce",
        "ncclAllGather",
        "ncclReduceScatter",
        "ncclAlltoAll",
        "ncclGather",
        "ncclScatter",
        "ncclSend",
        "ncclRecv",
    ] {
        s += &format!("probe nccl:{api}: attached\n");
    }
    s += "probe nccl:ncclCommShrink: inactive: not exported\n";
    s += &format!("  nccl comm={COMM} rank=0/1 gpu=0 pid=5151 seq=8 interval=0.010s {ops}\n");
    s += "  nccl comm=h:7:55 rank=-1/-1 gpu=3 pid=7 seq=9 interval=0.000s AllReduce=9/9B\n";
    s += &format!("  nccl comm={COMM} rank=0/1 gpu=0 pid=5151 seq=16 interval=0.011s {ops}\n");
    s += &format!(
        "  nccl comm={COMM} rank=0/1 gpu=0 pid=5151 seq=16 interval=0.000s  in cuStreamSynchronize for 0.2s (exited)\n"
    );
    s
}

fn failed(checks: &[Check]) -> Vec<&str> {
    checks
        .iter()
        .filter(|c| c.outcome == Outcome::Fail)
        .map(|c| c.name.as_str())
        .collect()
}

fn checks_of(out: &str, record: &str, console: &str, standin: bool) -> Vec<Check> {
    let w = parse_nccl_workload(out).unwrap();
    let rec = record_nccl(&parse_record(record).unwrap(), w.pid);
    let con = parse_nccl_console(console, w.pid);
    nccl_checks(&w, &rec, &con, &parse_probe_lines(console), standin)
}

#[test]
fn parses_the_nccl_workloads_own_account() {
    let w = parse_nccl_workload(NCCL_OUT).unwrap();
    assert_eq!(w.pid, 5151);
    assert_eq!(w.nranks, 1);
    assert_eq!(w.devices, BTreeMap::from([(0, 0)]));
    assert_eq!(w.nccl_version.map(version_text).as_deref(), Some("2.32.3"));
    assert_eq!(w.ops.len(), 10);
    assert_eq!(w.ops[&(0, "AllReduce".to_string())], (2, 8192));
    assert_eq!(w.groups["GroupStart"], 2);
    assert_eq!(w.mismatches, Some(0));
    // Send and Recv are not in the collector's sequence.
    assert_eq!(w.seq(), BTreeMap::from([(0, 16)]));
    assert!(w
        .probed_symbols()
        .contains(&"ncclReduceScatter".to_string()));
    let bad = NCCL_OUT.replace(
        "verify ok",
        "mismatch AllGather 0 3 0 3\nverify mismatches=7",
    );
    let b = parse_nccl_workload(&bad).unwrap();
    assert_eq!(b.mismatches, Some(7));
    assert_eq!(b.first_mismatch.as_deref(), Some("AllGather 0 3 0 3"));
    // Unfinished, failed or empty output is an error, never counts of 0.
    assert!(parse_nccl_workload(&NCCL_OUT.replace("done\n", "")).is_err());
    let err = parse_nccl_workload(
        "pid 1\nerror ncclCommInitAll 1 unhandled cuda error (run with NCCL_DEBUG=INFO for details)\n",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("ncclCommInitAll 1 unhandled cuda error"),
        "{err}"
    );
    assert!(parse_nccl_workload("pid 1\nnranks 1\nrank 0 device 0\ndone\n").is_err());
    assert_eq!(version_text(2708), "2.7.8");
}

#[test]
fn the_embedded_nccl_workload_prints_what_the_parser_reads() {
    for fmt in [
        "\"pid %d\\n\"",
        "\"nccl_version %d\\n\"",
        "\"cudart_version %d\\n\"",
        "\"nranks %d\\n\"",
        "\"rank %d device %d\\n\"",
        "\"op %d %s %llu %llu\\n\"",
        "\"group GroupStart %llu\\ngroup GroupEnd %llu\\n\"",
        "\"skipped_op %s (not exported)\\n\"",
        "\"verify ok\\n\"",
        "\"verify mismatches=%llu\\n\"",
        "\"mismatch %s %d %zu %g %g\\n\"",
        "\"done\\n\"",
        "\"error %s %d %s\\n\"",
    ] {
        assert!(NCCL_WORKLOAD_C.contains(fmt), "{fmt}");
    }
    // The op names are the collector's, the symbols NCCL's.
    for op in [
        "AllReduce",
        "Broadcast",
        "Reduce",
        "AllGather",
        "ReduceScatter",
        "AlltoAll",
        "Gather",
        "Scatter",
        "Send",
        "Recv",
    ] {
        assert!(NCCL_WORKLOAD_C.contains(&format!("\"{op}\"")), "{op}");
        assert!(
            NCCL_WORKLOAD_C.contains(&format!("\"nccl{op}\"")),
            "nccl{op}"
        );
    }
    for sym in [
        "ncclCommInitAll",
        "ncclCommDestroy",
        "cudaMalloc",
        "cudaStreamSynchronize",
    ] {
        assert!(NCCL_WORKLOAD_C.contains(&format!("\"{sym}\"")), "{sym}");
    }
}

#[test]
fn rows_and_lines_of_the_workloads_pid_are_summed() {
    let rec = record_nccl(&parse_record(&record()).unwrap(), 5151);
    assert_eq!(rec.len(), 1, "{rec:?}");
    let r = &rec[0];
    assert_eq!((r.rank, r.nranks, r.device, r.seq), (0, 1, 0, 16));
    assert_eq!(r.init, INIT_ALL);
    assert!(r.ended && r.exited);
    assert_eq!(r.ops["AlltoAll"], (2, 8192));
    assert_eq!(r.rows, 3);
    let con = parse_nccl_console(&console(), 5151);
    assert_eq!(con.len(), 1, "{con:?}");
    assert_eq!(con[0].ops["Send"], (2, 8192));
    assert_eq!(con[0].seq, 16);
    assert!(con[0].exited);
    let probes = parse_probe_lines(&console());
    assert_eq!(probes.get("ncclAllReduce"), Some(&true));
    assert_eq!(probes.get("ncclCommShrink"), Some(&false));
}

#[test]
fn a_record_matching_the_nccl_workload_passes_every_check() {
    let checks = checks_of(NCCL_OUT, &record(), &console(), false);
    assert!(failed(&checks).is_empty(), "{}", table(&checks));
    assert!(checks.iter().all(|c| c.outcome == Outcome::Pass));
    // probes, communicator, 2 × ranks, 10 ops × (calls, bytes), console,
    // no extra op, seq, destroyed, results.
    assert_eq!(checks.len(), 4 + 20 + 5, "{}", table(&checks));
    let on_standin = checks_of(NCCL_OUT, &record(), &console(), true);
    let r = on_standin
        .iter()
        .find(|c| c.name == "nccl collective results")
        .unwrap();
    assert_eq!(r.outcome, Outcome::Skip);
}

#[test]
fn a_count_rank_or_size_off_fails_the_check_that_names_it() {
    // One AllReduce byte count off in the record and one Send call in the console.
    let rec = record().replacen("\"bytes\":4096", "\"bytes\":4095", 1);
    let con = console().replacen("Send=1/4096B", "Send=2/4096B", 1);
    let checks = checks_of(NCCL_OUT, &rec, &con, false);
    assert_eq!(
        failed(&checks),
        [
            "nccl AllReduce bytes (record)",
            "nccl calls and bytes (console)"
        ],
        "{}",
        table(&checks)
    );
    // The wrong size, a handle instead of an id, an op never made, no destroy.
    let rec = record()
        .replace("\"nranks\":1", "\"nranks\":2")
        .replace(COMM, "h:5151:7f00")
        .replace("\"ended\":true", "\"ended\":false")
        .replacen("\"op\":\"Scatter\"", "\"op\":\"PutSignal\"", 1);
    let checks = checks_of(NCCL_OUT, &rec, &console(), false);
    assert_eq!(
        failed(&checks),
        [
            "nccl communicator (record)",
            "nccl rank, size and GPU (record)",
            "nccl Scatter calls (record)",
            "nccl Scatter bytes (record)",
            "no nccl ops the workload did not make",
            "nccl communicator destroyed (record)",
        ],
        "{}",
        table(&checks)
    );
    // A probe that did not attach, a wrong result, a missing seq step.
    let con = console().replace(
        "probe nccl:ncclGather: attached",
        "probe nccl:ncclGather: inactive: no symbol",
    );
    let out = NCCL_OUT.replace("verify ok", "verify mismatches=3");
    let rec = record().replace("\"seq\":16", "\"seq\":15");
    let checks = checks_of(&out, &rec, &con, false);
    assert_eq!(
        failed(&checks),
        [
            "nccl probes attached",
            "nccl seq (record)",
            "nccl collective results"
        ],
        "{}",
        table(&checks)
    );
    // Nothing recorded at all fails, never 0 = 0.
    let checks = checks_of(NCCL_OUT, "", "", false);
    assert!(
        checks
            .iter()
            .filter(|c| ![
                "no nccl ops the workload did not make",
                "nccl collective results"
            ]
            .contains(&c.name.as_str()))
            .all(|c| c.outcome == Outcome::Fail),
        "{}",
        table(&checks)
    );
}

#[test]
fn two_ranks_are_compared_rank_by_rank() {
    let out = "pid 9\nnranks 2\nrank 0 device 1\nrank 1 device 0\n\
               op 0 AllReduce 3 300\nop 1 AllReduce 3 300\nverify ok\ndone\n";
    let rows = |c0: u64, c1: u64| {
        let r = |rank: i64, dev: i64, c: u64| {
            json!({"comm": COMM, "nranks": 2, "rank": rank, "device": dev, "pid": 9,
                   "seq": c, "init": "ncclCommInitAll", "ended": true,
                   "ops": [{"op": "AllReduce", "calls": c, "bytes": c * 100}]})
        };
        format!("{}\n", json!({"nccl": [r(0, 1, c0), r(1, 0, c1)]}))
    };
    let con = format!(
        "probe nccl:ncclCommInitAll: attached\nprobe nccl:ncclCommDestroy: attached\n\
         probe nccl:ncclAllReduce: attached\n\
         nccl comm={COMM} rank=0/2 gpu=1 pid=9 seq=3 interval=0.1s AllReduce=3/300B\n\
         nccl comm={COMM} rank=1/2 gpu=0 pid=9 seq=3 interval=0.1s AllReduce=3/300B\n"
    );
    let checks = checks_of(out, &rows(3, 3), &con, false);
    assert!(failed(&checks).is_empty(), "{}", table(&checks));
    let c = checks
        .iter()
        .find(|c| c.name == "nccl rank, size and GPU (record)")
        .unwrap();
    assert_eq!(c.observed, "0/2 gpu1, 1/2 gpu0");
    // The same total split wrongly between the ranks still fails.
    let checks = checks_of(out, &rows(4, 2), &con, false);
    let f = failed(&checks);
    assert!(
        f.contains(&"nccl AllReduce calls (record)"),
        "{}",
        table(&checks)
    );
    let c = checks
        .iter()
        .find(|c| c.name == "nccl AllReduce calls (record)")
        .unwrap();
    assert!(c.observed.starts_with("6 (per rank"), "{}", c.observed);
}

#[test]
fn nccl_devices_default_to_the_check_device() {
    assert_eq!(parse_devices(None, 2, 4), Ok(vec![2]));
    assert_eq!(parse_devices(Some("all"), 0, 3), Ok(vec![0, 1, 2]));
    assert_eq!(parse_devices(Some("all"), 0, 16).map(|v| v.len()), Ok(8));
    assert_eq!(parse_devices(Some("1, 0"), 0, 2), Ok(vec![1, 0]));
    assert!(parse_devices(Some("0,0"), 0, 2).is_err());
    assert!(parse_devices(Some("2"), 0, 2).is_err());
    assert!(parse_devices(Some("x"), 0, 2).is_err());
    assert!(parse_devices(Some("all"), 0, 0).is_err());
}

/// A scratch tree of library places.
struct Tree(PathBuf);

impl Tree {
    fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("gpu-check-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Self(d)
    }

    fn file(&self, rel: &str) -> PathBuf {
        let p = self.0.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, "").unwrap();
        p
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_ld_cache_listing_is_read_for_this_architecture() {
    let text = "\
1234 libs found in cache `/etc/ld.so.cache'
\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2
\tlibnccl.so.2 (libc6) => /usr/lib/i386-linux-gnu/libnccl.so.2
\tlibnccl.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so
\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12
";
    assert_eq!(
        ld_cache_paths(text, NCCL_SONAME),
        [PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2")]
    );
    assert_eq!(
        ld_cache_paths(text, "libcudart.so.12"),
        [PathBuf::from("/usr/local/cuda/lib64/libcudart.so.12")]
    );
    assert!(ld_cache_paths(text, "libcudart.so.13").is_empty());
    assert_eq!(
        site_dirs("/usr/lib/python311.zip\n/opt/v/lib/python3.11/site-packages\n/usr/lib/python3/dist-packages\n"),
        [
            PathBuf::from("/opt/v/lib/python3.11/site-packages"),
            PathBuf::from("/usr/lib/python3/dist-packages")
        ]
    );
}

#[test]
fn nccl_is_found_in_the_venv_then_the_cache_then_directories_then_site_packages() {
    let t = Tree::new("find");
    let none = Places::default();
    let why = find(&none).unwrap_err();
    assert!(
        why.starts_with("no libnccl.so.2 on this node (looked in"),
        "{why}"
    );

    // Site-packages: the wheel's NCCL with the runtime wheel beside it.
    let sp = t.0.join("py/site-packages");
    let sp_nccl = t.file("py/site-packages/nvidia/nccl/lib/libnccl.so.2");
    let sp_rt = t.file("py/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12");
    let mut p = Places {
        site_packages: vec![sp],
        ..Places::default()
    };
    let l = find(&p).unwrap();
    assert_eq!((&l.nccl, &l.cudart), (&sp_nccl, &sp_rt), "{}", l.how);
    assert!(l.how.contains("site-packages"), "{}", l.how);

    // A library directory wins over site-packages; its runtime comes from
    // the same search (a directory), the wheel's runtime is not beside it.
    let dir = t.0.join("cuda/lib64");
    let dir_nccl = t.file("cuda/lib64/libnccl.so.2");
    let dir_rt = t.file("cuda/lib64/libcudart.so.12");
    p.dirs = vec![dir];
    let l = find(&p).unwrap();
    assert_eq!((&l.nccl, &l.cudart), (&dir_nccl, &dir_rt), "{}", l.how);

    // The ld.so cache wins over directories (a stale entry is passed over).
    let cached = t.file("cache/libnccl.so.2");
    p.ld_cache = format!(
        "\tlibnccl.so.2 (libc6,x86-64) => /nonexistent/libnccl.so.2\n\tlibnccl.so.2 (libc6,x86-64) => {}\n",
        cached.display()
    );
    assert_eq!(find(&p).unwrap().nccl, cached);

    // The check's own venv wins over everything; its runtime is beside it.
    let venv = t.0.join("venv/lib/python3.11/site-packages");
    let v_nccl = t.file("venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2");
    let v_rt = t.file("venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12");
    p.venv = vec![venv];
    let l = find(&p).unwrap();
    assert_eq!((&l.nccl, &l.cudart), (&v_nccl, &v_rt), "{}", l.how);
    assert!(l.how.contains("nvidia-venv"), "{}", l.how);

    // NCCL without any runtime: skipped, saying so.
    let lone = Places {
        dirs: vec![t.0.join("cache")],
        ..Places::default()
    };
    let why = find(&lone).unwrap_err();
    assert!(why.contains("but no CUDA runtime"), "{why}");
    // A runtime found for a given NCCL (--nccl-library).
    let l = with_cudart(&p, cached.clone(), "--nccl-library").unwrap();
    assert_eq!((l.nccl, l.cudart), (cached, v_rt));
    assert_eq!(
        find_cudart(&Places::default(), &sp_nccl).map(|f| f.0),
        Some(sp_rt)
    );
    assert!(find_nccl(&Places::default()).is_none());
}

fn args() -> Args {
    Args {
        out: None,
        timeout: 1,
        collector: None,
        no_build: true,
        device: 0,
        rounds: 1,
        launches: 1,
        elements: 1,
        python: None,
        cuda_library: None,
        nvml_library: None,
        no_nccl: false,
        nccl_library: None,
        cudart_library: None,
        nccl_devices: None,
    }
}

fn report() -> Report {
    Report {
        started: Instant::now(),
        started_unix_ms: 0,
        standin: false,
        facts: Map::new(),
        checks: Vec::new(),
        notes: Vec::new(),
    }
}

#[test]
fn the_nccl_part_is_skipped_by_flag_on_the_stand_in_and_without_nccl() {
    let out = std::env::temp_dir();
    let py = Path::new("/nonexistent/python");
    let soon = Instant::now() + Duration::from_secs(5);
    let mut r = report();
    let a = Args {
        no_nccl: true,
        ..args()
    };
    assert!(matches!(plan(&a, &out, py, 1, soon, &mut r), Ok(Plan::Skip(w)) if w == "--no-nccl"));
    let a = Args {
        cuda_library: Some("/x/libcuda.so.1".into()),
        ..args()
    };
    assert!(
        matches!(plan(&a, &out, py, 1, soon, &mut r), Ok(Plan::Skip(w)) if w.contains("--nccl-library"))
    );
    // A --nccl-library that is not there is the user's mistake, not a skip.
    let a = Args {
        nccl_library: Some("/nonexistent/libnccl.so.2".into()),
        ..args()
    };
    assert!(plan(&a, &out, py, 1, soon, &mut r).is_err());
    // So is a device CUDA does not have.
    let a = Args {
        nccl_devices: Some("3".into()),
        ..args()
    };
    assert!(plan(&a, &out, py, 1, soon, &mut r).is_err());
}

#[test]
fn a_skipped_part_is_one_skip_row_and_a_note_never_a_failure() {
    let mut r = report();
    r.checks.push(Check::new("launches (record)", true, 5, 5));
    let rows = judge(
        &Part::Skipped("no libnccl.so.2 on this node (looked in …)".into()),
        "",
        "",
        false,
        &mut r,
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].outcome, Outcome::Skip);
    assert!(rows[0].observed.contains("no libnccl.so.2"));
    r.checks.extend(rows);
    let (status, code, headline) = r.verdict(None);
    assert_eq!((status, code), ("pass", 0));
    assert_eq!(
        headline,
        "PASS: all 1 checks passed, 1 skipped; NCCL part skipped"
    );
    assert_eq!(
        r.facts["nccl_skipped"],
        "no libnccl.so.2 on this node (looked in …)"
    );
    // A part that broke is a failure.
    let rows = judge(
        &Part::Broke("the NCCL workload failed".into()),
        "",
        "",
        false,
        &mut r,
    );
    assert_eq!(rows[0].outcome, Outcome::Fail);
    r.checks.extend(rows);
    let (_, code, headline) = r.verdict(None);
    assert_eq!(code, 1);
    assert!(
        headline.starts_with("FAIL: 1 of 3 checks failed"),
        "{headline}"
    );
}

/// `nccl_workload.c` and `nccl_emulation.c` (NCCL's semantics on the CPU)
/// compiled with `cc` into `dir`; `None` (said loudly) without a compiler.
fn emulated_workload(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let (src, bin) = (dir.join("nccl_workload.c"), dir.join("nccl_workload"));
    let (esrc, lib) = (
        dir.join("nccl_emulation.c"),
        dir.join("libnccl_emulation.so"),
    );
    fs::write(&src, NCCL_WORKLOAD_C).unwrap();
    fs::write(&esrc, include_str!("../../gpu-check/nccl_emulation.c")).unwrap();
    let built = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new(&cc)
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    let w = ["-O2", "-Wall", "-Werror", "-o"].map(std::ffi::OsStr::new);
    if !built(&[&w[..], &[bin.as_os_str(), src.as_os_str(), "-ldl".as_ref()]].concat()) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI=true but {cc} cannot build the NCCL workload"
        );
        eprintln!("SKIPPED: no C compiler ({cc}) to build the NCCL workload");
        return None;
    }
    let so = ["-shared", "-fPIC", "-O2", "-Wall", "-o"].map(std::ffi::OsStr::new);
    assert!(
        built(&[&so[..], &[lib.as_os_str(), esrc.as_os_str()]].concat()),
        "the emulation does not compile"
    );
    Some((bin, lib))
}

fn run_emulated(bin: &Path, lib: &Path, devices: &[&str], wrong: Option<&str>) -> NcclWorkload {
    let mut c = std::process::Command::new(bin);
    c.arg("run")
        .arg(lib)
        .arg(lib)
        .args(["2", "100"])
        .args(devices);
    if let Some(op) = wrong {
        c.env("NCCL_EMULATION_WRONG", op);
    }
    let o = c.output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    parse_nccl_workload(&text).unwrap_or_else(|e| panic!("{e:#}: {text}"))
}

/// The real workload program against NCCL's semantics: it prints what the
/// parser reads, counts each call, and its result checks pass on right
/// answers and catch a wrong element of any op, on 1, 2, 3 and 8 ranks.
#[test]
fn the_nccl_workload_checks_every_op_against_nccls_semantics() {
    let t = Tree::new("emulated");
    let Some((bin, lib)) = emulated_workload(&t.0) else {
        return;
    };
    for devices in [
        &["0"][..],
        &["0", "1"],
        &["2", "0", "1"],
        &["0", "1", "2", "3", "4", "5", "6", "7"],
    ] {
        let w = run_emulated(&bin, &lib, devices, None);
        let n = devices.len();
        assert_eq!(w.mismatches, Some(0), "{n} ranks: {:?}", w.first_mismatch);
        assert_eq!(w.nranks as usize, n);
        assert_eq!(w.nccl_version, Some(23203));
        assert_eq!(
            w.devices.values().map(i32::to_string).collect::<Vec<_>>(),
            devices
        );
        // 10 ops on every rank, 2 rounds, 100 floats each.
        assert_eq!(w.ops.len(), 10 * n);
        assert!(w.ops.values().all(|&cb| cb == (2, 800)), "{:?}", w.ops);
        assert_eq!(w.seq().values().copied().collect::<Vec<_>>(), vec![16; n]);
        // Send/Recv are always grouped; the rest only with several ranks.
        let groups = if n == 1 { 2 } else { 2 * 9 };
        assert_eq!(w.groups["GroupStart"], groups);
        assert_eq!(w.groups["GroupEnd"], groups);
    }
    for op in [
        "AllReduce",
        "Broadcast",
        "Reduce",
        "AllGather",
        "ReduceScatter",
        "AlltoAll",
        "Gather",
        "Scatter",
        "Recv",
    ] {
        let w = run_emulated(&bin, &lib, &["1", "0", "2"], Some(op));
        assert!(w.mismatches.is_some_and(|m| m > 0), "{op} not caught");
        assert!(
            w.first_mismatch
                .as_deref()
                .is_some_and(|m| m.starts_with(&format!("{op} "))),
            "{op}: {:?}",
            w.first_mismatch
        );
    }
}
