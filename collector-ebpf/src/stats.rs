//! Per-CPU self-statistics shared by all probe families (indices in
//! `collector_common::stat`). Userspace sums them and exports them as metrics,
//! so every in-kernel drop is counted.
use aya_ebpf::{macros::map, maps::PerCpuArray};
use collector_common::stat;

#[map(name = "STATS")]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

#[inline(always)]
pub fn bump(index: u32) {
    if let Some(p) = STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
pub fn bump_by(index: u32, n: u64) {
    if let Some(p) = STATS.get_ptr_mut(index) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *p += n };
    }
}
