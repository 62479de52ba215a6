//! Loading and attaching the embedded eBPF object.
//!
//! The probes are described by a declarative table ([`table::PROBES`]); each is
//! optional unless marked required, and its outcome is recorded as a
//! [`ProbeStatus`] so that the operator sees what is active and why not.
pub(crate) mod attach;
pub mod bench;
pub mod btf;
mod cuda;
pub mod drain;
pub mod entry;
pub mod launch_cpu;
pub mod launch_duty;
pub mod libraries;
mod load;
pub(crate) mod mmap_array;
pub mod nccl;
pub mod ring;
mod section;
pub mod table;

use std::fmt;

use aya::{
    maps::{MapData, PerCpuArray},
    Ebpf,
};
use collector_common::{block::RqSlot, cuda::LaunchSlot, stat};
use mmap_array::MmapArray;

use crate::{privilege::PrivilegeError, tracefs::TracefsError};
pub use attach::{AttachError, VerbsError};
pub use bench::{bench_object, BenchProducer, BenchRecord, EmptyBlock, EmptyUprobe};
pub use section::{parse_loc, CodeLoc, LocError, ProviderSection, ProviderTarget, SpecError};
pub use table::{Attach, BlockAttach, BlockMode, ProbeSpec, PROBES};

/// The eBPF object built by `build.rs`, embedded in the binary.
static PROBES_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/faultline-probes.o"));

/// The collector's eBPF object as embedded, for tests.
pub fn probes_object() -> &'static [u8] {
    PROBES_OBJECT
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Privilege(#[from] PrivilegeError),
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    #[error(
        "this collector was built without its eBPF object (FAULTLINE_EBPF_STUB); rebuild with \
         `cargo xtask build`"
    )]
    Stub,
    #[error("loading the eBPF object failed: {0}; check `dmesg` and that the kernel has BPF, BTF and ring buffers (5.8+)")]
    Load(#[source] Box<aya::EbpfError>),
    #[error("required probe {probe} failed: {reason}")]
    Required {
        probe: &'static str,
        #[source]
        reason: Box<AttachError>,
    },
    #[error("CUDA launch probes: {0}")]
    Launch(String),
    #[error("eBPF map {0} missing from the object")]
    MissingMap(&'static str),
    #[error("eBPF map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("mapping eBPF map {name} into memory: {source}; the kernel must allow mmap of BPF arrays (5.5+)")]
    Mmap {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("registering ring buffer {name} with the runtime: {source}")]
    Poll {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Which probe families to enable.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    pub exec: bool,
    pub block: bool,
    /// Emit one sampled per-request block event every N completions per CPU (0 = off).
    pub block_sample_every: u32,
    /// Block probes on BTF-enabled raw tracepoints when the kernel has BTF;
    /// false forces the classic tracepoints.
    pub block_btf: bool,
    /// How block requests are timed; `None` picks from the kernel's
    /// tracepoints (mode IO where `block_io_start`/`block_io_done` exist,
    /// 6.5+). `Some(BlockMode::Rq)` runs the path of older kernels (issue to
    /// completion) on a new one, which is how the tests cover it.
    pub block_mode: Option<BlockMode>,
    pub cuda: bool,
    /// Where to find `libcuda.so.1`.
    pub cuda_search: crate::cuda_lib::Search,
    /// CUDA per-event stream budget, events per second per CPU (0 = aggregates only).
    pub cuda_events_per_sec: u32,
    pub verbs: bool,
    /// libibverbs for the control-path probes (default: ld.so cache, usual path).
    pub verbs_library: Option<std::path::PathBuf>,
    /// The provider's data-path functions; `None` resolves them through the
    /// ops table of a context on the first RDMA device.
    pub verbs_provider: Option<ProviderTarget>,
    pub nccl: bool,
    /// Where to find `libnccl.so.2` (every distinct copy found is attached).
    pub nccl_search: crate::nccl_lib::Search,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            exec: true,
            block: true,
            block_sample_every: 0,
            block_btf: true,
            block_mode: None,
            cuda: true,
            cuda_search: crate::cuda_lib::Search::default(),
            cuda_events_per_sec: 0,
            verbs: true,
            verbs_library: None,
            verbs_provider: None,
            nccl: true,
            nccl_search: crate::nccl_lib::Search::default(),
        }
    }
}

