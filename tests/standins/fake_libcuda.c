/*
 * Stand-in for the NVIDIA CUDA driver library (libcuda.so.1) used by
 * faultline's tests and benchmarks. It exports the driver-API symbols that
 * faultline probes, with the real C signatures and CUresult codes, and
 * behaves just enough like the driver for a workload to run: contexts carry a
 * device ordinal, module/library lookups return handles that remember their
 * kernel names, copies really copy, and synchronisation sleeps for
 * FAKE_CUDA_SYNC_US microseconds (default 0), or never returns while the
 * calling process has FAKE_CUDA_HANG in its environment.
 *
 * Built plainly (functions start like ordinary compiled code, as in the real
 * driver), with -DNOP5_ENTRY, where every exported symbol starts with a 5-byte
 * nop and jumps to its body (the kernel's optimised-uprobe path), and with
 * -DSTEPPED_ENTRY, where every exported symbol starts `mov %rdi,%rax` (an
 * instruction the kernel single-steps, and a register write no probe may be
 * moved past) and jumps to its body: the costliest entry there is.
 *
 * NVIDIA's real CUDA runtime (libcudart.so.12) runs over it too: the
 * driver's entry points are handed out by cuGetProcAddress / _v2 as the real
 * driver hands them out (the requested CUDA version picks the `_v2`
 * export, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the `_ptds` /
 * `_ptsz` one), and cuGetExportTable serves the private tables cudart needs
 * at initialisation (see "The runtime's private tables" below). With
 * FAKE_CUDA_TRACE=FILE every entry point asked for and every one then called
 * through the pointer handed out is appended to FILE (format below).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct fake_ctx *CUcontext;
typedef struct fake_mod *CUmodule;
typedef struct fake_func *CUfunction;
typedef struct fake_kernel *CUkernel;
typedef struct fake_lib *CUlibrary;
typedef struct fake_stream *CUstream;
typedef struct fake_event *CUevent;
typedef struct fake_graph *CUgraphExec;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_SUPPORTED 801
/* The CUDA version this driver reports and implements. */
#define FAKE_DRIVER_VERSION 12090

typedef struct CUlaunchAttribute_st { int id; char pad[4]; char value[64]; } CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

/* Context-local storage the runtime keeps in a context (see the tables below). */
#define CLS_SLOTS 16
struct fake_ctx { int device; struct { void *key, *value; } cls[CLS_SLOTS]; };
struct fake_mod { int unused; };
struct fake_func { char name[256]; };
struct fake_kernel { char name[256]; };
struct fake_lib { int unused; };

#if defined(NOP5_ENTRY) || defined(STEPPED_ENTRY)
#ifdef NOP5_ENTRY
#define ENTRY_BYTES ".byte 0x0f,0x1f,0x44,0x00,0x00\n"
#else
#define ENTRY_BYTES "mov %rdi,%rax\n"
#endif
#define FN(name) __attribute__((visibility("hidden"))) impl_##name
#define TRAMP(name)                                                              \
    __asm__(".globl " #name "\n.type " #name ",@function\n" #name ":\n"          \
            ENTRY_BYTES "jmp impl_" #name "\n"                                   \
            ".size " #name ",.-" #name "\n");
#else
#define FN(name) __attribute__((noinline)) name
#define TRAMP(name)
#endif

/* The entry points that exist twice (a `_ptds`/`_ptsz` per-thread-stream
 * variant beside the legacy one) have the same body here: keep the compiler
 * from folding one into a jump to the other (each must be its own entry,
 * probed on its own). */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_FOLD __attribute__((no_icf))
#else
#define NO_FOLD
#endif

static struct fake_ctx primary[64];
static __thread CUcontext current;

static int ndevices(void) {
    const char *s = getenv("FAKE_CUDA_DEVICES");
    int n = s ? atoi(s) : 8;
    return n < 0 ? 0 : (n > 64 ? 64 : n);
}

static void sync_sleep(void) {
    /* FAKE_CUDA_HANG set (by the workload, at the step it chose): the work
     * never completes, as when a collective's kernel waits for a peer that
     * is gone; the sync does not return. */
    while (getenv("FAKE_CUDA_HANG")) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    const char *s = getenv("FAKE_CUDA_SYNC_US");
    long us = s ? atol(s) : 0;
    if (us > 0) {
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0) {}
    }
}

CUresult FN(cuInit)(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
TRAMP(cuInit)

CUresult FN(cuDriverGetVersion)(int *v) { if (!v) return CUDA_ERROR_INVALID_VALUE; *v = FAKE_DRIVER_VERSION; return CUDA_SUCCESS; }
TRAMP(cuDriverGetVersion)

CUresult FN(cuDeviceGetCount)(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = ndevices();
    return CUDA_SUCCESS;
}
TRAMP(cuDeviceGetCount)

CUresult FN(cuDeviceGet)(CUdevice *dev, int ordinal) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}
TRAMP(cuDeviceGet)

CUresult FN(cuDevicePrimaryCtxRetain)(CUcontext *pctx, CUdevice dev) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    primary[dev].device = dev;
    *pctx = &primary[dev];
    return CUDA_SUCCESS;
}
TRAMP(cuDevicePrimaryCtxRetain)

CUresult FN(cuCtxCreate_v2)(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)flags;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    struct fake_ctx *c = calloc(1, sizeof *c);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    c->device = dev;
    *pctx = c;
    current = c;
    return CUDA_SUCCESS;
}
TRAMP(cuCtxCreate_v2)

CUresult FN(cuCtxSetCurrent)(CUcontext ctx) { current = ctx; return CUDA_SUCCESS; }
TRAMP(cuCtxSetCurrent)

