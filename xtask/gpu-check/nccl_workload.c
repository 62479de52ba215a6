/*
 * faultline gpu-check NCCL workload: real NCCL collectives on a communicator
 * made by ncclCommInitAll, through NVIDIA's CUDA runtime. `cargo xtask
 * gpu-check` compiles it at run time with the system C compiler; it needs
 * no CUDA toolkit and no NCCL headers: it loads libcudart and libnccl.so.2
 * with dlopen() (the paths the check found on the node) and declares the
 * few prototypes it calls (nccl.h 2.x, cuda_runtime_api.h).
 *
 *   nccl_workload run CUDART NCCL ROUNDS ELEMENTS DEV [DEV ...]
 *       ncclCommInitAll over the listed CUDA devices (one rank per device, in
 *       this process), a stream and buffers per rank (cudaMalloc, filled with
 *       cudaMemcpy), then ROUNDS times, each op on every rank (grouped with
 *       ncclGroupStart/End when there is more than one rank; Send/Recv always
 *       grouped: a ring, rank r sends to r+1 and receives from r-1):
 *       AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, and where the
 *       library exports them AlltoAll, Gather, Scatter, then Send + Recv;
 *       after each op every stream synchronised, and in the first and the
 *       last round each rank's output (zeroed before the op) copied back and
 *       checked against what the op must produce. Then ncclCommDestroy on
 *       each.
 *       Every op is called with count ELEMENTS of float32 (4 bytes).
 *
 * Every NCCL call goes through one wrapper that counts it per rank, so the
 * lines
 *   op <rank> <Op> <calls> <bytes>      group <GroupStart|GroupEnd> <calls>
 * are what the program really did (bytes: count x datatype size as passed),
 * not a formula. Other lines: pid <pid>, cudart_version <v>,
 * driver_version <v>, nccl_version <v>, cuda_devices <n>, nranks <n>,
 * rank <rank> device <ordinal>, skipped_op <Op> (not exported),
 * verify ok | verify mismatches=<n>, mismatch <Op> <rank> <index> <got> <want>
 * (the first), done (last), error <what> <code> <message>.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_FAILED 1
#define EXIT_USAGE 2
#define MAX_RANKS 8
#define FLOAT32 7 /* ncclFloat32 */
#define SUM 0     /* ncclSum */
#define HTOD 1    /* cudaMemcpyHostToDevice */
#define DTOH 2    /* cudaMemcpyDeviceToHost */

typedef void *H;
typedef int (*coll_red_t)(const void *, void *, size_t, int, int, H, H);      /* AllReduce, ReduceScatter */
typedef int (*coll_root_t)(const void *, void *, size_t, int, int, H, H);     /* Broadcast, Gather, Scatter */
typedef int (*coll_t)(const void *, void *, size_t, int, H, H);               /* AllGather, AlltoAll */
typedef int (*reduce_t)(const void *, void *, size_t, int, int, int, H, H);   /* Reduce */
typedef int (*send_t)(const void *, size_t, int, int, H, H);
typedef int (*recv_t)(void *, size_t, int, int, H, H);

static void *cudart, *nccl;
static const char *(*cuda_err)(int);
static const char *(*nccl_err)(int);

static void *sym(void *lib, const char *name, int required) {
    void *p = dlsym(lib, name);
    if (!p && required) {
        printf("error missing-symbol-%s 0 %s\n", name, lib == nccl ? "libnccl" : "libcudart");
        fflush(stdout);
        exit(EXIT_FAILED);
    }
    return p;
}

static void cuda_check(int r, const char *what) {
    if (r == 0) return;
    printf("error %s %d %s\n", what, r, cuda_err ? cuda_err(r) : "");
    fflush(stdout);
    exit(EXIT_FAILED);
}

static void nccl_check(int r, const char *what) {
    /* ncclInProgress (7) is success for a non-blocking communicator. */
    if (r == 0 || r == 7) return;
    printf("error %s %d %s\n", what, r, nccl_err ? nccl_err(r) : "");
    fflush(stdout);
    exit(EXIT_FAILED);
}

