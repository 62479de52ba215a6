//! CUDA driver-API uprobes on `libcuda.so.1`.
//!
//! Each uprobe is attached with a cookie (`bpf_get_attach_cookie`) naming the
//! call kind (`collector_common::cuda::call`), so one program serves every
//! function of the same shape. Hooked symbols and their C prototypes:
//!
//! - `CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ,
//!   blockDimX, blockDimY, blockDimZ, unsigned sharedMemBytes, CUstream hStream,
//!   void **kernelParams, void **extra)` and `cuLaunchCooperativeKernel` (same
//!   leading arguments, no `extra`) → [`cuda_launch`] and [`cuda_launch_coop`]. On x86-64 the 7th..9th
//!   arguments are on the stack: `[sp+8]` blockDimZ, `[sp+16]` sharedMemBytes,
//!   `[sp+24]` hStream.
//! - `CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
//!   void **kernelParams, void **extra)` → [`cuda_launch_ex`].
//! - `cuGraphLaunch(CUgraphExec, CUstream)`, `cuMemcpyAsync(CUdeviceptr dst,
//!   CUdeviceptr src, size_t ByteCount, CUstream)`, `cuMemcpyHtoDAsync_v2(CUdeviceptr,
//!   const void *, size_t, CUstream)`, `cuMemcpyDtoHAsync_v2(void *, CUdeviceptr,
//!   size_t, CUstream)`, `cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr
//!   srcDevice, size_t ByteCount, CUstream)`, `cuMemcpyPeerAsync(CUdeviceptr dstDevice,
//!   CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
//!   CUstream hStream)`, `cuMemFree_v2(CUdeviceptr)` → [`cuda_enter`], counted at entry.
//! - `cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t)`, `cuMemcpyDtoH_v2(void *,
//!   CUdeviceptr, size_t)`, `cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
//!   size_t ByteCount)`, `cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
//!   CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)`,
//!   `cuStreamSynchronize(CUstream)`, `cuCtxSynchronize(void)`,
//!   `cuEventSynchronize(CUevent)`, `cuMemAlloc_v2(CUdeviceptr *, size_t)` →
//!   [`cuda_enter`] + [`cuda_return`]: duration and `CUresult`.
//! - `cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)` and
//!   `cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)` →
//!   [`cuda_name_enter`] + [`cuda_name_return`]: the name, once per handle.
//! - `cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)` →
//!   [`cuda_kernel_func_enter`] + [`cuda_kernel_func_return`]: a `CUkernel`'s name
//!   becomes its `CUfunction`'s.
//! - `cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)` and
//!   `cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev)` →
//!   [`cuda_ctx_retain_enter`] / [`cuda_ctx_create_enter`] + [`cuda_ctx_return`]:
//!   context → device (and thread → device when the thread had made that
//!   context current before, as the CUDA runtime does with the primary context).
//! - `cuCtxSetCurrent(CUcontext ctx)` → [`cuda_ctx_set_current`]: thread → device.
//! - The `_ptds` / `_ptsz` per-thread-default-stream exports and the generic
//!   `cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t)` (and `cuMemcpy_ptds`)
//!   share their legacy export's programs and kinds (`collector/src/probes/table.rs`).
use aya_ebpf::{
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_get_smp_processor_id,
        bpf_probe_read_user, bpf_probe_read_user_str_bytes,
    },
    macros::{map, uprobe, uretprobe},
    maps::{HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{ProbeContext, RetProbeContext},
    EbpfContext, Global,
};
use collector_common::{
    block::{lat_bucket, LAT_BUCKETS},
    cuda::{
        call, launch_slot, CallKey, CallStats, CudaEventData, HandleKey, InCall, KernelName,
        LaunchKey, LaunchSlot, LaunchStats, LAUNCH_SLOTS, NAME_LEN, STACK_READ_EVERY,
        UNKNOWN_DEVICE,
    },
    stat, Event, EventHeader, EventKind,
};

use crate::{
    helpers::{add, cgroup_id, get_or_insert, now_ns},
    stats::bump,
};

/// Per-event stream budget: events per second per CPU; 0 = stream off.
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static CUDA_EVENTS_PER_SEC: Global<u32> = Global::new(0);

/// Per-CPU: the launch path is the hottest, so it updates without atomics;
/// userspace sums the CPUs.
#[map(name = "CUDA_LAUNCH_AGG")]
static CUDA_LAUNCH_AGG: PerCpuHashMap<LaunchKey, LaunchStats> =
    PerCpuHashMap::with_max_entries(32768, 0);

