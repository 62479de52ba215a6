/*
 * faultline gpu-check workload: a CUDA driver-API program that needs no CUDA
 * toolkit. `cargo xtask gpu-check` compiles it at run time with the system C
 * compiler; it loads the driver with dlopen() and runs a hand-written PTX
 * kernel (vadd.ptx) through the driver's JIT.
 *
 *   gpu_workload probe LIB
 *       cuInit and the device list; exit 10 when the driver sees no device.
 *   gpu_workload run LIB PTX DEVICE ROUNDS LAUNCHES ELEMENTS
 *       on device DEVICE (primary context, made current), ROUNDS times:
 *       2 x cuMemcpyHtoD_v2 (the inputs), LAUNCHES x cuLaunchKernel,
 *       1 x cuStreamSynchronize, 1 x cuMemcpyDtoH_v2 (the sum), checked;
 *       then 1 x cuCtxSynchronize. 3 x cuMemAlloc_v2 / cuMemFree_v2 around it.
 *
 * Every counted call goes through one wrapper that counts it, so the lines
 *   count <symbol> <calls>      bytes <symbol> <bytes>
 * are what the program really did, not a formula. Other lines:
 *   pid <pid>, device <ordinal> <cc> <name>, kernel <name>, ptx <target>,
 *   verify ok | verify mismatches=<n>, done (last), error <what> <CUresult>.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *H;

#define CUDA_ERROR_NO_DEVICE 100
#define ATTR_CC_MAJOR 75
#define ATTR_CC_MINOR 76
#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define EXIT_NO_DEVICE 10
#define KERNEL "faultline_vadd"
#define BLOCK 256

static void *lib;

static void *need(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        printf("error missing-symbol-%s 0\n", name);
        fflush(stdout);
        exit(EXIT_FAILED);
    }
    return p;
}

static void fail(const char *what, CUresult r) {
    printf("error %s %d\n", what, r);
    fflush(stdout);
    exit(EXIT_FAILED);
}

static void check(CUresult r, const char *what) {
    if (r != 0) fail(what, r);
}

/* The counted calls, in the order they are printed. */
enum { LAUNCH, HTOD, DTOH, STREAM_SYNC, CTX_SYNC, ALLOC, FREE, NCALLS };
static const char *const call_name[NCALLS] = {
    "cuLaunchKernel",      "cuMemcpyHtoD_v2",  "cuMemcpyDtoH_v2", "cuStreamSynchronize",
    "cuCtxSynchronize",    "cuMemAlloc_v2",    "cuMemFree_v2",
};
static unsigned long long calls[NCALLS], bytes[NCALLS];
static void *fn[NCALLS];

static CUresult launch(H f, unsigned grid, void **params) {
    calls[LAUNCH]++;
    return ((CUresult(*)(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         H, void **, void **))fn[LAUNCH])(f, grid, 1, 1, BLOCK, 1, 1, 0, 0, params, 0);
}
static CUresult htod(CUdeviceptr dst, const void *src, size_t n) {
    calls[HTOD]++;
    bytes[HTOD] += n;
    return ((CUresult(*)(CUdeviceptr, const void *, size_t))fn[HTOD])(dst, src, n);
}
static CUresult dtoh(void *dst, CUdeviceptr src, size_t n) {
    calls[DTOH]++;
    bytes[DTOH] += n;
    return ((CUresult(*)(void *, CUdeviceptr, size_t))fn[DTOH])(dst, src, n);
}
static CUresult stream_sync(void) {
    calls[STREAM_SYNC]++;
    return ((CUresult(*)(H))fn[STREAM_SYNC])(0);
}
static CUresult ctx_sync(void) {
    calls[CTX_SYNC]++;
    return ((CUresult(*)(void))fn[CTX_SYNC])();
}
static CUresult alloc(CUdeviceptr *p, size_t n) {
    calls[ALLOC]++;
    bytes[ALLOC] += n;
    return ((CUresult(*)(CUdeviceptr *, size_t))fn[ALLOC])(p, n);
}
static CUresult mfree(CUdeviceptr p) {
    calls[FREE]++;
    return ((CUresult(*)(CUdeviceptr))fn[FREE])(p);
}

