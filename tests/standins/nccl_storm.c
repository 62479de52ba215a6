/*
 * A collective-heavy NCCL process for faultline's NCCL overhead benchmark:
 * THREADS threads, each with its own NDEV communicators from one
 * ncclCommInitAll (one process drives every "GPU", so no rank waits for
 * another process), loop for SECONDS over
 *   ncclGroupStart; NDEV × { ncclAllReduce(1024 float32) + WORK_NS of busy
 *   CPU }; ncclGroupEnd
 * (WORK_NS stands in for NCCL's own host-side enqueue work per collective),
 * then destroy their communicators and print the true counts:
 *
 *   nccl_storm LIBNCCL THREADS NDEV SECONDS WORK_NS
 *     prints "ready <pid>" once every communicator exists, then
 *     "calls <N> seconds <S> allreduce <A> group_start <G> group_end <E>
 *      init <I> destroy <D>" (N = A + G + E, the calls of the timed loop).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define MAX_DEV 64

typedef void *ncclComm_t;
typedef int (*init_all_t)(ncclComm_t *, int, const int *);
typedef int (*allreduce_t)(const void *, void *, size_t, int, int, ncclComm_t, void *);
typedef int (*void_t)(void);
typedef int (*destroy_t)(ncclComm_t);

static init_all_t init_all;
static allreduce_t allreduce;
static void_t group_start, group_end;
static destroy_t destroy;
static int ndev;
static double seconds;
static long work_ns;
static volatile int go, ready_threads, failed;

struct counts {
    unsigned long long allreduce, group_start, group_end, init, destroy;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void spin(long ns) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

static void fail(const char *what, int r) {
    fprintf(stderr, "%s = %d\n", what, r);
    __atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST);
}

static void *worker(void *arg) {
    struct counts *c = arg;
    static float buf[1024];
    ncclComm_t comms[MAX_DEV] = {0};
    int r = init_all(comms, ndev, NULL);
    c->init++;
    if (r != 0) fail("ncclCommInitAll", r);
    __atomic_add_fetch(&ready_threads, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&go, __ATOMIC_SEQ_CST)) {}
    if (r != 0) return 0;
    double end = now() + seconds;
    while (now() < end) {
        if ((r = group_start()) != 0) { fail("ncclGroupStart", r); return 0; }
        c->group_start++;
        for (int d = 0; d < ndev; d++) {
            if ((r = allreduce(buf, buf, 1024, 7 /* float32 */, 0 /* sum */, comms[d], NULL)) != 0) {
                fail("ncclAllReduce", r);
                return 0;
            }
            c->allreduce++;
            spin(work_ns);
        }
        if ((r = group_end()) != 0) { fail("ncclGroupEnd", r); return 0; }
        c->group_end++;
    }
    for (int d = 0; d < ndev; d++) {
        if ((r = destroy(comms[d])) != 0) fail("ncclCommDestroy", r);
        c->destroy++;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: nccl_storm LIBNCCL THREADS NDEV SECONDS WORK_NS\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    int threads = atoi(argv[2]);
    ndev = atoi(argv[3]);
    seconds = atof(argv[4]);
    work_ns = atol(argv[5]);
    if (threads < 1 || threads > MAX_THREADS || ndev < 1 || ndev > MAX_DEV || seconds <= 0) return 2;
    init_all = (init_all_t)dlsym(lib, "ncclCommInitAll");
    allreduce = (allreduce_t)dlsym(lib, "ncclAllReduce");
    group_start = (void_t)dlsym(lib, "ncclGroupStart");
    group_end = (void_t)dlsym(lib, "ncclGroupEnd");
    destroy = (destroy_t)dlsym(lib, "ncclCommDestroy");
    if (!init_all || !allreduce || !group_start || !group_end || !destroy) {
        fprintf(stderr, "missing symbol\n");
        return 3;
    }
    pthread_t t[MAX_THREADS];
    struct counts c[MAX_THREADS] = {{0}};
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, &c[i]);
    while (__atomic_load_n(&ready_threads, __ATOMIC_SEQ_CST) < threads) usleep(100);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    double t0 = now();
    __atomic_store_n(&go, 1, __ATOMIC_SEQ_CST);
    struct counts total = {0};
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], 0);
        total.allreduce += c[i].allreduce;
        total.group_start += c[i].group_start;
        total.group_end += c[i].group_end;
        total.init += c[i].init;
        total.destroy += c[i].destroy;
    }
    double secs = now() - t0;
    if (failed) return 3;
    printf("calls %llu seconds %.3f allreduce %llu group_start %llu group_end %llu init %llu destroy %llu\n",
           total.allreduce + total.group_start + total.group_end, secs, total.allreduce, total.group_start,
           total.group_end, total.init, total.destroy);
    return 0;
}
