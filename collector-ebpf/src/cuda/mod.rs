//! CUDA driver-API uprobes on `libcuda.so.1`.
//!
//! Each uprobe is attached with a cookie (`bpf_get_attach_cookie`) naming the
//! call kind (`collector_common::cuda::call`), so one program serves every
//! function of the same shape. Hooked symbols and their C prototypes:
//!
//! - `CUresult cuLaunchKernel(CUfunction f, unsigned gridDimX, gridDimY, gridDimZ,
//!   blockDimX, blockDimY, blockDimZ, unsigned sharedMemBytes, CUstream hStream,
//!   void **kernelParams, void **extra)` and `cuLaunchCooperativeKernel` (same
//!   leading arguments, no `extra`) → [`launch::cuda_launch`] and [`launch::cuda_launch_coop`]. On x86-64 the 7th..9th
//!   arguments are on the stack: `[sp+8]` blockDimZ, `[sp+16]` sharedMemBytes,
//!   `[sp+24]` hStream.
//! - `CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
//!   void **kernelParams, void **extra)` → [`launch::cuda_launch_ex`].
//! - `cuGraphLaunch(CUgraphExec, CUstream)`, `cuMemcpyAsync(CUdeviceptr dst,
//!   CUdeviceptr src, size_t ByteCount, CUstream)`, `cuMemcpyHtoDAsync_v2(CUdeviceptr,
//!   const void *, size_t, CUstream)`, `cuMemcpyDtoHAsync_v2(void *, CUdeviceptr,
//!   size_t, CUstream)`, `cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr
//!   srcDevice, size_t ByteCount, CUstream)`, `cuMemcpyPeerAsync(CUdeviceptr dstDevice,
//!   CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
//!   CUstream hStream)`, `cuMemFree_v2(CUdeviceptr)` → [`calls::cuda_enter`], counted at entry.
//! - `cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t)`, `cuMemcpyDtoH_v2(void *,
//!   CUdeviceptr, size_t)`, `cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
//!   size_t ByteCount)`, `cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext,
//!   CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount)`,
//!   `cuStreamSynchronize(CUstream)`, `cuCtxSynchronize(void)`,
//!   `cuEventSynchronize(CUevent)`, `cuMemAlloc_v2(CUdeviceptr *, size_t)` →
//!   [`calls::cuda_enter`] + [`calls::cuda_return`]: duration and `CUresult`.
//! - `cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)` and
//!   `cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)` →
//!   [`names::cuda_name_enter`] + [`names::cuda_name_return`]: the name, once per handle.
//! - `cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)` →
//!   [`names::cuda_kernel_func_enter`] + [`names::cuda_kernel_func_return`]: a `CUkernel`'s name
//!   becomes its `CUfunction`'s.
//! - `cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)` and
//!   `cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev)` →
//!   [`device::cuda_ctx_retain_enter`] / [`device::cuda_ctx_create_enter`] + [`device::cuda_ctx_return`]:
//!   context → device (and thread → device when the thread had made that
//!   context current before, as the CUDA runtime does with the primary context).
//! - `cuCtxSetCurrent(CUcontext ctx)` → [`device::cuda_ctx_set_current`]: thread → device.
//! - The `_ptds` / `_ptsz` per-thread-default-stream exports and the generic
//!   `cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t)` (and `cuMemcpy_ptds`)
//!   share their legacy export's programs and kinds (`collector/src/probes/table.rs`).
//!
//! Modules: [`maps`] (every map, and the records of calls between entry and
//! return), then the programs: [`launch`], [`calls`], [`names`], [`device`].
use aya_ebpf::{helpers::bpf_get_attach_cookie, EbpfContext};
use collector_common::{cuda::CudaEventData, stat, Event, EventHeader, EventKind};

use crate::{helpers::cgroup_id, stats::bump};
use maps::{CUDA_EVENTS, CUDA_EVENTS_PER_SEC, CUDA_RATE};

mod calls;
mod device;
mod launch;
mod maps;
mod names;

pub(crate) use device::current_device;

#[inline(always)]
fn cookie(ctx: &impl EbpfContext) -> u64 {
    // SAFETY: valid program context.
    unsafe { bpf_get_attach_cookie(ctx.as_ptr()) }
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
