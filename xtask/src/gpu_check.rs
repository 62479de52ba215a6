//! `cargo xtask gpu-check`: the collector against a real NVIDIA GPU.
//!
//! A CUDA workload that needs no toolkit (`xtask/gpu-check/gpu_workload.c`,
//! compiled here with the system C compiler, loading `libcuda.so.1` with
//! dlopen and JIT-compiling the hand-written PTX kernel
//! `xtask/gpu-check/vadd.ptx`) runs under the release `faultline-collector`
//! while nvidia-ml-py (`xtask/gpu-check/nvml_sampler.py`) reads NVML beside
//! it. The workload prints what it did; the collector's record (`--record`,
//! the replay format) and its console lines say what it saw. Checks
//! ([`cuda_checks`], [`nvml_checks`]): launch, copy, sync, alloc and free
//! counts and bytes exactly equal to the workload's own, the kernel's name,
//! the device, and every GPU's NVML values physical and equal to
//! nvidia-ml-py's within the tolerances below.
//!
//! Exit codes: [`EXIT_PASS`] only when every check passed; [`EXIT_FAIL`] when
//! a check failed, the run broke or timed out; [`EXIT_NO_GPU`] on a machine
//! without `/dev/nvidia<N>` or a loadable `libcuda.so.1` (never a pass);
//! [`EXIT_CANNOT_RUN`] when a prerequisite on a GPU machine is missing (root,
//! a C compiler, nvidia-ml-py, the collector build). `result.json` in the
//! output directory says the same. docs/gpu-check.md is the user's guide.
use std::{
    collections::{BTreeMap, BTreeSet},
    ffi::{CStr, CString},
    fs,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Map, Value};

const WORKLOAD_C: &str = include_str!("../gpu-check/gpu_workload.c");
const KERNEL_PTX: &str = include_str!("../gpu-check/vadd.ptx");
const NVML_SAMPLER: &str = include_str!("../gpu-check/nvml_sampler.py");
/// The `.entry` of `vadd.ptx`, the name the collector must report.
pub const KERNEL_NAME: &str = "faultline_vadd";

pub const EXIT_PASS: i32 = 0;
pub const EXIT_FAIL: i32 = 1;
pub const EXIT_NO_GPU: i32 = 3;
pub const EXIT_CANNOT_RUN: i32 = 4;
/// `gpu_workload probe`: the driver loads but sees no device.
const WORKLOAD_NO_DEVICE: i32 = 10;

/// The collector's window (seconds) during the check.
const WINDOW_S: u32 = 1;
/// nvidia-ml-py's sampling interval (seconds).
const REF_INTERVAL_S: f64 = 0.2;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Directory for result.json and the run's files [default: <target dir>/gpu-check].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Give up after this many seconds (everything but the collector build);
    /// a timeout is a failure.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    timeout: u64,
    /// Run this collector binary [default: build target/release/faultline-collector].
    #[arg(long, value_name = "PATH")]
    collector: Option<PathBuf>,
    /// Skip `cargo build --release -p collector` (use the binary already built).
    #[arg(long)]
    no_build: bool,
    /// CUDA device ordinal the workload runs on.
    #[arg(long, default_value_t = 0)]
    device: u32,
    /// Rounds of the workload (each: 2 copies in, the launches, a stream
    /// sync, 1 copy out).
    #[arg(long, default_value_t = 10)]
    rounds: u32,
    /// Kernel launches per round.
    #[arg(long, default_value_t = 100)]
    launches: u32,
    /// Vector length (floats) of the kernel.
    #[arg(long, default_value_t = 1 << 20)]
    elements: u32,
    /// Python with nvidia-ml-py [default: <target dir>/nvidia-venv/bin/python,
    /// installed by scripts/setup.sh].
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// Self-test of the harness without a GPU: use this `libcuda.so.1` (the
    /// test stand-in) instead of the driver's. Skips the /dev/nvidia* test and
    /// the kernel-result check; the verdict says "stand-in", never a GPU pass.
    #[arg(long, value_name = "PATH")]
    cuda_library: Option<PathBuf>,
    /// `libnvidia-ml.so.1` for both NVML readers instead of the system's (with
    /// --cuda-library: the test stand-in).
    #[arg(long, value_name = "PATH")]
    nvml_library: Option<PathBuf>,
}

impl Args {
    fn standin(&self) -> bool {
        self.cuda_library.is_some()
    }
}

/// The workspace's target directory (`$CARGO_TARGET_DIR` when set).
fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    workspace_root().join("target")
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

// ---------------------------------------------------------------------------
// Checks and the report

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// Not applicable in this mode (only the stand-in self-test skips).
    Skip,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Skip => "skip",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub name: String,
    pub outcome: Outcome,
    pub expected: String,
    pub observed: String,
}

impl Check {
    fn new(
        name: impl Into<String>,
        pass: bool,
        expected: impl ToString,
        observed: impl ToString,
    ) -> Self {
        Self {
            name: name.into(),
            outcome: if pass { Outcome::Pass } else { Outcome::Fail },
            expected: expected.to_string(),
            observed: observed.to_string(),
        }
    }

    /// A count that must be exactly `expected`.
    fn exact(name: impl Into<String>, expected: u64, observed: Option<u64>) -> Self {
        match observed {
            Some(o) => Self::new(name, o == expected, expected, o),
            None => Self::new(name, false, expected, "nothing recorded"),
        }
    }
}

/// Why the run stopped before a verdict from the checks.
#[derive(Debug)]
enum Halt {
    NoGpu(String),
    CannotRun(String),
    Failed(String),
}

impl From<anyhow::Error> for Halt {
    fn from(e: anyhow::Error) -> Self {
        Halt::Failed(format!("{e:#}"))
    }
}

fn cannot(e: anyhow::Error) -> Halt {
    Halt::CannotRun(format!("{e:#}"))
}

struct Report {
    started: Instant,
    started_unix_ms: u64,
    standin: bool,
    facts: Map<String, Value>,
    checks: Vec<Check>,
}

impl Report {
    fn fact(&mut self, key: &str, v: impl Into<Value>) {
        self.facts.insert(key.into(), v.into());
    }

    /// Status word, exit code and the headline.
    fn verdict(&self, halt: Option<&Halt>) -> (&'static str, i32, String) {
        let failed = self
            .checks
            .iter()
            .filter(|c| c.outcome == Outcome::Fail)
            .count();
        let what = if self.standin {
            " (stand-in driver: the harness works; no GPU was tested)"
        } else {
            ""
        };
        match halt {
            Some(Halt::NoGpu(why)) => (
                "no_gpu",
                EXIT_NO_GPU,
                format!("NO GPU: {why}; nothing was checked (not a pass)"),
            ),
            Some(Halt::CannotRun(why)) => {
                ("cannot_run", EXIT_CANNOT_RUN, format!("CANNOT RUN: {why}"))
            }
            Some(Halt::Failed(why)) => ("fail", EXIT_FAIL, format!("FAIL: {why}")),
            None if self.checks.is_empty() => ("fail", EXIT_FAIL, "FAIL: no check ran".into()),
            None if failed > 0 => (
                "fail",
                EXIT_FAIL,
                format!("FAIL: {failed} of {} checks failed", self.checks.len()),
            ),
            None => (
                "pass",
                EXIT_PASS,
                format!("PASS: all {} checks passed{what}", self.checks.len()),
            ),
        }
    }

