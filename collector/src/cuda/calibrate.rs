//! What one uprobe hit costs on this kernel, measured on an entry of the
//! launch probe's own kind.
//!
//! The kind of the probed instruction sets most of the cost (see
//! [`super::entry`]): on the VM measured here an emulated `push` took
//! 0.8 µs a hit and a single-stepped `test` 9.6 µs. Bounded-overhead mode
//! budgets and scales launch counts with this cost, so it must be the cost
//! of the launch probe's kind: calibrated on a single-stepped entry (libc's
//! `getppid`, as it once was) while `cuLaunchKernel` was probed on a push,
//! the launch counts of a CET build came out 5.7× the truth.
//!
//! So the collector carries one tiny function per kind (below, in assembly,
//! so no compiler changes its first instruction), each with the kind's
//! instruction first, and probes its own copy with an empty program for
//! this process only.
use aya::{
    programs::{
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
        UProbe,
    },
    Ebpf, EbpfLoader,
};

use crate::probes::{attach::AttachError, entry::EntryKind, ProbeError};

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .text.faultline_calibration,\"ax\",@progbits",
    ".p2align 4",
    ".globl faultline_cal_push",
    ".hidden faultline_cal_push",
    ".type faultline_cal_push,@function",
    "faultline_cal_push:",
    "push %rbp",
    "pop %rbp",
    "ret",
    ".p2align 4",
    ".globl faultline_cal_nop",
    ".hidden faultline_cal_nop",
    ".type faultline_cal_nop,@function",
    "faultline_cal_nop:",
    "nop",
    "ret",
    ".p2align 4",
    ".globl faultline_cal_long_nop",
    ".hidden faultline_cal_long_nop",
    ".type faultline_cal_long_nop,@function",
    "faultline_cal_long_nop:",
    ".byte 0x0f, 0x1f, 0x40, 0x00",
    "ret",
    ".p2align 4",
    ".globl faultline_cal_nop5",
    ".hidden faultline_cal_nop5",
    ".type faultline_cal_nop5,@function",
    "faultline_cal_nop5:",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "ret",
    ".p2align 4",
    ".globl faultline_cal_branch",
    ".hidden faultline_cal_branch",
    ".type faultline_cal_branch,@function",
    "faultline_cal_branch:",
    ".byte 0xeb, 0x00",
    "ret",
    ".p2align 4",
    ".globl faultline_cal_stepped",
    ".hidden faultline_cal_stepped",
    ".type faultline_cal_stepped,@function",
    "faultline_cal_stepped:",
    "test %rdi, %rdi",
    "ret",
    // Padded to 16 bytes: 8 bytes from any function's start are in the section.
    ".p2align 4",
    ".popsection",
    options(att_syntax)
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn faultline_cal_push();
    fn faultline_cal_nop();
    fn faultline_cal_long_nop();
    fn faultline_cal_nop5();
    fn faultline_cal_branch();
    fn faultline_cal_stepped();
}

/// The calibration function whose first instruction is of `kind`.
#[cfg(target_arch = "x86_64")]
fn function_of(kind: EntryKind) -> unsafe extern "C" fn() {
    match kind {
        EntryKind::Push => faultline_cal_push,
        EntryKind::Nop => faultline_cal_nop,
        EntryKind::LongNop => faultline_cal_long_nop,
        EntryKind::Nop5 => faultline_cal_nop5,
        EntryKind::Branch => faultline_cal_branch,
        EntryKind::Stepped => faultline_cal_stepped,
    }
}

/// The first bytes of the calibration function for `kind` (for tests: the
/// classification of its own code must give `kind` back).
#[cfg(target_arch = "x86_64")]
pub fn code_of(kind: EntryKind) -> [u8; 8] {
    let f = function_of(kind) as usize as *const [u8; 8];
    // SAFETY: every calibration function starts 16-byte aligned, is under
    // 8 bytes long, and the section is padded to 16 bytes after the last.
    unsafe { std::ptr::read_unaligned(f) }
}

/// Where `addr` is in the file mapped there: the file offset, from
/// `/proc/self/maps`.
fn file_offset_of(addr: usize) -> Result<u64, AttachError> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(AttachError::SelfMaps)?;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let parse = |h: &str| usize::from_str_radix(h, 16).ok();
        let (Some(lo), Some(hi), Some(off)) = (parse(lo), parse(hi), parse(off)) else {
            continue;
        };
        if (lo..hi).contains(&addr) {
            return Ok((addr - lo + off) as u64);
        }
    }
    Err(AttachError::NotMapped(addr))
}

/// CPU time of the calling thread, ns: preemption by other threads (a
/// saturated host, the very case bounded mode is for) does not count.
fn thread_cpu_ns() -> f64 {
    crate::probes::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) as f64
}

