/*
 * Stand-in for NVIDIA's NCCL (libnccl.so.2) used by faultline's tests and
 * benchmarks. It has NCCL's C ABI (nccl.h 2.x): the same prototypes, the
 * 128-byte ncclUniqueId passed by value, ncclResult_t codes, and every API
 * exported twice as NCCL does, the strong `pncclX` and a weak `ncclX` alias
 * at the same address. `ncclBcast` is implemented through `ncclBroadcast`,
 * as NCCL implements it.
 *
 * Ranks are processes. A communicator created from a unique id keeps each
 * rank's collective sequence number in a shared-memory file named after the
 * id (FAKE_NCCL_SHM_DIR, default /dev/shm), and a collective does what
 * makes NCCL's ranks wait for each other: a rank may be at most
 * FAKE_NCCL_DEPTH (default 1) collectives ahead of the slowest rank of its
 * communicator, and waits inside the call otherwise. A rank that stops thus
 * stops the others one collective later, as on a real job.
 *
 * NCCL 2.32's newer entry points have their real prototypes too: the
 * per-call-config collectives (ncclAllReduceConfig …, a trailing
 * const ncclCollConfig_t *; separate code, as in NCCL, not calling the plain
 * ones), ncclGather / ncclScatter, the one-sided ncclPutSignal / ncclSignal /
 * ncclWaitSignal (no data moves: counted calls only), and the communicator
 * lifecycle ncclCommFinalize / Revoke / Suspend / Resume / Shrink / Grow
 * (shrunk and grown communicators, like splits, do no cross-process
 * ordering), and the device API's ncclDevCommCreate.
 *
 * Network: when FAKE_NCCL_VERBS names a libibverbs (the stand-in) and
 * FAKE_NCCL_IB is "device:port", each rank created from a unique id brings up
 * FAKE_NCCL_QPS (default 2) queue pairs on that port the way NCCL's IB
 * transport does: ibv_modify_qp to INIT with IBV_QP_PORT (and pkey, access
 * flags), then to RTR and RTS, through the library's exported ibv_modify_qp.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4,
    ncclUint64 = 5, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8,
    ncclBfloat16 = 9, ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11, ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct fake_comm *ncclComm_t;
typedef struct CUstream_st *cudaStream_t;
/* ncclConfig_t's first fields (size, magic, version, blocking, ...). */
typedef struct { size_t size; unsigned int magic; unsigned int version; int blocking; } ncclConfig_t;
/* ncclCollConfig_t's first fields (NCCL 2.32: size, magic, version, ...). */
typedef struct { size_t size; unsigned int magic; unsigned int version; } ncclCollConfig_t;
typedef struct fake_window *ncclWindow_t;
typedef struct { int opCnt; int peer; int sigIdx; int ctx; } ncclWaitSignalDesc_t;
/* The device API's host side (nccl_device/host.h): opaque here. */
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct { int rank, nRanks; } ncclDevComm_t;

#define NCCL_SPLIT_NOCOLOR -1
#define MAX_RANKS 64

struct shared { volatile uint64_t seq[MAX_RANKS]; };

struct fake_comm {
    int nranks, rank, device;
    uint64_t seq;
    struct shared *shm; /* NULL: no cross-process ordering (InitAll, split) */
    uint64_t idh;       /* names its split boards (0: none: InitAll, shrink, grow) */
    int splits;         /* ncclCommSplit calls on it so far */
};