    fn to_json(&self, halt: Option<&Halt>) -> Value {
        let (status, code, headline) = self.verdict(halt);
        let reason = match halt {
            Some(Halt::NoGpu(w) | Halt::CannotRun(w) | Halt::Failed(w)) => Value::from(w.clone()),
            None => Value::Null,
        };
        json!({
            "status": status,
            "exit_code": code,
            "passed": code == EXIT_PASS,
            "gpu_present": !matches!(halt, Some(Halt::NoGpu(_))) && !self.standin,
            "mode": if self.standin { "standin" } else { "gpu" },
            "headline": headline,
            "reason": reason,
            "started_unix_ms": self.started_unix_ms,
            "elapsed_s": (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "facts": Value::Object(self.facts.clone()),
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name,
                "result": c.outcome.word(),
                "expected": c.expected,
                "observed": c.observed,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The pass/fail table.
pub fn table(checks: &[Check]) -> String {
    let w_name = checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let w_exp = checks
        .iter()
        .map(|c| c.expected.len())
        .max()
        .unwrap_or(8)
        .clamp(8, 40);
    let mut s = format!(
        "{:<6} {:<w_name$}  {:<w_exp$}  observed\n",
        "result", "check", "expected"
    );
    for c in checks {
        s.push_str(&format!(
            "{:<6} {:<w_name$}  {:<w_exp$}  {}\n",
            c.outcome.word().to_uppercase(),
            c.name,
            c.expected,
            c.observed
        ));
    }
    s
}

/// Runs the check; returns the process's exit code. Never panics on a
/// missing GPU or a broken run: every end writes `result.json`.
pub fn run(args: &Args) -> i32 {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| target_dir().join("gpu-check"));
    let mut report = Report {
        started: Instant::now(),
        started_unix_ms: unix_ms(SystemTime::now()).max(0) as u64,
        standin: args.standin(),
        facts: Map::new(),
        checks: Vec::new(),
    };
    report.fact("timeout_s", args.timeout);
    report.fact("out_dir", out.display().to_string());
    let halt = check(args, &out, &mut report).err();
    if !report.checks.is_empty() {
        println!("\n{}", table(&report.checks));
    }
    let (_, code, headline) = report.verdict(halt.as_ref());
    let result = out.join("result.json");
    let written = fs::create_dir_all(&out)
        .and_then(|()| {
            let mut text = serde_json::to_string_pretty(&report.to_json(halt.as_ref()))
                .map_err(std::io::Error::other)?;
            text.push('\n');
            fs::write(&result, text)
        })
        .map(|()| result.display().to_string());
    println!("gpu-check: {headline} (exit {code})");
    match written {
        Ok(p) => println!("gpu-check: result in {p}"),
        Err(e) => eprintln!("gpu-check: could not write {}: {e}", result.display()),
    }
    code
}

fn check(args: &Args, out: &Path, report: &mut Report) -> Result<(), Halt> {
    // 1. Is there a GPU at all? (No build, no privileges needed to say no.)
    let lib = detect(args, Path::new("/dev"))?;
    report.fact("libcuda", lib.display().to_string());
    println!("gpu-check: driver library {}", lib.display());

    // 2. Prerequisites on a GPU machine.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Halt::CannotRun(
            "the collector's eBPF probes need root (CAP_BPF + CAP_PERFMON): run as root".into(),
        ));
    }
    let python = args
        .python
        .clone()
        .unwrap_or_else(|| target_dir().join("nvidia-venv/bin/python"));
    let has_pynvml = Command::new(&python)
        .args(["-c", "import pynvml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_pynvml {
        return Err(Halt::CannotRun(format!(
            "nvidia-ml-py not importable by {}: run scripts/setup.sh (or pass --python)",
            python.display()
        )));
    }
    fs::create_dir_all(out)
        .with_context(|| format!("creating {}", out.display()))
        .map_err(cannot)?;
    let mut deadline = Instant::now() + Duration::from_secs(args.timeout);

    // 3. The workload, compiled here; the driver's own view of its devices.
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let src = out.join("gpu_workload.c");
    let ptx = out.join("vadd.ptx");
    let sampler = out.join("nvml_sampler.py");
    let workload = out.join("gpu_workload");
    for (p, text) in [
        (&src, WORKLOAD_C),
        (&ptx, KERNEL_PTX),
        (&sampler, NVML_SAMPLER),
    ] {
        fs::write(p, text)
            .with_context(|| format!("writing {}", p.display()))
            .map_err(cannot)?;
    }
    let mut c = Command::new(&cc);
    c.args(["-O2", "-Wall", "-o"])
        .arg(&workload)
        .arg(&src)
        .arg("-ldl");
    let st = run_logged(c, &out.join("cc.log"), deadline, "compiling the workload")
        .map_err(|e| Halt::CannotRun(format!("{e:#} (is a C compiler installed as `{cc}`?)")))?;
    if !st.success() {
        return Err(Halt::CannotRun(format!(
            "{cc} could not compile the workload: {}",
            tail(&out.join("cc.log"), 10)
        )));
    }
    let mut c = Command::new(&workload);
    c.arg("probe").arg(&lib);
    let probe_out = out.join("probe.out");
    let st = run_logged(c, &probe_out, deadline, "the driver probe")?;
    let probe = read(&probe_out);
    if st.code() == Some(WORKLOAD_NO_DEVICE) {
        let why = probe
            .lines()
            .find_map(|l| l.strip_prefix("no_device "))
            .unwrap_or("the driver reports no device");
        return Err(Halt::NoGpu(format!("CUDA sees no device ({why})")));
    }
    if !st.success() {
        return Err(Halt::Failed(format!(
            "the driver probe failed ({st}): {}",
            tail(&probe_out, 10)
        )));
    }
    let devices: Vec<&str> = probe
        .lines()
        .filter_map(|l| l.strip_prefix("device "))
        .collect();
    println!(
        "gpu-check: {} CUDA device(s): {}",
        devices.len(),
        devices.join("; ")
    );
    report.fact("cuda_devices", devices.clone());
    if let Some(v) = probe
        .lines()
        .find_map(|l| l.strip_prefix("driver_version "))
    {
        report.fact("cuda_driver_version", v.trim());
    }
    if args.device as usize >= devices.len() {
        return Err(Halt::CannotRun(format!(
            "--device {} but CUDA has {} device(s)",
            args.device,
            devices.len()
        )));
    }

    // 4. The collector (its build is not part of the timeout).
    let collector = match &args.collector {
        Some(p) => p.clone(),
        None => {
            if !args.no_build {
                let t = Instant::now();
                let mut b = super::cargo();
                b.current_dir(workspace_root())
                    .args(["build", "--release", "-p", "collector"]);
                super::run(b).map_err(cannot)?;
                report.fact("build_s", (t.elapsed().as_secs_f64() * 10.0).round() / 10.0);
                deadline += t.elapsed();
            }
            target_dir().join("release/faultline-collector")
        }
    };
    if !collector.exists() {
        return Err(Halt::CannotRun(format!(
            "no collector at {} (cargo xtask build)",
            collector.display()
        )));
    }
    report.fact("collector", collector.display().to_string());

    // 5. nvidia-ml-py first, so that its samples cover every window.
    let reference = out.join("nvml_reference.jsonl");
    let mut c = Command::new(&python);
    c.arg(&sampler)
        .arg(args.nvml_library.as_deref().unwrap_or(Path::new("")))
        .arg(REF_INTERVAL_S.to_string())
        .arg(args.timeout.to_string())
        .stdin(Stdio::piped());
    let mut sampler_proc =
        Proc::spawn(c, &reference, &out.join("nvml_sampler.err"), "nvidia-ml-py")?;
    wait_for(deadline, "nvidia-ml-py's first reading", || {
        if read(&reference).contains("\"kind\": \"sample\"") {
            return Ok(true);
        }
        sampler_proc.alive(&out.join("nvml_sampler.err"))?;
        Ok(false)
    })?;

    let record = out.join("record.jsonl");
    let console = out.join("collector.out");
    let config = out.join("collector.toml");
    // Bounded-overhead mode would make launch counts estimates: off.
    fs::write(&config, "[cuda]\nlaunch_budget = 0\n")
        .context("writing the collector config")
        .map_err(cannot)?;
    let _ = fs::remove_file(&record);
    let remaining = deadline.saturating_duration_since(Instant::now()).as_secs() + 5;
    let mut c = Command::new(&collector);
    c.arg("--config")
        .arg(&config)
        .args(["--window", &WINDOW_S.to_string()])
        .args(["--duration", &remaining.to_string()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(["--no-block", "--no-verbs", "--no-otlp"])
        .arg("--cuda-library")
        .arg(&lib)
        .arg("--record")
        .arg(&record);
    if let Some(n) = &args.nvml_library {
        c.arg("--nvml-library").arg(n);
    }
    let collector_err = out.join("collector.err");
    let mut col = Proc::spawn(c, &console, &collector_err, "the collector")?;
    wait_for(deadline, "the collector's CUDA probes", || {
        let text = read(&console);
        if let Some(l) = text
            .lines()
            .find(|l| l.starts_with("probe cuLaunchKernel:"))
        {
            if l.ends_with(": attached") {
                return Ok(true);
            }
            bail!("the collector did not attach to {}: {l}", lib.display());
        }
        col.alive(&collector_err)?;
        Ok(false)
    })?;
    // The window loop runs (and NVML answered) once a window is recorded.
    wait_for(deadline, "the collector's first window", || {
        col.alive(&collector_err)?;
        Ok(lines(&record) >= 1)
    })?;

    // 6. The workload under the collector.
    let wl_out = out.join("workload.out");
    let mut c = Command::new(&workload);
    c.arg("run")
        .arg(&lib)
        .arg(&ptx)
        .arg(args.device.to_string())
        .arg(args.rounds.to_string())
        .arg(args.launches.to_string())
        .arg(args.elements.to_string());
    let st = run_logged(c, &wl_out, deadline, "the workload")?;
    let wl_text = read(&wl_out);
    if !st.success() {
        return Err(Halt::Failed(format!(
            "the workload failed ({st}): {}",
            tail(&wl_out, 10)
        )));
    }
    let wl = parse_workload(&wl_text).map_err(Halt::from)?;
    report.fact("workload", wl.to_json());
    println!(
        "gpu-check: workload pid {} ran {} launches of {} on device {} (ptx {})",
        wl.pid,
        wl.counts.get("cuLaunchKernel").copied().unwrap_or(0),
        wl.kernel,
        wl.device,
        wl.ptx
    );

    // Two more windows: the exited process's last counts are in them.
    let seen = lines(&record);
    wait_for(deadline, "two windows after the workload", || {
        col.alive(&collector_err)?;
        Ok(lines(&record) >= seen + 2)
    })?;
    let col_status = col.stop(deadline)?;
    drop(sampler_proc.child.stdin.take());
    let _ = sampler_proc.stop(deadline);

    // 7. Judge.
    let windows = parse_record(&read(&record)).map_err(Halt::from)?;
    let rec = record_cuda(&windows, wl.pid);
    let con = parse_console(&read(&console), wl.pid);
    let refs = parse_reference(&read(&reference)).map_err(Halt::from)?;
    if let Some(d) = &refs.driver {
        report.fact("nvml_driver_version", d.clone());
    }
    report.fact("windows", windows.len());
    report.checks.push(Check::new(
        "collector ran and stopped cleanly",
        col_status.success(),
        "exit 0 on SIGTERM",
        col_status,
    ));
    report
        .checks
        .extend(cuda_checks(&wl, &rec, &con, args.standin()));
    report
        .checks
        .extend(nvml_checks(&collector_gpus(&windows), &refs));
    Ok(())
}

/// `Ok(path of the library as loaded)` when this machine has an NVIDIA GPU
/// node under `dev` and `libcuda.so.1` loads; `Halt::NoGpu` otherwise. With
/// `--cuda-library` only that library is tried.
fn detect(args: &Args, dev: &Path) -> Result<PathBuf, Halt> {
    let lib = match &args.cuda_library {
        Some(p) => p.clone(),
        None => {
            let nodes = nvidia_nodes(dev);
            if nodes.is_empty() {
                return Err(Halt::NoGpu(format!(
                    "no NVIDIA GPU on this machine (no {}/nvidia<N> device node)",
                    dev.display()
                )));
            }
            println!("gpu-check: device nodes {}", nodes.join(" "));
            PathBuf::from("libcuda.so.1")
        }
    };
    loaded_path(&lib).map_err(|e| {
        Halt::NoGpu(format!(
            "no usable NVIDIA driver: {} is not loadable ({e})",
            lib.display()
        ))
    })
}

/// The `nvidia<N>` entries of `dev` (GPUs; `nvidiactl` and `nvidia-uvm`
/// alone are not a GPU).
pub fn nvidia_nodes(dev: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dev)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            n.strip_prefix("nvidia")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    v.sort();
    v
}

/// dlopen()s `lib` and returns the file it came from (found through
/// `cuInit`'s address), or why it could not.
fn loaded_path(lib: &Path) -> Result<PathBuf, String> {
    let name = CString::new(lib.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated file name; the handle is closed below. No
    // function of the library is called: loading runs only its constructors,
    // as the start of any CUDA program does.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated string valid until
        // the next dl* call on this thread, copied here at once.
        let e = unsafe { libc::dlerror() };
        return Err(if e.is_null() {
            "dlopen failed".into()
        } else {
            // SAFETY: see above.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        });
    }
    // SAFETY: `h` is a live handle from dlopen; the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(h, c"cuInit".as_ptr()) };
    let mut path = None;
    if !sym.is_null() {
        // SAFETY: Dl_info is plain data; dladdr fills it for an address
        // inside a loaded object (`sym` is one).
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `dli_fname` is NUL-terminated and lives as long
        // as the object stays loaded, and it is copied before dlclose.
        if unsafe { libc::dladdr(sym, &mut info) } != 0 && !info.dli_fname.is_null() {
            let f = unsafe { CStr::from_ptr(info.dli_fname) };
            path = Some(PathBuf::from(std::ffi::OsStr::from_bytes(f.to_bytes())));
        }
    }
    // SAFETY: `h` came from dlopen and is closed once.
    unsafe { libc::dlclose(h) };
    if sym.is_null() {
        return Err("it has no cuInit".into());
    }
    Ok(path.unwrap_or_else(|| lib.to_path_buf()))
}

// ---------------------------------------------------------------------------
// Processes, files, deadlines

/// A child process killed (and reaped) when dropped, so that no early return
/// leaves the collector, the workload or the sampler running.
struct Proc {
    child: Child,
    what: &'static str,
}

impl Proc {
    fn spawn(mut c: Command, stdout: &Path, stderr: &Path, what: &'static str) -> Result<Self> {
        let o =
            fs::File::create(stdout).with_context(|| format!("creating {}", stdout.display()))?;
        let e =
            fs::File::create(stderr).with_context(|| format!("creating {}", stderr.display()))?;
        let child = c
            .stdout(o)
            .stderr(e)
            .spawn()
            .with_context(|| format!("starting {what} ({c:?})"))?;
        Ok(Self { child, what })
    }

    /// An error naming the exit and the end of `stderr` once it exited.
    fn alive(&mut self, stderr: &Path) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!("{} exited early ({st}): {}", self.what, tail(stderr, 15));
        }
        Ok(())
    }

    /// SIGTERM, then wait until the deadline (SIGKILL after it).
    fn stop(&mut self, deadline: Instant) -> Result<ExitStatus> {
        if let Some(st) = self.child.try_wait()? {
            return Ok(st);
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let give_up = deadline.min(Instant::now() + Duration::from_secs(20));
        loop {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st);
            }
            if Instant::now() >= give_up {
                let _ = self.child.kill();
                bail!("{} did not stop on SIGTERM", self.what);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `c` to its end with stdout and stderr in `log`, killed at the deadline.
fn run_logged(c: Command, log: &Path, deadline: Instant, what: &'static str) -> Result<ExitStatus> {
    let mut p = Proc::spawn(c, log, &log.with_extension("err"), what)?;
    loop {
        if let Some(st) = p.child.try_wait()? {
            return Ok(st);
        }
        if Instant::now() >= deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `ready` until it says true, or fails at the deadline.
fn wait_for(deadline: Instant, what: &str, mut ready: impl FnMut() -> Result<bool>) -> Result<()> {
    loop {
        if ready()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read(p: &Path) -> String {
    fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Complete lines in the file.
fn lines(p: &Path) -> usize {
    read(p).bytes().filter(|&b| b == b'\n').count()
}

/// The last `n` lines of a file, on one line.
fn tail(p: &Path, n: usize) -> String {
    let text = read(p);
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let t = v[v.len().saturating_sub(n)..].join(" | ");
    if t.is_empty() {
        format!("(nothing in {})", p.display())
    } else {
        t
    }
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------
// What the workload did

/// The workload's own account (`count`/`bytes` lines of `gpu_workload run`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    pub pid: u32,
    pub device: i32,
    pub kernel: String,
    pub ptx: String,
    /// Driver symbol (`cuMemcpyHtoD_v2`) → calls made.
    pub counts: BTreeMap<String, u64>,
    /// Driver symbol → bytes passed.
    pub bytes: BTreeMap<String, u64>,
    /// Elements of the result that differed from a + b (0: correct).
    pub mismatches: Option<u64>,
}

impl Workload {
    fn to_json(&self) -> Value {
        json!({
            "pid": self.pid,
            "device": self.device,
            "kernel": self.kernel,
            "ptx": self.ptx,
            "counts": self.counts,
            "bytes": self.bytes,
            "mismatches": self.mismatches,
        })
    }
}

pub fn parse_workload(text: &str) -> Result<Workload> {
    let mut w = Workload {
        device: -1,
        ..Workload::default()
    };
    let mut done = false;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(key), rest) = (it.next(), it.collect::<Vec<_>>()) else {
            continue;
        };
        let num = |i: usize| -> Result<u64> {
            rest.get(i)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("workload line {line:?}: no number"))
        };
        match key {
            "pid" => w.pid = u32::try_from(num(0)?)?,
            "device" if w.pid != 0 => {
                w.device = rest
                    .first()
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("workload line {line:?}"))?;
            }
            "kernel" => w.kernel = rest.first().map_or("", |v| v).to_string(),
            "ptx" if rest.len() == 1 => w.ptx = rest[0].to_string(),
            "count" => {
                let sym = rest
                    .first()
                    .with_context(|| format!("workload line {line:?}"))?;
                w.counts.insert((*sym).to_string(), num(1)?);
            }
            "bytes" => {
                let sym = rest
                    .first()
                    .with_context(|| format!("workload line {line:?}"))?;
                w.bytes.insert((*sym).to_string(), num(1)?);
            }
            "verify" => {
                w.mismatches = Some(match rest.first() {
                    Some(&"ok") => 0,
                    Some(v) => v
                        .strip_prefix("mismatches=")
                        .and_then(|n| n.parse().ok())
                        .with_context(|| format!("workload line {line:?}"))?,
                    None => bail!("workload line {line:?}"),
                });
            }
            "error" => bail!("the workload failed: {line}"),
            "done" => done = true,
            _ => {}
        }
    }
    if !done {
        bail!("the workload did not finish (no `done` line)");
    }
    if w.pid == 0 || !w.counts.contains_key("cuLaunchKernel") {
        bail!("the workload printed no pid or no launch count");
    }
    Ok(w)
}

/// The collector's label of a driver symbol (`cuMemcpyHtoD_v2` → `cuMemcpyHtoD`).
pub fn call_label(symbol: &str) -> &str {
    symbol.strip_suffix("_v2").unwrap_or(symbol)
}

fn is_sync(label: &str) -> bool {
    matches!(
        label,
        "cuStreamSynchronize" | "cuCtxSynchronize" | "cuEventSynchronize"
    )
}

fn is_copy(label: &str) -> bool {
    label.starts_with("cuMemcpy")
}

// ---------------------------------------------------------------------------
// What the collector saw

/// The collector's console lines about one process, summed over windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsoleCuda {
    /// Kernel name → launches.
    pub kernels: BTreeMap<String, u64>,
    /// Call label → (calls, bytes).
    pub calls: BTreeMap<String, (u64, u64)>,
    /// `gpu=` values seen.
    pub devices: BTreeSet<String>,
}

/// Sums the `cuda pid=PID …` detail lines of the collector's console.
pub fn parse_console(text: &str, pid: u32) -> ConsoleCuda {
    let mut c = ConsoleCuda::default();
    let want = pid.to_string();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix("cuda ") else {
            continue;
        };
        // key=value words up to the rate, the identity or the GPU suffix.
        let kv: BTreeMap<&str, &str> = rest
            .split_whitespace()
            .take_while(|w| !w.starts_with(['(', '[', '{']))
            .filter_map(|w| w.split_once('='))
            .collect();
        if kv.get("pid") != Some(&want.as_str()) {
            continue;
        }
        let n = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        if let Some(gpu) = kv.get("gpu") {
            c.devices.insert((*gpu).to_string());
        }
        if let Some(k) = kv.get("kernel") {
            *c.kernels.entry((*k).to_string()).or_default() += n("launches");
        } else if let Some(call) = kv.get("call") {
            let e = c.calls.entry((*call).to_string()).or_default();
            e.0 += n("calls");
            e.1 += n("bytes");
        }
    }
    c
}

/// One window per line of the collector's `--record` file.
pub fn parse_record(text: &str) -> Result<Vec<Value>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("record line {}", i + 1)))
        .collect()
}

/// The wire rows (`Window.cuda[]`) of one process, summed over windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordCuda {
    pub launches: u64,
    pub sync_calls: u64,
    pub copy_bytes: u64,
    pub errors: u64,
    /// Some row's launches were a bounded-overhead estimate.
    pub sampled: bool,
    pub devices: BTreeSet<i64>,
    /// Windows with a row of the process.
    pub windows: usize,
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

pub fn record_cuda(windows: &[Value], pid: u32) -> RecordCuda {
    let mut r = RecordCuda::default();
    for w in windows {
        let rows: Vec<&Value> = w
            .get("cuda")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|row| u(row, "pid") == u64::from(pid))
            .collect();
        if !rows.is_empty() {
            r.windows += 1;
        }
        for row in rows {
            r.launches += u(row, "launches");
            r.sync_calls += u(row, "sync_calls");
            r.copy_bytes += u(row, "copy_bytes");
            r.errors += u(row, "errors");
            r.sampled |= f(row, "launches_sampled_fraction").is_some_and(|x| x > 0.0);
            r.devices
                .insert(row.get("device").and_then(Value::as_i64).unwrap_or(-1));
        }
    }
    r
}

/// Launch, copy, sync, alloc and free counts exactly equal to the workload's,
/// its kernel's name, its device, no error and no call it did not make.
pub fn cuda_checks(w: &Workload, rec: &RecordCuda, con: &ConsoleCuda, standin: bool) -> Vec<Check> {
    let mut v = Vec::new();
    let launches = w.counts.get("cuLaunchKernel").copied().unwrap_or(0);
    v.push(if rec.sampled {
        Check::new(
            "launches (record)",
            false,
            launches,
            format!("{} (a bounded-overhead estimate)", rec.launches),
        )
    } else {
        Check::exact(
            "launches (record)",
            launches,
            (rec.windows > 0).then_some(rec.launches),
        )
    });
    v.push(Check::exact(
        format!("launches of {KERNEL_NAME} (console)"),
        launches,
        con.kernels.get(KERNEL_NAME).copied(),
    ));
    let names: Vec<&str> = con.kernels.keys().map(String::as_str).collect();
    v.push(Check::new(
        "kernel name recorded",
        names == [KERNEL_NAME] && w.kernel == KERNEL_NAME,
        KERNEL_NAME,
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        },
    ));
    let mut expected_labels = BTreeSet::new();
    let (mut syncs, mut copy_bytes) = (0, 0);
    for (sym, &n) in w.counts.iter().filter(|(s, _)| *s != "cuLaunchKernel") {
        let label = call_label(sym);
        expected_labels.insert(label.to_string());
        let seen = con.calls.get(label);
        v.push(Check::exact(format!("{label} calls"), n, seen.map(|s| s.0)));
        if let Some(&b) = w.bytes.get(sym) {
            v.push(Check::exact(format!("{label} bytes"), b, seen.map(|s| s.1)));
            if is_copy(label) {
                copy_bytes += b;
            }
        }
        if is_sync(label) {
            syncs += n;
        }
    }
    let extra: Vec<String> = con
        .calls
        .iter()
        .filter(|(l, _)| !expected_labels.contains(*l))
        .map(|(l, (n, _))| format!("{l}={n}"))
        .collect();
    v.push(Check::new(
        "no calls the workload did not make",
        extra.is_empty(),
        "none",
        if extra.is_empty() {
            "none".into()
        } else {
            extra.join(", ")
        },
    ));
    let seen = (rec.windows > 0).then_some(());
    v.push(Check::exact(
        "sync calls (record)",
        syncs,
        seen.map(|()| rec.sync_calls),
    ));
    v.push(Check::exact(
        "copy bytes (record)",
        copy_bytes,
        seen.map(|()| rec.copy_bytes),
    ));
    v.push(Check::exact(
        "call errors (record)",
        0,
        seen.map(|()| rec.errors),
    ));
    let dev = w.device.to_string();
    let rec_devs: Vec<String> = rec.devices.iter().map(i64::to_string).collect();
    let con_devs: Vec<&String> = con.devices.iter().collect();
    v.push(Check::new(
        "device attributed",
        rec_devs == [dev.clone()] && con_devs == [&dev],
        format!("gpu={dev}"),
        format!("record {rec_devs:?}, console {con_devs:?}"),
    ));
    v.push(match (standin, w.mismatches) {
        (true, m) => Check {
            name: "kernel result".into(),
            outcome: Outcome::Skip,
            expected: "c = a + b".into(),
            observed: format!(
                "stand-in driver runs no kernel ({} mismatches)",
                m.unwrap_or(0)
            ),
        },
        (false, Some(0)) => Check::new("kernel result", true, "c = a + b", "every element"),
        (false, Some(m)) => Check::new(
            "kernel result",
            false,
            "c = a + b",
            format!("{m} elements differ"),
        ),
        (false, None) => Check::new("kernel result", false, "c = a + b", "not verified"),
    });
    v
}