/// Thread CPU ns per call of `f` over `n` calls.
fn per_call(n: u32, f: unsafe extern "C" fn()) -> f64 {
    let f = std::hint::black_box(f);
    let t0 = thread_cpu_ns();
    for _ in 0..n {
        // SAFETY: the calibration functions take nothing, change nothing
        // the ABI keeps, and return.
        unsafe { f() };
    }
    (thread_cpu_ns() - t0) / f64::from(n.max(1))
}

/// Median over `rounds` of [`per_call`].
fn median_per_call(calls: u32, rounds: u32, f: unsafe extern "C" fn()) -> f64 {
    let mut d: Vec<f64> = (0..rounds.max(1)).map(|_| per_call(calls, f)).collect();
    d.sort_by(f64::total_cmp);
    d[d.len() / 2]
}

/// Measures the CPU cost of one uprobe hit on this kernel on an entry of
/// one [`EntryKind`]: an empty uprobe on the collector's own calibration
/// function of that kind, attached for this process only and kept attached,
/// against the same function's cost before it was probed. It stays loaded
/// so the controller can measure again as the machine's trap cost drifts (a
/// VM's traps moved between 9 and 12 µs within seconds here).
pub struct HitCalibrator {
    _ebpf: Ebpf,
    kind: EntryKind,
    f: unsafe extern "C" fn(),
    /// The function's cost unprobed, ns per call.
    bias_ns: f64,
}

impl HitCalibrator {
    /// A calibrator for probes on entries of `kind`.
    #[cfg(target_arch = "x86_64")]
    pub fn new(kind: EntryKind) -> Result<Self, ProbeError> {
        let bench = crate::probes::bench::bench_object();
        if bench.is_empty() {
            return Err(ProbeError::Stub);
        }
        let err = |reason: AttachError| ProbeError::Required {
            probe: "uprobe calibration",
            reason: Box::new(reason),
        };
        let f = function_of(kind);
        let offset = file_offset_of(f as usize).map_err(err)?;
        let bias_ns = median_per_call(500, 7, f);
        // Kept loaded for the collector's life: the benchmarks' 8 MiB ring,
        // which the calibration never writes, shrinks to one page.
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("BENCH_RING", 4096)
            .load(bench)
            .map_err(|e| ProbeError::Load(Box::new(e)))?;
        let program = "bench_empty_uprobe";
        let p: &mut UProbe = crate::probes::attach::program(&mut ebpf, program).map_err(err)?;
        p.load()
            .map_err(|source| err(AttachError::Verifier { program, source }))?;
        // The running binary by its magic link: right even when the file
        // was replaced on disk since (its maps entry then reads "(deleted)").
        p.attach(
            UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(offset),
                cookie: None,
            },
            "/proc/self/exe",
            UProbeScope::CallingProcess,
        )
        .map_err(|source| {
            err(AttachError::Calibration {
                kind: kind.name(),
                offset,
                source,
            })
        })?;
        Ok(Self {
            _ebpf: ebpf,
            kind,
            f,
            bias_ns,
        })
    }

    /// Only x86-64 has calibration functions.
    #[cfg(not(target_arch = "x86_64"))]
    pub fn new(_kind: EntryKind) -> Result<Self, ProbeError> {
        Err(ProbeError::Required {
            probe: "uprobe calibration",
            reason: Box::new(AttachError::NoCalibration),
        })
    }

    /// The kind of entry this calibrator probes.
    pub fn kind(&self) -> EntryKind {
        self.kind
    }

    /// ns per hit: the median over `rounds` of `calls` calls of the probed
    /// function, each round timed in the thread's own CPU time, less the
    /// function's own cost unprobed. No attach or detach: a few ms of CPU
    /// at 10 µs traps for 100 × 3.
    pub fn measure(&mut self, calls: u32, rounds: u32) -> Result<f64, ProbeError> {
        Ok((median_per_call(calls, rounds, self.f) - self.bias_ns).max(0.0))
    }
}

/// [`HitCalibrator::measure`] once for `kind`: `calls` calls, 7 rounds.
pub fn measure_uprobe_hit_ns(kind: EntryKind, calls: u32) -> Result<f64, ProbeError> {
    HitCalibrator::new(kind)?.measure(calls, 7)
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn each_calibration_entry_is_of_its_kind() {
        for kind in EntryKind::ALL {
            let code = code_of(kind);
            assert_eq!(EntryKind::of(&code), kind, "{code:02x?}");
            assert_eq!(crate::probes::entry::skip(&code), 0, "{code:02x?}");
        }
    }

    #[test]
    fn the_functions_are_found_in_the_mapped_binary() {
        let off = file_offset_of(function_of(EntryKind::Push) as usize).expect("mapped");
        let exe = std::fs::read("/proc/self/exe").expect("read the test binary");
        let at = exe
            .get(off as usize..off as usize + 8)
            .expect("offset inside the file");
        assert_eq!(at, code_of(EntryKind::Push));
    }
}
