//! CUDA driver-API probe types: in-kernel aggregates per (pid, device,
//! kernel) and per (pid, device, call kind), names per `CUfunction`, and the
//! optional per-event stream.
use crate::block::LAT_BUCKETS;

/// Call kinds (the attach cookie of each uprobe and `CallKey::kind`).
pub mod call {
    pub const LAUNCH_KERNEL: u32 = 0;
    pub const LAUNCH_KERNEL_EX: u32 = 1;
    pub const LAUNCH_COOPERATIVE: u32 = 2;
    pub const GRAPH_LAUNCH: u32 = 3;
    pub const MEMCPY_HTOD: u32 = 4;
    pub const MEMCPY_DTOH: u32 = 5;
    pub const MEMCPY_ASYNC: u32 = 6;
    pub const MEMCPY_HTOD_ASYNC: u32 = 7;
    pub const MEMCPY_DTOH_ASYNC: u32 = 8;
    pub const STREAM_SYNC: u32 = 9;
    pub const CTX_SYNC: u32 = 10;
    pub const EVENT_SYNC: u32 = 11;
    pub const MEM_ALLOC: u32 = 12;
    pub const MEM_FREE: u32 = 13;
    /// `cuMemcpy` / `cuMemcpy_ptds` (unified addressing: any direction, synchronous).
    pub const MEMCPY: u32 = 14;
    /// `cuMemcpyDtoD_v2` / `_ptds`: device to device, synchronous.
    pub const MEMCPY_DTOD: u32 = 15;
    /// `cuMemcpyDtoDAsync_v2` / `_ptsz`.
    pub const MEMCPY_DTOD_ASYNC: u32 = 16;
    /// `cuMemcpyPeer` / `_ptds`: between two contexts' memories (two GPUs),
    /// synchronous; counted on the calling thread's device.
    pub const MEMCPY_PEER: u32 = 17;
    /// `cuMemcpyPeerAsync` / `_ptsz`.
    pub const MEMCPY_PEER_ASYNC: u32 = 18;
    pub const COUNT: u32 = 19;

    /// Label value of a call kind.
    pub fn name(kind: u32) -> &'static str {
        match kind {
            LAUNCH_KERNEL => "cuLaunchKernel",
            LAUNCH_KERNEL_EX => "cuLaunchKernelEx",
            LAUNCH_COOPERATIVE => "cuLaunchCooperativeKernel",
            GRAPH_LAUNCH => "cuGraphLaunch",
            MEMCPY_HTOD => "cuMemcpyHtoD",
            MEMCPY_DTOH => "cuMemcpyDtoH",
            MEMCPY_ASYNC => "cuMemcpyAsync",
            MEMCPY_HTOD_ASYNC => "cuMemcpyHtoDAsync",
            MEMCPY_DTOH_ASYNC => "cuMemcpyDtoHAsync",
            STREAM_SYNC => "cuStreamSynchronize",
            CTX_SYNC => "cuCtxSynchronize",
            EVENT_SYNC => "cuEventSynchronize",
            MEM_ALLOC => "cuMemAlloc",
            MEM_FREE => "cuMemFree",
            MEMCPY => "cuMemcpy",
            MEMCPY_DTOD => "cuMemcpyDtoD",
            MEMCPY_DTOD_ASYNC => "cuMemcpyDtoDAsync",
            MEMCPY_PEER => "cuMemcpyPeer",
            MEMCPY_PEER_ASYNC => "cuMemcpyPeerAsync",
            _ => "unknown",
        }
    }

    /// The copies: their `bytes` are bytes copied (copy bytes in the
    /// window rows, the `faultline_cuda_copy_bytes_total` series and usage).
    pub fn is_copy(kind: u32) -> bool {
        matches!(
            kind,
            MEMCPY_HTOD
                | MEMCPY_DTOH
                | MEMCPY
                | MEMCPY_ASYNC
                | MEMCPY_HTOD_ASYNC
                | MEMCPY_DTOH_ASYNC
                | MEMCPY_DTOD
                | MEMCPY_DTOD_ASYNC
                | MEMCPY_PEER
                | MEMCPY_PEER_ASYNC
        )
    }
}

/// Device index when the thread's current context is unknown.
pub const UNKNOWN_DEVICE: i32 = -1;

/// Bytes of a kernel name kept (NUL-terminated, truncated).
pub const NAME_LEN: usize = 128;

