//! Builds the C stand-ins used by the tests and benchmarks with the system C
//! compiler: the fake `libcuda.so.1` (plain, with 5-byte-nop entries, with
//! single-stepped `mov %rdi,%rax` entries, and a CET build whose entries
//! start `endbr64; push %rbp`),
//! libibverbs provider, `libnvidia-ml.so.1` and `libnccl.so.2`, and the
//! `cuda_workload`, `cudart_workload` (NVIDIA's real CUDA runtime over the
//! stand-in driver), `verbs_workload` and `nccl_workload` programs. Their paths reach the code through
//! `FAULTLINE_STANDINS_DIR`.
use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

fn cc(args: &[&str]) {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}; install gcc (scripts/setup.sh)"));
    assert!(status.success(), "{cc} {args:?} failed");
}

/// Builds the shared library `out` (its soname is its file name) from `src`.
fn shared_lib(src: &Path, out: &Path, extra: &[&str]) {
    let soname = format!(
        "-Wl,-soname,{}",
        out.file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 name")
    );
    let mut a = vec![
        "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
    ];
    a.extend(extra);
    a.extend([
        soname.as_str(),
        "-o",
        out.to_str().expect("utf-8"),
        src.to_str().expect("utf-8"),
    ]);
    cc(&a);
}

/// Builds the program `out` from `src` (it loads libraries with dlopen).
fn program(src: &Path, out: &Path) {
    cc(&[
        "-O2",
        "-g",
        "-Wall",
        "-Werror",
        "-o",
        out.to_str().expect("utf-8"),
        src.to_str().expect("utf-8"),
        "-ldl",
    ]);
}

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("standins");
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("manifest dir")).join("standins");
    println!("cargo:rerun-if-changed={}", src.display());
    for sub in [
        "plain",
        "nop5",
        "stepped",
        "cet",
        "nvml",
        "nccl",
        "nccl-push",
    ] {
        fs::create_dir_all(out.join(sub)).expect("mkdir");
    }
    let cuda = src.join("fake_libcuda.c");
    shared_lib(&cuda, &out.join("plain/libcuda.so.1"), &[]);
    shared_lib(&cuda, &out.join("nop5/libcuda.so.1"), &["-DNOP5_ENTRY"]);
    shared_lib(
        &cuda,
        &out.join("stepped/libcuda.so.1"),
        &["-DSTEPPED_ENTRY"],
    );
    // As a CET-enabled distribution compiler builds it: `endbr64; push %rbp`.
    shared_lib(
        &cuda,
        &out.join("cet/libcuda.so.1"),
        &[
            "-fcf-protection=full",
            "-fno-omit-frame-pointer",
            "-fno-shrink-wrap",
        ],
    );
    program(&src.join("cuda_workload.c"), &out.join("cuda_workload"));
    program(&src.join("cudart_workload.c"), &out.join("cudart_workload"));
    program(&src.join("launch_storm.c"), &out.join("launch_storm"));
    shared_lib(
        &src.join("fake_verbs.c"),
        &out.join("libfakeverbs.so.1"),
        &[],
    );
    program(&src.join("verbs_workload.c"), &out.join("verbs_workload"));
    shared_lib(
        &src.join("fake_nvml.c"),
        &out.join("nvml/libnvidia-ml.so.1"),
        &[],
    );
    shared_lib(
        &src.join("fake_nccl.c"),
        &out.join("nccl/libnccl.so.2"),
        &[],
    );
    program(&src.join("nccl_workload.c"), &out.join("nccl_workload"));
    // As NVIDIA's libnccl.so.2 is built: every probed API starts with a
    // `push` (frame pointers, no shrink-wrapping, no tail calls), for the
    // NCCL overhead benchmark's `nccl_storm`.
    shared_lib(
        &src.join("fake_nccl.c"),
        &out.join("nccl-push/libnccl.so.2"),
        &[
            "-fno-omit-frame-pointer",
            "-fno-shrink-wrap",
            "-fno-optimize-sibling-calls",
        ],
    );
    program(&src.join("nccl_storm.c"), &out.join("nccl_storm"));
    println!("cargo:rustc-env=FAULTLINE_STANDINS_DIR={}", out.display());
}