// ---------------------------------------------------------------------------
// NVML: the collector against nvidia-ml-py

/// How far a collector reading may lie outside the range of nvidia-ml-py's
/// readings of the same GPU taken within [`REF_SLACK_MS`] of the collector's
/// window: the two readers never sample at the same instant, and NVML's
/// values move between reads (power is a running average refreshed every
/// few tens of ms, the SM clock steps with load, the temperature by a
/// degree). The band is `[min − tol(min), max + tol(max)]` over those
/// readings, `tol(x) = max(abs, rel × |x|)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub abs: f64,
    pub rel: f64,
}

impl Tolerance {
    pub fn of(self, x: f64) -> f64 {
        self.abs.max(self.rel * x.abs())
    }
}

/// Power: 5 W or 5 %.
pub const POWER_TOL: Tolerance = Tolerance {
    abs: 5.0,
    rel: 0.05,
};
/// Temperature: 2 °C (integer readings; a die moves slowly).
pub const TEMP_TOL: Tolerance = Tolerance { abs: 2.0, rel: 0.0 };
/// SM clock: 30 MHz or 3 % (two clock bins).
pub const CLOCK_TOL: Tolerance = Tolerance {
    abs: 30.0,
    rel: 0.03,
};
/// nvidia-ml-py readings from this long before a window's start to this
/// long after its end (the collector reads NVML when it closes a window).
pub const REF_SLACK_MS: i64 = 1000;
/// Windows that must have been compared per GPU and value.
pub const MIN_COMPARED: usize = 2;
/// The power limit and the maximum SM clock are read, not measured: equal
/// (power limits to the mW NVML reports).
const LIMIT_EPS_W: f64 = 0.0005;