/// Per-process handle key (`CUfunction`, `CUkernel`, `CUcontext` are
/// pointers, meaningful only within one process).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandleKey {
    pub pid: u32,
    pub _pad: u32,
    pub handle: u64,
}
const _: () = assert!(core::mem::size_of::<HandleKey>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelName {
    pub name: [u8; NAME_LEN],
}
const _: () = assert!(core::mem::size_of::<KernelName>() == NAME_LEN);

/// Launch aggregate key: which process launched which kernel on which device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaunchKey {
    pub pid: u32,
    pub device: i32,
    /// `CUfunction` handle.
    pub func: u64,
}
const _: () = assert!(core::mem::size_of::<LaunchKey>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// All launches of this function (any of the three entry points).
    pub launches: u64,
    /// Of which through `cuLaunchKernelEx`.
    pub launches_ex: u64,
    /// Of which through `cuLaunchCooperativeKernel`.
    pub launches_cooperative: u64,
    /// Sum over launches of gridDimX·Y·Z.
    pub blocks: u64,
    /// Sum over launches of grid × blockDimX·Y·Z.
    pub threads: u64,
    /// Sum over launches of sharedMemBytes.
    pub shared_mem_bytes: u64,
    /// Dimensions of the latest launch.
    pub last_grid: [u32; 3],
    pub last_block: [u32; 3],
    /// `cuLaunchKernel` / `cuLaunchCooperativeKernel` pass blockDimZ and
    /// sharedMemBytes on the stack; reading user memory is the launch
    /// program's largest cost, so it is read on a slot's first launch and
    /// then every [`STACK_READ_EVERY`]th (per CPU), and these two hold the
    /// latest read. Caches: not summed across CPUs.
    pub stack_block_z: u32,
    pub stack_shared_mem: u32,
    /// Launches through the stack-argument entry points since the last read.
    pub since_stack_read: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<LaunchStats>() == 48 + 24 + 16);

/// The launch program reads blockDimZ and sharedMemBytes from the stack on
/// one launch in this many per (process, GPU, kernel) and CPU; the launches
/// in between use the latest values read. Sums are exact when a kernel
/// keeps its block depth and dynamic shared memory (the usual case); a
/// change is seen at most this many launches late on each CPU.
pub const STACK_READ_EVERY: u32 = 64;

/// Direct-mapped launch slots per CPU (`CUDA_LAUNCH_SLOTS`, one mmapable
/// array of `possible CPUs × LAUNCH_SLOTS`): on CPU `c` a key lives in slot
/// `c × LAUNCH_SLOTS + launch_slot(key)` when that slot is free or already
/// its own, else in the per-CPU hash map `CUDA_LAUNCH_AGG`. A key's totals
/// are the sum of its slots and hash values over all CPUs. The collector
/// frees the slots of processes that exited (stats zeroed first, then the
/// key), so a slot is free exactly when `key.pid == 0`.
pub const LAUNCH_SLOTS: u32 = 1 << LAUNCH_SLOT_BITS;
pub const LAUNCH_SLOT_BITS: u32 = 8;

/// One launch slot (104 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchSlot {
    pub key: LaunchKey,
    pub stats: LaunchStats,
}
const _: () = assert!(core::mem::size_of::<LaunchSlot>() == 16 + 88);

/// The slot of `k` within a CPU's [`LAUNCH_SLOTS`]: the function handle
/// mixed with the process and device, multiplied, folded and multiplied
/// again. One multiplicative (Fibonacci) step alone maps some handle spacings
/// badly: handles 0x110 apart (the stand-in driver's) used 72 slots for 600
/// kernels, where a random map uses ~230.
#[inline(always)]
pub fn launch_slot(k: &LaunchKey) -> u32 {
    let phi = crate::block::PHI;
    let mut x = k.func ^ (u64::from(k.pid) << 32 | u64::from(k.device as u32)).wrapping_mul(phi);
    x = x.wrapping_mul(phi);
    x ^= x >> 32;
    x = x.wrapping_mul(phi);
    (x >> (64 - LAUNCH_SLOT_BITS)) as u32
}

