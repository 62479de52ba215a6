/*
 * One NCCL rank for faultline's tests, through the NCCL C API loaded with
 * dlopen (the stand-in libnccl.so.2, or NVIDIA's real one) and the stand-in
 * CUDA driver (its current context names the rank's GPU).
 *
 *   nccl_workload LIBNCCL LIBCUDA IDFILE NRANKS RANK DEVICE ITERS MODE [SLEEP_US]
 *
 * Rank 0 creates the ncclUniqueId (ncclGetUniqueId) and publishes it in
 * IDFILE (written aside, then renamed); the others wait for it, as jobs do
 * through their launcher's store. Even ranks use ncclCommInitRank, odd ones
 * ncclCommInitRankConfig. MODE:
 *   steps  ITERS iterations of every op (below), then a split by rank parity
 *          with ITERS all-reduces on it; prints "ready" and waits for a line
 *          (or EOF) on stdin before destroying its communicators;
 *   loop   all-reduces forever, SLEEP_US apart (a training loop's cadence),
 *          times the number in the file NCCL_WORKLOAD_SLOW_FILE names while
 *          it exists (a slowed job); with NCCL_WORKLOAD_SYNC_EACH a
 *          cuStreamSynchronize after each (a step's sync on its
 *          collectives), and NCCL_WORKLOAD_CONTROL_FILE ("hang N", "pause N")
 *          every rank hangs in that sync, or pauses, after collective N;
 *   nullcomm  no communicator (for a library that cannot create one without
 *          a GPU, such as NVIDIA's real one here): ITERS calls of AllReduce
 *          (1000 float32), AllGather (10 bfloat16), Reduce (64 int64) and
 *          Send (10 float16) with a NULL communicator, each of which NCCL
 *          refuses with ncclInvalidArgument (4), and ITERS empty groups;
 *   nullcomm232  the same for NCCL 2.32's newer entry points: ITERS calls of
 *          each *Config collective, Gather, Scatter, PutSignal, Signal,
 *          WaitSignal, CommFinalize, CommRevoke, CommSuspend, CommResume,
 *          DevCommCreate and CommGrow with a NULL communicator (the
 *          collectives, one-sided calls, DevCommCreate and the grow must fail; NCCL takes a NULL one to Finalize
 *          and Revoke as a no-op; the sizes are those of api232 below), then
 *          one CommShrink of a NULL
 *          communicator in a forked child: NCCL 2.32.3 dereferences the
 *          parent unchecked and the child dies of SIGSEGV (after the probe
 *          at the entry fired); prints "shrink pid=CHILD signal=N";
 *   api232  NCCL 2.32's newer entry points on a real communicator (see
 *          api232() below for the exact calls, counts and protocol).
 * One iteration: {GroupStart AllReduce(1024 float32) GroupEnd}
 * AllGather(256 bfloat16) ReduceScatter(128 float64) Broadcast(300 int8)
 * Bcast(100 int32) Reduce(64 int64) AlltoAll(32 uint32)
 * {GroupStart Send(10 float16) Recv(10 float16) GroupEnd}. With
 * NCCL_WORKLOAD_LATE_US set, steps mode sleeps that long before each
 * iteration's AlltoAll (a rank late to one collective). Steps mode's split
 * takes NCCL_WORKLOAD_SPLIT="COLOR:KEY" (then prints the split's rank and
 * size after "ready"), and NCCL_WORKLOAD_SYNC_AFTER_READY makes it sit in
 * one cuStreamSynchronize after "ready" (a rank blocked in the driver).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef struct { size_t size; unsigned int magic; unsigned int version; int blocking; char rest[256]; } ncclConfig_t;
typedef int (*init_rank_t)(ncclComm_t *, int, ncclUniqueId, int);
typedef int (*init_cfg_t)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
typedef int (*coll5_t)(const void *, void *, size_t, int, int, ncclComm_t, void *);
typedef int (*coll4_t)(const void *, void *, size_t, int, ncclComm_t, void *);
typedef int (*reduce_t)(const void *, void *, size_t, int, int, int, ncclComm_t, void *);
typedef int (*p2p_t)(void *, size_t, int, int, ncclComm_t, void *);
typedef int (*bcast_t)(void *, size_t, int, int, ncclComm_t, void *);
typedef int (*void_t)(void);
typedef int (*comm_t)(ncclComm_t);
typedef int (*split_t)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);
typedef int (*uid_t_)(ncclUniqueId *);
/* NCCL 2.32: the per-call config collectives, one-sided calls, lifecycle. */
typedef struct {
    size_t size; unsigned int magic; unsigned int version; void *ext;
    int minCTAs, maxCTAs, nvlsCTAs, cgaClusterSize; const char *algSelection;
    int forceAlgSelection, CTAPolicy; unsigned long long userProfilerTag; void *launchCompletionEvent;
} ncclCollConfig_t;
typedef struct { int opCnt; int peer; int sigIdx; int ctx; } ncclWaitSignalDesc_t;
typedef int (*coll5c_t)(const void *, void *, size_t, int, int, ncclComm_t, void *, const ncclCollConfig_t *);
typedef int (*coll4c_t)(const void *, void *, size_t, int, ncclComm_t, void *, const ncclCollConfig_t *);
typedef int (*reducec_t)(const void *, void *, size_t, int, int, int, ncclComm_t, void *, const ncclCollConfig_t *);
typedef int (*put_t)(const void *, size_t, int, int, void *, size_t, int, int, unsigned, ncclComm_t, void *);
typedef int (*signal_t)(int, int, int, unsigned, ncclComm_t, void *);
typedef int (*wait_t)(int, ncclWaitSignalDesc_t *, ncclComm_t, void *);
typedef int (*comm_int_t)(ncclComm_t, int);
typedef int (*shrink_t)(ncclComm_t, int *, int, ncclComm_t *, ncclConfig_t *, int);
typedef int (*grow_t)(ncclComm_t, int, const ncclUniqueId *, int, ncclComm_t *, ncclConfig_t *);
typedef int (*devcomm_t)(ncclComm_t, const void *, void *);

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) { fprintf(stderr, "missing %s\n", name); exit(2); }
    return p;
}

