//! Kernel names: the name a module or library gives a handle, kept per
//! process for the launches that name the handle.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use collector_common::{
    cuda::{HandleKey, InCall, NAME_LEN},
    stat,
};

use super::{
    cookie,
    maps::{
        take_in_call, CUDA_FUNC_NAMES, CUDA_IN_CALL, CUDA_KERNEL_NAMES, CUDA_NAME_SCRATCH,
        SLOT_KFUNC, SLOT_NAME,
    },
};
use crate::stats::bump;

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