/// Physical ranges: power in (0, 2000) W, temperature in (0, 120] °C, the
/// SM clock above 0 MHz.
pub fn power_physical(w: f64) -> bool {
    w > 0.0 && w < 2000.0
}
pub fn temp_physical(c: f64) -> bool {
    c > 0.0 && c <= 120.0
}
pub fn clock_physical(mhz: f64) -> bool {
    mhz > 0.0
}

/// Whether `v` lies in the tolerance band around `refs` (false without refs).
pub fn within_band(v: f64, refs: &[f64], tol: Tolerance) -> bool {
    let Some(lo) = refs.iter().copied().reduce(f64::min) else {
        return false;
    };
    let hi = refs.iter().copied().fold(lo, f64::max);
    v >= lo - tol.of(lo) && v <= hi + tol.of(hi)
}

/// One GPU row of one recorded window (`Window.gpus[]`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollectorGpu {
    pub start_ms: i64,
    pub end_ms: i64,
    pub index: u64,
    pub uuid: String,
    pub pci_bus_id: String,
    pub lost: bool,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub temp_c: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub sm_clock_max_mhz: Option<f64>,
}

pub fn collector_gpus(windows: &[Value]) -> Vec<CollectorGpu> {
    let mut out = Vec::new();
    for w in windows {
        let start_ms = w.get("start_unix_ms").and_then(Value::as_i64).unwrap_or(0);
        let end_ms = w.get("end_unix_ms").and_then(Value::as_i64).unwrap_or(0);
        for g in w
            .get("gpus")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| g.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            out.push(CollectorGpu {
                start_ms,
                end_ms,
                index: u(g, "index"),
                uuid: s("uuid"),
                pci_bus_id: s("pci_bus_id"),
                lost: g.get("lost").and_then(Value::as_bool).unwrap_or(false),
                power_w: f(g, "power_w"),
                power_limit_w: f(g, "power_limit_w"),
                temp_c: f(g, "temp_c"),
                sm_clock_mhz: f(g, "sm_clock_mhz"),
                sm_clock_max_mhz: f(g, "sm_clock_max_mhz"),
            });
        }
    }
    out
}

