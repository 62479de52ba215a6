//! Programs and libraries the tests run: the C stand-ins `tests/build.rs`
//! builds, NVIDIA's wheels `scripts/setup.sh` installs, and the workspace's
//! own binaries.
use std::path::PathBuf;

use crate::in_ci;

/// Directory of the C stand-ins built by `tests/build.rs`.
pub const STANDINS_DIR: &str = env!("FAULTLINE_STANDINS_DIR");

/// The stand-in `libcuda.so.1` (ordinary function entries, like the real driver).
pub fn fake_libcuda() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("plain/libcuda.so.1")
}

/// The stand-in `libcuda.so.1` whose entries start with a single-stepped
/// register write (`mov %rdi,%rax`): no probe can be placed past it.
pub fn fake_libcuda_stepped() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("stepped/libcuda.so.1")
}

/// The stand-in `libcuda.so.1` whose entries start with a 5-byte nop.
pub fn fake_libcuda_nop5() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nop5/libcuda.so.1")
}

/// The stand-in `libcuda.so.1` built with CET (`-fcf-protection=full`) and
/// frame pointers: its functions start `endbr64; push %rbp`.
pub fn fake_libcuda_cet() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("cet/libcuda.so.1")
}

/// The `launch_storm` program (launch-heavy stand-in: threads × launches).
pub fn launch_storm() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("launch_storm")
}

/// The `cuda_workload` program.
pub fn cuda_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("cuda_workload")
}

/// The `cudart_workload` program (runs NVIDIA's real `libcudart.so.12`).
pub fn cudart_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("cudart_workload")
}

/// The stand-in libibverbs + provider (`libfakeverbs.so.1`).
pub fn fake_verbs() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("libfakeverbs.so.1")
}

/// The `verbs_workload` program.
pub fn verbs_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("verbs_workload")
}

/// The stand-in `libnvidia-ml.so.1` (scenario from `FAKE_NVML_SCENARIO`).
pub fn fake_nvml() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nvml/libnvidia-ml.so.1")
}

/// Drives the NVML stand-in of this test process: writes `scenario` to a
/// fresh directory named for `name` and sets `FAKE_NVML_SCENARIO` and
/// `FAKE_NVML_GPUS`, which the stand-in reads at `nvmlInit` (so call it
/// before any thread of the test starts). The directory, for other files.
pub fn nvml_scenario(name: &str, scenario: &str, gpus: u32) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("faultline-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the scenario directory");
    let file = dir.join("scenario.txt");
    std::fs::write(&file, scenario).expect("write the NVML scenario");
    std::env::set_var("FAKE_NVML_SCENARIO", &file);
    std::env::set_var("FAKE_NVML_GPUS", gpus.to_string());
    dir
}

/// The stand-in `libnccl.so.2` (NCCL's C ABI; ranks as processes).
pub fn fake_nccl() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl/libnccl.so.2")
}

/// The `nccl_workload` program (one NCCL rank).
pub fn nccl_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl_workload")
}

/// The stand-in `libnccl.so.2` built with push-led entries, as NVIDIA's
/// (`push %rbp` first in every collective and group call).
pub fn fake_nccl_push() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl-push/libnccl.so.2")
}

/// The `nccl_storm` program (collective-heavy stand-in: threads ×
/// grouped all-reduces on `ncclCommInitAll` communicators).
pub fn nccl_storm() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl_storm")
}

/// The cargo target directory these tests were built in.
pub fn target_dir() -> PathBuf {
    // STANDINS_DIR is <target>/<profile>/build/tests-<hash>/out/standins.
    PathBuf::from(STANDINS_DIR)
        .ancestors()
        .nth(5)
        .map(PathBuf::from)
        .expect("target dir above the stand-ins")
}

/// A file of NVIDIA's wheels that `scripts/setup.sh` installs into
/// `<target dir>/nvidia-venv` (`rel` under its `site-packages/nvidia/`, e.g.
/// `nccl/lib/libnccl.so.2`). Missing: `None` with a loud message, and a
/// panic under `CI=true` (CI must run these tests).
pub fn nvidia_wheel_file(rel: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("FAULTLINE_NVIDIA_VENV")
        .map_or_else(|| target_dir().join("nvidia-venv"), PathBuf::from);
    let found = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|py| py.path().join("site-packages/nvidia").join(rel))
        .find(|p| p.is_file());
    if found.is_some() {
        return found;
    }
    let msg = format!(
        "NVIDIA's {rel} is not in {}: run scripts/setup.sh (it installs nvidia-cuda-runtime-cu12, nvidia-nccl-cu12 and nvidia-ml-py there)",
        venv.display()
    );
    if in_ci() {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

/// A binary of the workspace from the target directory of this test run
/// (`cargo xtask test` builds them first).
pub fn bin(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("test executable path")
        .parent()
        .and_then(|p| p.parent())
        .expect("target directory")
        .join(name)
}
