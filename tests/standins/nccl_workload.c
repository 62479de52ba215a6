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
 *          it exists (a slowed job);
 *   nullcomm  no communicator (for a library that cannot create one without
 *          a GPU, such as NVIDIA's real one here): ITERS calls of AllReduce
 *          (1000 float32), AllGather (10 bfloat16), Reduce (64 int64) and
 *          Send (10 float16) with a NULL communicator, each of which NCCL
 *          refuses with ncclInvalidArgument (4), and ITERS empty groups.
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

static void *sym(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) { fprintf(stderr, "missing %s\n", name); exit(2); }
    return p;
}

#define CK(call) do { int r_ = (call); if (r_ != 0) { fprintf(stderr, "%s = %d\n", #call, r_); exit(3); } } while (0)

static char buf[1 << 16];
/* The CUDA driver library (argv[2]), when one is loaded. */
static void *cu_lib;

int main(int argc, char **argv) {
    if (argc < 9) { fprintf(stderr, "usage: see source\n"); return 2; }
    const char *idfile = argv[3];
    int nranks = atoi(argv[4]), rank = atoi(argv[5]), device = atoi(argv[6]);
    long iters = atol(argv[7]);
    const char *mode = argv[8];
    long sleep_us = argc > 9 ? atol(argv[9]) : 10000;
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
    coll5_t allreduce = (coll5_t)sym(h, "ncclAllReduce");
    void_t gstart = (void_t)sym(h, "ncclGroupStart"), gend = (void_t)sym(h, "ncclGroupEnd");
    if (strcmp(mode, "loop") == 0) {
        printf("ready pid=%d\n", getpid());
        fflush(stdout);
        const char *slow = getenv("NCCL_WORKLOAD_SLOW_FILE");
        for (;;) {
            CK(allreduce(buf, buf, 1024, 7, 0, comm, NULL));
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
