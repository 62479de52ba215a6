/*
 * Stand-in for the NVIDIA CUDA driver library (libcuda.so.1) used by
 * faultline's tests and benchmarks. It exports the driver-API symbols that
 * faultline probes, with the real C signatures and CUresult codes, and
 * behaves just enough like the driver for a workload to run: contexts carry a
 * device ordinal, module/library lookups return handles that remember their
 * kernel names, copies really copy, and synchronisation sleeps for
 * FAKE_CUDA_SYNC_US microseconds (default 0).
 *
 * Built plainly (functions start like ordinary compiled code, as in the real
 * driver), with -DNOP5_ENTRY, where every exported symbol starts with a 5-byte
 * nop and jumps to its body (the kernel's optimised-uprobe path), and with
 * -DSTEPPED_ENTRY, where every exported symbol starts `mov %rdi,%rax` (an
 * instruction the kernel single-steps, and a register write no probe may be
 * moved past) and jumps to its body: the costliest entry there is.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

typedef struct CUlaunchAttribute_st { int id; char pad[4]; char value[64]; } CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
    unsigned int gridDimX, gridDimY, gridDimZ;
    unsigned int blockDimX, blockDimY, blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

struct fake_ctx { int device; };
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

static struct fake_ctx primary[64];
static __thread CUcontext current;

static int ndevices(void) {
    const char *s = getenv("FAKE_CUDA_DEVICES");
    int n = s ? atoi(s) : 8;
    return n < 0 ? 0 : (n > 64 ? 64 : n);
}

static void sync_sleep(void) {
    const char *s = getenv("FAKE_CUDA_SYNC_US");
    long us = s ? atol(s) : 0;
    if (us > 0) {
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        while (nanosleep(&ts, &ts) != 0) {}
    }
}

CUresult FN(cuInit)(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
TRAMP(cuInit)

CUresult FN(cuDriverGetVersion)(int *v) { if (!v) return CUDA_ERROR_INVALID_VALUE; *v = 12040; return CUDA_SUCCESS; }
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
    struct fake_ctx *c = malloc(sizeof *c);
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
    CUresult FN(name)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,  \
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

/* Copies of cuLaunchKernel, same entry code, for the uprobe benchmark's
 * interleaved measurement: each tool probes its own copy, and the calls
 * alternate, so the machine's drift falls on all of them alike. */
LAUNCH_LIKE(faultline_bench_copy_empty, 9001)
LAUNCH_LIKE(faultline_bench_copy_peer, 9002)
LAUNCH_LIKE(faultline_bench_copy_none, 9003)

CUresult FN(cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f,
                              void **kernelParams, void **extra) {
    (void)kernelParams; (void)extra;
    if (!config || !f) return CUDA_ERROR_INVALID_VALUE;
    return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
TRAMP(cuLaunchKernelEx)

CUresult FN(cuLaunchCooperativeKernel)(CUfunction f, unsigned int gridDimX,
                                       unsigned int gridDimY, unsigned int gridDimZ,
                                       unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes,
                                       CUstream hStream, void **kernelParams) {
    (void)gridDimX; (void)gridDimY; (void)gridDimZ; (void)blockDimX; (void)blockDimY;
    (void)blockDimZ; (void)sharedMemBytes; (void)hStream; (void)kernelParams;
    if (!f) return CUDA_ERROR_INVALID_VALUE;
    return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
TRAMP(cuLaunchCooperativeKernel)

CUresult FN(cuGraphLaunch)(CUgraphExec hGraphExec, CUstream hStream) {
    (void)hStream;
    return hGraphExec ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
TRAMP(cuGraphLaunch)

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

CUresult FN(cuMemcpyHtoD_v2)(CUdeviceptr dst, const void *src, size_t n) {
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
}
TRAMP(cuMemcpyHtoD_v2)

CUresult FN(cuMemcpyDtoH_v2)(void *dst, CUdeviceptr src, size_t n) {
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}
TRAMP(cuMemcpyDtoH_v2)

CUresult FN(cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
    (void)s;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}
TRAMP(cuMemcpyAsync)

CUresult FN(cuMemcpyHtoDAsync_v2)(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
    (void)s;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
}
TRAMP(cuMemcpyHtoDAsync_v2)

CUresult FN(cuMemcpyDtoHAsync_v2)(void *dst, CUdeviceptr src, size_t n, CUstream s) {
    (void)s;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
}
TRAMP(cuMemcpyDtoHAsync_v2)

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

CUresult FN(cuStreamSynchronize)(CUstream s) { (void)s; sync_sleep(); return CUDA_SUCCESS; }
TRAMP(cuStreamSynchronize)

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
