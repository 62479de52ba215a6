//! Builds `collector-ebpf` for `bpfel-unknown-none` with the pinned nightly and
//! bpf-linker, and leaves the object in `$OUT_DIR/faultline-probes.o` for
//! `include_bytes_aligned!`. Set `FAULTLINE_EBPF_STUB=1` to embed an empty
//! object instead (fast `cargo check` without the eBPF toolchain; the
//! collector then reports that the probes are unavailable).
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

const EBPF_TOOLCHAIN: &str = "nightly-2026-05-19";
const EBPF_TARGET: &str = "bpfel-unknown-none";
const EBPF_BIN: &str = "faultline-probes";
/// The benchmarks' programs, an object of their own.
const EBPF_BENCH_BIN: &str = "faultline-bench-probes";

fn main() -> Result<()> {
    // `cfg(agent)`: the agent and every source need all four features; one
    // name for them instead of the four spelled out at each gated module.
    println!("cargo::rustc-check-cfg=cfg(agent)");
    if ["PROBES", "NVML", "RDMA", "OTLP"]
        .iter()
        .all(|f| env::var_os(format!("CARGO_FEATURE_{f}")).is_some())
    {
        println!("cargo::rustc-cfg=agent");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").context("OUT_DIR not set")?);
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR not set")?);
    let root = manifest_dir
        .parent()
        .context("collector crate has no parent directory")?;
    let ebpf_dir = root.join("collector-ebpf");
    let dst = out_dir.join("faultline-probes.o");
    let bench_dst = out_dir.join("faultline-bench-probes.o");

    for p in [
        ebpf_dir.join("src"),
        ebpf_dir.join("Cargo.toml"),
        root.join("collector-common/src"),
        root.join("collector-common/Cargo.toml"),
    ] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-env-changed=FAULTLINE_EBPF_STUB");
    build_info(&manifest_dir);

    if env::var_os("FAULTLINE_EBPF_STUB").is_some_and(|v| v != "0") {
        println!("cargo:warning=FAULTLINE_EBPF_STUB set: embedding an empty eBPF object");
        fs::write(&dst, b"")?;
        fs::write(&bench_dst, b"")?;
        return Ok(());
    }

    let target_dir = env::var_os("FAULTLINE_BPF_TARGET_DIR")
        .map_or_else(|| root.join("target").join("bpf"), PathBuf::from);
    build_ebpf(&ebpf_dir, &target_dir)?;
    for (bin, to) in [(EBPF_BIN, &dst), (EBPF_BENCH_BIN, &bench_dst)] {
        let obj = target_dir.join(EBPF_TARGET).join("release").join(bin);
        fs::copy(&obj, to)
            .with_context(|| format!("copy {} to {}", obj.display(), to.display()))?;
    }
    Ok(())
}

fn build_ebpf(ebpf_dir: &Path, target_dir: &Path) -> Result<()> {
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        EBPF_TOOLCHAIN,
        "cargo",
        "build",
        "--release",
        "--locked",
    ])
    .args(["--target", EBPF_TARGET, "-Z", "build-std=core"])
    .arg("--target-dir")
    .arg(target_dir)
    .current_dir(ebpf_dir);
    // The outer cargo's environment describes the host build (wrappers such as
    // clippy-driver, rustflags, profile overrides); none of it applies here.
    for (k, _) in env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let strip = (k.starts_with("CARGO_") && k != "CARGO_HOME")
            || k.starts_with("RUSTC")
            || k == "RUSTFLAGS"
            || k == "RUSTUP_TOOLCHAIN"
            || k == "RUSTDOCFLAGS";
        if strip {
            cmd.env_remove(k);
        }
    }
    cmd.env("RUSTFLAGS", "-C debuginfo=2 -C link-arg=--btf");
    let status = cmd.status().with_context(|| {
        "could not run rustup to build the eBPF probes; run `bash scripts/setup.sh` first"
    })?;
    if !status.success() {
        bail!(
            "building collector-ebpf failed ({status}); it needs the {EBPF_TOOLCHAIN} toolchain \
             with rust-src and bpf-linker 0.13 on PATH: run `bash scripts/setup.sh`"
        );
    }
    Ok(())
}

include!("../build-support/build_info.rs");
