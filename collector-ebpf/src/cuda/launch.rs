//! Kernel launches (`cuLaunchKernel`, `cuLaunchCooperativeKernel`,
//! `cuLaunchKernelEx`), counted per process, device and function on the
//! hottest path the probes have.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_probe_read_user},
    macros::uprobe,
    programs::ProbeContext,
};
use collector_common::{
    cuda::{
        call, launch_slot, CudaEventData, LaunchKey, LaunchStats, LAUNCH_SLOTS, STACK_READ_EVERY,
    },
    stat,
};

use super::{
    current_device, emit,
    maps::{CUDA_EVENTS_PER_SEC, CUDA_LAUNCH_AGG, CUDA_LAUNCH_GATE, CUDA_LAUNCH_SLOTS},
};
use crate::{
    helpers::{get_or_insert, now_ns},
    stats::bump,
};

/// Whether a launch now counts (see `CUDA_LAUNCH_GATE`); reads the clock only
/// in bounded mode.
#[inline(always)]
fn launch_counts() -> bool {
    let Some(g) = CUDA_LAUNCH_GATE.get(0) else {
        return true;
    };
    if g[1] == 0 {
        return true;
    }
    let now = now_ns();
    g[0] <= now && now < g[1]
}

/// Where a launch's blockDimZ, sharedMemBytes and hStream come from.
#[derive(Clone, Copy)]
enum Rest {
    /// Read already (`cuLaunchKernelEx`'s config struct).
    Known { bz: u32, shmem: u32, stream: u64 },
    /// On the user stack at this `rsp` (`cuLaunchKernel` and
    /// `cuLaunchCooperativeKernel`: 8-byte slots above the return address).
    Stack(u64),
}

/// `(blockDimZ, sharedMemBytes, hStream)` from the stack: one read.
#[inline(always)]
fn read_stack(sp: u64) -> (u32, u32, u64) {
    // SAFETY: user pointer read through the helper, which checks it.
    let st = unsafe { bpf_probe_read_user((sp + 8) as *const [u64; 3]) }.unwrap_or([0; 3]);
    (st[0] as u32, st[1] as u32, st[2])
}

/// This CPU's launch counters for `key`: its slot in `CUDA_LAUNCH_SLOTS`
/// when the slot is its own or free (claimed by writing the key; a free
/// slot's counters are zero), else its `CUDA_LAUNCH_AGG` value, created
/// zeroed.
#[inline(always)]
fn launch_stats(key: &LaunchKey) -> Option<*mut LaunchStats> {
    // SAFETY: no preconditions.
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let i = cpu
        .wrapping_mul(LAUNCH_SLOTS)
        .wrapping_add(launch_slot(key));
    if let Some(slot) = CUDA_LAUNCH_SLOTS.get_ptr_mut(i) {
        // SAFETY: valid array value pointer; only launches on this CPU write
        // this CPU's slots (the collector writes a slot only after its
        // process exited).
        unsafe {
            let k = &raw mut (*slot).key;
            if (*k).pid == key.pid && (*k).device == key.device && (*k).func == key.func {
                return Some(&raw mut (*slot).stats);
            }
            if (*k).pid == 0 {
                // The rest of the key is in place before the pid marks the
                // slot as claimed (the collector may copy the slot meanwhile),
                // as `block::agg_slot` does with its `used` flag.
                (*k).device = key.device;
                (*k).func = key.func;
                core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
                core::ptr::write_volatile(&raw mut (*k).pid, key.pid);
                return Some(&raw mut (*slot).stats);
            }
        }
    }
    get_or_insert!(CUDA_LAUNCH_AGG, key, &LaunchStats::default())
}