/// nvidia-ml-py's view: the GPUs and the readings over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reference {
    pub driver: Option<String>,
    pub gpus: Vec<RefGpu>,
    pub samples: Vec<RefSample>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefGpu {
    pub index: u64,
    pub uuid: String,
    pub pci_bus_id: String,
    pub power_limit_w: Option<f64>,
    pub sm_clock_max_mhz: Option<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefSample {
    pub t_ms: i64,
    pub uuid: String,
    pub power_w: Option<f64>,
    pub temp_c: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
}

/// The sampler's JSON lines (`nvml_sampler.py`).
pub fn parse_reference(text: &str) -> Result<Reference> {
    let mut r = Reference::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("nvidia-ml-py line {}: {line:?}", i + 1))?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match v.get("kind").and_then(Value::as_str) {
            Some("ready") => r.driver = v.get("driver").and_then(Value::as_str).map(str::to_string),
            Some("gpu") => r.gpus.push(RefGpu {
                index: u(&v, "index"),
                uuid: s("uuid"),
                pci_bus_id: s("pci_bus_id"),
                power_limit_w: f(&v, "power_limit_w"),
                sm_clock_max_mhz: f(&v, "sm_clock_max_mhz"),
            }),
            Some("sample") => r.samples.push(RefSample {
                t_ms: v.get("t_ms").and_then(Value::as_i64).unwrap_or(0),
                uuid: s("uuid"),
                power_w: f(&v, "power_w"),
                temp_c: f(&v, "temp_c"),
                sm_clock_mhz: f(&v, "sm_clock_mhz"),
            }),
            _ => {}
        }
    }
    Ok(r)
}

/// A value NVML measures, how to read it from both readers, its physical
/// range and its tolerance.
#[derive(Clone, Copy)]
struct Measure {
    what: &'static str,
    unit: &'static str,
    get: fn(&CollectorGpu) -> Option<f64>,
    get_ref: fn(&RefSample) -> Option<f64>,
    physical: fn(f64) -> bool,
    range: &'static str,
    tol: Tolerance,
}

const MEASURES: [Measure; 3] = [
    Measure {
        what: "power",
        unit: "W",
        get: |s| s.power_w,
        get_ref: |r| r.power_w,
        physical: power_physical,
        range: "0 < W < 2000",
        tol: POWER_TOL,
    },
    Measure {
        what: "temperature",
        unit: "°C",
        get: |s| s.temp_c,
        get_ref: |r| r.temp_c,
        physical: temp_physical,
        range: "0 < °C ≤ 120",
        tol: TEMP_TOL,
    },
    Measure {
        what: "SM clock",
        unit: "MHz",
        get: |s| s.sm_clock_mhz,
        get_ref: |r| r.sm_clock_mhz,
        physical: clock_physical,
        range: "> 0 MHz",
        tol: CLOCK_TOL,
    },
];