#define CK(call) do { int r_ = (call); if (r_ != 0) { fprintf(stderr, "%s = %d\n", #call, r_); exit(3); } } while (0)

static char buf[1 << 16];
/* The CUDA driver library (argv[2]), when one is loaded. */
static void *cu_lib;
/* ncclDevCommCreate's requirements (zeroed) and device communicator. */
static char devbuf[1 << 16];

/* NCCL 2.32's newer entry points, resolved once. */
struct api232 {
    coll5c_t allreduce_c, broadcast_c, reducescatter_c, gather_c, scatter_c;
    coll4c_t allgather_c, alltoall_c;
    reducec_t reduce_c;
    coll5_t gather, scatter, allreduce;
    put_t put;
    signal_t signal;
    wait_t wait;
    comm_t finalize, resume;
    comm_int_t revoke, suspend;
    shrink_t shrink;
    grow_t grow;
    devcomm_t devcomm;
};

static struct api232 api232_of(void *h) {
    struct api232 a;
    a.allreduce_c = (coll5c_t)sym(h, "ncclAllReduceConfig");
    a.broadcast_c = (coll5c_t)sym(h, "ncclBroadcastConfig");
    a.reducescatter_c = (coll5c_t)sym(h, "ncclReduceScatterConfig");
    a.gather_c = (coll5c_t)sym(h, "ncclGatherConfig");
    a.scatter_c = (coll5c_t)sym(h, "ncclScatterConfig");
    a.allgather_c = (coll4c_t)sym(h, "ncclAllGatherConfig");
    a.alltoall_c = (coll4c_t)sym(h, "ncclAlltoAllConfig");
    a.reduce_c = (reducec_t)sym(h, "ncclReduceConfig");
    a.gather = (coll5_t)sym(h, "ncclGather");
    a.scatter = (coll5_t)sym(h, "ncclScatter");
    a.allreduce = (coll5_t)sym(h, "ncclAllReduce");
    a.put = (put_t)sym(h, "ncclPutSignal");
    a.signal = (signal_t)sym(h, "ncclSignal");
    a.wait = (wait_t)sym(h, "ncclWaitSignal");
    a.finalize = (comm_t)sym(h, "ncclCommFinalize");
    a.resume = (comm_t)sym(h, "ncclCommResume");
    a.revoke = (comm_int_t)sym(h, "ncclCommRevoke");
    a.suspend = (comm_int_t)sym(h, "ncclCommSuspend");
    a.shrink = (shrink_t)sym(h, "ncclCommShrink");
    a.grow = (grow_t)sym(h, "ncclCommGrow");
    a.devcomm = (devcomm_t)sym(h, "ncclDevCommCreate");
    return a;
}