/// Outcome of one probe's attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeState {
    Attached,
    /// Disabled in the configuration.
    Disabled,
    /// Not needed on this kernel: another probe does its job (the reason says which).
    Unused(&'static str),
    /// Not available on this host (the reason says what is missing); other probes keep working.
    Inactive(String),
}

#[derive(Clone, Debug)]
pub struct ProbeStatus {
    pub name: &'static str,
    pub state: ProbeState,
}

impl fmt::Display for ProbeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            ProbeState::Attached => write!(f, "{}: attached", self.name),
            ProbeState::Disabled => write!(f, "{}: disabled by configuration", self.name),
            ProbeState::Unused(why) => write!(f, "{}: not used: {why}", self.name),
            ProbeState::Inactive(why) => write!(f, "{}: inactive: {why}", self.name),
        }
    }
}

/// The loaded object, its attached programs, and the per-probe outcomes.
pub struct Probes {
    pub(crate) ebpf: Ebpf,
    pub(crate) status: Vec<ProbeStatus>,
    pub(crate) block_mode: BlockMode,
    pub(crate) block_attach: BlockAttach,
    pub(crate) cuda_library: Option<std::path::PathBuf>,
    /// The NCCL libraries the uprobes are attached to, by file identity.
    pub(crate) nccl_libraries:
        std::collections::BTreeMap<crate::proc_libs::FileKey, libraries::AttachedLib>,
    /// CUDA driver libraries found after start (inside containers), by
    /// file identity: every CUDA probe attached, launch probes duty-cycled
    /// with the first library's.
    pub(crate) cuda_extra:
        std::collections::BTreeMap<crate::proc_libs::FileKey, libraries::AttachedLib>,
    /// The first CUDA library's identity and its hold (found inside a
    /// process's root: kept open).
    pub(crate) cuda_primary: Option<(crate::proc_libs::FileKey, libraries::AttachedLib)>,
    /// The launch uprobes' attach state (bounded-overhead mode).
    pub(crate) launch: std::sync::Mutex<launch_duty::LaunchDuty>,
    /// The BTF block probes' in-flight table, mapped (read-only).
    pub(crate) rq_slots: MmapArray<RqSlot>,
    /// The launch slots, mapped (written only to free dead processes' slots).
    pub(crate) launch_slots: MmapArray<LaunchSlot>,
}

/// Clock `id` (`clock_gettime`) in ns.
pub fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; the callers pass clocks that exist.
    unsafe { libc::clock_gettime(id, &mut t) };
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

impl Probes {
    /// The CUDA driver library the uprobes are attached to, if any.
    pub fn cuda_library(&self) -> Option<&std::path::Path> {
        self.cuda_library.as_deref()
    }

    /// The NCCL libraries the uprobes are attached to.
    pub fn nccl_libraries(&self) -> Vec<std::path::PathBuf> {
        self.nccl_libraries
            .values()
            .map(|l| l.found_at.clone())
            .collect()
    }

    /// The NCCL libraries attached, as shown (`PATH in pid N's root` for
    /// one found inside a container).
    pub fn nccl_libraries_shown(&self) -> Vec<String> {
        self.nccl_libraries
            .values()
            .map(|l| l.shown.clone())
            .collect()
    }

    /// How the block probes time requests on this kernel.
    pub fn block_mode(&self) -> BlockMode {
        self.block_mode
    }

    /// How the block programs are attached (BTF raw tracepoints or classic).
    pub fn block_attach(&self) -> BlockAttach {
        self.block_attach
    }

    /// Whether the block probes count requests (the counting tracepoints attached).
    pub fn block_active(&self) -> bool {
        match self.block_mode {
            BlockMode::Io => {
                // On BTF block_rq_complete counts; classically block_io_done
                // counts and block_rq_complete takes the bytes.
                self.is_attached("block_io_start")
                    && self.is_attached("block_rq_complete")
                    && (self.block_attach == BlockAttach::Btf || self.is_attached("block_io_done"))
            }
            BlockMode::Rq => {
                self.is_attached("block_rq_issue") && self.is_attached("block_rq_complete")
            }
        }
    }

    pub fn status(&self) -> &[ProbeStatus] {
        &self.status
    }

    pub fn is_attached(&self, name: &str) -> bool {
        self.status
            .iter()
            .any(|s| s.name == name && s.state == ProbeState::Attached)
    }

