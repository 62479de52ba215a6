//! The benchmarks' probes: a do-nothing uprobe (the uprobe baseline) and
//! the ring-drain benchmark's synthetic producer.
use aya::{
    programs::{uprobe::UProbeAttachLocation, TracePoint},
    Ebpf, EbpfLoader,
};
use collector_common::stat;

use super::{attach::attach_one, read_stats, ring, ProbeError};

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
            reason,
        })?;
        Ok(Self { _ebpf: ebpf })
    }
}

/// Measures the CPU cost of one uprobe hit on this kernel: an empty uprobe
/// on libc's `getppid`, attached for this process only and kept attached,
/// against `getpid` (the same trivial system call, unprobed). The trap
/// dominates a launch probe's cost (the README's uprobe table), so this is
/// what bounded-overhead mode budgets with; it stays loaded so the
/// controller can measure again as the machine's trap cost drifts (a VM's
/// traps moved between 9 and 12 µs within seconds here). Nothing else in
/// the collector calls `getppid`.
pub struct HitCalibrator {
    _ebpf: Ebpf,
    /// `getppid` minus `getpid` without the probe, ns per call.
    bias_ns: f64,
}

/// CPU time of the calling thread, ns: preemption by other threads (a
/// saturated host, the very case bounded mode is for) does not count.
fn thread_cpu_ns() -> f64 {
    super::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) as f64
}

/// Thread CPU ns per call of `f` over `n` calls.
fn per_call(n: u32, f: unsafe extern "C" fn() -> libc::pid_t) -> f64 {
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        // SAFETY: getpid/getppid have no preconditions.
        std::hint::black_box(unsafe { f() });
    }
    (thread_cpu_ns() - t0) / f64::from(n.max(1))
}

/// Median of `pairs` differences `getppid − getpid`, `calls` calls each.
fn getppid_over_getpid(calls: u32, pairs: u32) -> f64 {
    let mut d: Vec<f64> = (0..pairs.max(1))
        .map(|_| per_call(calls, libc::getppid) - per_call(calls, libc::getpid))
        .collect();
    d.sort_by(f64::total_cmp);
    d[d.len() / 2]
}

impl HitCalibrator {
    pub fn new() -> Result<Self, ProbeError> {
        use aya::programs::{
            uprobe::{UProbeAttachPoint, UProbeScope},
            UProbe,
        };
        if BENCH_OBJECT.is_empty() {
            return Err(ProbeError::Stub);
        }
        let err = |reason: String| ProbeError::Required {
            probe: "uprobe calibration",
            reason,
        };
        let libc = std::fs::read_to_string("/proc/self/maps")
            .ok()
            .and_then(|m| {
                m.lines()
                    .filter_map(|l| l.split_whitespace().nth(5))
                    .find(|p| {
                        std::path::Path::new(p)
                            .file_name()
                            .and_then(|f| f.to_str())
                            .is_some_and(|f| f.starts_with("libc.so") || f.starts_with("libc-"))
                    })
                    .map(std::path::PathBuf::from)
            })
            .ok_or_else(|| err("libc not found in /proc/self/maps".into()))?;
        let bias_ns = getppid_over_getpid(500, 7);
        // Kept loaded for the collector's life: the benchmarks' 8 MiB ring,
        // which the calibration never writes, shrinks to one page.
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("BENCH_RING", 4096)
            .load(BENCH_OBJECT)
            .map_err(|e| ProbeError::Load(Box::new(e)))?;
        let p: &mut UProbe = ebpf
            .program_mut("bench_empty_uprobe")
            .ok_or_else(|| err("bench_empty_uprobe missing".into()))?
            .try_into()
            .map_err(|e| err(format!("{e}")))?;
        p.load().map_err(|e| err(format!("{e:#}")))?;
        p.attach(
            UProbeAttachPoint {
                location: UProbeAttachLocation::Symbol("getppid"),
                cookie: None,
            },
            &libc,
            UProbeScope::CallingProcess,
        )
        .map_err(|e| err(e.to_string()))?;
        Ok(Self {
            _ebpf: ebpf,
            bias_ns,
        })
    }

    /// ns per hit: the median over `pairs` of (`calls` probed `getppid`s −
    /// `calls` `getpid`s), each side timed in the thread's own CPU time,
    /// less the two calls' difference without the probe. No attach or
    /// detach: a few ms of CPU at 10 µs traps for 100 × 3.
    pub fn measure(&mut self, calls: u32, pairs: u32) -> Result<f64, ProbeError> {
        Ok((getppid_over_getpid(calls, pairs) - self.bias_ns).max(0.0))
    }
}

/// [`HitCalibrator::measure`] once: `calls` calls per side, 7 pairs.
pub fn measure_uprobe_hit_ns(calls: u32) -> Result<f64, ProbeError> {
    HitCalibrator::new()?.measure(calls, 7)
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
        let r = (|| -> Result<(), String> {
            let prog: &mut TracePoint = ebpf
                .program_mut("bench_ring_producer")
                .ok_or("program bench_ring_producer missing")?
                .try_into()
                .map_err(|e| format!("{e}"))?;
            prog.load().map_err(|e| format!("{e:#}"))?;
            prog.attach("syscalls", "sys_enter_getppid")
                .map_err(|e| format!("{e}"))?;
            Ok(())
        })();
        r.map_err(|reason| ProbeError::Required {
            probe: "bench_ring_producer",
            reason,
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