/* NCCL_API: strong pncclX, weak ncclX at the same address. */
#define NCCL_API(ret, name, ...)                                                  \
    __attribute__((visibility("default"), noinline)) ret p##name(__VA_ARGS__);    \
    extern __attribute__((visibility("default"), weak, alias("p" #name))) ret     \
        name(__VA_ARGS__);                                                        \
    __attribute__((visibility("default"), noinline)) ret p##name(__VA_ARGS__)

static int dtype_ok(ncclDataType_t t) { return (int)t >= 0 && t < ncclNumTypes; }

static int depth(void) {
    const char *s = getenv("FAKE_NCCL_DEPTH");
    int d = s ? atoi(s) : 1;
    return d < 0 ? 0 : d;
}

static uint64_t id_hash(const ncclUniqueId *id) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) h = (h ^ (unsigned char)id->internal[i]) * 1099511628211ull;
    return h;
}

/* ncclCommSplit's rendezvous: every rank of the parent posts its colour and
 * key on the board of that split call, then waits for all of them. */
struct split_board {
    volatile int32_t posted[MAX_RANKS];
    volatile int32_t color[MAX_RANKS];
    volatile int32_t key[MAX_RANKS];
};

static struct split_board *open_board(uint64_t idh, int call) {
    const char *dir = getenv("FAKE_NCCL_SHM_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/fake-nccl-%016llx-split%d", dir ? dir : "/dev/shm",
             (unsigned long long)idh, call);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return NULL;
    if (ftruncate(fd, sizeof(struct split_board)) != 0) { close(fd); return NULL; }
    void *p = mmap(NULL, sizeof(struct split_board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static struct shared *open_shared(const ncclUniqueId *id) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) h = (h ^ (unsigned char)id->internal[i]) * 1099511628211ull;
    const char *dir = getenv("FAKE_NCCL_SHM_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/fake-nccl-%016llx", dir ? dir : "/dev/shm", (unsigned long long)h);
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return NULL;
    if (ftruncate(fd, sizeof(struct shared)) != 0) { close(fd); return NULL; }
    void *p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* A collective: this rank's sequence advances; it may run at most depth()
 * collectives ahead of the slowest rank. */
static ncclResult_t collective(ncclComm_t comm) {
    comm->seq++;
    if (!comm->shm) return ncclSuccess;
    __atomic_store_n(&comm->shm->seq[comm->rank], comm->seq, __ATOMIC_SEQ_CST);
    uint64_t ahead = (uint64_t)depth();
    for (;;) {
        uint64_t min = UINT64_MAX;
        for (int r = 0; r < comm->nranks; r++) {
            uint64_t s = __atomic_load_n(&comm->shm->seq[r], __ATOMIC_SEQ_CST);
            if (s < min) min = s;
        }
        if (min + ahead >= comm->seq) return ncclSuccess;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* NCCL's IB transport bringing up its queue pairs on FAKE_NCCL_IB. The
 * device, context and QPs live as long as the process (NCCL keeps them for
 * the communicator's life). */
static ncclResult_t ib_connect(void) {
    const char *lib = getenv("FAKE_NCCL_VERBS"), *spec = getenv("FAKE_NCCL_IB");
    if (!lib || !spec) return ncclSuccess;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) return ncclSystemError;
    int (*modify)(struct ibv_qp *, struct ibv_qp_attr *, int) =
        (int (*)(struct ibv_qp *, struct ibv_qp_attr *, int))dlsym(h, "ibv_modify_qp");
    if (!modify) return ncclSystemError;
    static struct ibv_device dev;
    static struct ibv_context ctx;
    static struct ibv_qp qps[16];
    static uint32_t next_qp = 0x100;
    char name[IBV_SYSFS_NAME_MAX];
    unsigned port = 0;
    if (sscanf(spec, "%63[^:]:%u", name, &port) != 2 || port == 0 || port > 255) return ncclInvalidArgument;
    memset(dev.name, 0, sizeof dev.name);
    memcpy(dev.name, name, strlen(name));
    ctx.device = &dev;
    const char *n = getenv("FAKE_NCCL_QPS");
    int nq = n ? atoi(n) : 2;
    if (nq < 0 || nq > 16) return ncclInvalidArgument;
    for (int i = 0; i < nq; i++) {
        struct ibv_qp *qp = &qps[i];
        memset(qp, 0, sizeof *qp);
        qp->context = &ctx;
        qp->qp_num = next_qp++;
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = (uint8_t)port;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        if (modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return ncclSystemError;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_RTR;
        if (modify(qp, &a, IBV_QP_STATE)) return ncclSystemError;
        a.qp_state = IBV_QPS_RTS;
        if (modify(qp, &a, IBV_QP_STATE)) return ncclSystemError;
    }
    return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank) {
    if (!out || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    struct fake_comm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->nranks = nranks;
    c->rank = rank;
    c->shm = open_shared(id);
    if (!c->shm) { free(c); return ncclSystemError; }
    c->idh = id_hash(id);
    ncclResult_t r = ib_connect();
    if (r != ncclSuccess) { munmap((void *)c->shm, sizeof(struct shared)); free(c); return r; }
    *out = c;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetVersion, int *version) {
    if (!version) return ncclInvalidArgument;
    *version = 23203;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0) return ncclSystemError;
    ssize_t n = read(fd, id->internal, sizeof id->internal);
    close(fd);
    return n == (ssize_t)sizeof id->internal ? ncclSuccess : ncclSystemError;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclSystemError: return "unhandled system error";
    default: return "unknown result code";
    }
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    return init_rank(comm, nranks, &commId, rank);
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId,
         int rank, ncclConfig_t *config) {
    (void)config;
    return init_rank(comm, nranks, &commId, rank);
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank, int nId,
         ncclUniqueId *commIds, ncclConfig_t *config) {
    (void)config;
    if (nId < 1 || !commIds) return ncclInvalidArgument;
    return init_rank(newcomm, nranks, &commIds[0], myrank);
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist) {
    if (!comms || ndev < 1 || ndev > MAX_RANKS) return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        struct fake_comm *c = calloc(1, sizeof *c);
        if (!c) return ncclSystemError;
        c->nranks = ndev;
        c->rank = i;
        c->device = devlist ? devlist[i] : i;
        comms[i] = c;
    }
    return ncclSuccess;
}

/* As NCCL: every rank of the parent calls it; those passing one colour form
 * one communicator, ranked by key, then by parent rank; NCCL_SPLIT_NOCOLOR
 * gets none. The ranks meet on a board in FAKE_NCCL_SHM_DIR named after the
 * parent and the split call (at most FAKE_NCCL_SPLIT_WAIT_S, default 60 s,
 * then ncclRemoteError). A parent with no board name (ncclCommInitAll,
 * shrink, grow) gives rank and size -1. */
NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
         ncclConfig_t *config) {
    (void)config;
    if (!comm || !newcomm || color < NCCL_SPLIT_NOCOLOR) return ncclInvalidArgument;
    int call = comm->splits++, nranks = -1, rank = -1;
    if (comm->idh && comm->nranks > 0 && comm->rank >= 0) {
        struct split_board *b = open_board(comm->idh, call);
        if (!b) return ncclSystemError;
        __atomic_store_n(&b->color[comm->rank], color, __ATOMIC_SEQ_CST);
        __atomic_store_n(&b->key[comm->rank], key, __ATOMIC_SEQ_CST);
        __atomic_store_n(&b->posted[comm->rank], 1, __ATOMIC_SEQ_CST);
        const char *w = getenv("FAKE_NCCL_SPLIT_WAIT_S");
        long waits = (w ? atol(w) : 60) * 1000;
        for (int r = 0; r < comm->nranks; r++) {
            while (!__atomic_load_n(&b->posted[r], __ATOMIC_SEQ_CST)) {
                if (waits-- <= 0) { munmap((void *)b, sizeof *b); return ncclRemoteError; }
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
        }
        nranks = rank = 0;
        for (int r = 0; r < comm->nranks; r++) {
            int c = __atomic_load_n(&b->color[r], __ATOMIC_SEQ_CST);
            int k = __atomic_load_n(&b->key[r], __ATOMIC_SEQ_CST);
            if (c != color) continue;
            nranks++;
            if (k < key || (k == key && r < comm->rank)) rank++;
        }
        munmap((void *)b, sizeof *b);
    }
    if (color == NCCL_SPLIT_NOCOLOR) { *newcomm = NULL; return ncclSuccess; }
    struct fake_comm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->nranks = nranks;
    c->rank = rank;
    c->device = comm->device;
    /* Its own splits meet on boards named after it. */
    c->idh = comm->idh ? (comm->idh ^ ((uint64_t)(uint32_t)color << 32 ^ (uint64_t)call)) * 1099511628211ull : 0;
    *newcomm = c;
    return ncclSuccess;
}

static ncclResult_t destroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    if (comm->shm) munmap((void *)comm->shm, sizeof(struct shared));
    free(comm);
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) { return destroy(comm); }

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) { return destroy(comm); }

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count) {
    if (!comm || !count) return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank) {
    if (!comm || !rank) return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

#define CHECK_ARGS(comm, dt) \
    do { if (!(comm) || !dtype_ok(dt)) return ncclInvalidArgument; } while (0)

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)op; (void)stream;
    CHECK_ARGS(comm, datatype);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)recvcount; (void)op; (void)stream;
    CHECK_ARGS(comm, datatype);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)root; (void)stream;
    CHECK_ARGS(comm, datatype);
    return collective(comm);
}

