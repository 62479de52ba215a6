//! Helpers shared by faultline's workspace-level integration tests.
//!
//! Tests that need root and a BPF-capable kernel call [`require_bpf`] first:
//! locally a missing capability skips the test with the reason printed; in CI
//! (`CI=true`) it fails the test instead, so CI can never go green by skipping.
//!
//! Modules: [`blockdev`] (loop devices and direct I/O), [`standins`] (the C
//! stand-ins, NVIDIA's wheels, the workspace's binaries), [`fake_ib`] (a fake
//! sysfs InfiniBand tree), [`procs`] (children, their output, the
//! correlator's subscriber), [`metrics`] (`/metrics` scraped and read),
//! [`dcgm_exporter`], [`stream`], [`scratch`] (scratch directories),
//! [`turns`] (one former test file at a time in each crate's one test
//! binary). Everything but `dcgm_exporter` and `stream` is also here at the
//! crate root.
use std::{
    fs, io,
    os::unix::fs::MetadataExt,
    path::PathBuf,
    sync::{Mutex, MutexGuard},
};

pub mod blockdev;
pub mod dcgm_exporter;
pub mod fake_ib;
pub mod metrics;
pub mod procs;
pub mod scratch;
pub mod standins;
pub mod stream;
pub mod turns;

pub use blockdev::{direct_io_workload, dsync_writes, AlignedBuf, DiskStat, Issued, LoopDevice};
pub use fake_ib::FakeIb;
pub use procs::{
    json_strs, lines_of, nats_server, streaming_collector, subscriber, updates, wait_window,
    KillOnDrop,
};
pub use scratch::{fresh_dir, scratch_dir};
pub use standins::*;
pub use turns::{one_file_at_a_time, tests_without_a_turn, FileTurn};

static KERNEL: Mutex<()> = Mutex::new(());

/// Serialises tests that attach probes or touch shared kernel state
/// (loop devices, tracefs) within one test binary.
pub fn kernel_lock() -> MutexGuard<'static, ()> {
    KERNEL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether this run is CI (`CI` set to something other than empty, 0 or
/// false): there, a missing prerequisite fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// What is missing for eBPF tests on this host, if anything.
pub fn bpf_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root (eBPF load/attach needs CAP_BPF+CAP_PERFMON)".into());
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
    }
    None
}

/// Returns `true` when the test may proceed. Locally prints a skip reason and
/// returns `false` when BPF is unavailable; under `CI=true` panics instead.
pub fn require_bpf(test: &str) -> bool {
    match bpf_missing() {
        None => true,
        Some(why) if in_ci() => panic!("{test}: CI=true but {why}"),
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// cgroup v2 id of this process: the inode number of its cgroup directory,
/// which is what `bpf_get_current_cgroup_id()` returns.
pub fn own_cgroup_id() -> io::Result<u64> {
    let text = fs::read_to_string("/proc/self/cgroup")?;
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("no cgroup v2 entry in /proc/self/cgroup"))?;
    let dir = PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    Ok(fs::metadata(dir)?.ino())
}

/// A multi-threaded tokio runtime for tests that hold [`kernel_lock`] (a std
/// mutex must not be held across `.await`, so the lock lives outside it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