static void open_driver(const char *path) {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("no_device dlopen %s\n", dlerror());
        fflush(stdout);
        exit(EXIT_NO_DEVICE);
    }
}

static void init_driver(void) {
    CUresult r = ((CUresult(*)(unsigned))need("cuInit"))(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        printf("no_device cuInit %d\n", r);
        fflush(stdout);
        exit(EXIT_NO_DEVICE);
    }
    check(r, "cuInit");
}

static void describe_device(int ordinal, CUdevice dev) {
    char name[256] = "unknown";
    int major = -1, minor = -1;
    CUresult (*get_name)(char *, int, CUdevice) = (CUresult(*)(char *, int, CUdevice))dlsym(lib, "cuDeviceGetName");
    CUresult (*attr)(int *, int, CUdevice) = (CUresult(*)(int *, int, CUdevice))dlsym(lib, "cuDeviceGetAttribute");
    if (get_name && get_name(name, sizeof name, dev) != 0) strcpy(name, "unknown");
    if (attr) {
        if (attr(&major, ATTR_CC_MAJOR, dev) != 0) major = -1;
        if (attr(&minor, ATTR_CC_MINOR, dev) != 0) minor = -1;
    }
    printf("device %d %d.%d %s\n", ordinal, major, minor, name);
}

static int probe(void) {
    init_driver();
    CUresult (*version)(int *) = (CUresult(*)(int *))dlsym(lib, "cuDriverGetVersion");
    int v = 0;
    if (version && version(&v) == 0) printf("driver_version %d\n", v);
    int n = 0;
    check(((CUresult(*)(int *))need("cuDeviceGetCount"))(&n), "cuDeviceGetCount");
    printf("devices %d\n", n);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        if (((CUresult(*)(CUdevice *, int))need("cuDeviceGet"))(&d, i) == 0) describe_device(i, d);
    }
    fflush(stdout);
    return n > 0 ? 0 : EXIT_NO_DEVICE;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf) buf[len] = 0;
    return buf;
}

/* The lowest PTX ISA version that knows target sm_<sm>. */
static const char *ptx_isa_for(int sm) {
    if (sm == 120) return "8.7";
    if (sm == 121) return "8.8";
    if (sm >= 110) return "9.0";
    if (sm >= 103) return "8.8";
    if (sm >= 100) return "8.6";
    if (sm >= 89) return "7.8";
    if (sm >= 87) return "7.4";
    if (sm >= 86) return "7.1";
    if (sm >= 80) return "7.0";
    if (sm >= 75) return "6.3";
    return "6.0";
}

/* cuModuleLoadData of the PTX as shipped (sm_50); should a driver refuse it,
 * once more with the header naming the device's own target. */
static H load_module(const char *ptx, CUdevice dev) {
    CUresult (*load)(H *, const void *) = (CUresult(*)(H *, const void *))need("cuModuleLoadData");
    H mod = 0;
    CUresult r = load(&mod, ptx);
    if (r == 0) {
        printf("ptx sm_50\n");
        return mod;
    }
    printf("ptx sm_50 refused %d\n", r);
    CUresult (*attr)(int *, int, CUdevice) = (CUresult(*)(int *, int, CUdevice))dlsym(lib, "cuDeviceGetAttribute");
    int major = 0, minor = 0;
    const char *body = strstr(ptx, ".target");
    if (!attr || !body || attr(&major, ATTR_CC_MAJOR, dev) != 0 || attr(&minor, ATTR_CC_MINOR, dev) != 0)
        fail("cuModuleLoadData", r);
    body = strchr(body, '\n');
    if (!body) fail("cuModuleLoadData", r);
    int sm = major * 10 + minor;
    size_t n = strlen(body) + 64;
    char *alt = malloc(n);
    if (!alt) fail("malloc", 0);
    snprintf(alt, n, ".version %s\n.target sm_%d%s", ptx_isa_for(sm), sm, body);
    check(load(&mod, alt), "cuModuleLoadData");
    printf("ptx sm_%d\n", sm);
    free(alt);
    return mod;
}