/// Direct-mapped launch slots in front of `CUDA_LAUNCH_AGG`, `LAUNCH_SLOTS`
/// per CPU (`collector_common::cuda::LAUNCH_SLOTS`): an array lookup instead
/// of a hash lookup on the hottest path. The collector sizes it to the
/// possible CPUs at load; a CPU beyond its size uses the hash map. Mmapable:
/// the collector reads it, and frees dead processes' slots, in place.
#[map(name = "CUDA_LAUNCH_SLOTS")]
static CUDA_LAUNCH_SLOTS: aya_ebpf::maps::Array<LaunchSlot> =
    aya_ebpf::maps::Array::with_max_entries(LAUNCH_SLOTS, aya_ebpf::bindings::BPF_F_MMAPABLE);

#[map(name = "CUDA_CALL_AGG")]
static CUDA_CALL_AGG: HashMap<CallKey, CallStats> = HashMap::with_max_entries(16384, 0);

#[map(name = "CUDA_CALL_ZERO")]
static CUDA_CALL_ZERO: aya_ebpf::maps::Array<CallStats> =
    aya_ebpf::maps::Array::with_max_entries(1, 0);

/// `CUfunction` → kernel name, per process.
#[map(name = "CUDA_FUNC_NAMES")]
static CUDA_FUNC_NAMES: LruHashMap<HandleKey, KernelName> = LruHashMap::with_max_entries(65536, 0);

/// `CUkernel` → kernel name, per process (library API).
#[map(name = "CUDA_KERNEL_NAMES")]
static CUDA_KERNEL_NAMES: LruHashMap<HandleKey, KernelName> =
    LruHashMap::with_max_entries(16384, 0);

/// `CUcontext` → device ordinal, per process.
#[map(name = "CUDA_CTX_DEVICE")]
static CUDA_CTX_DEVICE: LruHashMap<HandleKey, i32> = LruHashMap::with_max_entries(16384, 0);

/// Thread id → a context it made current before its device was known
/// (cleared when it makes a known one current). The CUDA runtime makes the
/// primary context current before it retains it (it gets the handle from
/// the driver's private interface), so the retain's return gives the device.
#[map(name = "CUDA_THREAD_PENDING_CTX")]
static CUDA_THREAD_PENDING_CTX: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);

/// Thread id → device ordinal of its current context.
#[map(name = "CUDA_THREAD_DEVICE")]
static CUDA_THREAD_DEVICE: LruHashMap<u32, i32> = LruHashMap::with_max_entries(65536, 0);

/// Bumped on every write to `CUDA_THREAD_DEVICE`: invalidates every CPU's
/// `CUDA_DEVICE_CACHE`.
#[map(name = "CUDA_THREAD_DEVICE_GEN")]
static CUDA_THREAD_DEVICE_GEN: aya_ebpf::maps::Array<u64> =
    aya_ebpf::maps::Array::with_max_entries(1, 0);

/// Per CPU: the device of the last thread that launched here, as
/// `[tid + 1, CUDA_THREAD_DEVICE_GEN when read, device]`. A launching thread
/// mostly stays on its CPU, so the launch path skips the hash lookup.
#[map(name = "CUDA_DEVICE_CACHE")]
static CUDA_DEVICE_CACHE: PerCpuArray<[u64; 3]> = PerCpuArray::with_max_entries(1, 0);

/// Calls between entry and return: key `[pid_tgid, slot]`.
#[map(name = "CUDA_IN_CALL")]
static CUDA_IN_CALL: HashMap<[u64; 2], InCall> = HashMap::with_max_entries(65536, 0);

/// Scratch for names (too large for the BPF stack).
#[map(name = "CUDA_NAME_SCRATCH")]
static CUDA_NAME_SCRATCH: PerCpuArray<KernelName> = PerCpuArray::with_max_entries(1, 0);

/// Rate limiter state per CPU: `[window start ns, events in window]`.
#[map(name = "CUDA_RATE")]
static CUDA_RATE: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

/// Bounded-overhead mode's gate, `[open_at, close_at]` in `bpf_ktime_get_ns`
/// time (CLOCK_MONOTONIC): launches count while `open_at ≤ now < close_at`,
/// or always while `close_at == 0` (exact mode; the map starts zeroed). The
/// collector sets each attached phase's window ahead of time, once the links
/// are in place, so the counted time is exactly the window whatever the
/// collector's own scheduling delays (which, on a CPU-saturated host, made a
/// 20 ms phase's accounted length off by milliseconds).
#[map(name = "CUDA_LAUNCH_GATE")]
static CUDA_LAUNCH_GATE: aya_ebpf::maps::Array<[u64; 2]> =
    aya_ebpf::maps::Array::with_max_entries(1, 0);

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