CUresult FN(cuModuleLoadData)(CUmodule *mod, const void *image) {
    (void)image;
    if (!mod) return CUDA_ERROR_INVALID_VALUE;
    *mod = malloc(sizeof(struct fake_mod));
    return *mod ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
TRAMP(cuModuleLoadData)

CUresult FN(cuModuleGetFunction)(CUfunction *hfunc, CUmodule hmod, const char *name) {
    if (!hfunc || !hmod || !name) return CUDA_ERROR_INVALID_VALUE;
    if (strncmp(name, "missing", 7) == 0) return CUDA_ERROR_NOT_FOUND;
    struct fake_func *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    strncpy(f->name, name, sizeof f->name - 1);
    *hfunc = f;
    return CUDA_SUCCESS;
}
TRAMP(cuModuleGetFunction)

CUresult FN(cuLibraryLoadData)(CUlibrary *lib, const void *code, void *jo, void *jov,
                               unsigned int nj, void *lo, void *lov, unsigned int nl) {
    (void)code; (void)jo; (void)jov; (void)nj; (void)lo; (void)lov; (void)nl;
    if (!lib) return CUDA_ERROR_INVALID_VALUE;
    *lib = malloc(sizeof(struct fake_lib));
    return *lib ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
TRAMP(cuLibraryLoadData)

CUresult FN(cuLibraryGetKernel)(CUkernel *pKernel, CUlibrary library, const char *name) {
    if (!pKernel || !library || !name) return CUDA_ERROR_INVALID_VALUE;
    struct fake_kernel *k = calloc(1, sizeof *k);
    if (!k) return CUDA_ERROR_OUT_OF_MEMORY;
    strncpy(k->name, name, sizeof k->name - 1);
    *pKernel = k;
    return CUDA_SUCCESS;
}
TRAMP(cuLibraryGetKernel)

CUresult FN(cuKernelGetFunction)(CUfunction *pFunc, CUkernel kernel) {
    if (!pFunc || !kernel) return CUDA_ERROR_INVALID_VALUE;
    struct fake_func *f = calloc(1, sizeof *f);
    if (!f) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(f->name, kernel->name, sizeof f->name);
    *pFunc = f;
    return CUDA_SUCCESS;
}
TRAMP(cuKernelGetFunction)

/* cuLaunchKernel's body; `invalid` differs between copies so that no
 * compiler merges them (identical-code folding would turn a copy into a
 * jump to another, changing its entry). */
#define LAUNCH_LIKE(name, invalid)                                               \
    CUresult NO_FOLD FN(name)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,  \
                      unsigned int gridDimZ, unsigned int blockDimX,             \
                      unsigned int blockDimY, unsigned int blockDimZ,            \
                      unsigned int sharedMemBytes, CUstream hStream,             \
                      void **kernelParams, void **extra) {                       \
        (void)hStream; (void)kernelParams; (void)extra; (void)sharedMemBytes;    \
        if (!f || !gridDimX || !gridDimY || !gridDimZ || !blockDimX ||           \
            !blockDimY || !blockDimZ)                                            \
            return invalid;                                                      \
        return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;              \
    }                                                                            \
    TRAMP(name)

LAUNCH_LIKE(cuLaunchKernel, CUDA_ERROR_INVALID_VALUE)
/* The per-thread-default-stream variant (what cudart calls for a launch on
 * cudaStreamPerThread or from code built with --default-stream per-thread). */
LAUNCH_LIKE(cuLaunchKernel_ptsz, CUDA_ERROR_INVALID_VALUE)

/* Copies of cuLaunchKernel, same entry code, for the uprobe benchmark's
 * interleaved measurement: each tool probes its own copy, and the calls
 * alternate, so the machine's drift falls on all of them alike. */
LAUNCH_LIKE(faultline_bench_copy_empty, 9001)
LAUNCH_LIKE(faultline_bench_copy_peer, 9002)
LAUNCH_LIKE(faultline_bench_copy_none, 9003)

#define LAUNCH_EX_LIKE(name)                                                     \
    CUresult NO_FOLD FN(name)(const CUlaunchConfig *config, CUfunction f,        \
                              void **kernelParams, void **extra) {               \
        (void)kernelParams; (void)extra;                                         \
        if (!config || !f) return CUDA_ERROR_INVALID_VALUE;                      \
        return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;              \
    }                                                                            \
    TRAMP(name)
LAUNCH_EX_LIKE(cuLaunchKernelEx)
LAUNCH_EX_LIKE(cuLaunchKernelEx_ptsz)

#define COOP_LIKE(name)                                                          \
    CUresult NO_FOLD FN(name)(CUfunction f, unsigned int gridDimX,               \
                              unsigned int gridDimY, unsigned int gridDimZ,      \
                              unsigned int blockDimX, unsigned int blockDimY,    \
                              unsigned int blockDimZ, unsigned int sharedMemBytes, \
                              CUstream hStream, void **kernelParams) {           \
        (void)gridDimX; (void)gridDimY; (void)gridDimZ; (void)blockDimX;         \
        (void)blockDimY; (void)blockDimZ; (void)sharedMemBytes; (void)hStream;   \
        (void)kernelParams;                                                      \
        if (!f) return CUDA_ERROR_INVALID_VALUE;                                 \
        return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;              \
    }                                                                            \
    TRAMP(name)
COOP_LIKE(cuLaunchCooperativeKernel)
COOP_LIKE(cuLaunchCooperativeKernel_ptsz)

#define GRAPH_LAUNCH_LIKE(name)                                                  \
    CUresult NO_FOLD FN(name)(CUgraphExec hGraphExec, CUstream hStream) {        \
        (void)hStream;                                                           \
        return hGraphExec ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;             \
    }                                                                            \
    TRAMP(name)
GRAPH_LAUNCH_LIKE(cuGraphLaunch)
GRAPH_LAUNCH_LIKE(cuGraphLaunch_ptsz)

CUresult FN(cuMemAlloc_v2)(CUdeviceptr *dptr, size_t bytesize) {
    if (!dptr || !bytesize) return CUDA_ERROR_INVALID_VALUE;
    void *p = malloc(bytesize);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
TRAMP(cuMemAlloc_v2)

CUresult FN(cuMemFree_v2)(CUdeviceptr dptr) {
    free((void *)(uintptr_t)dptr);
    return CUDA_SUCCESS;
}
TRAMP(cuMemFree_v2)

/* Copies really copy: a device pointer is a host address here (unified
 * addressing), so the generic cuMemcpy / cuMemcpyAsync need no direction. */
#define COPY_LIKE(name, DstT, SrcT)                                              \
    CUresult NO_FOLD FN(name)(DstT dst, SrcT src, size_t n) {                    \
        if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;                       \
        memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);         \
        return CUDA_SUCCESS;                                                     \
    }                                                                            \
    TRAMP(name)
#define COPY_ASYNC_LIKE(name, DstT, SrcT)                                        \
    CUresult NO_FOLD FN(name)(DstT dst, SrcT src, size_t n, CUstream s) {        \
        (void)s;                                                                 \
        if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;                       \
        memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);         \
        return CUDA_SUCCESS;                                                     \
    }                                                                            \
    TRAMP(name)