#[inline(always)]
fn record_launch(pid_tgid: u64, kind: u32, func: u64, grid: [u32; 3], bxy: [u32; 2], rest: Rest) {
    let pid = (pid_tgid >> 32) as u32;
    let device = current_device(pid_tgid as u32);
    let key = LaunchKey { pid, device, func };
    let Some(s) = launch_stats(&key) else {
        bump(stat::CUDA_AGG_MAP_FULL);
        return;
    };
    // Launches are not added to `stat::CUDA_CALLS`: they have their own
    // counters, and the launch path touches as few cache lines as it can.
    // SAFETY (all `*s`): valid pointer to this CPU's slot or per-CPU map
    // value; uprobes run with migration disabled and a thread cannot re-enter
    // its own uprobe.
    let (bz, shmem) = match rest {
        Rest::Known { bz, shmem, .. } => (bz, shmem),
        Rest::Stack(sp) => unsafe {
            if (*s).since_stack_read == 0 {
                let (bz, shmem, _) = read_stack(sp);
                (*s).stack_block_z = bz;
                (*s).stack_shared_mem = shmem;
            }
            (*s).since_stack_read = ((*s).since_stack_read + 1) % STACK_READ_EVERY;
            ((*s).stack_block_z, (*s).stack_shared_mem)
        },
    };
    let block = [bxy[0], bxy[1], bz];
    let blocks = u64::from(grid[0]) * u64::from(grid[1]) * u64::from(grid[2]);
    let threads = blocks * u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
    unsafe {
        (*s).launches += 1;
        if kind == call::LAUNCH_KERNEL_EX {
            (*s).launches_ex += 1;
        } else if kind == call::LAUNCH_COOPERATIVE {
            (*s).launches_cooperative += 1;
        }
        (*s).blocks += blocks;
        (*s).threads += threads;
        (*s).shared_mem_bytes += u64::from(shmem);
        (*s).last_grid = grid;
        (*s).last_block = block;
    }
    if CUDA_EVENTS_PER_SEC.load() != 0 {
        // The event stream carries each launch's own arguments.
        let (bz, shmem, stream) = match rest {
            Rest::Known { bz, shmem, stream } => (bz, shmem, stream),
            Rest::Stack(sp) => read_stack(sp),
        };
        let now = now_ns();
        emit(
            pid_tgid,
            now,
            &CudaEventData {
                kind,
                device,
                func,
                stream,
                bytes: 0,
                dur_ns: 0,
                grid,
                block: [bxy[0], bxy[1], bz],
                shared_mem_bytes: shmem,
                result: 0,
            },
        );
    }
}

/// uprobe: `cuLaunchKernel`. One program per launch symbol, the kind a
/// constant: no attach-cookie helper call on the hottest path (it was a
/// measurable part of the program's cost).
#[uprobe]
pub fn cuda_launch(ctx: ProbeContext) -> u32 {
    launch(&ctx, call::LAUNCH_KERNEL)
}

/// uprobe: `cuLaunchCooperativeKernel` (the same leading arguments).
#[uprobe]
pub fn cuda_launch_coop(ctx: ProbeContext) -> u32 {
    launch(&ctx, call::LAUNCH_COOPERATIVE)
}

#[inline(always)]
fn launch(ctx: &ProbeContext, kind: u32) -> u32 {
    if !launch_counts() {
        return 0;
    }
    let func: u64 = ctx.arg(0).unwrap_or(0);
    let gx: u64 = ctx.arg(1).unwrap_or(0);
    let gy: u64 = ctx.arg(2).unwrap_or(0);
    let gz: u64 = ctx.arg(3).unwrap_or(0);
    let bx: u64 = ctx.arg(4).unwrap_or(0);
    let by: u64 = ctx.arg(5).unwrap_or(0);
    // SAFETY: regs is the probe's pt_regs.
    let sp = unsafe { (*ctx.regs).rsp };
    record_launch(
        bpf_get_current_pid_tgid(),
        kind,
        func,
        [gx as u32, gy as u32, gz as u32],
        [bx as u32, by as u32],
        Rest::Stack(sp),
    );
    0
}

/// `CUlaunchConfig` prefix (cuda.h): seven `unsigned int`s, then `CUstream hStream`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    _pad: u32,
    stream: u64,
}

/// uprobe: `cuLaunchKernelEx`.
#[uprobe]
pub fn cuda_launch_ex(ctx: ProbeContext) -> u32 {
    if !launch_counts() {
        return 0;
    }
    let cfg_ptr: u64 = ctx.arg(0).unwrap_or(0);
    let func: u64 = ctx.arg(1).unwrap_or(0);
    // SAFETY: user pointer read through the helper, which checks it.
    let cfg = unsafe { bpf_probe_read_user(cfg_ptr as *const LaunchConfig) };
    let Ok(cfg) = cfg else { return 0 };
    record_launch(
        bpf_get_current_pid_tgid(),
        call::LAUNCH_KERNEL_EX,
        func,
        cfg.grid,
        [cfg.block[0], cfg.block[1]],
        Rest::Known {
            bz: cfg.block[2],
            shmem: cfg.shared_mem_bytes,
            stream: cfg.stream,
        },
    );
    0
}
