/*
 * A CUDA runtime-API workload for faultline's tests: loads NVIDIA's real
 * libcudart.so.12 with dlopen() by path (cudart then loads libcuda.so.1, the
 * stand-in driver, through the library search path) and performs, N times:
 *
 *   cudaMalloc(ALLOC_BYTES)
 *   (before the loop, the peer buffer: cudaSetDevice(1), cudaMalloc of
 *   ALLOC_BYTES, cudaSetDevice(0); its cudaFree after the loop)
 *   cudaMemcpy H->D of HTOD_BYTES, cudaMemcpy D->H of DTOH_BYTES
 *   on a stream from cudaStreamCreate:
 *     cudaMemcpyAsync H->D of ASYNC_HTOD_BYTES, D->H of ASYNC_DTOH_BYTES,
 *     cudaStreamSynchronize
 *   on cudaStreamPerThread (the per-thread default stream):
 *     cudaMemcpyAsync H->D of PT_HTOD_BYTES, D->H of PT_DTOH_BYTES,
 *     cudaStreamSynchronize
 *   through the per-thread entry points a program built with
 *   `nvcc --default-stream per-thread` calls:
 *     cudaMemcpy_ptds H->D of PTDS_HTOD_BYTES, D->H of PTDS_DTOH_BYTES,
 *     cudaMemcpyAsync_ptsz H->D of PTSZ_HTOD_BYTES on stream 0,
 *     cudaStreamSynchronize_ptsz(0)
 *   with cudaMemcpyDefault (the driver tells the direction from the
 *   addresses): cudaMemcpy H->D of DFLT_HTOD_BYTES and D->H of
 *   DFLT_DTOH_BYTES, cudaMemcpyAsync H->D of DFLT_ASYNC_BYTES on the created
 *   stream, cudaMemcpy_ptds H->D of DFLT_PTDS_BYTES, cudaStreamSynchronize
 *   device to device and between the two devices, a chain through regions
 *   of the allocation (A..F, REGION bytes apart) and a buffer on device 1,
 *   each copy of fewer bytes than the one before, the end checked:
 *     cudaMemcpy H->D A of CHAIN_HTOD_BYTES,
 *     cudaMemcpy D->D B<-A of DTOD_BYTES (cudaMemcpyDeviceToDevice),
 *     cudaMemcpyAsync D->D C<-B of ASYNC_DTOD_BYTES on the created stream,
 *     cudaStreamSynchronize,
 *     cudaMemcpyPeer device 1 <- C (device 0) of PEER_BYTES,
 *     cudaMemcpyPeerAsync D (device 0) <- device 1 of PEER_ASYNC_BYTES on
 *     the created stream, cudaStreamSynchronize,
 *     cudaMemcpy_ptds D->D E<-D of PTDS_DTOD_BYTES,
 *     cudaMemcpyAsync_ptsz D->D F<-E of PTSZ_DTOD_BYTES on stream 0,
 *     cudaStreamSynchronize_ptsz(0),
 *     cudaMemcpy D->H of CHAIN_DTOH_BYTES from F
 *   cudaDeviceSynchronize
 *   cudaFree
 *
 *   cudart_workload LIBCUDART N
 *
 * Every copy carries a distinct byte pattern and every copy back is checked,
 * so the bytes really went through the driver. Every return code is checked:
 * any error prints the call, its code and cudart's name for it, and exits 4.
 * Prints "ready <pid>" once cudart is loaded (before its lazy initialisation)
 * and "done" at the end. The byte sizes are fixed here and in
 * tests/tests/it/real_cudart.rs.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALLOC_BYTES 65536
#define HTOD_BYTES 4096
#define DTOH_BYTES 2048
#define ASYNC_HTOD_BYTES 1000
#define ASYNC_DTOH_BYTES 3000
#define PT_HTOD_BYTES 512
#define PT_DTOH_BYTES 768
#define PTDS_HTOD_BYTES 1536
#define PTDS_DTOH_BYTES 1280
#define PTSZ_HTOD_BYTES 640
#define DFLT_HTOD_BYTES 200
#define DFLT_DTOH_BYTES 300
#define DFLT_ASYNC_BYTES 400
#define DFLT_PTDS_BYTES 600
#define REGION 8192
#define CHAIN_HTOD_BYTES 2800
#define DTOD_BYTES 2500
#define ASYNC_DTOD_BYTES 2200
#define PEER_BYTES 1900
#define PEER_ASYNC_BYTES 1600
#define PTDS_DTOD_BYTES 1400
#define PTSZ_DTOD_BYTES 1200
#define CHAIN_DTOH_BYTES 1000

typedef int cudaError_t;
typedef void *cudaStream_t;
enum { H2D = 1, D2H = 2, D2D = 3, DEFAULT = 4 };
#define cudaStreamPerThread ((cudaStream_t)0x2)

static void *lib;

static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "libcudart has no %s\n", name);
        exit(3);
    }
    return p;
}

#define CALL(rt, name, args, ...) ((rt(*) args)sym(#name))(__VA_ARGS__)

static void check(cudaError_t r, const char *what, int i) {
    if (r != 0) {
        const char *(*err_name)(cudaError_t) =
            (const char *(*)(cudaError_t))dlsym(lib, "cudaGetErrorName");
        fprintf(stderr, "%s (iteration %d) failed: %d %s\n", what, i, r,
                err_name ? err_name(r) : "");
        exit(4);
    }
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 31 + i * 7);
}

static void expect(const unsigned char *p, size_t n, unsigned seed, const char *what, int i) {
    for (size_t k = 0; k < n; k++) {
        if (p[k] != (unsigned char)(seed * 31 + k * 7)) {
            fprintf(stderr, "%s (iteration %d): byte %zu differs\n", what, i, k);
            exit(5);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: cudart_workload LIBCUDART N\n");
        return 2;
    }
    int n = atoi(argv[2]);
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);

    int version = 0, devices = 0;
    check(CALL(cudaError_t, cudaRuntimeGetVersion, (int *), &version), "cudaRuntimeGetVersion", -1);
    check(CALL(cudaError_t, cudaGetDeviceCount, (int *), &devices), "cudaGetDeviceCount", -1);
    printf("runtime %d devices %d\n", version, devices);
    check(CALL(cudaError_t, cudaSetDevice, (int), 0), "cudaSetDevice", -1);
    cudaStream_t stream = 0;
    check(CALL(cudaError_t, cudaStreamCreate, (cudaStream_t *), &stream), "cudaStreamCreate", -1);

    /* A buffer on device 1 for the peer copies. */
    void *peer = 0;
    check(CALL(cudaError_t, cudaSetDevice, (int), 1), "cudaSetDevice 1", -1);
    check(CALL(cudaError_t, cudaMalloc, (void **, size_t), &peer, ALLOC_BYTES), "cudaMalloc (device 1)", -1);
    check(CALL(cudaError_t, cudaSetDevice, (int), 0), "cudaSetDevice 0", -1);

    unsigned char *host = malloc(ALLOC_BYTES), *back = malloc(ALLOC_BYTES);
    if (!host || !back) return 2;
    for (int i = 0; i < n; i++) {
        void *dev = 0;
        check(CALL(cudaError_t, cudaMalloc, (void **, size_t), &dev, ALLOC_BYTES), "cudaMalloc", i);

        /* Synchronous copies: what goes in must come back. */
        fill(host, HTOD_BYTES, i);
        check(CALL(cudaError_t, cudaMemcpy, (void *, const void *, size_t, int), dev, host, HTOD_BYTES, H2D),
              "cudaMemcpy H2D", i);
        memset(back, 0, ALLOC_BYTES);
        check(CALL(cudaError_t, cudaMemcpy, (void *, const void *, size_t, int), back, dev, DTOH_BYTES, D2H),
              "cudaMemcpy D2H", i);
        expect(back, DTOH_BYTES, i, "cudaMemcpy round trip", i);

        /* Asynchronous copies on a created stream. */
        fill(host, ASYNC_HTOD_BYTES, i + 1000);
        check(CALL(cudaError_t, cudaMemcpyAsync, (void *, const void *, size_t, int, cudaStream_t), dev, host,
                   ASYNC_HTOD_BYTES, H2D, stream),
              "cudaMemcpyAsync H2D (stream)", i);
        memset(back, 0, ALLOC_BYTES);
        check(CALL(cudaError_t, cudaMemcpyAsync, (void *, const void *, size_t, int, cudaStream_t), back, dev,
                   ASYNC_DTOH_BYTES, D2H, stream),
              "cudaMemcpyAsync D2H (stream)", i);
        check(CALL(cudaError_t, cudaStreamSynchronize, (cudaStream_t), stream), "cudaStreamSynchronize", i);
        expect(back, ASYNC_HTOD_BYTES, i + 1000, "cudaMemcpyAsync round trip", i);

        /* Asynchronous copies on the per-thread default stream. */
        fill(host, PT_DTOH_BYTES, i + 2000);
        check(CALL(cudaError_t, cudaMemcpyAsync, (void *, const void *, size_t, int, cudaStream_t), dev, host,
                   PT_HTOD_BYTES, H2D, cudaStreamPerThread),
              "cudaMemcpyAsync H2D (cudaStreamPerThread)", i);
        memset(back, 0, ALLOC_BYTES);
        check(CALL(cudaError_t, cudaMemcpyAsync, (void *, const void *, size_t, int, cudaStream_t), back, dev,
                   PT_DTOH_BYTES, D2H, cudaStreamPerThread),
              "cudaMemcpyAsync D2H (cudaStreamPerThread)", i);
        check(CALL(cudaError_t, cudaStreamSynchronize, (cudaStream_t), cudaStreamPerThread),
              "cudaStreamSynchronize (cudaStreamPerThread)", i);
        expect(back, PT_HTOD_BYTES, i + 2000, "per-thread stream round trip", i);

        /* The per-thread-default-stream entry points (nvcc --default-stream per-thread). */
        fill(host, PTDS_HTOD_BYTES, i + 3000);
        check(CALL(cudaError_t, cudaMemcpy_ptds, (void *, const void *, size_t, int), dev, host, PTDS_HTOD_BYTES,
                   H2D),
              "cudaMemcpy_ptds H2D", i);
        memset(back, 0, ALLOC_BYTES);
        check(CALL(cudaError_t, cudaMemcpy_ptds, (void *, const void *, size_t, int), back, dev, PTDS_DTOH_BYTES,
                   D2H),
              "cudaMemcpy_ptds D2H", i);
        expect(back, PTDS_DTOH_BYTES, i + 3000, "cudaMemcpy_ptds round trip", i);
        check(CALL(cudaError_t, cudaMemcpyAsync_ptsz, (void *, const void *, size_t, int, cudaStream_t), dev, host,
                   PTSZ_HTOD_BYTES, H2D, (cudaStream_t)0),
              "cudaMemcpyAsync_ptsz H2D", i);
        check(CALL(cudaError_t, cudaStreamSynchronize_ptsz, (cudaStream_t), (cudaStream_t)0),
              "cudaStreamSynchronize_ptsz", i);

        /* cudaMemcpyDefault: unified addressing picks the direction. */
        fill(host, DFLT_DTOH_BYTES, i + 4000);
        check(CALL(cudaError_t, cudaMemcpy, (void *, const void *, size_t, int), dev, host, DFLT_HTOD_BYTES,
                   DEFAULT),
              "cudaMemcpy default H2D", i);
        memset(back, 0, ALLOC_BYTES);
        check(CALL(cudaError_t, cudaMemcpy, (void *, const void *, size_t, int), back, dev, DFLT_DTOH_BYTES,
                   DEFAULT),
              "cudaMemcpy default D2H", i);
        expect(back, DFLT_HTOD_BYTES, i + 4000, "cudaMemcpyDefault round trip", i);
        check(CALL(cudaError_t, cudaMemcpyAsync, (void *, const void *, size_t, int, cudaStream_t), dev, host,
                   DFLT_ASYNC_BYTES, DEFAULT, stream),
              "cudaMemcpyAsync default (stream)", i);
        check(CALL(cudaError_t, cudaMemcpy_ptds, (void *, const void *, size_t, int), dev, host, DFLT_PTDS_BYTES,
                   DEFAULT),
              "cudaMemcpy_ptds default", i);
        check(CALL(cudaError_t, cudaStreamSynchronize, (cudaStream_t), stream), "cudaStreamSynchronize", i);

        /* Device to device and between devices: host -> A -> B -> C -> device 1 -> D -> E -> F -> host. */
        char *a = dev, *b = a + REGION, *c = b + REGION, *d = c + REGION, *e = d + REGION, *f = e + REGION;
        fill(host, CHAIN_HTOD_BYTES, i + 5000);
        check(CALL(cudaError_t, cudaMemcpy, (void *, const void *, size_t, int), a, host, CHAIN_HTOD_BYTES, H2D),
              "cudaMemcpy H2D (chain)", i);
        check(CALL(cudaError_t, cudaMemcpy, (void *, const void *, size_t, int), b, a, DTOD_BYTES, D2D),
              "cudaMemcpy D2D", i);
        check(CALL(cudaError_t, cudaMemcpyAsync, (void *, const void *, size_t, int, cudaStream_t), c, b,
                   ASYNC_DTOD_BYTES, D2D, stream),
              "cudaMemcpyAsync D2D (stream)", i);
        check(CALL(cudaError_t, cudaStreamSynchronize, (cudaStream_t), stream), "cudaStreamSynchronize (D2D)", i);
        check(CALL(cudaError_t, cudaMemcpyPeer, (void *, int, const void *, int, size_t), peer, 1, c, 0, PEER_BYTES),
              "cudaMemcpyPeer", i);
        check(CALL(cudaError_t, cudaMemcpyPeerAsync, (void *, int, const void *, int, size_t, cudaStream_t), d, 0,
                   peer, 1, PEER_ASYNC_BYTES, stream),
              "cudaMemcpyPeerAsync (stream)", i);
        check(CALL(cudaError_t, cudaStreamSynchronize, (cudaStream_t), stream), "cudaStreamSynchronize (peer)", i);
        check(CALL(cudaError_t, cudaMemcpy_ptds, (void *, const void *, size_t, int), e, d, PTDS_DTOD_BYTES, D2D),
              "cudaMemcpy_ptds D2D", i);
        check(CALL(cudaError_t, cudaMemcpyAsync_ptsz, (void *, const void *, size_t, int, cudaStream_t), f, e,
                   PTSZ_DTOD_BYTES, D2D, (cudaStream_t)0),
              "cudaMemcpyAsync_ptsz D2D", i);
        check(CALL(cudaError_t, cudaStreamSynchronize_ptsz, (cudaStream_t), (cudaStream_t)0),
              "cudaStreamSynchronize_ptsz (D2D)", i);
        memset(back, 0, ALLOC_BYTES);
        check(CALL(cudaError_t, cudaMemcpy, (void *, const void *, size_t, int), back, f, CHAIN_DTOH_BYTES, D2H),
              "cudaMemcpy D2H (chain)", i);
        expect(back, CHAIN_DTOH_BYTES, i + 5000, "device-to-device and peer chain", i);

        check(CALL(cudaError_t, cudaDeviceSynchronize, (void)), "cudaDeviceSynchronize", i);
        check(CALL(cudaError_t, cudaFree, (void *), dev), "cudaFree", i);
    }
    check(CALL(cudaError_t, cudaStreamDestroy, (cudaStream_t), stream), "cudaStreamDestroy", -1);
    check(CALL(cudaError_t, cudaFree, (void *), peer), "cudaFree (device 1)", -1);
    check(CALL(cudaError_t, cudaGetLastError, (void)), "cudaGetLastError", -1);
    free(host);
    free(back);
    printf("done\n");
    fflush(stdout);
    return 0;
}
