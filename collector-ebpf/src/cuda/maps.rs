//! The CUDA probes' maps, and the records of calls between their entry
//! and return.
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    Global,
};
use collector_common::cuda::{
    CallKey, CallStats, HandleKey, InCall, KernelName, LaunchKey, LaunchSlot, LaunchStats,
    LAUNCH_SLOTS,
};

/// Per-event stream budget: events per second per CPU; 0 = stream off.
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
pub(super) static CUDA_EVENTS_PER_SEC: Global<u32> = Global::new(0);

/// Per-CPU: the launch path is the hottest, so it updates without atomics;
/// userspace sums the CPUs.
#[map(name = "CUDA_LAUNCH_AGG")]
pub(super) static CUDA_LAUNCH_AGG: PerCpuHashMap<LaunchKey, LaunchStats> =
    PerCpuHashMap::with_max_entries(32768, 0);

/// Direct-mapped launch slots in front of `CUDA_LAUNCH_AGG`, `LAUNCH_SLOTS`
/// per CPU (`collector_common::cuda::LAUNCH_SLOTS`): an array lookup instead
/// of a hash lookup on the hottest path. The collector sizes it to the
/// possible CPUs at load; a CPU beyond its size uses the hash map. Mmapable:
/// the collector reads it, and frees dead processes' slots, in place.
#[map(name = "CUDA_LAUNCH_SLOTS")]
pub(super) static CUDA_LAUNCH_SLOTS: Array<LaunchSlot> =
    Array::with_max_entries(LAUNCH_SLOTS, aya_ebpf::bindings::BPF_F_MMAPABLE);

#[map(name = "CUDA_CALL_AGG")]
pub(super) static CUDA_CALL_AGG: HashMap<CallKey, CallStats> = HashMap::with_max_entries(16384, 0);

#[map(name = "CUDA_CALL_ZERO")]
pub(super) static CUDA_CALL_ZERO: Array<CallStats> = Array::with_max_entries(1, 0);

/// `CUfunction` → kernel name, per process.
#[map(name = "CUDA_FUNC_NAMES")]
pub(super) static CUDA_FUNC_NAMES: LruHashMap<HandleKey, KernelName> =
    LruHashMap::with_max_entries(65536, 0);

/// `CUkernel` → kernel name, per process (library API).
#[map(name = "CUDA_KERNEL_NAMES")]
pub(super) static CUDA_KERNEL_NAMES: LruHashMap<HandleKey, KernelName> =
    LruHashMap::with_max_entries(16384, 0);

/// `CUcontext` → device ordinal, per process.
#[map(name = "CUDA_CTX_DEVICE")]
pub(super) static CUDA_CTX_DEVICE: LruHashMap<HandleKey, i32> =
    LruHashMap::with_max_entries(16384, 0);

/// Thread id → a context it made current before its device was known
/// (cleared when it makes a known one current). The CUDA runtime makes the
/// primary context current before it retains it (it gets the handle from
/// the driver's private interface), so the retain's return gives the device.
#[map(name = "CUDA_THREAD_PENDING_CTX")]
pub(super) static CUDA_THREAD_PENDING_CTX: LruHashMap<u32, u64> =
    LruHashMap::with_max_entries(16384, 0);

/// Thread id → device ordinal of its current context.
#[map(name = "CUDA_THREAD_DEVICE")]
pub(super) static CUDA_THREAD_DEVICE: LruHashMap<u32, i32> = LruHashMap::with_max_entries(65536, 0);

/// Bumped on every write to `CUDA_THREAD_DEVICE`: invalidates every CPU's
/// `CUDA_DEVICE_CACHE`.
#[map(name = "CUDA_THREAD_DEVICE_GEN")]
pub(super) static CUDA_THREAD_DEVICE_GEN: Array<u64> = Array::with_max_entries(1, 0);

/// Per CPU: the device of the last thread that launched here, as
/// `[tid + 1, CUDA_THREAD_DEVICE_GEN when read, device]`. A launching thread
/// mostly stays on its CPU, so the launch path skips the hash lookup.
#[map(name = "CUDA_DEVICE_CACHE")]
pub(super) static CUDA_DEVICE_CACHE: PerCpuArray<[u64; 3]> = PerCpuArray::with_max_entries(1, 0);

/// Calls between entry and return: key `[pid_tgid, slot]`.
#[map(name = "CUDA_IN_CALL")]
pub(super) static CUDA_IN_CALL: HashMap<[u64; 2], InCall> = HashMap::with_max_entries(65536, 0);

/// Scratch for names (too large for the BPF stack).
#[map(name = "CUDA_NAME_SCRATCH")]
pub(super) static CUDA_NAME_SCRATCH: PerCpuArray<KernelName> = PerCpuArray::with_max_entries(1, 0);

/// Rate limiter state per CPU: `[window start ns, events in window]`.
#[map(name = "CUDA_RATE")]
pub(super) static CUDA_RATE: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

/// Bounded-overhead mode's gate, `[open_at, close_at]` in `bpf_ktime_get_ns`
/// time (CLOCK_MONOTONIC): launches count while `open_at ≤ now < close_at`,
/// or always while `close_at == 0` (exact mode; the map starts zeroed). The
/// collector sets each attached phase's window ahead of time, once the links
/// are in place, so the counted time is exactly the window whatever the
/// collector's own scheduling delays (which, on a CPU-saturated host, made a
/// 20 ms phase's accounted length off by milliseconds).
#[map(name = "CUDA_LAUNCH_GATE")]
pub(super) static CUDA_LAUNCH_GATE: Array<[u64; 2]> = Array::with_max_entries(1, 0);

/// Optional per-event stream.
#[map(name = "CUDA_EVENTS")]
pub(super) static CUDA_EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

pub(super) const SLOT_CALL: u64 = 0;
pub(super) const SLOT_NAME: u64 = 1;
pub(super) const SLOT_CTX: u64 = 2;
pub(super) const SLOT_KFUNC: u64 = 3;

/// The entry record of this thread's call in `slot`, removed from the map.
#[inline(always)]
pub(super) fn take_in_call(pid_tgid: u64, slot: u64) -> Option<InCall> {
    let key = [pid_tgid, slot];
    // SAFETY: the value is copied out before the entry is removed.
    let rec = unsafe { CUDA_IN_CALL.get(&key) }.copied()?;
    let _ = CUDA_IN_CALL.remove(&key);
    Some(rec)
}