/* As NCCL: the in-place broadcast is a broadcast (through the public symbol). */
NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)op; (void)root; (void)stream;
    CHECK_ARGS(comm, datatype);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)sendcount; (void)stream;
    CHECK_ARGS(comm, datatype);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    return peer >= 0 ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
    (void)recvbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    return peer >= 0 ? ncclSuccess : ncclInvalidArgument;
}

static __thread int group_depth;

NCCL_API(ncclResult_t, ncclGroupStart, void) {
    group_depth++;
    return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) {
    if (group_depth == 0) return ncclInvalidUsage;
    group_depth--;
    return ncclSuccess;
}

/* ---- NCCL 2.32's newer entry points ---- */

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    return root >= 0 ? collective(comm) : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    return root >= 0 ? collective(comm) : ncclInvalidArgument;
}

/* Per-call config variants: their own code (as NCCL 2.32's), no call to
 * the plain entry point, so a probe on each counts each call once. */
#define CHECK_CONFIG(config) do { if (!(config)) return ncclInvalidArgument; } while (0)

NCCL_API(ncclResult_t, ncclAllReduceConfig, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)op; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclBroadcastConfig, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)root; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclReduceConfig, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)op; (void)root; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclAllGatherConfig, const void *sendbuff, void *recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)sendcount; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclReduceScatterConfig, const void *sendbuff, void *recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)recvcount; (void)op; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclAlltoAllConfig, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream, const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return collective(comm);
}