/* The ops, by the collector's names, in the order they run. */
enum { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL, GATHER, SCATTER, SEND, RECV, NOPS };
static const char *const op_name[NOPS] = {
    "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
    "AlltoAll",  "Gather",    "Scatter", "Send",     "Recv",
};
static const char *const op_sym[NOPS] = {
    "ncclAllReduce", "ncclBroadcast", "ncclReduce",  "ncclAllGather", "ncclReduceScatter",
    "ncclAlltoAll",  "ncclGather",    "ncclScatter", "ncclSend",      "ncclRecv",
};
/* Added in NCCL 2.28: run where the library exports them. */
static const int op_optional[NOPS] = {0, 0, 0, 0, 0, 1, 1, 1, 0, 0};
static void *op_fn[NOPS];
static unsigned long long calls[MAX_RANKS][NOPS], bytes[MAX_RANKS][NOPS];
static unsigned long long group_start_calls, group_end_calls;
static int (*group_start)(void), (*group_end)(void);

static void group_begin(void) {
    group_start_calls++;
    nccl_check(group_start(), "ncclGroupStart");
}

static void group_finish(void) {
    group_end_calls++;
    nccl_check(group_end(), "ncclGroupEnd");
}

struct rank {
    int dev;
    H comm, stream;
    float *send, *recv; /* device, ELEMENTS x nranks floats each */
};

static int nranks;
static size_t n; /* ELEMENTS */
static struct rank ranks[MAX_RANKS];

/* Rank r's send buffer: element j is (j % 97) + r (exact in float32). */
static float pattern(size_t j, int r) { return (float)(j % 97) + (float)r; }

static float sum_over_ranks(size_t j) {
    return (float)nranks * (float)(j % 97) + (float)(nranks * (nranks - 1) / 2);
}

/* One op on rank r, counted. */
static void issue(int o, int r) {
    struct rank *k = &ranks[r];
    int root = 0, peer;
    calls[r][o]++;
    bytes[r][o] += n * 4;
    int rc;
    switch (o) {
    case ALLREDUCE:
    case REDUCESCATTER:
        rc = ((coll_red_t)op_fn[o])(k->send, k->recv, n, FLOAT32, SUM, k->comm, k->stream);
        break;
    case BROADCAST:
    case GATHER:
    case SCATTER:
        rc = ((coll_root_t)op_fn[o])(k->send, k->recv, n, FLOAT32, root, k->comm, k->stream);
        break;
    case REDUCE:
        rc = ((reduce_t)op_fn[o])(k->send, k->recv, n, FLOAT32, SUM, root, k->comm, k->stream);
        break;
    case ALLGATHER:
    case ALLTOALL:
        rc = ((coll_t)op_fn[o])(k->send, k->recv, n, FLOAT32, k->comm, k->stream);
        break;
    case SEND:
        peer = (r + 1) % nranks;
        rc = ((send_t)op_fn[o])(k->send, n, FLOAT32, peer, k->comm, k->stream);
        break;
    default: /* RECV */
        peer = (r + nranks - 1) % nranks;
        rc = ((recv_t)op_fn[o])(k->recv, n, FLOAT32, peer, k->comm, k->stream);
        break;
    }
    nccl_check(rc, op_sym[o]);
}

/* How many elements of rank r's receive buffer op o writes (0: none, a
 * non-root rank of Reduce or Gather). */
static size_t out_len(int o, int r) {
    switch (o) {
    case REDUCE:
        return r == 0 ? n : 0;
    case GATHER:
        return r == 0 ? n * (size_t)nranks : 0;
    case ALLGATHER:
    case ALLTOALL:
        return n * (size_t)nranks;
    default:
        return n;
    }
}

/* What rank r's receive buffer must hold at element j after op o; returns 0
 * where the op defines nothing (a non-root rank of Reduce or Gather, or
 * past the op's output). */