/// One measured value: physical in every window, and inside nvidia-ml-py's
/// band in every window that has reference readings (at least
/// [`MIN_COMPARED`] of them).
fn measured(
    v: &mut Vec<Check>,
    gpu: &str,
    m: &Measure,
    samples: &[&CollectorGpu],
    refs: &[&RefSample],
) {
    let Measure {
        what,
        unit,
        get,
        get_ref,
        physical,
        range,
        tol,
    } = *m;
    let vals: Vec<f64> = samples.iter().filter_map(|s| get(s)).collect();
    let missing = samples.len() - vals.len();
    let bad: Vec<f64> = vals.iter().copied().filter(|x| !physical(*x)).collect();
    let lo = vals.iter().copied().reduce(f64::min);
    let hi = vals.iter().copied().reduce(f64::max);
    v.push(Check::new(
        format!("{gpu} {what} physical"),
        !vals.is_empty() && missing == 0 && bad.is_empty(),
        range,
        match (lo, hi) {
            (Some(lo), Some(hi)) if bad.is_empty() && missing == 0 && lo == hi => {
                format!("{lo} {unit} in {} windows", vals.len())
            }
            (Some(lo), Some(hi)) if bad.is_empty() && missing == 0 => {
                format!("{lo}–{hi} {unit} in {} windows", vals.len())
            }
            (Some(_), Some(_)) if missing > 0 => {
                format!("missing in {missing} of {} windows", samples.len())
            }
            (Some(_), Some(_)) => format!("{bad:?} {unit}"),
            _ => "not reported".into(),
        },
    ));
    let (mut compared, mut worst) = (0usize, None::<String>);
    for s in samples {
        let Some(x) = get(s) else { continue };
        let near: Vec<f64> = refs
            .iter()
            .filter(|r| r.t_ms >= s.start_ms - REF_SLACK_MS && r.t_ms <= s.end_ms + REF_SLACK_MS)
            .filter_map(|r| get_ref(r))
            .collect();
        if near.is_empty() {
            continue;
        }
        compared += 1;
        if worst.is_none() && !within_band(x, &near, tol) {
            let lo = near.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = near.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            worst = Some(format!(
                "window ending {}: {x} {unit} vs nvidia-ml-py {lo}–{hi} {unit}",
                s.end_ms
            ));
        }
    }
    let expected = format!("within {}", describe_tol(tol, unit));
    v.push(match worst {
        Some(w) => Check::new(format!("{gpu} {what} = nvidia-ml-py"), false, expected, w),
        None if compared < MIN_COMPARED => Check::new(
            format!("{gpu} {what} = nvidia-ml-py"),
            false,
            expected,
            format!("only {compared} windows with readings from both"),
        ),
        None => Check::new(
            format!("{gpu} {what} = nvidia-ml-py"),
            true,
            expected,
            format!("{compared} of {compared} windows"),
        ),
    });
}

fn describe_tol(t: Tolerance, unit: &str) -> String {
    if t.rel > 0.0 {
        format!("±max({} {unit}, {}%)", t.abs, t.rel * 100.0)
    } else {
        format!("±{} {unit}", t.abs)
    }
}