/* NCCL_COLLCONFIG_INITIALIZER's values (nccl.h 2.32.3). */
static ncclCollConfig_t coll_config(void) {
    ncclCollConfig_t c;
    memset(&c, 0, sizeof c);
    c.size = sizeof c;
    c.magic = 0xcafebeef;
    c.version = 23203;
    c.minCTAs = c.maxCTAs = c.nvlsCTAs = c.cgaClusterSize = c.CTAPolicy = -2147483647 - 1;
    c.forceAlgSelection = 1;
    return c;
}

/* One iteration of the 2.32 calls on `comm` (every call's result must be
 * `want`, or anything but 0 when `want` is -1):
 *   AllReduceConfig(512 float32) AllReduce(8 float32) BroadcastConfig(200 int8)
 *   ReduceConfig(48 int64) AllGatherConfig(128 bfloat16)
 *   ReduceScatterConfig(96 float64) AlltoAllConfig(24 uint32)
 *   Gather(40 float16) GatherConfig(40 float16) Scatter(20 int32)
 *   ScatterConfig(20 int32): 11 collectives;
 *   PutSignal(64 uint8, sigIdx 3) Signal WaitSignal(1 descriptor). */
static int api232_step(const struct api232 *a, ncclComm_t comm, int peer, int want) {
    ncclCollConfig_t cfg = coll_config();
    ncclWaitSignalDesc_t d = {1, peer, 3, 0};
    int r[14] = {
        a->allreduce_c(buf, buf, 512, 7, 0, comm, NULL, &cfg),
        a->allreduce(buf, buf, 8, 7, 0, comm, NULL),
        a->broadcast_c(buf, buf, 200, 0, 0, comm, NULL, &cfg),
        a->reduce_c(buf, buf, 48, 4, 0, 0, comm, NULL, &cfg),
        a->allgather_c(buf, buf, 128, 9, comm, NULL, &cfg),
        a->reducescatter_c(buf, buf, 96, 8, 0, comm, NULL, &cfg),
        a->alltoall_c(buf, buf, 24, 3, comm, NULL, &cfg),
        a->gather(buf, buf, 40, 6, 0, comm, NULL),
        a->gather_c(buf, buf, 40, 6, 0, comm, NULL, &cfg),
        a->scatter(buf, buf, 20, 2, 0, comm, NULL),
        a->scatter_c(buf, buf, 20, 2, 0, comm, NULL, &cfg),
        /* Without a communicator (NCCL refuses the call anyway) ctx and
         * flags are nonzero too: the stack slots beside comm's all are. */
        a->put(buf, 64, 1, peer, NULL, 0, 3, comm ? 0 : 1, comm ? 0 : 2, comm, NULL),
        a->signal(peer, 3, 0, 0, comm, NULL),
        a->wait(1, &d, comm, NULL),
    };
    for (int i = 0; i < 14; i++) {
        if (want == -1 ? r[i] == 0 : r[i] != want) {
            fprintf(stderr, "2.32 call %d returned %d\n", i, r[i]);
            return 3;
        }
    }
    return 0;
}

static int wait_line(void) {
    char line[64];
    return fgets(line, sizeof line, stdin) != NULL;
}

/* api232 on a communicator of NRANKS ranks: ITERS × api232_step; then
 * CommSuspend(comm) CommResume(comm) DevCommCreate(comm); every rank but the last shrinks comm
 * by excluding the last rank and issues ITERS AllReduceConfig(16 float32)
 * on the shrunk communicator; every rank grows comm to NRANKS + 1 (rank 0
 * passes the id) and issues ITERS AllReduce(4 float32) on it. Prints
 * "ready pid=…", waits for a line; then CommFinalize(comm),
 * CommRevoke(grown), CommSuspend(shrunk); prints "ended", waits for a
 * line, destroys every communicator and prints "done". */