/// Call aggregate key.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallKey {
    pub pid: u32,
    pub device: i32,
    /// One of [`call`].
    pub kind: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<CallKey>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallStats {
    pub calls: u64,
    /// Calls that returned a non-zero `CUresult` (only for probed returns).
    pub errors: u64,
    /// Bytes copied or allocated.
    pub bytes: u64,
    /// Entry→return time of the blocking calls, ns.
    pub dur_sum_ns: u64,
    pub dur_max_ns: u64,
    /// Calls with a measured duration (the histogram's total).
    pub timed: u64,
    /// Last non-zero `CUresult`.
    pub last_error: u32,
    pub _pad: u32,
    pub hist: [u64; LAT_BUCKETS],
}
const _: () = assert!(core::mem::size_of::<CallStats>() == 8 * (7 + LAT_BUCKETS));

impl CallStats {
    pub const ZERO: Self = Self {
        calls: 0,
        errors: 0,
        bytes: 0,
        dur_sum_ns: 0,
        dur_max_ns: 0,
        timed: 0,
        last_error: 0,
        _pad: 0,
        hist: [0; LAT_BUCKETS],
    };
}

/// Entry state of a call in progress, per thread, until its return probe.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct InCall {
    pub start_ns: u64,
    pub a0: u64,
    pub a1: u64,
    pub bytes: u64,
    pub kind: u32,
    pub device: i32,
}
const _: () = assert!(core::mem::size_of::<InCall>() == 40);

/// Optional per-event stream record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaEventData {
    pub kind: u32,
    pub device: i32,
    /// `CUfunction` for launches, otherwise 0.
    pub func: u64,
    pub stream: u64,
    pub bytes: u64,
    /// Entry→return ns for blocking calls, 0 otherwise.
    pub dur_ns: u64,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    /// `CUresult` for probed returns, 0 otherwise.
    pub result: u32,
}
const _: () = assert!(core::mem::size_of::<CudaEventData>() == 40 + 32);

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): `#[repr(C)]`, no implicit padding (sizes asserted), any bit pattern valid.
    unsafe impl aya::Pod for super::HandleKey {}
    unsafe impl aya::Pod for super::KernelName {}
    unsafe impl aya::Pod for super::LaunchKey {}
    unsafe impl aya::Pod for super::LaunchStats {}
    unsafe impl aya::Pod for super::LaunchSlot {}
    unsafe impl aya::Pod for super::CudaEventData {}
    unsafe impl aya::Pod for super::CallKey {}
    unsafe impl aya::Pod for super::CallStats {}
    unsafe impl aya::Pod for super::InCall {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::distinct;

    #[test]
    fn every_kind_has_its_own_name_and_the_copies_are_the_cu_memcpy_kinds() {
        let names: [&str; call::COUNT as usize] = core::array::from_fn(|k| call::name(k as u32));
        for (i, a) in names.iter().enumerate() {
            assert_ne!(*a, "unknown", "kind {i}");
            assert!(!names[..i].contains(a), "{a} twice");
        }
        assert_eq!(call::name(call::COUNT), "unknown");
        for k in 0..call::COUNT {
            assert_eq!(
                call::is_copy(k),
                call::name(k).starts_with("cuMemcpy"),
                "{}",
                call::name(k)
            );
        }
        // Device to device and peer copies are copies of their own kinds.
        assert_eq!(
            [
                call::MEMCPY_DTOD,
                call::MEMCPY_DTOD_ASYNC,
                call::MEMCPY_PEER,
                call::MEMCPY_PEER_ASYNC
            ]
            .map(call::name),
            [
                "cuMemcpyDtoD",
                "cuMemcpyDtoDAsync",
                "cuMemcpyPeer",
                "cuMemcpyPeerAsync"
            ]
        );
    }

    #[test]
    fn launch_slots_spread_a_process_s_kernels() {
        // 128 `CUfunction` handles of one process, as a driver allocates
        // them (heap objects a fixed size apart, several sizes), on two
        // GPUs: a random map of 128 keys to 256 slots leaves ~101 distinct
        // (at least 89 in 1,000 draws); the rest still count, through the
        // hash map.
        for spacing in [0x40, 0x60, 0x110, 0x118, 0x1000] {
            for device in [0, 1] {
                let keys = (0..128u64).map(|i| LaunchKey {
                    pid: 4242,
                    device,
                    func: 0x5555_5600_1a40 + i * spacing,
                });
                let d = distinct::<{ LAUNCH_SLOTS as usize / 64 }>(keys.map(|k| launch_slot(&k)));
                assert!(
                    d >= 89,
                    "spacing {spacing:#x}, device {device}: {d} distinct slots"
                );
            }
        }
    }
}