/// The collector's GPUs are nvidia-ml-py's (index, UUID, PCI bus id); per
/// GPU, power, temperature and SM clock physical and equal to
/// nvidia-ml-py's within [`POWER_TOL`], [`TEMP_TOL`], [`CLOCK_TOL`]; the
/// power limit and maximum SM clock equal.
pub fn nvml_checks(col: &[CollectorGpu], reference: &Reference) -> Vec<Check> {
    let mut v = Vec::new();
    let ident = |i: u64, uuid: &str, pci: &str| format!("{i}:{uuid}@{}", pci.to_ascii_lowercase());
    let theirs: BTreeSet<String> = reference
        .gpus
        .iter()
        .map(|g| ident(g.index, &g.uuid, &g.pci_bus_id))
        .collect();
    let ours: BTreeSet<String> = col
        .iter()
        .map(|g| ident(g.index, &g.uuid, &g.pci_bus_id))
        .collect();
    v.push(Check::new(
        "NVML GPUs = nvidia-ml-py's",
        !theirs.is_empty() && ours == theirs,
        format!(
            "{} GPU(s): {}",
            theirs.len(),
            theirs.iter().cloned().collect::<Vec<_>>().join(" ")
        ),
        if ours.is_empty() {
            "no GPU in any window".into()
        } else {
            format!(
                "{} GPU(s): {}",
                ours.len(),
                ours.iter().cloned().collect::<Vec<_>>().join(" ")
            )
        },
    ));
    for g in &reference.gpus {
        let name = format!("gpu{}", g.index);
        let samples: Vec<&CollectorGpu> = col.iter().filter(|c| c.uuid == g.uuid).collect();
        let refs: Vec<&RefSample> = reference
            .samples
            .iter()
            .filter(|r| r.uuid == g.uuid)
            .collect();
        let lost = samples.iter().filter(|s| s.lost).count();
        if lost > 0 {
            v.push(Check::new(
                format!("{name} not lost"),
                false,
                "present",
                format!("lost in {lost} windows"),
            ));
        }
        for m in &MEASURES {
            measured(&mut v, &name, m, &samples, &refs);
        }
        for (what, ours, theirs, unit, eps) in [
            (
                "power limit",
                samples.iter().map(|s| s.power_limit_w).collect::<Vec<_>>(),
                g.power_limit_w,
                "W",
                LIMIT_EPS_W,
            ),
            (
                "max SM clock",
                samples.iter().map(|s| s.sm_clock_max_mhz).collect(),
                g.sm_clock_max_mhz,
                "MHz",
                0.0,
            ),
        ] {
            let distinct: BTreeSet<String> = ours
                .iter()
                .map(|o| o.map_or_else(|| "none".into(), |x| format!("{x}")))
                .collect();
            let pass = theirs.is_some_and(|t| {
                !ours.is_empty() && ours.iter().all(|o| o.is_some_and(|x| (x - t).abs() <= eps))
            });
            v.push(Check::new(
                format!("{name} {what} = nvidia-ml-py"),
                pass,
                theirs.map_or_else(
                    || "nvidia-ml-py read none".into(),
                    |t| format!("{t} {unit}"),
                ),
                if ours.is_empty() {
                    "not reported".into()
                } else {
                    format!(
                        "{} {unit}",
                        distinct.into_iter().collect::<Vec<_>>().join(", ")
                    )
                },
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKLOAD_OUT: &str = "\
pid 4242
device 0 8.0 NVIDIA A100-SXM4-80GB
ptx sm_50
kernel faultline_vadd
count cuLaunchKernel 1000
count cuMemcpyHtoD_v2 20
bytes cuMemcpyHtoD_v2 83886080
count cuMemcpyDtoH_v2 10
bytes cuMemcpyDtoH_v2 41943040
count cuStreamSynchronize 10
count cuCtxSynchronize 1
count cuMemAlloc_v2 3
bytes cuMemAlloc_v2 12582912
count cuMemFree_v2 3
verify ok
done
";

    /// Two windows as the collector records them (`--record`): the
    /// workload's counts split across them, beside another process.
    fn record() -> String {
        let w1 = json!({"origin": {"hostname": "n1", "instance": "i"}, "seq": 3,
        "start_unix_ms": 10_000, "end_unix_ms": 11_000,
        "gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:18:00.0", "lost": false,
                  "power_w": 250.5, "power_limit_w": 400.0, "temp_c": 61, "sm_clock_mhz": 1410,
                  "sm_clock_max_mhz": 1410}],
        "cuda": [
            {"pid": 4242, "device": 0, "launches": 600, "sync_calls": 6, "copy_bytes": 75497472,
             "errors": 0, "launches_sampled_fraction": 0.0},
            {"pid": 7, "device": 1, "launches": 99, "sync_calls": 1, "copy_bytes": 5, "errors": 2}
        ]});
        let w2 = json!({"origin": {"hostname": "n1", "instance": "i"}, "seq": 4,
            "start_unix_ms": 11_000, "end_unix_ms": 12_000,
            "gpus": [{"index": 0, "uuid": "GPU-a", "pci_bus_id": "00000000:18:00.0", "lost": false,
                      "power_w": 262.0, "power_limit_w": 400.0, "temp_c": 63, "sm_clock_mhz": 1395,
                      "sm_clock_max_mhz": 1410}],
            "cuda": [{"pid": 4242, "device": 0, "launches": 400, "sync_calls": 5,
                      "copy_bytes": 50331648, "errors": 0}]});
        format!("{w1}\n{w2}\n")
    }

    const CONSOLE: &str = "\
probe cuLaunchKernel: attached
window 3: seq=3 exec events=2 total=3
  cuda pid=4242 gpu=0 kernel=faultline_vadd launches=600 (600.0/s) grid=[4096, 1, 1] block=[256, 1, 1] [uuid=GPU-a temp=61C]
  cuda pid=4242 gpu=0 call=cuMemcpyHtoD calls=12 bytes=50331648 wait_mean=0.650ms [uuid=GPU-a]
  cuda pid=4242 gpu=0 call=cuMemcpyDtoH calls=6 bytes=25165824 wait_mean=0.356ms
  cuda pid=4242 gpu=0 call=cuStreamSynchronize calls=6 wait_mean=0.015ms {job=1 rank=0}
  cuda pid=4242 gpu=0 call=cuMemAlloc calls=3 bytes=12582912 wait_mean=0.005ms
  cuda pid=7 gpu=1 kernel=other launches=99 (99.0/s) grid=[1, 1, 1] block=[1, 1, 1]
  cuda pid=7 gpu=1 call=cuEventSynchronize calls=1
window 4: seq=4
  cuda pid=4242 gpu=0 kernel=faultline_vadd launches=400 (400.0/s) grid=[4096, 1, 1] block=[256, 1, 1]
  cuda pid=4242 gpu=0 call=cuMemcpyHtoD calls=8 bytes=33554432
  cuda pid=4242 gpu=0 call=cuMemcpyDtoH calls=4 bytes=16777216
  cuda pid=4242 gpu=0 call=cuStreamSynchronize calls=4
  cuda pid=4242 gpu=0 call=cuCtxSynchronize calls=1
  cuda pid=4242 gpu=0 call=cuMemFree calls=3
";

    fn reference() -> String {
        let mut s = String::from("{\"kind\": \"ready\", \"driver\": \"570.86.15\"}\n");
        s += "{\"kind\": \"gpu\", \"index\": 0, \"uuid\": \"GPU-a\", \"name\": \"A100\", \
              \"pci_bus_id\": \"00000000:18:00.0\", \"power_limit_w\": 400.0, \"sm_clock_max_mhz\": 1410}\n";
        for (t, p, c, clk) in [
            (9_500, 249.0, 61, 1410),
            (10_500, 252.0, 61, 1410),
            (11_200, 258.0, 62, 1395),
            (11_800, 263.0, 63, 1395),
            (12_400, 262.5, 63, 1395),
        ] {
            s += &format!(
                "{{\"kind\": \"sample\", \"t_ms\": {t}, \"index\": 0, \"uuid\": \"GPU-a\", \
                 \"power_w\": {p}, \"temp_c\": {c}, \"sm_clock_mhz\": {clk}}}\n"
            );
        }
        s
    }

    fn failed(checks: &[Check]) -> Vec<&Check> {
        checks
            .iter()
            .filter(|c| c.outcome == Outcome::Fail)
            .collect()
    }

    #[test]
    fn parses_the_workloads_own_counts() {
        let w = parse_workload(WORKLOAD_OUT).unwrap();
        assert_eq!(w.pid, 4242);
        assert_eq!(w.device, 0);
        assert_eq!(w.kernel, KERNEL_NAME);
        assert_eq!(w.ptx, "sm_50");
        assert_eq!(w.counts["cuLaunchKernel"], 1000);
        assert_eq!(w.counts["cuMemcpyHtoD_v2"], 20);
        assert_eq!(w.bytes["cuMemcpyDtoH_v2"], 41_943_040);
        assert_eq!(w.counts.len(), 7);
        assert_eq!(w.mismatches, Some(0));
        let bad = WORKLOAD_OUT.replace("verify ok", "verify mismatches=12");
        assert_eq!(parse_workload(&bad).unwrap().mismatches, Some(12));
        // Unfinished, failed or pid-less output is an error, not a count of 0.
        assert!(parse_workload(&WORKLOAD_OUT.replace("done\n", "")).is_err());
        let err = parse_workload(&WORKLOAD_OUT.replace("verify ok", "error cuModuleLoadData 218"))
            .unwrap_err();
        assert!(err.to_string().contains("cuModuleLoadData 218"), "{err}");
        assert!(parse_workload("count cuLaunchKernel 5\ndone\n").is_err());
        // The probe's `device` lines before the pid are not the run's device.
        let w = parse_workload(&format!("device 3 9.0 H100\n{WORKLOAD_OUT}")).unwrap();
        assert_eq!(w.device, 0);
    }

    #[test]
    fn the_embedded_workload_prints_what_the_parser_reads() {
        for sym in [
            "cuLaunchKernel",
            "cuMemcpyHtoD_v2",
            "cuMemcpyDtoH_v2",
            "cuStreamSynchronize",
            "cuCtxSynchronize",
            "cuMemAlloc_v2",
            "cuMemFree_v2",
        ] {
            assert!(WORKLOAD_C.contains(&format!("\"{sym}\"")), "{sym}");
        }
        for fmt in [
            "\"pid %d\\n\"",
            "\"count %s %llu\\n\"",
            "\"bytes %s %llu\\n\"",
            "\"done\\n\"",
        ] {
            assert!(WORKLOAD_C.contains(fmt), "{fmt}");
        }
        assert!(WORKLOAD_C.contains(&format!("#define KERNEL \"{KERNEL_NAME}\"")));
        assert!(KERNEL_PTX.contains(&format!(".visible .entry {KERNEL_NAME}(")));
        assert!(KERNEL_PTX.contains("\n.version 6.0\n.target sm_50\n"));
    }

    #[test]
    fn sums_console_lines_of_the_workloads_pid() {
        let c = parse_console(CONSOLE, 4242);
        assert_eq!(c.kernels, BTreeMap::from([(KERNEL_NAME.to_string(), 1000)]));
        assert_eq!(c.calls["cuMemcpyHtoD"], (20, 83_886_080));
        assert_eq!(c.calls["cuMemcpyDtoH"], (10, 41_943_040));
        assert_eq!(c.calls["cuStreamSynchronize"], (10, 0));
        assert_eq!(c.calls["cuMemAlloc"], (3, 12_582_912));
        assert!(!c.calls.contains_key("cuEventSynchronize"), "pid 7's line");
        assert_eq!(c.devices, BTreeSet::from(["0".to_string()]));
    }

    #[test]
    fn a_recorded_window_matching_the_workload_passes_every_cuda_check() {
        let w = parse_workload(WORKLOAD_OUT).unwrap();
        let windows = parse_record(&record()).unwrap();
        let rec = record_cuda(&windows, w.pid);
        assert_eq!(rec.launches, 1000);
        assert_eq!(rec.sync_calls, 11);
        assert_eq!(rec.copy_bytes, 125_829_120);
        assert_eq!(rec.windows, 2);
        let con = parse_console(CONSOLE, w.pid);
        let checks = cuda_checks(&w, &rec, &con, false);
        assert!(failed(&checks).is_empty(), "{}", table(&checks));
        assert!(checks.iter().all(|c| c.outcome == Outcome::Pass));
        // One per count and byte line, plus the rest.
        assert_eq!(checks.len(), 3 + 6 + 3 + 1 + 3 + 2);
    }

    #[test]
    fn a_recorded_window_off_by_one_fails_the_check_that_names_it() {
        let w = parse_workload(WORKLOAD_OUT).unwrap();
        let windows =
            parse_record(&record().replace("\"launches\":400", "\"launches\":399")).unwrap();
        let rec = record_cuda(&windows, w.pid);
        let con = parse_console(
            &CONSOLE.replace("calls=4 bytes=16777216", "calls=3 bytes=16777216"),
            w.pid,
        );
        let checks = cuda_checks(&w, &rec, &con, false);
        let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["launches (record)", "cuMemcpyDtoH calls"],
            "{}",
            table(&checks)
        );
        let c = &checks[0];
        assert_eq!((c.expected.as_str(), c.observed.as_str()), ("1000", "999"));

        // A call the workload never made, a second kernel name, a sampled
        // estimate, an error and the wrong device are each failures.
        let con = parse_console(
            &format!(
                "{CONSOLE}  cuda pid=4242 gpu=1 call=cuEventSynchronize calls=1\n  cuda pid=4242 gpu=0 kernel=0x7f00 launches=1 (1/s)\n"
            ),
            w.pid,
        );
        let mut rec = record_cuda(&parse_record(&record()).unwrap(), w.pid);
        rec.sampled = true;
        rec.errors = 1;
        let checks = cuda_checks(&w, &rec, &con, false);
        let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "launches (record)",
                "kernel name recorded",
                "no calls the workload did not make",
                "call errors (record)",
                "device attributed"
            ],
            "{}",
            table(&checks)
        );
        // Nothing recorded at all is a failure, never a pass of 0 = 0.
        let none = cuda_checks(&w, &RecordCuda::default(), &ConsoleCuda::default(), false);
        assert!(none
            .iter()
            .filter(|c| !["no calls the workload did not make", "kernel result"]
                .contains(&c.name.as_str()))
            .all(|c| c.outcome == Outcome::Fail));
    }

    #[test]
    fn the_kernel_result_is_checked_on_a_gpu_and_skipped_on_the_stand_in() {
        let mut w = parse_workload(WORKLOAD_OUT).unwrap();
        w.mismatches = Some(5);
        let rec = record_cuda(&parse_record(&record()).unwrap(), w.pid);
        let con = parse_console(CONSOLE, w.pid);
        let result = |standin| {
            cuda_checks(&w, &rec, &con, standin)
                .into_iter()
                .find(|c| c.name == "kernel result")
                .unwrap()
                .outcome
        };
        assert_eq!(result(false), Outcome::Fail);
        assert_eq!(result(true), Outcome::Skip);
    }

    #[test]
    fn nvml_tolerance_band() {
        let refs = [250.0, 262.0];
        assert!(within_band(250.0, &refs, POWER_TOL));
        // 5 % of 250 W = 12.5 W below, 5 % of 262 W = 13.1 W above.
        assert!(within_band(237.6, &refs, POWER_TOL));
        assert!(!within_band(237.4, &refs, POWER_TOL));
        assert!(within_band(275.0, &refs, POWER_TOL));
        assert!(!within_band(275.2, &refs, POWER_TOL));
        // At low power the absolute 5 W rules.
        assert!(within_band(25.0, &[30.0], POWER_TOL));
        assert!(!within_band(24.9, &[30.0], POWER_TOL));
        assert!(within_band(63.0, &[61.0], TEMP_TOL));
        assert!(!within_band(64.0, &[61.0], TEMP_TOL));
        assert!(within_band(1380.0, &[1410.0], CLOCK_TOL));
        assert!(
            within_band(1452.0, &[1410.0], CLOCK_TOL),
            "3 % of 1410 = 42.3 MHz"
        );
        assert!(!within_band(1453.0, &[1410.0], CLOCK_TOL));
        assert!(!within_band(1.0, &[], TEMP_TOL), "no reference, no pass");
        assert!(power_physical(0.5) && !power_physical(0.0) && !power_physical(2000.0));
        assert!(temp_physical(120.0) && !temp_physical(121.0) && !temp_physical(0.0));
        assert!(clock_physical(210.0) && !clock_physical(0.0));
    }

    #[test]
    fn nvml_values_equal_to_nvidia_ml_py_pass() {
        let windows = parse_record(&record()).unwrap();
        let refs = parse_reference(&reference()).unwrap();
        assert_eq!(refs.driver.as_deref(), Some("570.86.15"));
        assert_eq!(refs.samples.len(), 5);
        let checks = nvml_checks(&collector_gpus(&windows), &refs);
        assert!(failed(&checks).is_empty(), "{}", table(&checks));
        assert_eq!(checks.len(), 1 + 6 + 2);
    }

    #[test]
    fn nvml_values_off_or_unphysical_fail() {
        let refs = parse_reference(&reference()).unwrap();
        // 290 W against nvidia-ml-py's 258–263 W around the second window.
        let windows = parse_record(&record().replace("262.0", "290.0")).unwrap();
        let checks = nvml_checks(&collector_gpus(&windows), &refs);
        let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["gpu0 power = nvidia-ml-py"], "{}", table(&checks));
        // A temperature of 0 and a power limit that differs.
        let windows = parse_record(&record().replace("\"temp_c\":63", "\"temp_c\":0").replace(
            "\"power_limit_w\":400.0,\"power_w\":250.5",
            "\"power_limit_w\":350.0,\"power_w\":250.5",
        ))
        .unwrap();
        let checks = nvml_checks(&collector_gpus(&windows), &refs);
        let names: Vec<&str> = failed(&checks).iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "gpu0 temperature physical",
                "gpu0 temperature = nvidia-ml-py",
                "gpu0 power limit = nvidia-ml-py"
            ],
            "{}",
            table(&checks)
        );
        // Collector readings with no nvidia-ml-py reading near them.
        let mut far = refs.clone();
        for s in &mut far.samples {
            s.t_ms += 60_000;
        }
        let checks = nvml_checks(&collector_gpus(&parse_record(&record()).unwrap()), &far);
        assert_eq!(failed(&checks).len(), 3, "{}", table(&checks));
        // A GPU the collector did not report.
        let checks = nvml_checks(&[], &refs);
        assert!(
            checks.iter().all(|c| c.outcome == Outcome::Fail),
            "{}",
            table(&checks)
        );
    }

    #[test]
    fn gpu_nodes_are_nvidia_and_a_number() {
        let dir = std::env::temp_dir().join(format!("gpu-check-dev-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for n in ["nvidiactl", "nvidia-uvm", "nvidia-modeset", "null"] {
            fs::write(dir.join(n), "").unwrap();
        }
        assert!(nvidia_nodes(&dir).is_empty());
        let args = Args {
            out: None,
            timeout: 1,
            collector: None,
            no_build: false,
            device: 0,
            rounds: 1,
            launches: 1,
            elements: 1,
            python: None,
            cuda_library: None,
            nvml_library: None,
        };
        assert!(matches!(detect(&args, &dir), Err(Halt::NoGpu(w)) if w.contains("/nvidia<N>")));
        fs::write(dir.join("nvidia0"), "").unwrap();
        fs::write(dir.join("nvidia7"), "").unwrap();
        assert_eq!(nvidia_nodes(&dir), ["nvidia0", "nvidia7"]);
        fs::remove_dir_all(&dir).unwrap();
        let args = Args {
            cuda_library: Some("/nonexistent/libcuda.so.1".into()),
            ..args
        };
        assert!(
            matches!(detect(&args, Path::new("/nonexistent")), Err(Halt::NoGpu(w)) if w.contains("not loadable"))
        );
    }

    #[test]
    fn the_verdict_never_passes_without_a_gpu() {
        let mut r = Report {
            started: Instant::now(),
            started_unix_ms: 0,
            standin: false,
            facts: Map::new(),
            checks: Vec::new(),
        };
        let halt = Halt::NoGpu("no /dev/nvidia<N>".into());
        let (status, code, headline) = r.verdict(Some(&halt));
        assert_eq!((status, code), ("no_gpu", EXIT_NO_GPU));
        assert!(headline.contains("NO GPU") && headline.contains("not a pass"));
        let j = r.to_json(Some(&halt));
        assert_eq!(j["passed"], false);
        assert_eq!(j["gpu_present"], false);
        assert_eq!(r.verdict(None).1, EXIT_FAIL, "no check ran");
        r.checks.push(Check::new("x", true, 1, 1));
        assert_eq!(r.verdict(None).1, EXIT_PASS);
        r.checks.push(Check::new("y", false, 1, 2));
        assert_eq!(r.verdict(None).1, EXIT_FAIL);
        assert_eq!(
            r.verdict(Some(&Halt::CannotRun("root".into()))).1,
            EXIT_CANNOT_RUN
        );
    }
}
