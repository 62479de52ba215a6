//! The run, step by step: is there a GPU, the prerequisites, the workload
//! and the driver's devices, the NCCL part's libraries, the collector,
//! nvidia-ml-py beside it, the workloads under both (CUDA, then NCCL), and
//! the checks on what each saw.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};

use super::{
    cuda::{cuda_checks, parse_console, parse_record, record_cuda},
    detect::detect,
    nccl_part::{self, Part, Plan},
    nvml::{collector_gpus, nvml_checks, parse_reference},
    proc::{lines, read, run_logged, tail, wait_for, Proc},
    report::{cannot, Check, Halt, Report},
    target_dir,
    workload::{parse_workload, Workload},
    Args, KERNEL_PTX, NVML_SAMPLER, REF_INTERVAL_S, WINDOW_S, WORKLOAD_C, WORKLOAD_NO_DEVICE,
};

type Step<T> = Result<T, Halt>;

/// The files of one run, in the output directory.
struct Files {
    out: PathBuf,
    workload_src: PathBuf,
    ptx: PathBuf,
    sampler: PathBuf,
    workload: PathBuf,
    reference: PathBuf,
    sampler_err: PathBuf,
    record: PathBuf,
    console: PathBuf,
    collector_err: PathBuf,
}

impl Files {
    fn new(out: &Path) -> Self {
        Self {
            out: out.to_path_buf(),
            workload_src: out.join("gpu_workload.c"),
            ptx: out.join("vadd.ptx"),
            sampler: out.join("nvml_sampler.py"),
            workload: out.join("gpu_workload"),
            reference: out.join("nvml_reference.jsonl"),
            sampler_err: out.join("nvml_sampler.err"),
            record: out.join("record.jsonl"),
            console: out.join("collector.out"),
            collector_err: out.join("collector.err"),
        }
    }
}

pub fn check(args: &Args, out: &Path, report: &mut Report) -> Step<()> {
    // 1. Is there a GPU at all? (No build, no privileges needed to say no.)
    let lib = detect(args, Path::new("/dev"))?;
    report.fact("libcuda", lib.display().to_string());
    println!("gpu-check: driver library {}", lib.display());

    // 2. Prerequisites on a GPU machine.
    let python = prerequisites(args, out)?;
    let mut deadline = Instant::now() + Duration::from_secs(args.timeout);

    // 3. The workload, compiled here; the driver's own view of its devices.
    let files = Files::new(out);
    compile_workload(&files, deadline)?;
    let cuda_devices = probe_devices(args, &files, &lib, deadline, report)?;
    // The NCCL part: its libraries on this node, or why it is skipped.
    let plan = nccl_part::plan(args, out, &python, cuda_devices, deadline, report)?;

    // 4. The collector (its build is not part of the timeout).
    let collector = collector_binary(args, report, &mut deadline)?;

    // 5. nvidia-ml-py first, so that its samples cover every window.
    let mut sampler = start_sampler(args, &python, &files, deadline)?;
    let mut col = start_collector(args, &collector, &lib, plan.nccl(), &files, deadline)?;

    // 6. The workloads under the collector: CUDA, then NCCL.
    let wl = run_workload(args, &files, &lib, deadline, report)?;
    let part = match plan {
        Plan::Run(ready) => match nccl_part::run(args, &ready, out, deadline, report) {
            Ok(w) => Part::Ran(w),
            Err(why) => Part::Broke(why),
        },
        other => Part::from(other),
    };
    // Two more windows: the exited processes' last counts are in them.
    let seen = lines(&files.record);
    wait_for(deadline, "two windows after the workload", || {
        col.alive(&files.collector_err)?;
        Ok(lines(&files.record) >= seen + 2)
    })?;
    let col_status = col.stop(deadline)?;
    drop(sampler.child.stdin.take());
    let _ = sampler.stop(deadline);

    // 7. Judge.
    judge(args, &files, &wl, col_status, report)?;
    let rows = nccl_part::judge(
        &part,
        &read(&files.record),
        &read(&files.console),
        args.standin(),
        report,
    );
    report.checks.extend(rows);
    Ok(())
}

/// Root, and a Python with nvidia-ml-py (returned); the output directory.
fn prerequisites(args: &Args, out: &Path) -> Step<PathBuf> {
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
    Ok(python)
}

/// Writes the embedded sources and compiles the workload with `$CC`.
fn compile_workload(files: &Files, deadline: Instant) -> Step<()> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    for (p, text) in [
        (&files.workload_src, WORKLOAD_C),
        (&files.ptx, KERNEL_PTX),
        (&files.sampler, NVML_SAMPLER),
    ] {
        fs::write(p, text)
            .with_context(|| format!("writing {}", p.display()))
            .map_err(cannot)?;
    }
    let mut c = Command::new(&cc);
    c.args(["-O2", "-Wall", "-o"])
        .arg(&files.workload)
        .arg(&files.workload_src)
        .arg("-ldl");
    let log = files.out.join("cc.log");
    let st = run_logged(c, &log, deadline, "compiling the workload")
        .map_err(|e| Halt::CannotRun(format!("{e:#} (is a C compiler installed as `{cc}`?)")))?;
    if !st.success() {
        return Err(Halt::CannotRun(format!(
            "{cc} could not compile the workload: {}",
            tail(&log, 10)
        )));
    }
    Ok(())
}

/// `gpu_workload probe`: the devices the driver sees (none: no GPU; their
/// number returned), and that `--device` is one of them.
fn probe_devices(
    args: &Args,
    files: &Files,
    lib: &Path,
    deadline: Instant,
    report: &mut Report,
) -> Step<usize> {
    let mut c = Command::new(&files.workload);
    c.arg("probe").arg(lib);
    let probe_out = files.out.join("probe.out");
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
    Ok(devices.len())
}

