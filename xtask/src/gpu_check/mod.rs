//! `cargo xtask gpu-check`: the collector against a real NVIDIA GPU.
//!
//! A CUDA workload that needs no toolkit (`xtask/gpu-check/gpu_workload.c`,
//! compiled here with the system C compiler, loading `libcuda.so.1` with
//! dlopen and JIT-compiling the hand-written PTX kernel
//! `xtask/gpu-check/vadd.ptx`) runs under the release `faultline-collector`
//! while nvidia-ml-py (`xtask/gpu-check/nvml_sampler.py`) reads NVML beside
//! it. The workload prints what it did; the collector's record (`--record`,
//! the replay format) and its console lines say what it saw. Checks
//! ([`cuda::cuda_checks`], [`nvml::nvml_checks`]): launch, copy, sync, alloc and free
//! counts and bytes exactly equal to the workload's own, the kernel's name,
//! the device, and every GPU's NVML values physical and equal to
//! nvidia-ml-py's within the tolerances below.
//!
//! The real-NCCL part ([`nccl_part`], [`nccl::nccl_checks`]): where the node
//! has a `libnccl.so.2` (found without the network by [`nccl_find`]),
//! `xtask/gpu-check/nccl_workload.c`, compiled here too, runs real
//! collectives on an `ncclCommInitAll` communicator through the real CUDA
//! runtime under the same collector, and its calls, bytes, ranks, sizes and
//! sequence must be exactly what the collector recorded. Where there is no
//! NCCL the part is one skipped row and the rest of the check is unchanged.
//!
//! Exit codes: [`EXIT_PASS`] only when every check passed; [`EXIT_FAIL`] when
//! a check failed, the run broke or timed out; [`EXIT_NO_GPU`] on a machine
//! without `/dev/nvidia<N>` or a loadable `libcuda.so.1` (never a pass);
//! [`EXIT_CANNOT_RUN`] when a prerequisite on a GPU machine is missing (root,
//! a C compiler, nvidia-ml-py, the collector build). `result.json` in the
//! output directory says the same. docs/gpu-check.md is the user's guide.
use std::{
    fs,
    path::PathBuf,
    time::{Instant, SystemTime},
};

use serde_json::Map;

mod cuda;
mod detect;
mod nccl;
mod nccl_find;
mod nccl_part;
mod nvml;
mod proc;
mod report;
mod steps;
mod workload;

use report::{table, Report};

const WORKLOAD_C: &str = include_str!("../../gpu-check/gpu_workload.c");
const KERNEL_PTX: &str = include_str!("../../gpu-check/vadd.ptx");
const NVML_SAMPLER: &str = include_str!("../../gpu-check/nvml_sampler.py");
const NCCL_WORKLOAD_C: &str = include_str!("../../gpu-check/nccl_workload.c");
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
    /// Skip the real-NCCL part (the rest of the check is unchanged).
    #[arg(long)]
    no_nccl: bool,
    /// `libnccl.so.2` for the NCCL part instead of searching the node (the
    /// check's nvidia-venv, the ld.so cache, the usual directories, Python
    /// site-packages). With --cuda-library: the test stand-in, and without
    /// it the stand-in run skips the NCCL part.
    #[arg(long, value_name = "PATH")]
    nccl_library: Option<PathBuf>,
    /// The CUDA runtime (`libcudart.so.12`) the NCCL workload uses
    /// [default: beside the NCCL wheel, else searched as NCCL is].
    #[arg(long, value_name = "PATH")]
    cudart_library: Option<PathBuf>,
    /// CUDA devices of the NCCL part's `ncclCommInitAll` communicator, one
    /// rank each: a comma-separated list, or `all` (every device, at most
    /// 8) [default: --device, a one-GPU communicator].
    #[arg(long, value_name = "LIST")]
    nccl_devices: Option<String>,
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
    super::workspace_root().join("target")
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
        started_unix_ms: proc::unix_ms(SystemTime::now()).max(0) as u64,
        standin: args.standin(),
        facts: Map::new(),
        checks: Vec::new(),
        notes: Vec::new(),
    };
    report.fact("timeout_s", args.timeout);
    report.fact("out_dir", out.display().to_string());
    let halt = steps::check(args, &out, &mut report).err();
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

#[cfg(test)]
mod nccl_tests;
#[cfg(test)]
mod tests;
