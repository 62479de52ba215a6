//! Types shared by `collector-ebpf` (the probes, `no_std`) and `collector` (userspace).
//!
//! Every type is `#[repr(C)]` with explicit padding and a compile-time size
//! assertion, so both sides agree byte for byte. Kernel integers are never
//! transmuted into enums: they travel as integers and are converted with
//! `TryFrom` on the userspace side, where unknown values are counted.
#![no_std]

pub mod block;
pub mod cuda;
pub mod exec;
pub mod nccl;
pub mod verbs;

#[cfg(test)]
pub(crate) mod test_util {
    /// Distinct values among `slots`, each below `N * 64` (no_std: a bitmap).
    pub fn distinct<const N: usize>(slots: impl Iterator<Item = u32>) -> usize {
        let mut used = [0u64; N];
        let mut n = 0;
        for s in slots {
            assert!((s as usize) < N * 64, "slot {s}");
            let (w, b) = (s as usize / 64, s % 64);
            if used[w] & (1 << b) == 0 {
                used[w] |= 1 << b;
                n += 1;
            }
        }
        n
    }
}

/// Header common to every event written into a ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// `bpf_ktime_get_ns()` at the probe (CLOCK_MONOTONIC, ns).
    pub ts_ns: u64,
    /// cgroup v2 id of the task (`bpf_get_current_cgroup_id()`).
    pub cgroup_id: u64,
    /// Thread group id (the userspace "pid").
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Which [`EventKind`] follows.
    pub kind: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<EventHeader>() == 32);

/// Kind tag carried in [`EventHeader::kind`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Exec = 1,
    BlockRequest = 2,
    Cuda = 3,
}

impl TryFrom<u32> for EventKind {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        match v {
            1 => Ok(Self::Exec),
            2 => Ok(Self::BlockRequest),
            3 => Ok(Self::Cuda),
            other => Err(other),
        }
    }
}

/// Generic envelope: a uniform header followed by the probe-specific payload.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Event<T> {
    pub header: EventHeader,
    pub data: T,
}

/// Indices into the per-CPU `STATS` array that every probe family updates.
/// Userspace sums them across CPUs and exposes them as self-metrics.
pub mod stat {
    /// Events successfully reserved and submitted to a ring.
    pub const EXEC_EVENTS: u32 = 0;
    /// Ring full: the event was dropped in the kernel.
    pub const EXEC_RING_FULL: u32 = 1;
    /// Block requests seen at issue.
    pub const BLOCK_ISSUED: u32 = 2;
    /// Block requests seen at completion with a matching issue record.
    pub const BLOCK_COMPLETED: u32 = 3;
    /// Completions without an issue record (issued before attach, or map full).
    pub const BLOCK_UNMATCHED: u32 = 4;
    /// In-flight map full at issue: that request is not timed.
    pub const BLOCK_START_MAP_FULL: u32 = 5;
    /// Aggregate map full: the request could not be counted.
    pub const BLOCK_AGG_MAP_FULL: u32 = 6;
    /// Sampled per-request events dropped because the ring was full.
    pub const BLOCK_RING_FULL: u32 = 7;
    /// CUDA calls counted (all kinds, launches included).
    pub const CUDA_CALLS: u32 = 8;
    /// CUDA aggregate map full: a call could not be counted.
    pub const CUDA_AGG_MAP_FULL: u32 = 9;
    /// A return probe found no entry record (entry before attach, or map full).
    pub const CUDA_UNMATCHED_RETURN: u32 = 10;
    /// Per-event stream: dropped by the rate limit.
    pub const CUDA_EVENTS_RATE_LIMITED: u32 = 11;
    /// Per-event stream: dropped because the ring was full.
    pub const CUDA_RING_FULL: u32 = 12;
    /// Per-event stream: events written.
    pub const CUDA_EVENTS: u32 = 13;
    /// Kernel names captured.
    pub const CUDA_NAMES: u32 = 14;
    /// Work completions decoded.
    pub const VERBS_WC: u32 = 15;
    /// Completions returned beyond the per-poll decode bound (not decoded).
    pub const VERBS_WC_UNDECODED: u32 = 16;
    /// Verbs aggregate map full.
    pub const VERBS_MAP_FULL: u32 = 17;
    /// Ring-drain benchmark: records written by the synthetic producer.
    pub const BENCH_EVENTS: u32 = 18;
    /// Ring-drain benchmark: records lost to a full ring.
    pub const BENCH_RING_FULL: u32 = 19;
    /// Partial completions of timed block requests (the record followed the
    /// request's advancing sector).
    pub const BLOCK_PARTIAL: u32 = 20;
    /// Block requests counted without a latency: the kernel did not time
    /// them (no `RQF_IO_STAT`: the device's `queue/iostats` is off) and the
    /// probes had not yet switched to their own start clock.
    pub const BLOCK_UNTIMED: u32 = 21;
    /// NCCL calls counted (collectives, point-to-point, groups).
    pub const NCCL_CALLS: u32 = 22;
    /// NCCL aggregate or communicator map full: a call or communicator lost.
    pub const NCCL_MAP_FULL: u32 = 23;
    /// An NCCL init return probe found no entry record.
    pub const NCCL_UNMATCHED_RETURN: u32 = 24;
    /// Number of slots.
    pub const COUNT: u32 = 25;
}