/// The collector to run: `--collector`, or the release build (built here
/// unless `--no-build`; the build's time extends the deadline).
fn collector_binary(args: &Args, report: &mut Report, deadline: &mut Instant) -> Step<PathBuf> {
    let collector = match &args.collector {
        Some(p) => p.clone(),
        None => {
            if !args.no_build {
                let t = Instant::now();
                let mut b = crate::cargo();
                b.current_dir(crate::workspace_root()).args([
                    "build",
                    "--release",
                    "-p",
                    "collector",
                ]);
                crate::run(b).map_err(cannot)?;
                report.fact("build_s", (t.elapsed().as_secs_f64() * 10.0).round() / 10.0);
                *deadline += t.elapsed();
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
    Ok(collector)
}

/// nvidia-ml-py's sampler, once it has read NVML once.
fn start_sampler(args: &Args, python: &Path, files: &Files, deadline: Instant) -> Step<Proc> {
    let mut c = Command::new(python);
    c.arg(&files.sampler)
        .arg(args.nvml_library.as_deref().unwrap_or(Path::new("")))
        .arg(REF_INTERVAL_S.to_string())
        .arg(args.timeout.to_string())
        .stdin(Stdio::piped());
    let mut sampler = Proc::spawn(c, &files.reference, &files.sampler_err, "nvidia-ml-py")?;
    wait_for(deadline, "nvidia-ml-py's first reading", || {
        if read(&files.reference).contains("\"kind\": \"sample\"") {
            return Ok(true);
        }
        sampler.alive(&files.sampler_err)?;
        Ok(false)
    })?;
    Ok(sampler)
}

/// The collector, once its CUDA probes are attached and it recorded a
/// window; its NCCL probes on `nccl` where the NCCL part runs.
fn start_collector(
    args: &Args,
    collector: &Path,
    lib: &Path,
    nccl: Option<&Path>,
    files: &Files,
    deadline: Instant,
) -> Step<Proc> {
    let config = files.out.join("collector.toml");
    // Bounded-overhead mode would make launch counts estimates: off.
    fs::write(&config, "[cuda]\nlaunch_budget = 0\n")
        .context("writing the collector config")
        .map_err(cannot)?;
    let _ = fs::remove_file(&files.record);
    let remaining = deadline.saturating_duration_since(Instant::now()).as_secs() + 5;
    let mut c = Command::new(collector);
    c.arg("--config")
        .arg(&config)
        .args(["--window", &WINDOW_S.to_string()])
        .args(["--duration", &remaining.to_string()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(["--no-block", "--no-verbs", "--no-otlp"])
        .arg("--cuda-library")
        .arg(lib)
        .arg("--record")
        .arg(&files.record);
    if let Some(n) = &args.nvml_library {
        c.arg("--nvml-library").arg(n);
    }
    if let Some(n) = nccl {
        c.arg("--nccl-library").arg(n);
    }
    let mut col = Proc::spawn(c, &files.console, &files.collector_err, "the collector")?;
    wait_for(deadline, "the collector's CUDA probes", || {
        let text = read(&files.console);
        if let Some(l) = text
            .lines()
            .find(|l| l.starts_with("probe cuLaunchKernel:"))
        {
            if l.ends_with(": attached") {
                return Ok(true);
            }
            bail!("the collector did not attach to {}: {l}", lib.display());
        }
        col.alive(&files.collector_err)?;
        Ok(false)
    })?;
    // The window loop runs (and NVML answered) once a window is recorded.
    wait_for(deadline, "the collector's first window", || {
        col.alive(&files.collector_err)?;
        Ok(lines(&files.record) >= 1)
    })?;
    Ok(col)
}

/// `gpu_workload run` to its end; its own account of what it did.
fn run_workload(
    args: &Args,
    files: &Files,
    lib: &Path,
    deadline: Instant,
    report: &mut Report,
) -> Step<Workload> {
    let wl_out = files.out.join("workload.out");
    let mut c = Command::new(&files.workload);
    c.arg("run")
        .arg(lib)
        .arg(&files.ptx)
        .arg(args.device.to_string())
        .arg(args.rounds.to_string())
        .arg(args.launches.to_string())
        .arg(args.elements.to_string());
    let st = run_logged(c, &wl_out, deadline, "the workload")?;
    if !st.success() {
        return Err(Halt::Failed(format!(
            "the workload failed ({st}): {}",
            tail(&wl_out, 10)
        )));
    }
    let wl = parse_workload(&read(&wl_out)).map_err(Halt::from)?;
    report.fact("workload", wl.to_json());
    println!(
        "gpu-check: workload pid {} ran {} launches of {} on device {} (ptx {})",
        wl.pid,
        wl.counts.get("cuLaunchKernel").copied().unwrap_or(0),
        wl.kernel,
        wl.device,
        wl.ptx
    );
    Ok(wl)
}

/// The checks: the collector stopped cleanly, its CUDA counts are the
/// workload's, its NVML readings nvidia-ml-py's.
fn judge(
    args: &Args,
    files: &Files,
    wl: &Workload,
    col_status: ExitStatus,
    report: &mut Report,
) -> Step<()> {
    let windows = parse_record(&read(&files.record)).map_err(Halt::from)?;
    let rec = record_cuda(&windows, wl.pid);
    let con = parse_console(&read(&files.console), wl.pid);
    let refs = parse_reference(&read(&files.reference)).map_err(Halt::from)?;
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
        .extend(cuda_checks(wl, &rec, &con, args.standin()));
    report
        .checks
        .extend(nvml_checks(&collector_gpus(&windows), &refs));
    Ok(())
}