/// Optional per-event stream.
#[map(name = "CUDA_EVENTS")]
static CUDA_EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

const SLOT_CALL: u64 = 0;
const SLOT_NAME: u64 = 1;
const SLOT_CTX: u64 = 2;
const SLOT_KFUNC: u64 = 3;

/// The entry record of this thread's call in `slot`, removed from the map.
#[inline(always)]
fn take_in_call(pid_tgid: u64, slot: u64) -> Option<InCall> {
    let key = [pid_tgid, slot];
    // SAFETY: the value is copied out before the entry is removed.
    let rec = unsafe { CUDA_IN_CALL.get(&key) }.copied()?;
    let _ = CUDA_IN_CALL.remove(&key);
    Some(rec)
}

#[inline(always)]
fn cookie(ctx: &impl EbpfContext) -> u64 {
    // SAFETY: valid program context.
    unsafe { bpf_get_attach_cookie(ctx.as_ptr()) }
}

/// The device of thread `tid`'s current context: from this CPU's cache when
/// it holds `tid` and no thread's device changed since it was filled.
#[inline(always)]
pub(crate) fn current_device(tid: u32) -> i32 {
    let gen = CUDA_THREAD_DEVICE_GEN.get(0).copied().unwrap_or(0);
    let cache = CUDA_DEVICE_CACHE.get_ptr_mut(0);
    if let Some(c) = cache {
        // SAFETY: per-CPU slot, no other writer while the program runs here.
        unsafe {
            if (*c)[0] == u64::from(tid) + 1 && (*c)[1] == gen {
                return (*c)[2] as i32;
            }
        }
    }
    // SAFETY: the value is copied out immediately.
    let dev = unsafe { CUDA_THREAD_DEVICE.get(&tid) }
        .copied()
        .unwrap_or(UNKNOWN_DEVICE);
    if let Some(c) = cache {
        // SAFETY: as above.
        unsafe { *c = [u64::from(tid) + 1, gen, dev as u32 as u64] };
    }
    dev
}

/// Records thread `tid`'s device and invalidates the per-CPU caches (the
/// map first: a cache refilled in between reads the new value).
#[inline(always)]
fn set_thread_device(tid: u32, dev: i32) {
    let _ = CUDA_THREAD_DEVICE.insert(&tid, &dev, 0);
    if let Some(g) = CUDA_THREAD_DEVICE_GEN.get_ptr_mut(0) {
        add(g, 1);
    }
}

#[inline(always)]
fn is_blocking(kind: u32) -> bool {
    matches!(
        kind,
        call::MEMCPY_HTOD
            | call::MEMCPY_DTOH
            | call::MEMCPY
            | call::MEMCPY_DTOD
            | call::MEMCPY_PEER
            | call::STREAM_SYNC
            | call::CTX_SYNC
            | call::EVENT_SYNC
            | call::MEM_ALLOC
    )
}

#[inline(always)]
fn call_slot(key: &CallKey) -> Option<*mut CallStats> {
    // The zero value comes from a one-entry array: CallStats is larger than
    // the stack allows.
    let zero = CUDA_CALL_ZERO.get_ptr(0)?;
    // SAFETY: `zero` points into the array's value memory, valid for the run.
    get_or_insert!(CUDA_CALL_AGG, key, unsafe { &*zero })
}

/// Counts one call; `dur`/`result` only for probed returns.
#[inline(always)]
fn count_call(pid: u32, device: i32, kind: u32, bytes: u64, dur: Option<u64>, result: u32) {
    let key = CallKey {
        pid,
        device,
        kind,
        _pad: 0,
    };
    let Some(s) = call_slot(&key) else {
        bump(stat::CUDA_AGG_MAP_FULL);
        return;
    };
    bump(stat::CUDA_CALLS);
    // SAFETY: valid map value pointer for the program's duration.
    unsafe {
        add(&raw mut (*s).calls, 1);
        if bytes > 0 {
            add(&raw mut (*s).bytes, bytes);
        }
        if result != 0 {
            add(&raw mut (*s).errors, 1);
            (*s).last_error = result;
        }
        if let Some(d) = dur {
            add(&raw mut (*s).timed, 1);
            add(&raw mut (*s).dur_sum_ns, d);
            if d > (*s).dur_max_ns {
                (*s).dur_max_ns = d;
            }
            let b = lat_bucket(d);
            if b < LAT_BUCKETS {
                add(&raw mut (*s).hist[b], 1);
            }
        }
    }
}

