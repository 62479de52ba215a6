//! Which device a thread's work runs on: context → device from the calls
//! that create or retain a context, thread → device from the calls that
//! make one current.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use collector_common::cuda::{HandleKey, InCall, UNKNOWN_DEVICE};

use super::maps::{
    take_in_call, CUDA_CTX_DEVICE, CUDA_DEVICE_CACHE, CUDA_IN_CALL, CUDA_THREAD_DEVICE,
    CUDA_THREAD_DEVICE_GEN, CUDA_THREAD_PENDING_CTX, SLOT_CTX,
};
use crate::helpers::add;

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