static int run(const char *ptx_path, int ordinal, unsigned rounds, unsigned launches, unsigned n) {
    char *ptx = read_file(ptx_path);
    if (!ptx) fail("read-ptx", 0);
    for (int i = 0; i < NCALLS; i++) fn[i] = need(call_name[i]);
    printf("pid %d\n", (int)getpid());
    init_driver();
    CUdevice dev;
    check(((CUresult(*)(CUdevice *, int))need("cuDeviceGet"))(&dev, ordinal), "cuDeviceGet");
    describe_device(ordinal, dev);
    H ctx = 0;
    check(((CUresult(*)(H *, CUdevice))need("cuDevicePrimaryCtxRetain"))(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(((CUresult(*)(H))need("cuCtxSetCurrent"))(ctx), "cuCtxSetCurrent");
    H mod = load_module(ptx, dev);
    H func = 0;
    check(((CUresult(*)(H *, H, const char *))need("cuModuleGetFunction"))(&func, mod, KERNEL),
          "cuModuleGetFunction");
    printf("kernel %s\n", KERNEL);

    size_t size = (size_t)n * sizeof(float);
    float *a = malloc(size), *b = malloc(size), *c = malloc(size);
    if (!a || !b || !c) fail("malloc", 0);
    CUdeviceptr da, db, dc;
    check(alloc(&da, size), "cuMemAlloc_v2");
    check(alloc(&db, size), "cuMemAlloc_v2");
    check(alloc(&dc, size), "cuMemAlloc_v2");
    void *params[] = {&da, &db, &dc, &n};
    unsigned grid = (n + BLOCK - 1) / BLOCK;
    unsigned long long mismatches = 0;
    for (unsigned r = 0; r < rounds; r++) {
        /* Exact in binary floating point: i/2 + (r+1)*2 < 2^24. */
        for (unsigned i = 0; i < n; i++) {
            a[i] = (float)i * 0.5f;
            b[i] = (float)(r + 1) * 2.0f;
            c[i] = -1.0f;
        }
        check(htod(da, a, size), "cuMemcpyHtoD_v2");
        check(htod(db, b, size), "cuMemcpyHtoD_v2");
        for (unsigned l = 0; l < launches; l++) check(launch(func, grid, params), "cuLaunchKernel");
        check(stream_sync(), "cuStreamSynchronize");
        check(dtoh(c, dc, size), "cuMemcpyDtoH_v2");
        if (launches > 0)
            for (unsigned i = 0; i < n; i++)
                if (c[i] != a[i] + b[i]) mismatches++;
    }
    check(ctx_sync(), "cuCtxSynchronize");
    check(mfree(da), "cuMemFree_v2");
    check(mfree(db), "cuMemFree_v2");
    check(mfree(dc), "cuMemFree_v2");
    CUresult (*release)(CUdevice) = (CUresult(*)(CUdevice))dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
    if (release) release(dev);

    for (int i = 0; i < NCALLS; i++) {
        printf("count %s %llu\n", call_name[i], calls[i]);
        if (i == HTOD || i == DTOH || i == ALLOC) printf("bytes %s %llu\n", call_name[i], bytes[i]);
    }
    if (mismatches == 0)
        printf("verify ok\n");
    else
        printf("verify mismatches=%llu\n", mismatches);
    printf("done\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, 0, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "probe") == 0) {
        open_driver(argv[2]);
        return probe();
    }
    if (argc == 8 && strcmp(argv[1], "run") == 0) {
        open_driver(argv[2]);
        return run(argv[3], atoi(argv[4]), (unsigned)strtoul(argv[5], 0, 10),
                   (unsigned)strtoul(argv[6], 0, 10), (unsigned)strtoul(argv[7], 0, 10));
    }
    fprintf(stderr,
            "usage: gpu_workload probe LIB\n"
            "       gpu_workload run LIB PTX DEVICE ROUNDS LAUNCHES ELEMENTS\n");
    return EXIT_USAGE;
}
