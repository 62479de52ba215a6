//! Helpers every probe family uses: wall-clock-free time, the current
//! cgroup, lock-free adds into map values, and the get-or-insert-zeroed of
//! an aggregation slot.
use core::intrinsics::{atomic_cxchg, atomic_xadd, AtomicOrdering};

use aya_ebpf::helpers::{bpf_get_current_cgroup_id, bpf_ktime_get_ns};

/// Monotonic nanoseconds (`bpf_ktime_get_ns`).
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: the helper takes no arguments and cannot fail.
    unsafe { bpf_ktime_get_ns() }
}

/// cgroup v2 id of the current task (`bpf_get_current_cgroup_id`).
#[inline(always)]
pub fn cgroup_id() -> u64 {
    // SAFETY: the helper takes no arguments and cannot fail.
    unsafe { bpf_get_current_cgroup_id() }
}

/// Adds `v` to the u64 at `p` atomically (BPF_ATOMIC add: map values are
/// shared between CPUs).
#[inline(always)]
pub fn add(p: *mut u64, v: u64) {
    // SAFETY: callers pass a pointer into a map value (from `get_ptr_mut`),
    // valid and aligned for the program's run.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

/// Sets the u64 at `p` to `new` if it is 0 (BPF_CMPXCHG); returns what it
/// held before (0 = claimed).
#[inline(always)]
pub fn claim(p: *mut u64, new: u64) -> u64 {
    // SAFETY: as for `add`: a pointer into a map value, valid and aligned.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(p, 0, new).0
    }
}

/// The value slot of `$key` in `$map` (a `HashMap` or `PerCpuHashMap`),
/// inserted as `$zero` first when absent; `BPF_NOEXIST` so that a racing
/// insert on another CPU wins and is used. `None` when the map is full.
macro_rules! get_or_insert {
    ($map:expr, $key:expr, $zero:expr) => {{
        match $map.get_ptr_mut($key) {
            Some(p) => Some(p),
            None => {
                let _ = $map.insert($key, $zero, u64::from(aya_ebpf::bindings::BPF_NOEXIST));
                $map.get_ptr_mut($key)
            }
        }
    }};
}
pub(crate) use get_or_insert;
