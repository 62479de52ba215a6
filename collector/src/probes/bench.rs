//! The benchmarks' probes: a do-nothing uprobe (the uprobe baseline) and
//! the ring-drain benchmark's synthetic producer.
use aya::{programs::uprobe::UProbeAttachLocation, Ebpf, EbpfLoader};
use collector_common::stat;

use super::{
    attach::{attach_btf_tracepoint, attach_one, attach_tracepoint, AttachError},
    read_stats, ring, ProbeError,
};

/// The benchmarks' eBPF object (`collector-ebpf/src/bench_main.rs`), kept
/// out of the collector's: its 8 MiB ring and its programs serve only
/// `faultline-bench`.
static BENCH_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/faultline-bench-probes.o"));

/// The maps of the benchmarks' object, for tests.
pub fn bench_object() -> &'static [u8] {
    BENCH_OBJECT
}
use crate::{privilege, tracefs::Tracefs};

/// A loaded object with only the do-nothing uprobe attached to one symbol:
/// the baseline for the uprobe benchmarks.
pub struct EmptyUprobe {
    _ebpf: Ebpf,
}

impl EmptyUprobe {
    pub fn attach(lib: &std::path::Path, symbol: &str) -> Result<Self, ProbeError> {
        if BENCH_OBJECT.is_empty() {
            return Err(ProbeError::Stub);
        }
        privilege::check_host()?;
        let mut ebpf = EbpfLoader::new()
            .load(BENCH_OBJECT)
            .map_err(|e| ProbeError::Load(Box::new(e)))?;
        attach_one(
            &mut ebpf,
            &mut Vec::new(),
            "bench_empty_uprobe",
            UProbeAttachLocation::Symbol(symbol),
            0,
            lib,
        )
        .map_err(|reason| ProbeError::Required {
            probe: "bench_empty_uprobe",
            reason: Box::new(reason),
        })?;
        Ok(Self { _ebpf: ebpf })
    }
}

/// A loaded object with empty programs on the block tracepoints of the BTF
/// path (`block_io_start`, `block_rq_complete`): the
/// baseline of the block benchmark, the cost of the tracepoints' calls into
/// BPF before any work.
pub struct EmptyBlock {
    ebpf: Ebpf,
}

impl EmptyBlock {
    /// The programs, with the tracepoint each is attached to.
    pub const PROGRAMS: [(&'static str, &'static str); 2] = [
        ("bench_empty_io_start", "block_io_start"),
        ("bench_empty_rq_complete", "block_rq_complete"),
    ];

    pub fn attach() -> Result<Self, ProbeError> {
        if BENCH_OBJECT.is_empty() {
            return Err(ProbeError::Stub);
        }
        privilege::check_host()?;
        let btf = aya::Btf::from_sys_fs().map_err(|e| ProbeError::Required {
            probe: "bench_empty_io_start",
            reason: Box::new(AttachError::KernelBtf(e)),
        })?;
        let mut ebpf = EbpfLoader::new()
            .load(BENCH_OBJECT)
            .map_err(|e| ProbeError::Load(Box::new(e)))?;
        for (program, tracepoint) in Self::PROGRAMS {
            attach_btf_tracepoint(&mut ebpf, program, tracepoint, &btf).map_err(|reason| {
                ProbeError::Required {
                    probe: program,
                    reason: Box::new(reason),
                }
            })?;
        }
        Ok(Self { ebpf })
    }

    /// (program, runs, run time ns) from the kernel's run-time accounting
    /// (counting only while `enable_run_stats` is held).
    pub fn program_run_stats(&self) -> Vec<(String, u64, u64)> {
        super::run_stats_of(&self.ebpf)
    }
}

/// One record of the ring-drain benchmark's synthetic producer.
#[derive(Clone, Copy, Debug)]
pub struct BenchRecord {
    pub ts_ns: u64,
    pub index: u64,
}

impl ring::Decode for BenchRecord {
    const RING: &'static str = "BENCH_RING";
    const LABEL: &'static str = "bench";
    fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 32 {
            return None;
        }
        let w = |i: usize| u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        Some(Self {
            ts_ns: w(0),
            index: w(1),
        })
    }
}

/// The ring-drain benchmark's producer: `getppid()` from process `tgid`
/// writes 64 records into `BENCH_RING`.
pub struct BenchProducer {
    ebpf: Ebpf,
}

impl BenchProducer {
    pub fn start(tgid: u32) -> Result<(Self, ring::EventRing<BenchRecord>), ProbeError> {
        if BENCH_OBJECT.is_empty() {
            return Err(ProbeError::Stub);
        }
        privilege::check_host()?;
        Tracefs::system()?;
        let mut ebpf = EbpfLoader::new()
            .override_global("BENCH_TGID", &tgid, true)
            .load(BENCH_OBJECT)
            .map_err(|e| ProbeError::Load(Box::new(e)))?;
        attach_tracepoint(
            &mut ebpf,
            "bench_ring_producer",
            "syscalls",
            "sys_enter_getppid",
        )
        .map_err(|reason| ProbeError::Required {
            probe: "bench_ring_producer",
            reason: Box::new(reason),
        })?;
        let ring = ring::EventRing::from_ebpf(&mut ebpf)?;
        Ok((Self { ebpf }, ring))
    }

    /// (written, lost to a full ring) as counted in the kernel.
    pub fn counts(&self) -> Result<(u64, u64), ProbeError> {
        let k = read_stats(&self.ebpf)?;
        Ok((
            k[stat::BENCH_EVENTS as usize],
            k[stat::BENCH_RING_FULL as usize],
        ))
    }
}

/// Whether the child `pid` has exited, leaving it unreaped: a benchmark or
/// test takes its last snapshot then, while the dead process's final CPU
/// time is still readable (as it is in production until its parent reaps
/// it), and reaps it after.
pub fn child_exited_unreaped(pid: u32) -> bool {
    // SAFETY: waitid only fills `info`, a plain C struct.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT | libc::WNOHANG,
        );
        r == 0 && info.si_pid() != 0
    }
}