static int expected(int o, int r, size_t j, float *want) {
    size_t q = j / n, i = j % n;
    switch (o) {
    case ALLREDUCE:
        if (j >= n) return 0;
        *want = sum_over_ranks(j);
        return 1;
    case BROADCAST:
        if (j >= n) return 0;
        *want = pattern(j, 0);
        return 1;
    case REDUCE:
        if (r != 0 || j >= n) return 0;
        *want = sum_over_ranks(j);
        return 1;
    case ALLGATHER:
        *want = pattern(i, (int)q);
        return 1;
    case REDUCESCATTER:
        if (j >= n) return 0;
        *want = sum_over_ranks((size_t)r * n + j);
        return 1;
    case ALLTOALL:
        *want = pattern((size_t)r * n + i, (int)q);
        return 1;
    case GATHER:
        if (r != 0) return 0;
        *want = pattern(i, (int)q);
        return 1;
    case SCATTER:
        if (j >= n) return 0;
        *want = pattern((size_t)r * n + j, 0);
        return 1;
    case RECV:
        if (j >= n) return 0;
        *want = pattern(j, (r + nranks - 1) % nranks);
        return 1;
    default:
        return 0;
    }
}

int main(int argc, char **argv) {
    if (argc < 7 || strcmp(argv[1], "run") != 0) {
        fprintf(stderr, "usage: %s run CUDART NCCL ROUNDS ELEMENTS DEV [DEV ...]\n", argv[0]);
        return EXIT_USAGE;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rounds = atoi(argv[4]);
    long elements = atol(argv[5]);
    nranks = argc - 6;
    if (rounds < 1 || elements < 1 || nranks > MAX_RANKS) {
        fprintf(stderr, "ROUNDS and ELEMENTS must be positive, at most %d devices\n", MAX_RANKS);
        return EXIT_USAGE;
    }
    n = (size_t)elements;
    int devlist[MAX_RANKS];
    for (int r = 0; r < nranks; r++) devlist[r] = atoi(argv[6 + r]);
    printf("pid %d\n", (int)getpid());

    cudart = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
    if (!cudart) {
        printf("error dlopen-cudart 0 %s\n", dlerror());
        return EXIT_FAILED;
    }
    cuda_err = (const char *(*)(int))sym(cudart, "cudaGetErrorString", 1);
    int (*runtime_version)(int *) = (int (*)(int *))sym(cudart, "cudaRuntimeGetVersion", 1);
    int (*driver_version)(int *) = (int (*)(int *))sym(cudart, "cudaDriverGetVersion", 1);
    int (*device_count)(int *) = (int (*)(int *))sym(cudart, "cudaGetDeviceCount", 1);
    int (*set_device)(int) = (int (*)(int))sym(cudart, "cudaSetDevice", 1);
    int (*cmalloc)(void **, size_t) = (int (*)(void **, size_t))sym(cudart, "cudaMalloc", 1);
    int (*cfree)(void *) = (int (*)(void *))sym(cudart, "cudaFree", 1);
    int (*memcpy_)(void *, const void *, size_t, int) =
        (int (*)(void *, const void *, size_t, int))sym(cudart, "cudaMemcpy", 1);
    int (*stream_create)(H *) = (int (*)(H *))sym(cudart, "cudaStreamCreate", 1);
    int (*stream_destroy)(H) = (int (*)(H))sym(cudart, "cudaStreamDestroy", 1);
    int (*stream_sync)(H) = (int (*)(H))sym(cudart, "cudaStreamSynchronize", 1);
    int v = 0;
    cuda_check(runtime_version(&v), "cudaRuntimeGetVersion");
    printf("cudart_version %d\n", v);
    cuda_check(driver_version(&v), "cudaDriverGetVersion");
    printf("driver_version %d\n", v);
    cuda_check(device_count(&v), "cudaGetDeviceCount");
    printf("cuda_devices %d\n", v);

    nccl = dlopen(argv[3], RTLD_NOW | RTLD_LOCAL);
    if (!nccl) {
        printf("error dlopen-nccl 0 %s\n", dlerror());
        return EXIT_FAILED;
    }
    nccl_err = (const char *(*)(int))sym(nccl, "ncclGetErrorString", 1);
    int (*get_version)(int *) = (int (*)(int *))sym(nccl, "ncclGetVersion", 1);
    int (*init_all)(H *, int, const int *) = (int (*)(H *, int, const int *))sym(nccl, "ncclCommInitAll", 1);
    int (*destroy)(H) = (int (*)(H))sym(nccl, "ncclCommDestroy", 1);
    group_start = (int (*)(void))sym(nccl, "ncclGroupStart", 1);
    group_end = (int (*)(void))sym(nccl, "ncclGroupEnd", 1);
    for (int o = 0; o < NOPS; o++) {
        op_fn[o] = sym(nccl, op_sym[o], !op_optional[o]);
        if (!op_fn[o]) printf("skipped_op %s (not exported)\n", op_name[o]);
    }
    nccl_check(get_version(&v), "ncclGetVersion");
    printf("nccl_version %d\n", v);

    H comms[MAX_RANKS];
    cuda_check(set_device(devlist[0]), "cudaSetDevice");
    nccl_check(init_all(comms, nranks, devlist), "ncclCommInitAll");
    printf("nranks %d\n", nranks);

    size_t total = n * (size_t)nranks, size = total * sizeof(float);
    float *host = malloc(size), *zero = calloc(total, sizeof(float));
    if (!host || !zero) {
        printf("error malloc 0 out of memory\n");
        return EXIT_FAILED;
    }
    for (int r = 0; r < nranks; r++) {
        struct rank *k = &ranks[r];
        k->dev = devlist[r];
        k->comm = comms[r];
        printf("rank %d device %d\n", r, k->dev);
        cuda_check(set_device(k->dev), "cudaSetDevice");
        cuda_check(stream_create(&k->stream), "cudaStreamCreate");
        cuda_check(cmalloc((void **)&k->send, size), "cudaMalloc");
        cuda_check(cmalloc((void **)&k->recv, size), "cudaMalloc");
        for (size_t j = 0; j < total; j++) host[j] = pattern(j, r);
        cuda_check(memcpy_(k->send, host, size, HTOD), "cudaMemcpy-HtoD");
    }

    unsigned long long mismatches = 0;
    for (int round = 0; round < rounds; round++) {
        /* The first and the last round are checked (every round issues the same calls). */
        int verify = round == 0 || round == rounds - 1;
        for (int o = 0; o < NOPS; o++) {
            if (!op_fn[o] || o == RECV) continue;
            int checked = o == SEND ? RECV : o;
            for (int r = 0; verify && r < nranks; r++) {
                size_t len = out_len(checked, r) * sizeof(float);
                if (len == 0) continue;
                cuda_check(set_device(ranks[r].dev), "cudaSetDevice");
                cuda_check(memcpy_(ranks[r].recv, zero, len, HTOD), "cudaMemcpy-HtoD");
            }
            int grouped = nranks > 1 || o == SEND;
            if (grouped) group_begin();
            for (int r = 0; r < nranks; r++) {
                issue(o, r);
                if (o == SEND) issue(RECV, r);
            }
            if (grouped) group_finish();
            for (int r = 0; r < nranks; r++) {
                cuda_check(set_device(ranks[r].dev), "cudaSetDevice");
                cuda_check(stream_sync(ranks[r].stream), "cudaStreamSynchronize");
                size_t len = verify ? out_len(checked, r) : 0;
                if (len == 0) continue;
                cuda_check(memcpy_(host, ranks[r].recv, len * sizeof(float), DTOH), "cudaMemcpy-DtoH");
                for (size_t j = 0; j < len; j++) {
                    float want;
                    if (!expected(checked, r, j, &want) || host[j] == want) continue;
                    if (mismatches++ == 0)
                        printf("mismatch %s %d %zu %g %g\n", op_name[checked], r, j, host[j], want);
                }
            }
        }
    }

    for (int r = 0; r < nranks; r++) {
        cuda_check(set_device(ranks[r].dev), "cudaSetDevice");
        nccl_check(destroy(ranks[r].comm), "ncclCommDestroy");
        cuda_check(cfree(ranks[r].send), "cudaFree");
        cuda_check(cfree(ranks[r].recv), "cudaFree");
        cuda_check(stream_destroy(ranks[r].stream), "cudaStreamDestroy");
    }
    for (int r = 0; r < nranks; r++)
        for (int o = 0; o < NOPS; o++)
            if (calls[r][o]) printf("op %d %s %llu %llu\n", r, op_name[o], calls[r][o], bytes[r][o]);
    printf("group GroupStart %llu\ngroup GroupEnd %llu\n", group_start_calls, group_end_calls);
    if (mismatches == 0)
        printf("verify ok\n");
    else
        printf("verify mismatches=%llu\n", mismatches);
    printf("done\n");
    free(host);
    free(zero);
    return 0;
}