COPY_LIKE(cuMemcpyHtoD_v2, CUdeviceptr, const void *)
COPY_LIKE(cuMemcpyHtoD_v2_ptds, CUdeviceptr, const void *)
COPY_LIKE(cuMemcpyDtoH_v2, void *, CUdeviceptr)
COPY_LIKE(cuMemcpyDtoH_v2_ptds, void *, CUdeviceptr)
COPY_LIKE(cuMemcpy, CUdeviceptr, CUdeviceptr)
COPY_LIKE(cuMemcpy_ptds, CUdeviceptr, CUdeviceptr)
COPY_ASYNC_LIKE(cuMemcpyAsync, CUdeviceptr, CUdeviceptr)
COPY_ASYNC_LIKE(cuMemcpyAsync_ptsz, CUdeviceptr, CUdeviceptr)
COPY_ASYNC_LIKE(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *)
COPY_ASYNC_LIKE(cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, const void *)
COPY_ASYNC_LIKE(cuMemcpyDtoHAsync_v2, void *, CUdeviceptr)
COPY_ASYNC_LIKE(cuMemcpyDtoHAsync_v2_ptsz, void *, CUdeviceptr)
/* Device to device (cuda.h: cuMemcpyDtoD_v2(CUdeviceptr dstDevice,
 * CUdeviceptr srcDevice, size_t ByteCount), the async one with a CUstream). */
COPY_LIKE(cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr)
COPY_LIKE(cuMemcpyDtoD_v2_ptds, CUdeviceptr, CUdeviceptr)
COPY_ASYNC_LIKE(cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr)
COPY_ASYNC_LIKE(cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, CUdeviceptr)

/* Between the memories of two contexts (cuda.h: cuMemcpyPeer(CUdeviceptr
 * dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext
 * srcContext, size_t ByteCount), cuMemcpyPeerAsync with a CUstream after). */
#define PEER_LIKE(name)                                                          \
    CUresult NO_FOLD FN(name)(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, \
                              CUcontext srcCtx, size_t n) {                      \
        if (!dstCtx || !srcCtx) return CUDA_ERROR_INVALID_CONTEXT;               \
        if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;                       \
        memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);         \
        return CUDA_SUCCESS;                                                     \
    }                                                                            \
    TRAMP(name)
#define PEER_ASYNC_LIKE(name)                                                    \
    CUresult NO_FOLD FN(name)(CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, \
                              CUcontext srcCtx, size_t n, CUstream s) {          \
        (void)s;                                                                 \
        if (!dstCtx || !srcCtx) return CUDA_ERROR_INVALID_CONTEXT;               \
        if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;                       \
        memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);         \
        return CUDA_SUCCESS;                                                     \
    }                                                                            \
    TRAMP(name)
PEER_LIKE(cuMemcpyPeer)
PEER_LIKE(cuMemcpyPeer_ptds)
PEER_ASYNC_LIKE(cuMemcpyPeerAsync)
PEER_ASYNC_LIKE(cuMemcpyPeerAsync_ptsz)