/// Per-CPU token budget for the optional event stream.
#[inline(always)]
fn stream_allowed(now: u64) -> bool {
    let per_sec = CUDA_EVENTS_PER_SEC.load();
    if per_sec == 0 {
        return false;
    }
    let Some(r) = CUDA_RATE.get_ptr_mut(0) else {
        return false;
    };
    // SAFETY: per-CPU slot.
    unsafe {
        if now.saturating_sub((*r)[0]) >= 1_000_000_000 {
            (*r)[0] = now;
            (*r)[1] = 0;
        }
        if (*r)[1] >= u64::from(per_sec) {
            bump(stat::CUDA_EVENTS_RATE_LIMITED);
            return false;
        }
        (*r)[1] += 1;
    }
    true
}

#[inline(always)]
fn emit(pid_tgid: u64, now: u64, data: &CudaEventData) {
    if !stream_allowed(now) {
        return;
    }
    let Some(mut entry) = CUDA_EVENTS.reserve::<Event<CudaEventData>>(0) else {
        bump(stat::CUDA_RING_FULL);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: exclusively owned reserved slot.
    unsafe {
        (*ev).header = EventHeader {
            ts_ns: now,
            cgroup_id: cgroup_id(),
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            kind: EventKind::Cuda as u32,
            _pad: 0,
        };
        (*ev).data = *data;
    }
    entry.submit(0);
    bump(stat::CUDA_EVENTS);
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

/// The first six integer arguments of the probed call (x86-64: `rdi`,
/// `rsi`, `rdx`, `rcx`, `r8`, `r9`), each read once with a volatile load,
/// whatever the kind. [`cuda_enter`] wants a different argument per kind;
/// loads made only on the kind's branch are merged by the compiler into one
/// load from a computed offset into the context, which the verifier refuses
/// ("dereference of modified ctx ptr"). Six loads at constant offsets cost
/// less than one map lookup.
#[inline(always)]
fn int_args(ctx: &ProbeContext) -> [u64; 6] {
    let r = ctx.regs;
    // SAFETY: `regs` is the probe's pt_regs, valid for the program's run.
    unsafe {
        [
            core::ptr::read_volatile(&raw const (*r).rdi),
            core::ptr::read_volatile(&raw const (*r).rsi),
            core::ptr::read_volatile(&raw const (*r).rdx),
            core::ptr::read_volatile(&raw const (*r).rcx),
            core::ptr::read_volatile(&raw const (*r).r8),
            core::ptr::read_volatile(&raw const (*r).r9),
        ]
    }
}

#[inline(always)]
fn call_bytes(a: &[u64; 6], kind: u32) -> u64 {
    match kind {
        call::MEMCPY_HTOD
        | call::MEMCPY_DTOH
        | call::MEMCPY
        | call::MEMCPY_ASYNC
        | call::MEMCPY_HTOD_ASYNC
        | call::MEMCPY_DTOH_ASYNC
        | call::MEMCPY_DTOD
        | call::MEMCPY_DTOD_ASYNC => a[2],
        // After the two (pointer, context) pairs.
        call::MEMCPY_PEER | call::MEMCPY_PEER_ASYNC => a[4],
        call::MEM_ALLOC => a[1],
        _ => 0,
    }
}

/// uprobe: graph launch, copies, synchronisation, alloc/free (cookie = kind).
#[uprobe]
pub fn cuda_enter(ctx: ProbeContext) -> u32 {
    let kind = cookie(&ctx) as u32;
    let pid_tgid = bpf_get_current_pid_tgid();
    let device = current_device(pid_tgid as u32);
    let a = int_args(&ctx);
    let bytes = call_bytes(&a, kind);
    if is_blocking(kind) {
        let rec = InCall {
            start_ns: now_ns(),
            a0: 0,
            a1: 0,
            bytes,
            kind,
            device,
        };
        if CUDA_IN_CALL
            .insert(&[pid_tgid, SLOT_CALL], &rec, 0)
            .is_err()
        {
            // Cannot time it: count it now without a duration.
            count_call((pid_tgid >> 32) as u32, device, kind, bytes, None, 0);
        }
        return 0;
    }
    count_call((pid_tgid >> 32) as u32, device, kind, bytes, None, 0);
    if CUDA_EVENTS_PER_SEC.load() != 0 {
        let stream: u64 = match kind {
            call::GRAPH_LAUNCH => a[1],
            call::MEMCPY_ASYNC
            | call::MEMCPY_HTOD_ASYNC
            | call::MEMCPY_DTOH_ASYNC
            | call::MEMCPY_DTOD_ASYNC => a[3],
            call::MEMCPY_PEER_ASYNC => a[5],
            _ => 0,
        };
        let now = now_ns();
        emit(
            pid_tgid,
            now,
            &CudaEventData {
                kind,
                device,
                func: 0,
                stream,
                bytes,
                dur_ns: 0,
                grid: [0; 3],
                block: [0; 3],
                shared_mem_bytes: 0,
                result: 0,
            },
        );
    }
    0
}

/// uretprobe: the blocking calls of [`cuda_enter`] (cookie = kind).
#[uretprobe]
pub fn cuda_return(ctx: RetProbeContext) -> u32 {
    let kind = cookie(&ctx) as u32;
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(rec) = take_in_call(pid_tgid, SLOT_CALL) else {
        bump(stat::CUDA_UNMATCHED_RETURN);
        return 0;
    };
    if rec.kind != kind {
        bump(stat::CUDA_UNMATCHED_RETURN);
        return 0;
    }
    let now = now_ns();
    let rc: u64 = ctx.ret();
    let rc = rc as u32;
    let dur = now.saturating_sub(rec.start_ns);
    count_call(
        (pid_tgid >> 32) as u32,
        rec.device,
        kind,
        rec.bytes,
        Some(dur),
        rc,
    );
    if CUDA_EVENTS_PER_SEC.load() != 0 {
        emit(
            pid_tgid,
            now,
            &CudaEventData {
                kind,
                device: rec.device,
                func: 0,
                stream: 0,
                bytes: rec.bytes,
                dur_ns: dur,
                grid: [0; 3],
                block: [0; 3],
                shared_mem_bytes: 0,
                result: rc,
            },
        );
    }
    0
}

/// uprobe: `cuModuleGetFunction` (cookie 0) / `cuLibraryGetKernel` (cookie 1):
/// remember the out-pointer and the name pointer until return.
#[uprobe]
pub fn cuda_name_enter(ctx: ProbeContext) -> u32 {
    let rec = InCall {
        start_ns: 0,
        a0: ctx.arg(0).unwrap_or(0),
        a1: ctx.arg(2).unwrap_or(0),
        bytes: 0,
        kind: cookie(&ctx) as u32,
        device: 0,
    };
    let _ = CUDA_IN_CALL.insert(&[bpf_get_current_pid_tgid(), SLOT_NAME], &rec, 0);
    0
}

/// uretprobe: on success, store name under the handle the call wrote.
#[uretprobe]
pub fn cuda_name_return(ctx: RetProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(rec) = take_in_call(pid_tgid, SLOT_NAME) else {
        return 0;
    };
    let rc: u64 = ctx.ret();
    if rc as u32 != 0 {
        return 0;
    }
    // SAFETY: user pointers read through the checked helpers.
    let Ok(handle) = (unsafe { bpf_probe_read_user(rec.a0 as *const u64) }) else {
        return 0;
    };
    let Some(buf) = CUDA_NAME_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: per-CPU scratch slot.
    let name = unsafe { &mut *buf };
    name.name[0] = 0;
    let dst: &mut [u8; NAME_LEN] = &mut name.name;
    if unsafe { bpf_probe_read_user_str_bytes(rec.a1 as *const u8, dst) }.is_err() {
        return 0;
    }
    let hk = HandleKey {
        pid: (pid_tgid >> 32) as u32,
        _pad: 0,
        handle,
    };
    let map = if rec.kind == 1 {
        &CUDA_KERNEL_NAMES
    } else {
        &CUDA_FUNC_NAMES
    };
    if map.insert(&hk, &*name, 0).is_ok() {
        bump(stat::CUDA_NAMES);
    }
    0
}

/// uprobe: `cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)`.
#[uprobe]
pub fn cuda_kernel_func_enter(ctx: ProbeContext) -> u32 {
    let rec = InCall {
        start_ns: 0,
        a0: ctx.arg(0).unwrap_or(0),
        a1: ctx.arg(1).unwrap_or(0),
        bytes: 0,
        kind: 0,
        device: 0,
    };
    let _ = CUDA_IN_CALL.insert(&[bpf_get_current_pid_tgid(), SLOT_KFUNC], &rec, 0);
    0
}

/// uretprobe: the `CUkernel`'s name becomes the `CUfunction`'s.
#[uretprobe]
pub fn cuda_kernel_func_return(ctx: RetProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(rec) = take_in_call(pid_tgid, SLOT_KFUNC) else {
        return 0;
    };
    let rc: u64 = ctx.ret();
    if rc as u32 != 0 {
        return 0;
    }
    let pid = (pid_tgid >> 32) as u32;
    // SAFETY: a user pointer (the call's `CUfunction *`) read through the checked helper.
    let Ok(func) = (unsafe { bpf_probe_read_user(rec.a0 as *const u64) }) else {
        return 0;
    };
    let kk = HandleKey {
        pid,
        _pad: 0,
        handle: rec.a1,
    };
    let Some(name) = CUDA_KERNEL_NAMES.get_ptr(&kk) else {
        return 0;
    };
    let fk = HandleKey {
        pid,
        _pad: 0,
        handle: func,
    };
    // SAFETY: `name` points into map value memory.
    if CUDA_FUNC_NAMES.insert(&fk, unsafe { &*name }, 0).is_ok() {
        bump(stat::CUDA_NAMES);
    }
    0
}

#[inline(always)]
fn ctx_enter(pctx: u64, dev: u64, kind: u32) -> u32 {
    let rec = InCall {
        start_ns: 0,
        a0: pctx,
        a1: dev,
        bytes: 0,
        kind,
        device: dev as i32,
    };
    let _ = CUDA_IN_CALL.insert(&[bpf_get_current_pid_tgid(), SLOT_CTX], &rec, 0);
    0
}

/// uprobe: `cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)`.
#[uprobe]
pub fn cuda_ctx_retain_enter(ctx: ProbeContext) -> u32 {
    ctx_enter(ctx.arg(0).unwrap_or(0), ctx.arg(1).unwrap_or(0), 0)
}

/// uprobe: `cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev)`; the
/// new context also becomes the thread's current one.
#[uprobe]
pub fn cuda_ctx_create_enter(ctx: ProbeContext) -> u32 {
    ctx_enter(ctx.arg(0).unwrap_or(0), ctx.arg(2).unwrap_or(0), 1)
}

/// uretprobe: both context calls: record context → device.
#[uretprobe]
pub fn cuda_ctx_return(ctx: RetProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(rec) = take_in_call(pid_tgid, SLOT_CTX) else {
        return 0;
    };
    let rc: u64 = ctx.ret();
    if rc as u32 != 0 {
        return 0;
    }
    // SAFETY: a user pointer (the call's `CUcontext *`) read through the checked helper.
    let Ok(cuctx) = (unsafe { bpf_probe_read_user(rec.a0 as *const u64) }) else {
        return 0;
    };
    let hk = HandleKey {
        pid: (pid_tgid >> 32) as u32,
        _pad: 0,
        handle: cuctx,
    };
    let _ = CUDA_CTX_DEVICE.insert(&hk, &rec.device, 0);
    let tid = pid_tgid as u32;
    // SAFETY: copied out immediately.
    let pending = unsafe { CUDA_THREAD_PENDING_CTX.get(&tid) }.copied();
    if rec.kind == 1 || pending == Some(cuctx) {
        // Created (and made current), or retained while already current.
        set_thread_device(tid, rec.device);
        if pending.is_some() {
            let _ = CUDA_THREAD_PENDING_CTX.remove(&tid);
        }
    }
    0
}

/// uprobe: `cuCtxSetCurrent(CUcontext ctx)`.
#[uprobe]
pub fn cuda_ctx_set_current(ctx: ProbeContext) -> u32 {
    let cuctx: u64 = ctx.arg(0).unwrap_or(0);
    let pid_tgid = bpf_get_current_pid_tgid();
    let hk = HandleKey {
        pid: (pid_tgid >> 32) as u32,
        _pad: 0,
        handle: cuctx,
    };
    // SAFETY: copied out immediately.
    let dev = unsafe { CUDA_CTX_DEVICE.get(&hk) }
        .copied()
        .unwrap_or(UNKNOWN_DEVICE);
    let tid = pid_tgid as u32;
    if dev == UNKNOWN_DEVICE && cuctx != 0 {
        let _ = CUDA_THREAD_PENDING_CTX.insert(&tid, &cuctx, 0);
    } else {
        let _ = CUDA_THREAD_PENDING_CTX.remove(&tid);
    }
    set_thread_device(tid, dev);
    0
}