NCCL_API(ncclResult_t, ncclGatherConfig, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return root >= 0 ? collective(comm) : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclScatterConfig, const void *sendbuff, void *recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t *config) {
    (void)sendbuff; (void)recvbuff; (void)count; (void)stream;
    CHECK_ARGS(comm, datatype);
    CHECK_CONFIG(config);
    return root >= 0 ? collective(comm) : ncclInvalidArgument;
}

/* One-sided: enqueued on the stream in NCCL; nothing moves here. */
NCCL_API(ncclResult_t, ncclPutSignal, const void *localbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
         ncclComm_t comm, cudaStream_t stream) {
    (void)localbuff; (void)count; (void)peerWin; (void)peerWinOffset; (void)sigIdx; (void)ctx;
    (void)stream;
    CHECK_ARGS(comm, datatype);
    return peer >= 0 && flags == 0 ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
         cudaStream_t stream) {
    (void)sigIdx; (void)ctx; (void)stream;
    if (!comm) return ncclInvalidArgument;
    return peer >= 0 && flags == 0 ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t *signalDescs, ncclComm_t comm,
         cudaStream_t stream) {
    (void)stream;
    if (!comm || nDesc < 0 || (nDesc > 0 && !signalDescs)) return ncclInvalidArgument;
    return ncclSuccess;
}

/* Lifecycle. */
NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
    return comm ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
    return comm && revokeFlags == 0 ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
    (void)flags;
    return comm ? ncclSuccess : ncclInvalidArgument;
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
    return comm ? ncclSuccess : ncclInvalidArgument;
}

/* The parent's ranks but the excluded ones, in their order. */
NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
         ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
    (void)config; (void)shrinkFlags;
    if (!comm || !newcomm || excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList))
        return ncclInvalidArgument;
    int below = 0;
    for (int i = 0; i < excludeRanksCount; i++) {
        if (excludeRanksList[i] == comm->rank) return ncclInvalidUsage; /* an excluded rank */
        if (excludeRanksList[i] < comm->rank) below++;
    }
    struct fake_comm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->nranks = comm->nranks - excludeRanksCount;
    c->rank = comm->rank - below;
    c->device = comm->device;
    *newcomm = c;
    return ncclSuccess;
}

/* Existing ranks: comm, rank -1 (uniqueId on the root only); new ranks: no
 * comm, the grow id and their rank. */
NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
         ncclComm_t *newcomm, ncclConfig_t *config) {
    (void)config;
    if (!newcomm || nRanks < 1 || nRanks > MAX_RANKS) return ncclInvalidArgument;
    if (comm ? rank != -1 : (!uniqueId || rank < 0 || rank >= nRanks)) return ncclInvalidArgument;
    struct fake_comm *c = calloc(1, sizeof *c);
    if (!c) return ncclSystemError;
    c->nranks = nRanks;
    c->rank = comm ? comm->rank : rank;
    c->device = comm ? comm->device : 0;
    *newcomm = c;
    return ncclSuccess;
}

/* A device communicator (kernels that communicate by themselves). */
NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
         ncclDevComm_t *outDevComm) {
    if (!comm || !reqs || !outDevComm) return ncclInvalidArgument;
    outDevComm->rank = comm->rank;
    outDevComm->nRanks = comm->nranks;
    return ncclSuccess;
}