CUresult FN(cuStreamCreate)(CUstream *s, unsigned int flags) {
    (void)flags;
    if (!s) return CUDA_ERROR_INVALID_VALUE;
    *s = (CUstream)malloc(8);
    return *s ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
TRAMP(cuStreamCreate)

CUresult FN(cuEventCreate)(CUevent *e, unsigned int flags) {
    (void)flags;
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    *e = (CUevent)malloc(8);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
TRAMP(cuEventCreate)

#define STREAM_SYNC_LIKE(name)                                                   \
    CUresult NO_FOLD FN(name)(CUstream s) { (void)s; sync_sleep(); return CUDA_SUCCESS; } \
    TRAMP(name)
STREAM_SYNC_LIKE(cuStreamSynchronize)
STREAM_SYNC_LIKE(cuStreamSynchronize_ptsz)

CUresult FN(cuStreamDestroy_v2)(CUstream s) {
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    free(s);
    return CUDA_SUCCESS;
}
TRAMP(cuStreamDestroy_v2)

CUresult FN(cuCtxSynchronize)(void) {
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    sync_sleep();
    return CUDA_SUCCESS;
}
TRAMP(cuCtxSynchronize)

CUresult FN(cuEventSynchronize)(CUevent e) {
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    sync_sleep();
    return CUDA_SUCCESS;
}
TRAMP(cuEventSynchronize)

/* ---- What the CUDA runtime asks of a driver at initialisation ---- */

static void uuid_of(int dev, unsigned char uuid[16]) {
    static const unsigned char base[16] = {0xfa, 0x17, 0x11, 0x2e, 0x5d, 0x0c, 0x4a, 0x11,
                                           0x9a, 0x3e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    memcpy(uuid, base, 16);
    uuid[15] = (unsigned char)dev;
}

/* CUdevice_attribute values of an A100-like device; 0 for the rest. */
static int attribute_of(int attr, int dev) {
    switch (attr) {
    case 1: return 1024;                   /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: return 1024;           /* MAX_BLOCK_DIM_X, _Y */
    case 4: return 64;                     /* MAX_BLOCK_DIM_Z */
    case 5: return 2147483647;             /* MAX_GRID_DIM_X */
    case 6: case 7: return 65535;          /* MAX_GRID_DIM_Y, _Z */
    case 8: return 49152;                  /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 9: return 65536;                  /* TOTAL_CONSTANT_MEMORY */
    case 10: return 32;                    /* WARP_SIZE */
    case 12: return 65536;                 /* MAX_REGISTERS_PER_BLOCK */
    case 13: return 1410000;               /* CLOCK_RATE, kHz */
    case 16: return 108;                   /* MULTIPROCESSOR_COUNT */
    case 33: return 0x10 + dev;            /* PCI_BUS_ID */
    case 34: return 0;                     /* PCI_DEVICE_ID */
    case 36: return 1215000;               /* MEMORY_CLOCK_RATE, kHz */
    case 37: return 5120;                  /* GLOBAL_MEMORY_BUS_WIDTH */
    case 39: return 2048;                  /* MAX_THREADS_PER_MULTIPROCESSOR */
    case 41: return 1;                     /* UNIFIED_ADDRESSING */
    case 50: return 0;                     /* PCI_DOMAIN_ID */
    case 75: return 8;                     /* COMPUTE_CAPABILITY_MAJOR */
    case 76: return 0;                     /* COMPUTE_CAPABILITY_MINOR */
    default: return 0;
    }
}

CUresult FN(cuDeviceGetAttribute)(int *value, int attr, CUdevice dev) {
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    *value = attribute_of(attr, dev);
    return CUDA_SUCCESS;
}
TRAMP(cuDeviceGetAttribute)

CUresult FN(cuDeviceGetName)(char *name, int len, CUdevice dev) {
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "faultline stand-in GPU %d", dev);
    return CUDA_SUCCESS;
}
TRAMP(cuDeviceGetName)

CUresult FN(cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev) {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    *bytes = (size_t)80 << 30;
    return CUDA_SUCCESS;
}
TRAMP(cuDeviceTotalMem_v2)

#define UUID_LIKE(name)                                                          \
    CUresult NO_FOLD FN(name)(unsigned char *uuid, CUdevice dev) {               \
        if (!uuid) return CUDA_ERROR_INVALID_VALUE;                              \
        if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;      \
        uuid_of(dev, uuid);                                                      \
        return CUDA_SUCCESS;                                                     \
    }                                                                            \
    TRAMP(name)
UUID_LIKE(cuDeviceGetUuid)
UUID_LIKE(cuDeviceGetUuid_v2)

CUresult FN(cuDevicePrimaryCtxRelease_v2)(CUdevice dev) {
    return dev < 0 || dev >= ndevices() ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}
TRAMP(cuDevicePrimaryCtxRelease_v2)

CUresult FN(cuDevicePrimaryCtxGetState)(CUdevice dev, unsigned int *flags, int *active) {
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = primary[dev].device == dev;
    return CUDA_SUCCESS;
}
TRAMP(cuDevicePrimaryCtxGetState)

CUresult FN(cuCtxGetCurrent)(CUcontext *pctx) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = current;
    return CUDA_SUCCESS;
}
TRAMP(cuCtxGetCurrent)

CUresult FN(cuCtxGetDevice)(CUdevice *dev) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *dev = current->device;
    return CUDA_SUCCESS;
}
TRAMP(cuCtxGetDevice)

/* cudaMemcpyPeer / cudaMemcpyPeerAsync ask it of both devices' contexts
 * before the copy (the runtime fails the copy when it is missing; the value
 * itself is not checked). 3020: the context ABI cuda.h documents. */
CUresult FN(cuCtxGetApiVersion)(CUcontext ctx, unsigned int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx && !current) return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
}
TRAMP(cuCtxGetApiVersion)

/* CU_MODULE_EAGER_LOADING */
CUresult FN(cuModuleGetLoadingMode)(int *mode) {
    if (!mode) return CUDA_ERROR_INVALID_VALUE;
    *mode = 1;
    return CUDA_SUCCESS;
}
TRAMP(cuModuleGetLoadingMode)

/* ---- FAKE_CUDA_TRACE ----
 *
 * One line per event, appended with a single write():
 *   resolve NAME CUDAVERSION FLAGS EXPORT STATUS   a cuGetProcAddress(_v2) call:
 *       EXPORT is the symbol handed out ("-" for none), STATUS the
 *       CUdriverProcAddressQueryResult (0 found, 1 no such symbol, 2 the
 *       requested version is older than every export of it)
 *   call EXPORT          a call through a pointer cuGetProcAddress handed out
 *   table UUID found|unknown       a cuGetExportTable request
 *   private TABLE.INDEX  a call into one of those tables
 *
 * Calls are seen through thunks: while tracing, cuGetProcAddress hands out a
 * stub that records the call and jumps to the real entry with every register
 * and the stack as the caller left them, so a probe on the entry sees the
 * caller's arguments and return address. Without FAKE_CUDA_TRACE the real
 * entry is handed out. */

static int trace_fd = -2;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;

static int tracing(void) {
    if (trace_fd == -2) {
        pthread_mutex_lock(&trace_lock);
        if (trace_fd == -2) {
            const char *path = getenv("FAKE_CUDA_TRACE");
            trace_fd = path && *path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
        }
        pthread_mutex_unlock(&trace_lock);
    }
    return trace_fd >= 0;
}

__attribute__((format(printf, 1, 2))) static void trace(const char *fmt, ...) {
    if (!tracing()) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(trace_fd, line, (size_t)n);
    (void)w;
}

#if defined(__x86_64__)
#define THUNKS 256
static const char *thunk_name[THUNKS];
static void *thunk_target[THUNKS];
static int thunks_used;

/* Called by thunk `i` with the caller's registers saved: records the call
 * and returns where to jump. */
