//! Builds the C stand-ins used by the tests and benchmarks with the system C
//! compiler: the fake `libcuda.so.1` (plain, and with 5-byte-nop entries) and
//! the `cuda_workload` program. Their paths reach the code through
//! `FAULTLINE_STANDINS_DIR`.
use std::{env, fs, path::PathBuf, process::Command};

fn cc(args: &[&str]) {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}; install gcc (scripts/setup.sh)"));
    assert!(status.success(), "{cc} {args:?} failed");
}

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("standins");
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("manifest dir")).join("standins");
    println!("cargo:rerun-if-changed={}", src.display());
    for sub in ["plain", "nop5"] {
        fs::create_dir_all(out.join(sub)).expect("mkdir");
    }
    let lib_src = src.join("fake_libcuda.c");
    let lib_src = lib_src.to_str().expect("utf-8 path");
    let common = [
        "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
    ];
    let plain = out.join("plain/libcuda.so.1");
    let nop5 = out.join("nop5/libcuda.so.1");
    let mut a: Vec<&str> = common.to_vec();
    a.extend([
        "-Wl,-soname,libcuda.so.1",
        "-o",
        plain.to_str().expect("utf-8"),
        lib_src,
    ]);
    cc(&a);
    let mut a: Vec<&str> = common.to_vec();
    a.extend([
        "-DNOP5_ENTRY",
        "-Wl,-soname,libcuda.so.1",
        "-o",
        nop5.to_str().expect("utf-8"),
        lib_src,
    ]);
    cc(&a);
    let wl = out.join("cuda_workload");
    let wl_src = src.join("cuda_workload.c");
    cc(&[
        "-O2",
        "-g",
        "-Wall",
        "-Werror",
        "-o",
        wl.to_str().expect("utf-8"),
        wl_src.to_str().expect("utf-8"),
        "-ldl",
    ]);
    let verbs = out.join("libfakeverbs.so.1");
    let verbs_src = src.join("fake_verbs.c");
    cc(&[
        "-O2",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-shared",
        "-Wl,-soname,libfakeverbs.so.1",
        "-o",
        verbs.to_str().expect("utf-8"),
        verbs_src.to_str().expect("utf-8"),
    ]);
    let vw = out.join("verbs_workload");
    let vw_src = src.join("verbs_workload.c");
    cc(&[
        "-O2",
        "-g",
        "-Wall",
        "-Werror",
        "-o",
        vw.to_str().expect("utf-8"),
        vw_src.to_str().expect("utf-8"),
        "-ldl",
    ]);
    let nvml = out.join("nvml/libnvidia-ml.so.1");
    fs::create_dir_all(out.join("nvml")).expect("mkdir nvml");
    let nvml_src = src.join("fake_nvml.c");
    cc(&[
        "-O2",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-shared",
        "-Wl,-soname,libnvidia-ml.so.1",
        "-o",
        nvml.to_str().expect("utf-8"),
        nvml_src.to_str().expect("utf-8"),
    ]);
    println!("cargo:rustc-env=FAULTLINE_STANDINS_DIR={}", out.display());
}
