//! `cargo xtask`: build and run helpers.
//!
//! - `cargo xtask build` builds the eBPF object (through `collector/build.rs`,
//!   which embeds it) and the release binaries in one step.
//! - `cargo xtask run [-- ARGS]` builds, then runs the collector on this host.
//! - `cargo xtask test` runs every test of the workspace.
//! - `cargo xtask rdma-vm` runs the real-RDMA scenario in a soft-RoCE guest.
//! - `cargo xtask gpu-check` checks the collector against a real NVIDIA GPU
//!   (exit 3 where there is none; docs/gpu-check.md).
//! - `cargo xtask deb` makes the Debian packages of both binaries (`deb.rs`).
//! - `cargo xtask layout` fails on an import circle between sibling modules
//!   (a crate's top-level modules, or the children of any folder module)
//!   and on files or functions over the length limits (`layout/mod.rs`).
use std::{
    io::{BufRead as _, BufReader, Write as _},
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};
use clap::{Parser, Subcommand};

mod bench;
mod deb;
mod fuzz;
mod gpu_check;
mod layout;
mod rdma_vm;

#[derive(Debug, Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Build the eBPF object and the release binaries (the object is embedded).
    Build,
    /// Build, then run the embedded default: a simulated 32-node cluster with
    /// an injected degrading InfiniBand link, streaming to the correlator, with
    /// a subscriber printing candidates (`faultline-sim ARGS`). With
    /// `--host`, run the collector on this host instead (`faultline-collector ARGS`).
    Run {
        #[arg(long)]
        host: bool,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The Debian packages faultline-collector and faultline-correlator
    /// (cargo-deb; release binaries unless --bin-dir), in target/debian:
    /// binaries, systemd units, conffiles (docs/running.md, packages).
    Deb(deb::Args),
    /// Run the benchmarks (tables on stdout, JSON in bench/). Needs root.
    /// A failing benchmark's result says why; the rest still run, and the
    /// run exits non-zero at the end, listing the failures.
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Detection accuracy over seeded simulated scenarios (bench/detect.json).
    BenchDetect {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Real RDMA end to end: boot a QEMU guest with Debian's kernel and
    /// soft-RoCE (rdma_rxe), run perftest traffic, packet loss, a link flap and
    /// a killed peer under faultline's collector and correlator, and check what
    /// they saw (pass/fail table, guest log and JSON in target/rdma-vm/).
    RdmaVm(rdma_vm::Args),
    /// Real GPU: a toolkit-free CUDA workload (hand-written PTX, compiled
    /// here against libcuda with dlopen) under the release collector; launch,
    /// copy and sync counts must be exact and NVML values physical and equal
    /// to nvidia-ml-py's; where the node has a libnccl.so.2 (found without
    /// the network), real NCCL collectives on an ncclCommInitAll
    /// communicator, counts, bytes, rank and size exact (absent: that part
    /// is skipped) (pass/fail table, JSON in target/gpu-check/). Exit 0
    /// pass, 1 fail, 3 no GPU on this machine, 4 a prerequisite is missing.
    GpuCheck(gpu_check::Args),
    /// Run every cargo-fuzz target (`fuzz/`) for a bounded time from the
    /// corpora in the repo (needs cargo-fuzz and the pinned nightly:
    /// scripts/setup.sh).
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 20)]
        secs: u64,
    },
    /// Lint the workspace (host crates, all targets) and the eBPF crate
    /// (with the pinned nightly that builds it, for its own target), warnings
    /// as errors.
    Clippy,
    /// Check the workspace's shape: no import circle between sibling modules
    /// (a crate's top-level modules, a folder's children), no file over 600 lines
    /// and no function over 120 outside tests (exceptions, with their
    /// reasons: xtask/layout-allow.txt).
    Layout,
    /// Run every test of the workspace (root and a BPF-capable kernel needed
    /// for the probe tests; under CI=true their absence fails the run).
    Test {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(mut cmd: Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("spawning {shown}"))?;
    if !status.success() {
        bail!("{shown} failed: {status}");
    }
    Ok(())
}

/// The workspace's root directory.
fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| ".".into(), std::path::Path::to_path_buf)
}

/// A release binary of the workspace (in `$CARGO_TARGET_DIR` when set).
fn release_bin(name: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| "target".into(), std::path::PathBuf::from)
        .join("release")
        .join(name)
}