__attribute__((visibility("hidden"), used)) void *fake_thunk_enter(unsigned long i) {
    trace("call %s", thunk_name[i]);
    return thunk_target[i];
}

/* THUNKS stubs 16 bytes apart (`push $i; jmp common`), then the common part:
 * save the argument registers (and %rax, %xmm0-7), call fake_thunk_enter(i)
 * on an aligned stack, restore them, drop i and jump to the target. */
__asm__(".pushsection .text\n"
        ".p2align 4\n"
        ".hidden fake_thunks\n"
        "fake_thunks:\n"
        ".set fake_thunk_i, 0\n"
        ".rept 256\n"
        "endbr64\n"
        ".byte 0x68\n.long fake_thunk_i\n"
        "jmp fake_thunk_common\n"
        ".p2align 4\n"
        ".set fake_thunk_i, fake_thunk_i + 1\n"
        ".endr\n"
        "fake_thunk_common:\n"
        "push %rdi\npush %rsi\npush %rdx\npush %rcx\npush %r8\npush %r9\npush %rax\n"
        "sub $136, %rsp\n"
        "movdqu %xmm0, 0(%rsp)\nmovdqu %xmm1, 16(%rsp)\nmovdqu %xmm2, 32(%rsp)\n"
        "movdqu %xmm3, 48(%rsp)\nmovdqu %xmm4, 64(%rsp)\nmovdqu %xmm5, 80(%rsp)\n"
        "movdqu %xmm6, 96(%rsp)\nmovdqu %xmm7, 112(%rsp)\n"
        "mov 192(%rsp), %rdi\n"
        "call fake_thunk_enter\n"
        "mov %rax, %r11\n"
        "movdqu 0(%rsp), %xmm0\nmovdqu 16(%rsp), %xmm1\nmovdqu 32(%rsp), %xmm2\n"
        "movdqu 48(%rsp), %xmm3\nmovdqu 64(%rsp), %xmm4\nmovdqu 80(%rsp), %xmm5\n"
        "movdqu 96(%rsp), %xmm6\nmovdqu 112(%rsp), %xmm7\n"
        "add $136, %rsp\n"
        "pop %rax\npop %r9\npop %r8\npop %rcx\npop %rdx\npop %rsi\npop %rdi\n"
        "add $8, %rsp\n"
        "jmp *%r11\n"
        ".popsection\n");
extern const char fake_thunks[] __attribute__((visibility("hidden")));

/* The pointer to hand out for `export` at `fn`: a thunk while tracing. */
static void *traced(const char *export, void *fn) {
    if (!tracing()) return fn;
    pthread_mutex_lock(&trace_lock);
    int i;
    for (i = 0; i < thunks_used && thunk_target[i] != fn; i++) {}
    if (i == thunks_used && i < THUNKS) {
        thunk_name[i] = export;
        thunk_target[i] = fn;
        thunks_used++;
    }
    pthread_mutex_unlock(&trace_lock);
    if (i == THUNKS) {
        trace("untraced %s", export);
        return fn;
    }
    return (void *)(fake_thunks + 16 * i);
}
#else
static void *traced(const char *export, void *fn) { (void)export; return fn; }
#endif