    /// In-kernel self-statistics summed over CPUs (indices in `collector_common::stat`).
    pub fn kernel_stats(&self) -> Result<[u64; stat::COUNT as usize], ProbeError> {
        read_stats(&self.ebpf)
    }

    /// Kernel run statistics per attached program: (program, invocations,
    /// total ns), from `/proc/self/fdinfo`. The counters only move while
    /// BPF run-time stats are enabled ([`enable_run_stats`]).
    pub fn program_run_stats(&self) -> Vec<(String, u64, u64)> {
        run_stats_of(&self.ebpf)
    }

    /// Runs the kernel skipped per program (`recursion_misses` in
    /// `/proc/self/fdinfo`): a program already running on a CPU is not run
    /// again when an interrupt hits its hook there (a block completion in
    /// softirq over another device's completion), so that event is lost.
    /// Always counted by the kernel, no stats switch needed.
    pub fn recursion_misses(&self) -> Vec<(String, u64)> {
        fdinfo_of(&self.ebpf, &["recursion_misses:"])
            .into_iter()
            .map(|(n, v)| (n, v[0]))
            .collect()
    }

    /// Access to the loaded object for probe families that read maps.
    pub fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }
}

/// Kernel run statistics of `ebpf`'s loaded programs: (program,
/// invocations, total ns), from `/proc/self/fdinfo`, sorted by program.
/// (program, invocations, total ns) of every loaded program.
fn run_stats_of(ebpf: &Ebpf) -> Vec<(String, u64, u64)> {
    fdinfo_of(ebpf, &["run_cnt:", "run_time_ns:"])
        .into_iter()
        .map(|(n, v)| (n, v[0], v[1]))
        .collect()
}

/// The `fields` (0 when absent) of every loaded program's
/// `/proc/self/fdinfo` entry, by program name.
fn fdinfo_of(ebpf: &Ebpf, fields: &[&str]) -> Vec<(String, Vec<u64>)> {
    use std::os::fd::{AsFd as _, AsRawFd as _};
    let mut out = Vec::new();
    for (name, prog) in ebpf.programs() {
        let Ok(fd) = prog.fd() else { continue };
        let raw = fd.as_fd().as_raw_fd();
        let Ok(text) = std::fs::read_to_string(format!("/proc/self/fdinfo/{raw}")) else {
            continue;
        };
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        out.push((name.to_string(), fields.iter().map(|f| field(f)).collect()));
    }
    out.sort();
    out
}

/// The per-CPU `STATS` array of a loaded object, summed over CPUs.
fn read_stats(ebpf: &Ebpf) -> Result<[u64; stat::COUNT as usize], ProbeError> {
    let err = |source| ProbeError::Map {
        name: "STATS",
        source,
    };
    let map = ebpf.map("STATS").ok_or(ProbeError::MissingMap("STATS"))?;
    let arr = PerCpuArray::<&MapData, u64>::try_from(map).map_err(err)?;
    let mut out = [0u64; stat::COUNT as usize];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = arr.get(&(i as u32), 0).map_err(err)?.iter().sum();
    }
    Ok(out)
}

/// Turns on the kernel's BPF run-time accounting (`BPF_ENABLE_STATS`) for as
/// long as the returned fd lives. It costs two clock reads per program run, so
/// only benchmarks use it.
pub fn enable_run_stats() -> std::io::Result<std::os::fd::OwnedFd> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// Removes the entries of `name` whose key belongs to a process in `dead`.
pub(crate) fn prune_hash<K: aya::Pod, V: aya::Pod>(
    p: &mut Probes,
    name: &'static str,
    dead: &std::collections::BTreeSet<u32>,
    pid: impl Fn(&K) -> u32,
) -> Result<u64, ProbeError> {
    let m = p
        .ebpf_mut()
        .map_mut(name)
        .ok_or(ProbeError::MissingMap(name))?;
    let mut h = aya::maps::HashMap::<&mut MapData, K, V>::try_from(m)
        .map_err(|source| ProbeError::Map { name, source })?;
    let keys: Vec<K> = h
        .keys()
        .flatten()
        .filter(|k| dead.contains(&pid(k)))
        .collect();
    let mut n = 0;
    for k in keys {
        n += u64::from(h.remove(&k).is_ok());
    }
    Ok(n)
}