fn build() -> Result<()> {
    let mut c = cargo();
    c.args([
        "build",
        "--release",
        "-p",
        "collector",
        "-p",
        "correlator",
        "-p",
        "sim",
    ]);
    run(c)
}

/// The pinned nightly of the eBPF crate (collector/build.rs builds with it).
const EBPF_TOOLCHAIN: &str = "nightly-2026-05-19";

fn clippy() -> Result<()> {
    let mut c = cargo();
    c.args([
        "clippy",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]);
    run(c)?;
    let mut c = Command::new("rustup");
    c.args([
        "run",
        EBPF_TOOLCHAIN,
        "cargo",
        "clippy",
        "--release",
        "--locked",
    ])
    .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
    .args([
        "--target-dir",
        "../target/bpf-clippy",
        "--",
        "-D",
        "warnings",
    ])
    .current_dir("collector-ebpf");
    // The outer cargo's environment describes the host build.
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        if (k.starts_with("CARGO_") && k != "CARGO_HOME")
            || k.starts_with("RUSTC")
            || k == "RUSTFLAGS"
            || k == "RUSTUP_TOOLCHAIN"
        {
            c.env_remove(k);
        }
    }
    run(c)
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Build => build(),
        Cmd::Run { host, args } => {
            build()?;
            if host {
                let mut c = Command::new("target/release/faultline-collector");
                c.args(args);
                return run(c);
            }
            let mut c = Command::new(release_bin("faultline-sim"));
            if args.is_empty() {
                c.args(["--inject", "ib-link-degrade", "--duration", "40"]);
                // The web UI keeps serving the run's incidents until Ctrl-C.
                c.args(["--web", "127.0.0.1:8080", "--keep-serving"]);
            } else {
                c.args(args);
            }
            run(c)
        }
        Cmd::Test { args } => test(&args),
        Cmd::Clippy => clippy(),
        Cmd::Layout => layout::run(),
        Cmd::Deb(args) => deb::run(&args),
        Cmd::Fuzz { secs } => fuzz::run(secs),
        Cmd::RdmaVm(args) => rdma_vm::run(&args),
        Cmd::GpuCheck(args) => std::process::exit(gpu_check::run(&args)),
        Cmd::BenchDetect { args } => {
            let mut c = cargo();
            c.args(["build", "--release", "-p", "sim"]);
            run(c)?;
            let mut c = Command::new(release_bin("faultline-sim"));
            c.arg("bench-detect").args(args);
            run(c)
        }
        Cmd::Bench { args } => bench::run(args),
    }
}

/// Runs `cargo test`, echoing its output, and ends with one summary line
/// (`summary: N passed, M failed`) over all test binaries, so the last line
/// says what ran even when the final binary (doc tests) has none.
fn test(args: &[String]) -> Result<()> {
    // Some workspace tests run the shipped binaries from target/debug: build
    // them first so they are never stale.
    let mut b = cargo();
    b.args(["build", "--bins"]);
    run(b)?;
    let mut c = cargo();
    // Every test binary runs even after one fails, so a run reports all
    // its failures at once.
    c.args(["test", "--no-fail-fast"])
        .args(args)
        .stdout(Stdio::piped());
    let mut child = c.spawn().context("spawning cargo test")?;
    let stdout = child.stdout.take().context("cargo test stdout")?;
    let (mut passed, mut failed, mut ignored) = (0u64, 0u64, 0u64);
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test output")?;
        writeln!(out, "{line}")?;
        if let Some(rest) = line.strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else {
                    continue;
                };
                let n: u64 = n.parse().unwrap_or(0);
                match what {
                    "passed" => passed += n,
                    "failed" => failed += n,
                    "ignored" => ignored += n,
                    _ => {}
                }
            }
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    writeln!(
        out,
        "summary: {passed} passed, {failed} failed, {ignored} skipped"
    )?;
    if !status.success() {
        bail!("cargo test failed: {status}");
    }
    // Fuzzing, bounded: FAULTLINE_FUZZ_SECS per target (default 10, 0 = skip).
    let secs = std::env::var("FAULTLINE_FUZZ_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    if secs > 0 {
        fuzz::run(secs)?;
    }
    Ok(())
}
