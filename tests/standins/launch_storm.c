/*
 * A launch-heavy CUDA process for faultline's bounded-overhead tests and
 * benchmark: THREADS threads call cuLaunchKernel in a loop for SECONDS, each
 * launch followed by WORK_NS of busy CPU (standing in for the driver's own
 * launch work), and it prints the true count:
 *
 *   launch_storm LIB THREADS SECONDS WORK_NS
 *     prints "ready <pid>" once loaded, then "launches <N> seconds <S>".
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *H;
typedef CUresult (*launch_fn)(H, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, H, void **, void **);
typedef CUresult (*retain_fn)(H *, int);
typedef CUresult (*set_fn)(H);
typedef CUresult (*getfn_fn)(H *, H, const char *);
typedef CUresult (*load_fn)(H *, const void *);

static launch_fn launch;
static retain_fn retain;
static set_fn set_current;
static H func;
static double seconds;
static long work_ns;
static volatile int go;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
    unsigned long long *count = arg;
    H ctx = 0;
    retain(&ctx, 0);
    set_current(ctx);
    while (!go) {}
    double end = now() + seconds;
    unsigned long long n = 0;
    while (now() < end) {
        launch(func, 8, 1, 1, 256, 1, 1, 0, 0, 0, 0);
        n++;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do {
            clock_gettime(CLOCK_MONOTONIC, &b);
        } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < work_ns);
    }
    *count = n;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: launch_storm LIB THREADS SECONDS WORK_NS\n"); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    int threads = atoi(argv[2]);
    seconds = atof(argv[3]);
    work_ns = atol(argv[4]);
    if (threads < 1 || threads > 64 || seconds <= 0) return 2;
    launch = (launch_fn)dlsym(lib, "cuLaunchKernel");
    retain = (retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
    set_current = (set_fn)dlsym(lib, "cuCtxSetCurrent");
    getfn_fn getfn = (getfn_fn)dlsym(lib, "cuModuleGetFunction");
    load_fn load = (load_fn)dlsym(lib, "cuModuleLoadData");
    CUresult (*init)(unsigned) = (CUresult (*)(unsigned))dlsym(lib, "cuInit");
    if (!launch || !retain || !set_current || !getfn || !load || !init) { fprintf(stderr, "missing symbol\n"); return 3; }
    init(0);
    H mod = 0;
    load(&mod, "image");
    getfn(&func, mod, "storm_kernel");
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    pthread_t t[64];
    unsigned long long counts[64] = {0};
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, &counts[i]);
    double t0 = now();
    go = 1;
    unsigned long long total = 0;
    for (int i = 0; i < threads; i++) { pthread_join(t[i], 0); total += counts[i]; }
    printf("launches %llu seconds %.3f\n", total, now() - t0);
    return 0;
}