/* ---- cuGetProcAddress ----
 *
 * The real driver's rule (the PFN_<name>_v<version>[_ptds|_ptsz] typedefs of
 * cudaTypedefs.h): a name has one export per ABI version, and the caller's
 * CUDA version picks the newest one not newer than itself; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the per-thread-stream export
 * (`_ptds` for synchronous calls, `_ptsz` for calls that take a stream)
 * where the name has one. Names not listed here have a single export under
 * their own name. */
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 2
enum { ANY_STREAM, LEGACY_STREAM, PER_THREAD_STREAM };
static const struct {
    const char *name;
    int since;
    int mode;
    const char *export;
} proc_versions[] = {
    {"cuGetProcAddress", 12000, ANY_STREAM, "cuGetProcAddress_v2"},
    {"cuGetProcAddress", 11030, ANY_STREAM, "cuGetProcAddress"},
    {"cuDeviceTotalMem", 3020, ANY_STREAM, "cuDeviceTotalMem_v2"},
    {"cuDeviceTotalMem", 2000, ANY_STREAM, "cuDeviceTotalMem"},
    {"cuDeviceGetUuid", 11040, ANY_STREAM, "cuDeviceGetUuid_v2"},
    {"cuDeviceGetUuid", 9020, ANY_STREAM, "cuDeviceGetUuid"},
    {"cuDevicePrimaryCtxRelease", 11000, ANY_STREAM, "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxRelease", 7000, ANY_STREAM, "cuDevicePrimaryCtxRelease"},
    {"cuCtxCreate", 12050, ANY_STREAM, "cuCtxCreate_v4"},
    {"cuCtxCreate", 11040, ANY_STREAM, "cuCtxCreate_v3"},
    {"cuCtxCreate", 3020, ANY_STREAM, "cuCtxCreate_v2"},
    {"cuCtxCreate", 2000, ANY_STREAM, "cuCtxCreate"},
    {"cuCtxSynchronize", 13000, ANY_STREAM, "cuCtxSynchronize_v2"},
    {"cuCtxSynchronize", 2000, ANY_STREAM, "cuCtxSynchronize"},
    {"cuStreamDestroy", 4000, ANY_STREAM, "cuStreamDestroy_v2"},
    {"cuStreamDestroy", 2000, ANY_STREAM, "cuStreamDestroy"},
    {"cuMemAlloc", 3020, ANY_STREAM, "cuMemAlloc_v2"},
    {"cuMemAlloc", 2000, ANY_STREAM, "cuMemAlloc"},
    {"cuMemFree", 3020, ANY_STREAM, "cuMemFree_v2"},
    {"cuMemFree", 2000, ANY_STREAM, "cuMemFree"},
    {"cuMemcpy", 4000, LEGACY_STREAM, "cuMemcpy"},
    {"cuMemcpy", 7000, PER_THREAD_STREAM, "cuMemcpy_ptds"},
    {"cuMemcpyAsync", 4000, LEGACY_STREAM, "cuMemcpyAsync"},
    {"cuMemcpyAsync", 7000, PER_THREAD_STREAM, "cuMemcpyAsync_ptsz"},
    {"cuMemcpyHtoD", 3020, LEGACY_STREAM, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 2000, LEGACY_STREAM, "cuMemcpyHtoD"},
    {"cuMemcpyHtoD", 7000, PER_THREAD_STREAM, "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyDtoH", 3020, LEGACY_STREAM, "cuMemcpyDtoH_v2"},
    {"cuMemcpyDtoH", 2000, LEGACY_STREAM, "cuMemcpyDtoH"},
    {"cuMemcpyDtoH", 7000, PER_THREAD_STREAM, "cuMemcpyDtoH_v2_ptds"},
    {"cuMemcpyHtoDAsync", 3020, LEGACY_STREAM, "cuMemcpyHtoDAsync_v2"},
    {"cuMemcpyHtoDAsync", 2000, LEGACY_STREAM, "cuMemcpyHtoDAsync"},
    {"cuMemcpyHtoDAsync", 7000, PER_THREAD_STREAM, "cuMemcpyHtoDAsync_v2_ptsz"},
    {"cuMemcpyDtoHAsync", 3020, LEGACY_STREAM, "cuMemcpyDtoHAsync_v2"},
    {"cuMemcpyDtoHAsync", 2000, LEGACY_STREAM, "cuMemcpyDtoHAsync"},
    {"cuMemcpyDtoHAsync", 7000, PER_THREAD_STREAM, "cuMemcpyDtoHAsync_v2_ptsz"},
    {"cuMemcpyDtoD", 3020, LEGACY_STREAM, "cuMemcpyDtoD_v2"},
    {"cuMemcpyDtoD", 2000, LEGACY_STREAM, "cuMemcpyDtoD"},
    {"cuMemcpyDtoD", 7000, PER_THREAD_STREAM, "cuMemcpyDtoD_v2_ptds"},
    {"cuMemcpyDtoDAsync", 3020, LEGACY_STREAM, "cuMemcpyDtoDAsync_v2"},
    {"cuMemcpyDtoDAsync", 2000, LEGACY_STREAM, "cuMemcpyDtoDAsync"},
    {"cuMemcpyDtoDAsync", 7000, PER_THREAD_STREAM, "cuMemcpyDtoDAsync_v2_ptsz"},
    {"cuMemcpyPeer", 4000, LEGACY_STREAM, "cuMemcpyPeer"},
    {"cuMemcpyPeer", 7000, PER_THREAD_STREAM, "cuMemcpyPeer_ptds"},
    {"cuMemcpyPeerAsync", 4000, LEGACY_STREAM, "cuMemcpyPeerAsync"},
    {"cuMemcpyPeerAsync", 7000, PER_THREAD_STREAM, "cuMemcpyPeerAsync_ptsz"},
    {"cuStreamSynchronize", 2000, LEGACY_STREAM, "cuStreamSynchronize"},
    {"cuStreamSynchronize", 7000, PER_THREAD_STREAM, "cuStreamSynchronize_ptsz"},
    {"cuLaunchKernel", 4000, LEGACY_STREAM, "cuLaunchKernel"},
    {"cuLaunchKernel", 7000, PER_THREAD_STREAM, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 11060, LEGACY_STREAM, "cuLaunchKernelEx"},
    {"cuLaunchKernelEx", 11060, PER_THREAD_STREAM, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 9000, LEGACY_STREAM, "cuLaunchCooperativeKernel"},
    {"cuLaunchCooperativeKernel", 9000, PER_THREAD_STREAM, "cuLaunchCooperativeKernel_ptsz"},
    {"cuGraphLaunch", 10000, LEGACY_STREAM, "cuGraphLaunch"},
    {"cuGraphLaunch", 10000, PER_THREAD_STREAM, "cuGraphLaunch_ptsz"},
};

static void *self_handle(void) {
    static void *h;
    if (!h) {
        Dl_info info;
        if (dladdr((void *)&ndevices, &info) && info.dli_fname)
            h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    }
    return h;
}

/* CUdriverProcAddressQueryResult */
enum { PROC_SUCCESS = 0, PROC_SYMBOL_NOT_FOUND = 1, PROC_VERSION_NOT_SUFFICIENT = 2 };