static int api232(void *h, ncclComm_t comm, const ncclUniqueId *id, int nranks, int rank, long iters) {
    struct api232 a = api232_of(h);
    int peer = (rank + 1) % nranks;
    for (long i = 0; i < iters; i++) {
        int rc = api232_step(&a, comm, peer, 0);
        if (rc) return rc;
    }
    CK(a.suspend(comm, 1));
    CK(a.resume(comm));
    CK(a.devcomm(comm, devbuf, devbuf + 4096));
    ncclCollConfig_t cfg = coll_config();
    ncclComm_t shrunk = NULL, grown = NULL;
    int last = nranks - 1;
    if (rank != last) {
        CK(a.shrink(comm, &last, 1, &shrunk, NULL, 0));
        for (long i = 0; i < iters; i++) CK(a.allreduce_c(buf, buf, 16, 7, 0, shrunk, NULL, &cfg));
    }
    CK(a.grow(comm, nranks + 1, rank == 0 ? id : NULL, -1, &grown, NULL));
    for (long i = 0; i < iters; i++) CK(a.allreduce(buf, buf, 4, 7, 0, grown, NULL));
    printf("ready pid=%d\n", getpid());
    fflush(stdout);
    wait_line();
    CK(a.finalize(comm));
    CK(a.revoke(grown, 0));
    if (shrunk) CK(a.suspend(shrunk, 1));
    printf("ended\n");
    fflush(stdout);
    wait_line();
    comm_t destroy = (comm_t)sym(h, "ncclCommDestroy");
    if (shrunk) CK(destroy(shrunk));
    CK(destroy(grown));
    CK(destroy(comm));
    printf("done\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 9) { fprintf(stderr, "usage: see source\n"); return 2; }
    const char *idfile = argv[3];
    int nranks = atoi(argv[4]), rank = atoi(argv[5]), device = atoi(argv[6]);
    long iters = atol(argv[7]);
    const char *mode = argv[8];
    long sleep_us = argc > 9 ? atol(argv[9]) : 10000;
    /* NCCL_WORKLOAD_GO_FILE: map both libraries, say "mapped" and wait
     * until the file exists (a job already running when the collector
     * starts; the later dlopen calls return these handles). */
    const char *go = getenv("NCCL_WORKLOAD_GO_FILE");
    if (go && *go) {
        if (strcmp(argv[2], "-") != 0 && !dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        if (!dlopen(argv[1], RTLD_NOW)) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        printf("mapped\n");
        fflush(stdout);
        while (access(go, F_OK) != 0) usleep(10000);
    }
    if (strcmp(argv[2], "-") != 0) {
        void *cu = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
        if (!cu) { fprintf(stderr, "%s\n", dlerror()); return 2; }
        void *ctx = NULL;
        CK(((int (*)(unsigned))sym(cu, "cuInit"))(0));
        CK(((int (*)(void **, int))sym(cu, "cuDevicePrimaryCtxRetain"))(&ctx, device));
        CK(((int (*)(void *))sym(cu, "cuCtxSetCurrent"))(ctx));
        cu_lib = cu;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 2; }
    if (strcmp(mode, "nullcomm") == 0) {
        coll5_t ar = (coll5_t)sym(h, "ncclAllReduce");
        coll4_t ag = (coll4_t)sym(h, "ncclAllGather");
        reduce_t rd = (reduce_t)sym(h, "ncclReduce");
        p2p_t sd = (p2p_t)sym(h, "ncclSend");
        void_t gs = (void_t)sym(h, "ncclGroupStart"), ge = (void_t)sym(h, "ncclGroupEnd");
        for (long i = 0; i < iters; i++) {
            if (ar(buf, buf, 1000, 7, 0, NULL, NULL) != 4 || ag(buf, buf, 10, 9, NULL, NULL) != 4 ||
                rd(buf, buf, 64, 4, 0, 0, NULL, NULL) != 4 || sd(buf, 10, 6, 1, NULL, NULL) != 4) {
                fprintf(stderr, "a NULL communicator was not refused with ncclInvalidArgument\n");
                return 3;
            }
            CK(gs());
            CK(ge());
        }
        printf("ready pid=%d\ndone\n", getpid());
        return 0;
    }
    if (strcmp(mode, "nullcomm232") == 0) {
        struct api232 a = api232_of(h);
        ncclComm_t out = NULL;
        int none = 1;
        for (long i = 0; i < iters; i++) {
            int rc = api232_step(&a, NULL, 1, -1);
            if (rc) return rc;
            /* NCCL 2.32.3 takes a NULL communicator to Finalize and Revoke
             * as a no-op (ncclSuccess): their results are not checked. */
            (void)a.finalize(NULL);
            (void)a.revoke(NULL, 0);
            (void)a.suspend(NULL, 1);
            (void)a.resume(NULL);
            if (a.devcomm(NULL, devbuf, devbuf + 4096) == 0) {
                fprintf(stderr, "a device communicator of no communicator\n");
                return 3;
            }
            if (a.grow(NULL, 2, NULL, 1, &out, NULL) == 0) {
                fprintf(stderr, "a grow with neither communicator nor id succeeded\n");
                return 3;
            }
        }
        fflush(stdout);
        pid_t child = fork();
        if (child < 0) { perror("fork"); return 2; }
        if (child == 0) {
            struct rlimit no_core = {0, 0};
            setrlimit(RLIMIT_CORE, &no_core);
            _exit(a.shrink(NULL, &none, 1, &out, NULL, 0) == 0 ? 0 : 5);
        }
        int st = 0;
        if (waitpid(child, &st, 0) != child) { perror("waitpid"); return 2; }
        printf("shrink pid=%d signal=%d\n", (int)child, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        printf("ready pid=%d\ndone\n", getpid());
        return 0;
    }
    ncclUniqueId id;
    if (rank == 0) {
        CK(((uid_t_)sym(h, "ncclGetUniqueId"))(&id));
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp%d", idfile, getpid());
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0) { perror("id"); return 2; }
        if (rename(tmp, idfile) != 0) { perror("rename"); return 2; }
    } else {
        for (int i = 0;; i++) {
            FILE *f = fopen(idfile, "rb");
            if (f) {
                size_t n = fread(&id, sizeof id, 1, f);
                fclose(f);
                if (n == 1) break;
            }
            if (i > 30000) { fprintf(stderr, "no id in %s\n", idfile); return 2; }
            usleep(1000);
        }
    }
    ncclComm_t comm = NULL;
    if (rank % 2 == 0) {
        CK(((init_rank_t)sym(h, "ncclCommInitRank"))(&comm, nranks, id, rank));
    } else {
        ncclConfig_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.size = sizeof cfg;
        cfg.blocking = 1;
        CK(((init_cfg_t)sym(h, "ncclCommInitRankConfig"))(&comm, nranks, id, rank, &cfg));
    }
    if (strcmp(mode, "api232") == 0) return api232(h, comm, &id, nranks, rank, iters);
    coll5_t allreduce = (coll5_t)sym(h, "ncclAllReduce");
    void_t gstart = (void_t)sym(h, "ncclGroupStart"), gend = (void_t)sym(h, "ncclGroupEnd");
    if (strcmp(mode, "loop") == 0) {
        printf("ready pid=%d\n", getpid());
        fflush(stdout);
        const char *slow = getenv("NCCL_WORKLOAD_SLOW_FILE");
        const char *control = getenv("NCCL_WORKLOAD_CONTROL_FILE");
        int sync_each = getenv("NCCL_WORKLOAD_SYNC_EACH") != NULL && cu_lib;
        for (long i = 1;; i++) {
            CK(allreduce(buf, buf, 1024, 7, 0, comm, NULL));
            /* The control file, "hang N" or "pause N": at collective N every
             * rank hangs in its sync after it (the driver never completes
             * the work), or pauses on the host while the file still says so
             * (a checkpoint, an evaluation on the CPU). */
            char what[16] = "";
            long at = -1;
            FILE *cf = control ? fopen(control, "r") : NULL;
            if (cf) {
                if (fscanf(cf, "%15s %ld", what, &at) != 2) at = -1;
                fclose(cf);
            }
            if (at == i && strcmp(what, "hang") == 0) setenv("FAKE_CUDA_HANG", "1", 1);
            if (sync_each)
                CK(((int (*)(void *))sym(cu_lib, "cuStreamSynchronize"))(NULL));
            while (at == i && strcmp(what, "pause") == 0) {
                usleep(10000);
                cf = fopen(control, "r");
                if (!cf) break;
                if (fscanf(cf, "%15s %ld", what, &at) != 2) at = -1;
                fclose(cf);
            }
            double factor = 1.0;
            FILE *f = slow ? fopen(slow, "r") : NULL;
            if (f) {
                if (fscanf(f, "%lf", &factor) != 1) factor = 1.0;
                fclose(f);
            }
            usleep((useconds_t)(sleep_us * factor));
        }
    }
    coll4_t allgather = (coll4_t)sym(h, "ncclAllGather");
    coll5_t reducescatter = (coll5_t)sym(h, "ncclReduceScatter");
    coll5_t broadcast = (coll5_t)sym(h, "ncclBroadcast");
    bcast_t bcast = (bcast_t)sym(h, "ncclBcast");
    reduce_t reduce = (reduce_t)sym(h, "ncclReduce");
    coll4_t alltoall = (coll4_t)sym(h, "ncclAlltoAll");
    p2p_t send = (p2p_t)sym(h, "ncclSend"), recv = (p2p_t)sym(h, "ncclRecv");
    int peer = rank ^ 1;
    if (peer >= nranks) peer = rank;
    const char *late = getenv("NCCL_WORKLOAD_LATE_US");
    long late_us = late ? atol(late) : 0;
    for (long i = 0; i < iters; i++) {
        CK(gstart());
        CK(allreduce(buf, buf, 1024, 7 /* float32 */, 0, comm, NULL));
        CK(gend());
        CK(allgather(buf, buf, 256, 9 /* bfloat16 */, comm, NULL));
        CK(reducescatter(buf, buf, 128, 8 /* float64 */, 0, comm, NULL));
        CK(broadcast(buf, buf, 300, 0 /* int8 */, 0, comm, NULL));
        CK(bcast(buf, 100, 2 /* int32 */, 0, comm, NULL));
        CK(reduce(buf, buf, 64, 4 /* int64 */, 0, 0, comm, NULL));
        if (late_us > 0) usleep((useconds_t)late_us);
        CK(alltoall(buf, buf, 32, 3 /* uint32 */, comm, NULL));
        CK(gstart());
        CK(send(buf, 10, 6 /* float16 */, peer, comm, NULL));
        CK(recv(buf, 10, 6, peer, comm, NULL));
        CK(gend());
    }
    ncclComm_t sub = NULL;
    /* NCCL_WORKLOAD_SPLIT="COLOR:KEY": the split's colour and key (default:
     * rank parity and rank); the split's rank and size are printed after
     * "ready" ("split rank=R nranks=N"). */
    int scolor = rank % 2, skey = rank;
    const char *sp = getenv("NCCL_WORKLOAD_SPLIT");
    if (sp && sscanf(sp, "%d:%d", &scolor, &skey) != 2) { fprintf(stderr, "bad NCCL_WORKLOAD_SPLIT\n"); return 2; }
    CK(((split_t)sym(h, "ncclCommSplit"))(comm, scolor, skey, &sub, NULL));
    for (long i = 0; sub && i < iters; i++) CK(allreduce(buf, buf, 16, 7, 0, sub, NULL));
    printf("ready pid=%d\n", getpid());
    if (sp && sub) {
        int sr = -1, sn = -1;
        CK(((int (*)(ncclComm_t, int *))sym(h, "ncclCommUserRank"))(sub, &sr));
        CK(((int (*)(ncclComm_t, int *))sym(h, "ncclCommCount"))(sub, &sn));
        printf("split rank=%d nranks=%d\n", sr, sn);
    }
    fflush(stdout);
    /* NCCL_WORKLOAD_SYNC_AFTER_READY: one cuStreamSynchronize on the legacy
     * stream (the stand-in driver holds it FAKE_CUDA_SYNC_US), then "synced". */
    if (getenv("NCCL_WORKLOAD_SYNC_AFTER_READY") && cu_lib) {
        CK(((int (*)(void *))sym(cu_lib, "cuStreamSynchronize"))(NULL));
        printf("synced\n");
        fflush(stdout);
    }
    char line[64];
    if (!fgets(line, sizeof line, stdin)) { /* EOF: go on */ }
    if (sub) CK(((comm_t)sym(h, "ncclCommDestroy"))(sub));
    CK(((comm_t)sym(h, "ncclCommDestroy"))(comm));
    printf("done\n");
    return 0;
}
