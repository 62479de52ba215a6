/*
 * A CUDA driver-API workload for faultline's tests: loads the driver with
 * dlopen() as real CUDA programs do, resolves every entry point with dlsym()
 * and performs exactly the calls its arguments describe, in order:
 *
 *   cuda_workload LIB TOKEN...
 *     device:N                        primary context of device N, made current
 *     create:N                        cuCtxCreate_v2 on device N (current)
 *     func:NAME                       cuModuleGetFunction -> current function
 *     libkernel:NAME                  cuLibraryGetKernel + cuKernelGetFunction
 *     launch:COUNT:GX,GY,GZ:BX,BY,BZ:SHMEM      cuLaunchKernel
 *     launchex:COUNT:GX,GY,GZ:BX,BY,BZ:SHMEM    cuLaunchKernelEx
 *     coop:COUNT:GX,GY,GZ:BX,BY,BZ:SHMEM        cuLaunchCooperativeKernel
 *     graph:COUNT                     cuGraphLaunch
 *     htod:BYTES:COUNT  dtoh:BYTES:COUNT  memcpyasync:BYTES:COUNT
 *     htodasync:BYTES:COUNT  dtohasync:BYTES:COUNT
 *     dtod:BYTES:COUNT  dtodptds:BYTES:COUNT     cuMemcpyDtoD_v2 / _v2_ptds
 *     dtodasync:BYTES:COUNT  dtodasyncptsz:BYTES:COUNT
 *                                     cuMemcpyDtoDAsync_v2 / _v2_ptsz
 *     peer:BYTES:COUNT  peerptds:BYTES:COUNT     cuMemcpyPeer / _ptds
 *     peerasync:BYTES:COUNT  peerasyncptsz:BYTES:COUNT
 *                                     cuMemcpyPeerAsync / _ptsz
 *   (each copy token allocates two buffers of BYTES and frees them after)
 *     peerdev:N                       the peer copies' other context: the
 *                                     primary context of device N (retained;
 *                                     the current context until given)
 *     streamsync:COUNT  ctxsync:COUNT  eventsync:COUNT
 *     alloc:BYTES:COUNT               cuMemAlloc_v2 + cuMemFree_v2
 *     badlaunch:COUNT                 cuLaunchKernel with a NULL function (error)
 *     wait                            read one line from stdin before going on
 *
 * Prints "ready <pid>" once the library is loaded and "done" at the end.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *H;
typedef struct { unsigned gx, gy, gz, bx, by, bz, shmem; H stream; void *attrs; unsigned nattrs; } LaunchConfig;

static void *lib;
static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) { fprintf(stderr, "missing symbol %s\n", name); exit(3); }
    return p;
}
#define CALL(rt, name, args, ...) ((rt(*) args)sym(#name))(__VA_ARGS__)

static void check(CUresult r, const char *what) {
    if (r != 0) { fprintf(stderr, "%s failed: %d\n", what, r); exit(4); }
}

static int parse_dims(const char *s, unsigned d[3]) {
    return sscanf(s, "%u,%u,%u", &d[0], &d[1], &d[2]) == 3;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: cuda_workload LIB TOKEN...\n"); return 2; }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    check(CALL(CUresult, cuInit, (unsigned), 0), "cuInit");
    H mod = 0, library = 0, func = 0, stream = 0, event = 0, ctx = 0, peerctx = 0;
    check(CALL(CUresult, cuModuleLoadData, (H *, const void *), &mod, "image"), "cuModuleLoadData");
    check(CALL(CUresult, cuLibraryLoadData, (H *, const void *, void *, void *, unsigned, void *, void *, unsigned),
               &library, "image", 0, 0, 0, 0, 0, 0), "cuLibraryLoadData");
    check(CALL(CUresult, cuStreamCreate, (H *, unsigned), &stream, 0), "cuStreamCreate");
    check(CALL(CUresult, cuEventCreate, (H *, unsigned), &event, 0), "cuEventCreate");
    printf("ready %d\n", (int)getpid());
    fflush(stdout);

    char *hbuf = malloc(1 << 26);
    if (!hbuf) return 5;
    memset(hbuf, 1, 1 << 26);
    for (int i = 2; i < argc; i++) {
        char *t = argv[i];
        char name[256];
        unsigned count = 0, g[3], b[3], shmem = 0;
        unsigned long long bytes = 0;
        char gs[64], bs[64];
        int n;
        if (sscanf(t, "device:%d", &n) == 1) {
            check(CALL(CUresult, cuDevicePrimaryCtxRetain, (H *, int), &ctx, n), "retain");
            check(CALL(CUresult, cuCtxSetCurrent, (H), ctx), "setcurrent");
        } else if (sscanf(t, "peerdev:%d", &n) == 1) {
            check(CALL(CUresult, cuDevicePrimaryCtxRetain, (H *, int), &peerctx, n), "retain peer");
        } else if (sscanf(t, "create:%d", &n) == 1) {
            check(CALL(CUresult, cuCtxCreate_v2, (H *, unsigned, int), &ctx, 0, n), "create");
        } else if (sscanf(t, "func:%255s", name) == 1) {
            check(CALL(CUresult, cuModuleGetFunction, (H *, H, const char *), &func, mod, name), "getfunction");
        } else if (sscanf(t, "libkernel:%255s", name) == 1) {
            H k = 0;
            check(CALL(CUresult, cuLibraryGetKernel, (H *, H, const char *), &k, library, name), "getkernel");
            check(CALL(CUresult, cuKernelGetFunction, (H *, H), &func, k), "kernelgetfunction");
        } else if (sscanf(t, "launch:%u:%63[^:]:%63[^:]:%u", &count, gs, bs, &shmem) == 4 && parse_dims(gs, g) && parse_dims(bs, b)) {
            for (unsigned k = 0; k < count; k++)
                check(CALL(CUresult, cuLaunchKernel, (H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **),
                           func, g[0], g[1], g[2], b[0], b[1], b[2], shmem, stream, 0, 0), "launch");
        } else if (sscanf(t, "launchex:%u:%63[^:]:%63[^:]:%u", &count, gs, bs, &shmem) == 4 && parse_dims(gs, g) && parse_dims(bs, b)) {
            LaunchConfig c = {g[0], g[1], g[2], b[0], b[1], b[2], shmem, stream, 0, 0};
            for (unsigned k = 0; k < count; k++)
                check(CALL(CUresult, cuLaunchKernelEx, (const LaunchConfig *, H, void **, void **), &c, func, 0, 0), "launchex");
        } else if (sscanf(t, "coop:%u:%63[^:]:%63[^:]:%u", &count, gs, bs, &shmem) == 4 && parse_dims(gs, g) && parse_dims(bs, b)) {
            for (unsigned k = 0; k < count; k++)
                check(CALL(CUresult, cuLaunchCooperativeKernel, (H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **),
                           func, g[0], g[1], g[2], b[0], b[1], b[2], shmem, stream, 0), "coop");
        } else if (sscanf(t, "graph:%u", &count) == 1) {
            for (unsigned k = 0; k < count; k++)
                check(CALL(CUresult, cuGraphLaunch, (H, H), (H)0x1000, stream), "graph");
        } else if (sscanf(t, "badlaunch:%u", &count) == 1) {
            for (unsigned k = 0; k < count; k++)
                CALL(CUresult, cuLaunchKernel, (H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, H, void **, void **),
                     (H)0, 1, 1, 1, 1, 1, 1, 0, stream, 0, 0);
        } else if (sscanf(t, "alloc:%llu:%u", &bytes, &count) == 2) {
            for (unsigned k = 0; k < count; k++) {
                CUdeviceptr d = 0;
                check(CALL(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t), &d, bytes), "alloc");
                check(CALL(CUresult, cuMemFree_v2, (CUdeviceptr), d), "free");
            }
        } else if (sscanf(t, "%31[a-z]:%llu:%u", name, &bytes, &count) == 3) {
            if (bytes > (1 << 26)) { fprintf(stderr, "copy too large\n"); return 2; }
            CUdeviceptr d = 0, d2 = 0;
            check(CALL(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t), &d, bytes), "alloc");
            check(CALL(CUresult, cuMemAlloc_v2, (CUdeviceptr *, size_t), &d2, bytes), "alloc");
            for (unsigned k = 0; k < count; k++) {
                if (!strcmp(name, "htod"))
                    check(CALL(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr, const void *, size_t), d, hbuf, bytes), "htod");
                else if (!strcmp(name, "dtoh"))
                    check(CALL(CUresult, cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t), hbuf, d, bytes), "dtoh");
                else if (!strcmp(name, "memcpyasync"))
                    check(CALL(CUresult, cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, H), d2, d, bytes, stream), "memcpyasync");
                else if (!strcmp(name, "htodasync"))
                    check(CALL(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, H), d, hbuf, bytes, stream), "htodasync");
                else if (!strcmp(name, "dtohasync"))
                    check(CALL(CUresult, cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, H), hbuf, d, bytes, stream), "dtohasync");
                else if (!strcmp(name, "dtod"))
                    check(CALL(CUresult, cuMemcpyDtoD_v2, (CUdeviceptr, CUdeviceptr, size_t), d2, d, bytes), "dtod");
                else if (!strcmp(name, "dtodptds"))
                    check(CALL(CUresult, cuMemcpyDtoD_v2_ptds, (CUdeviceptr, CUdeviceptr, size_t), d2, d, bytes), "dtodptds");
                else if (!strcmp(name, "dtodasync"))
                    check(CALL(CUresult, cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, H), d2, d, bytes, stream), "dtodasync");
                else if (!strcmp(name, "dtodasyncptsz"))
                    check(CALL(CUresult, cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr, CUdeviceptr, size_t, H), d2, d, bytes, stream),
                          "dtodasyncptsz");
                else if (!strcmp(name, "peer"))
                    check(CALL(CUresult, cuMemcpyPeer, (CUdeviceptr, H, CUdeviceptr, H, size_t), d2, ctx, d,
                               peerctx ? peerctx : ctx, bytes), "peer");
                else if (!strcmp(name, "peerptds"))
                    check(CALL(CUresult, cuMemcpyPeer_ptds, (CUdeviceptr, H, CUdeviceptr, H, size_t), d2, ctx, d,
                               peerctx ? peerctx : ctx, bytes), "peerptds");
                else if (!strcmp(name, "peerasync"))
                    check(CALL(CUresult, cuMemcpyPeerAsync, (CUdeviceptr, H, CUdeviceptr, H, size_t, H), d2,
                               peerctx ? peerctx : ctx, d, ctx, bytes, stream), "peerasync");
                else if (!strcmp(name, "peerasyncptsz"))
                    check(CALL(CUresult, cuMemcpyPeerAsync_ptsz, (CUdeviceptr, H, CUdeviceptr, H, size_t, H), d2,
                               peerctx ? peerctx : ctx, d, ctx, bytes, stream), "peerasyncptsz");
                else { fprintf(stderr, "unknown token %s\n", t); return 2; }
            }
            CALL(CUresult, cuMemFree_v2, (CUdeviceptr), d);
            CALL(CUresult, cuMemFree_v2, (CUdeviceptr), d2);
        } else if (sscanf(t, "streamsync:%u", &count) == 1) {
            for (unsigned k = 0; k < count; k++) check(CALL(CUresult, cuStreamSynchronize, (H), stream), "streamsync");
        } else if (sscanf(t, "ctxsync:%u", &count) == 1) {
            for (unsigned k = 0; k < count; k++) check(CALL(CUresult, cuCtxSynchronize, (void)), "ctxsync");
        } else if (sscanf(t, "eventsync:%u", &count) == 1) {
            for (unsigned k = 0; k < count; k++) check(CALL(CUresult, cuEventSynchronize, (H), event), "eventsync");
        } else if (!strcmp(t, "wait")) {
            char line[64];
            if (!fgets(line, sizeof line, stdin)) return 6;
        } else {
            fprintf(stderr, "unknown token %s\n", t);
            return 2;
        }
    }
    printf("done\n");
    fflush(stdout);
    return 0;
}