static CUresult get_proc_address(const char *symbol, void **pfn, int version,
                                 unsigned long long flags, int *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    int mode = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM ? PER_THREAD_STREAM
                                                                      : LEGACY_STREAM;
    const char *export = NULL;
    int listed = 0, best = -1;
    for (size_t i = 0; i < sizeof proc_versions / sizeof proc_versions[0]; i++) {
        if (strcmp(proc_versions[i].name, symbol) != 0) continue;
        if (proc_versions[i].mode != ANY_STREAM && proc_versions[i].mode != mode) continue;
        listed = 1;
        if (proc_versions[i].since <= version && proc_versions[i].since > best) {
            best = proc_versions[i].since;
            export = proc_versions[i].export;
        }
    }
    int st = PROC_SUCCESS;
    void *fn = NULL;
    if (!listed) export = symbol;
    if (!export) {
        st = PROC_VERSION_NOT_SUFFICIENT;
    } else if (!*symbol || !(fn = dlsym(self_handle(), export))) {
        st = PROC_SYMBOL_NOT_FOUND;
    }
    trace("resolve %s %d %llu %s %d", *symbol ? symbol : "\"\"", version, flags,
          fn ? export : "-", st);
    *pfn = fn ? traced(export, fn) : NULL;
    if (status) *status = st;
    return fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult FN(cuGetProcAddress)(const char *symbol, void **pfn, int cudaVersion,
                              unsigned long long flags) {
    return get_proc_address(symbol, pfn, cudaVersion, flags, NULL);
}
TRAMP(cuGetProcAddress)

CUresult FN(cuGetProcAddress_v2)(const char *symbol, void **pfn, int cudaVersion,
                                 unsigned long long flags, int *symbolStatus) {
    return get_proc_address(symbol, pfn, cudaVersion, flags, symbolStatus);
}
TRAMP(cuGetProcAddress_v2)

/* ---- The runtime's private tables ----
 *
 * cudart asks cuGetExportTable for tables of functions the driver does not
 * export by name, identified by UUID. Their layouts are known from public
 * reverse engineering (the ZLUDA project names them); a table starts with
 * its size in bytes unless noted. Only what cudart 12.9 uses for
 * initialisation, context management and copies is implemented; the other
 * slots return CUDA_ERROR_NOT_SUPPORTED (and are traced). */

static CUresult private_unknown(void) {
    trace("private unknown");
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* CUDART_INTERFACE [2]: the device's primary context, without retaining it. */
static CUresult rt_primary_context(CUcontext *pctx, CUdevice dev) {
    trace("private CUDART_INTERFACE.2");
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= ndevices()) return CUDA_ERROR_INVALID_DEVICE;
    primary[dev].device = dev;
    *pctx = &primary[dev];
    return CUDA_SUCCESS;
}

/* CUDART_INTERFACE [7]: takes one word, returns nothing. */
static void rt_interface_7(uintptr_t arg) {
    (void)arg;
    trace("private CUDART_INTERFACE.7");
}

/* CUDART_INTERFACE [12]: loads the JIT compilers; none here. */
static CUresult rt_load_compilers(void) {
    trace("private CUDART_INTERFACE.12");
    return CUDA_SUCCESS;
}

/* TOOLS_RUNTIME_CALLBACK_HOOKS [2] and [6]: buffers the runtime writes into. */
static uint32_t hooks_buffer_2[1024], hooks_buffer_6[14];
static void hooks_buffer(int which, void **ptr, size_t *len) {
    trace("private TOOLS_RUNTIME_CALLBACK_HOOKS.%d", which);
    if (ptr) *ptr = which == 2 ? (void *)hooks_buffer_2 : (void *)hooks_buffer_6;
    if (len) *len = which == 2 ? 1024 : 14;
}
static void hooks_2(void **ptr, size_t *len) { hooks_buffer(2, ptr, len); }
static void hooks_6(void **ptr, size_t *len) { hooks_buffer(6, ptr, len); }

/* CONTEXT_LOCAL_STORAGE_INTERFACE_V0301 (no size word): put, delete, get a
 * value by key in a context (the current one for NULL). */
static struct fake_ctx *ctx_or_current(CUcontext c) { return c ? c : current; }

static CUresult cls_put(CUcontext c, void *key, void *value, void *dtor) {
    (void)dtor;
    trace("private CONTEXT_LOCAL_STORAGE.0");
    struct fake_ctx *x = ctx_or_current(c);
    if (!x) return CUDA_ERROR_INVALID_CONTEXT;
    int free_slot = -1;
    for (int i = 0; i < CLS_SLOTS; i++) {
        if (x->cls[i].key == key) { x->cls[i].value = value; return CUDA_SUCCESS; }
        if (!x->cls[i].key && free_slot < 0) free_slot = i;
    }
    if (free_slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    x->cls[free_slot].key = key;
    x->cls[free_slot].value = value;
    return CUDA_SUCCESS;
}

static CUresult cls_delete(CUcontext c, void *key) {
    trace("private CONTEXT_LOCAL_STORAGE.1");
    struct fake_ctx *x = ctx_or_current(c);
    if (!x) return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < CLS_SLOTS; i++)
        if (x->cls[i].key == key) x->cls[i].key = x->cls[i].value = NULL;
    return CUDA_SUCCESS;
}

static CUresult cls_get(void **value, CUcontext c, void *key) {
    trace("private CONTEXT_LOCAL_STORAGE.2");
    struct fake_ctx *x = ctx_or_current(c);
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (!x) return CUDA_ERROR_INVALID_CONTEXT;
    for (int i = 0; i < CLS_SLOTS; i++)
        if (x->cls[i].key == key) { *value = x->cls[i].value; return CUDA_SUCCESS; }
    return CUDA_ERROR_INVALID_HANDLE;
}

/* CONTEXT_CHECKS [2] and [3]: flags of a context no stand-in context has. */
static CUresult ctx_check(CUcontext c, uint32_t *flag, void **other) {
    (void)c; (void)other;
    trace("private CONTEXT_CHECKS.2");
    if (flag) *flag = 0;
    return CUDA_SUCCESS;
}
static uint32_t ctx_check_3(void) {
    trace("private CONTEXT_CHECKS.3");
    return 0;
}

/* MD2 (RFC 1319), for the integrity answer below. */
static const uint8_t md2_pi[256] = {
    41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19,
    98, 167, 5, 243, 192, 199, 115, 140, 152, 147, 43, 217, 188, 76, 130, 202,
    30, 155, 87, 60, 253, 212, 224, 22, 103, 66, 111, 24, 138, 23, 229, 18,
    190, 78, 196, 214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47, 238, 122,
    169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16, 137, 11, 34, 95, 33,
    128, 127, 93, 154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3,
    255, 25, 48, 179, 72, 165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198,
    79, 184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4, 241,
    69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2,
    27, 96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15,
    85, 71, 163, 35, 221, 81, 175, 58, 195, 92, 249, 206, 186, 197, 234, 38,
    44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65, 129, 77, 82,
    106, 220, 55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74,
    120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57,
    242, 239, 183, 14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10,
    49, 68, 80, 180, 143, 237, 31, 26, 219, 153, 141, 51, 159, 17, 131, 20,
};

struct md2 { uint8_t state[48], sum[16], block[16]; unsigned len; };

static void md2_compress(struct md2 *m) {
    uint8_t l = m->sum[15];
    for (int i = 0; i < 16; i++) {
        m->state[16 + i] = m->block[i];
        m->state[32 + i] = m->block[i] ^ m->state[i];
        l = m->sum[i] ^= md2_pi[m->block[i] ^ l];
    }
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++) t = m->state[k] ^= md2_pi[t];
        t = (uint8_t)(t + round);
    }
}

