//! Copies, synchronisation, graph launches, allocations and frees: counted
//! at entry, and the blocking ones timed to their return with the result.
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use collector_common::{
    block::{lat_bucket, LAT_BUCKETS},
    cuda::{call, CallKey, CallStats, CudaEventData, InCall},
    stat,
};

use super::{
    cookie, current_device, emit,
    maps::{
        take_in_call, CUDA_CALL_AGG, CUDA_CALL_ZERO, CUDA_EVENTS_PER_SEC, CUDA_IN_CALL, SLOT_CALL,
    },
};
use crate::{
    helpers::{add, get_or_insert, now_ns},
    stats::bump,
};

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