static void md2_add(struct md2 *m, const void *data, size_t n) {
    for (const uint8_t *p = data; n--; p++) {
        m->block[m->len++] = *p;
        if (m->len == 16) { md2_compress(m); m->len = 0; }
    }
}

static void md2_digest(struct md2 *m, uint8_t out[16]) {
    uint8_t pad = (uint8_t)(16 - m->len), sum[16];
    for (int i = 0; i < pad; i++) md2_add(m, &pad, 1);
    memcpy(sum, m->sum, 16);
    md2_add(m, sum, 16);
    memcpy(out, m->state, 16);
}

/* An HMAC over MD2 (16-byte blocks) with the runtime's fixed key. */
static void hmac_md2(const uint8_t key[16], const void *msg, size_t n, const void *msg2,
                     size_t n2, uint8_t out[16]) {
    uint8_t pad[16], inner[16];
    struct md2 m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < 16; i++) pad[i] = key[i] ^ 0x36;
    md2_add(&m, pad, 16);
    md2_add(&m, msg, n);
    md2_add(&m, msg2, n2);
    md2_digest(&m, inner);
    memset(&m, 0, sizeof m);
    for (int i = 0; i < 16; i++) pad[i] = key[i] ^ 0x5c;
    md2_add(&m, pad, 16);
    md2_add(&m, inner, 16);
    md2_digest(&m, out);
}

static void *integrity_table[3];
static void *rt_interface_table[13];

/* INTEGRITY_CHECK [1]: the runtime checks that it talks to a driver by the
 * answer to a challenge (its version and the time): an HMAC-MD2 over the
 * driver version, the challenge, the process and thread, the addresses of
 * this table, of the CUDART_INTERFACE table and of this function, and each
 * device's UUID and PCI location. The runtime computes the same from what
 * the driver told it and compares. */
static CUresult integrity_answer(uint32_t version, uint64_t unix_seconds, uint64_t out[2]) {
    static const uint8_t key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                    0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
    trace("private INTEGRITY_CHECK.1");
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    struct {
        uint32_t driver_version, version, pid, tid;
        const void *rt_table, *integrity_table, *fn;
        uint64_t unix_seconds;
    } msg = {FAKE_DRIVER_VERSION, version, (uint32_t)getpid(), (uint32_t)pthread_self(),
             rt_interface_table, integrity_table, integrity_table[1], unix_seconds};
    struct { unsigned char uuid[16]; int32_t pci_domain, pci_bus, pci_device; } devs[64];
    int n = ndevices();
    for (int d = 0; d < n; d++) {
        uuid_of(d, devs[d].uuid);
        devs[d].pci_domain = attribute_of(50, d);
        devs[d].pci_bus = attribute_of(33, d);
        devs[d].pci_device = attribute_of(34, d);
    }
    uint8_t digest[16];
    hmac_md2(key, &msg, sizeof msg, devs, (size_t)n * sizeof devs[0], digest);
    memcpy(out, digest, 16);
    return CUDA_SUCCESS;
}

static void *tools_tls_table[4];
static void *hooks_table[7];
static void *cls_table[4];
static void *ctx_checks_table[4];

static const struct {
    const char *name;
    unsigned char uuid[16];
    void **table;
    int slots;
    int sized;
} private_tables[] = {
    {"CUDART_INTERFACE", {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     rt_interface_table, 13, 1},
    {"TOOLS_TLS", {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     tools_tls_table, 4, 1},
    {"TOOLS_RUNTIME_CALLBACK_HOOKS", {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     hooks_table, 7, 1},
    {"CONTEXT_LOCAL_STORAGE", {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     cls_table, 4, 0},
    {"INTEGRITY_CHECK", {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     integrity_table, 3, 1},
    {"CONTEXT_CHECKS", {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     ctx_checks_table, 4, 1},
};

static pthread_once_t private_once = PTHREAD_ONCE_INIT;

static void private_init(void) {
    for (size_t t = 0; t < sizeof private_tables / sizeof private_tables[0]; t++) {
        void **table = private_tables[t].table;
        int slots = private_tables[t].slots;
        for (int i = 0; i < slots; i++) table[i] = (void *)private_unknown;
        if (private_tables[t].sized) table[0] = (void *)(uintptr_t)(slots * sizeof(void *));
    }
    rt_interface_table[2] = (void *)rt_primary_context;
    rt_interface_table[7] = (void *)rt_interface_7;
    rt_interface_table[12] = (void *)rt_load_compilers;
    tools_tls_table[1] = tools_tls_table[2] = tools_tls_table[3] = NULL;
    hooks_table[2] = (void *)hooks_2;
    hooks_table[6] = (void *)hooks_6;
    cls_table[0] = (void *)cls_put;
    cls_table[1] = (void *)cls_delete;
    cls_table[2] = (void *)cls_get;
    cls_table[3] = NULL;
    integrity_table[1] = (void *)integrity_answer;
    ctx_checks_table[2] = (void *)ctx_check;
    ctx_checks_table[3] = (void *)ctx_check_3;
}

CUresult FN(cuGetExportTable)(const void **table, const unsigned char *uuid) {
    if (!table || !uuid) return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&private_once, private_init);
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", uuid[i]);
    for (size_t t = 0; t < sizeof private_tables / sizeof private_tables[0]; t++) {
        if (memcmp(private_tables[t].uuid, uuid, 16) == 0) {
            trace("table %s found %s", hex, private_tables[t].name);
            *table = private_tables[t].table;
            return CUDA_SUCCESS;
        }
    }
    trace("table %s unknown", hex);
    *table = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
TRAMP(cuGetExportTable)
