/*
 * A CPU emulation of the CUDA runtime and NCCL calls nccl_workload.c makes,
 * for testing the workload where there is no GPU (xtask/src/gpu_check/
 * nccl_tests.rs builds it as one shared library and passes it as both
 * CUDART and NCCL). "Device" memory is host memory; every collective does
 * what NCCL's does (nccl.h's definitions: sums, the root's data, gathered
 * and scattered blocks, point-to-point pairs), so the workload's result
 * checks are exercised for real. Calls inside ncclGroupStart/End are queued
 * and run at the outermost ncclGroupEnd, as a group of ranks in one process
 * must be.
 *
 * NCCL_EMULATION_WRONG=<Op> makes that op deliver a wrong element (its
 * first output element + 1), so the test sees a mismatch reported.
 */
#include <stdlib.h>
#include <string.h>

typedef void *H;

/* ---- CUDA runtime ---- */
const char *cudaGetErrorString(int e) { return e ? "emulated error" : "no error"; }
int cudaRuntimeGetVersion(int *v) { *v = 12090; return 0; }
int cudaDriverGetVersion(int *v) { *v = 12090; return 0; }
int cudaGetDeviceCount(int *v) { *v = 8; return 0; }
int cudaSetDevice(int d) { return d >= 0 && d < 8 ? 0 : 101; }
int cudaMalloc(void **p, size_t s) { *p = malloc(s); return *p ? 0 : 2; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMemcpy(void *d, const void *s, size_t n, int kind) { (void)kind; memcpy(d, s, n); return 0; }
int cudaStreamCreate(H *s) { *s = (H)1; return 0; }
int cudaStreamDestroy(H s) { (void)s; return 0; }
int cudaStreamSynchronize(H s) { (void)s; return 0; }

/* ---- NCCL ---- */
struct comm { int rank, nranks; };
enum { AR, BC, RD, AG, RS, A2A, GA, SC, SE, RE };
static const char *const names[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                    "AlltoAll",  "Gather",    "Scatter", "Send",     "Recv"};
struct call { int op, rank, peer, root; const float *s; float *r; size_t n; };
static struct call pend[256];
static int np, depth;

static float sum_at(int op, size_t j) {
    float s = 0;
    for (int b = 0; b < np; b++)
        if (pend[b].op == op) s += pend[b].s[j];
    return s;
}

static const struct call *of_rank(int op, int rank) {
    for (int b = 0; b < np; b++)
        if (pend[b].op == op && pend[b].rank == rank) return &pend[b];
    return NULL;
}

static void run(void) {
    const char *wrong = getenv("NCCL_EMULATION_WRONG");
    for (int a = 0; a < np; a++) {
        struct call *c = &pend[a];
        const struct call *x;
        size_t n = c->n;
        int touched = 1;
        switch (c->op) {
        case AR:
            for (size_t i = 0; i < n; i++) c->r[i] = sum_at(AR, i);
            break;
        case RD:
            if (c->rank == c->root)
                for (size_t i = 0; i < n; i++) c->r[i] = sum_at(RD, i);
            else
                touched = 0;
            break;
        case BC:
            if ((x = of_rank(BC, c->root))) memcpy(c->r, x->s, n * sizeof(float));
            break;
        case AG:
            for (int b = 0; b < np; b++)
                if (pend[b].op == AG) memcpy(c->r + pend[b].rank * n, pend[b].s, n * sizeof(float));
            break;
        case RS:
            for (size_t i = 0; i < n; i++) c->r[i] = sum_at(RS, c->rank * n + i);
            break;
        case A2A:
            for (int b = 0; b < np; b++)
                if (pend[b].op == A2A)
                    memcpy(c->r + pend[b].rank * n, pend[b].s + c->rank * n, n * sizeof(float));
            break;
        case GA:
            if (c->rank == c->root) {
                for (int b = 0; b < np; b++)
                    if (pend[b].op == GA) memcpy(c->r + pend[b].rank * n, pend[b].s, n * sizeof(float));
            } else {
                touched = 0;
            }
            break;
        case SC:
            if ((x = of_rank(SC, c->root))) memcpy(c->r, x->s + c->rank * n, n * sizeof(float));
            break;
        case RE:
            for (int b = 0; b < np; b++)
                if (pend[b].op == SE && pend[b].rank == c->peer && pend[b].peer == c->rank)
                    memcpy(c->r, pend[b].s, n * sizeof(float));
            break;
        default:
            touched = 0;
        }
        if (touched && wrong && strcmp(wrong, names[c->op]) == 0) c->r[0] += 1;
    }
    np = 0;
}

static int add(int op, H comm, const void *s, void *r, size_t n, int peer, int root) {
    struct comm *c = comm;
    if (!c || np == (int)(sizeof pend / sizeof pend[0])) return 4; /* ncclInvalidArgument */
    pend[np++] = (struct call){op, c->rank, peer, root, s, r, n};
    if (depth == 0) run();
    return 0;
}

const char *ncclGetErrorString(int e) { return e ? "emulated error" : "no error"; }
int ncclGetVersion(int *v) { *v = 23203; return 0; }
int ncclCommInitAll(H *comms, int n, const int *devs) {
    (void)devs;
    for (int i = 0; i < n; i++) {
        struct comm *c = malloc(sizeof *c);
        if (!c) return 2;
        c->rank = i;
        c->nranks = n;
        comms[i] = c;
    }
    return 0;
}
int ncclCommDestroy(H c) { free(c); return 0; }
int ncclGroupStart(void) { depth++; return 0; }
int ncclGroupEnd(void) {
    if (depth == 0) return 5; /* ncclInvalidUsage */
    if (--depth == 0) run();
    return 0;
}
int ncclAllReduce(const void *s, void *r, size_t n, int t, int o, H c, H st) {
    (void)t; (void)o; (void)st;
    return add(AR, c, s, r, n, 0, 0);
}
int ncclReduceScatter(const void *s, void *r, size_t n, int t, int o, H c, H st) {
    (void)t; (void)o; (void)st;
    return add(RS, c, s, r, n, 0, 0);
}
int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, H c, H st) {
    (void)t; (void)st;
    return add(BC, c, s, r, n, 0, root);
}
int ncclGather(const void *s, void *r, size_t n, int t, int root, H c, H st) {
    (void)t; (void)st;
    return add(GA, c, s, r, n, 0, root);
}
int ncclScatter(const void *s, void *r, size_t n, int t, int root, H c, H st) {
    (void)t; (void)st;
    return add(SC, c, s, r, n, 0, root);
}
int ncclReduce(const void *s, void *r, size_t n, int t, int o, int root, H c, H st) {
    (void)t; (void)o; (void)st;
    return add(RD, c, s, r, n, 0, root);
}
int ncclAllGather(const void *s, void *r, size_t n, int t, H c, H st) {
    (void)t; (void)st;
    return add(AG, c, s, r, n, 0, 0);
}
int ncclAlltoAll(const void *s, void *r, size_t n, int t, H c, H st) {
    (void)t; (void)st;
    return add(A2A, c, s, r, n, 0, 0);
}
int ncclSend(const void *s, size_t n, int t, int peer, H c, H st) {
    (void)t; (void)st;
    return add(SE, c, s, NULL, n, peer, 0);
}
int ncclRecv(void *r, size_t n, int t, int peer, H c, H st) {
    (void)t; (void)st;
    return add(RE, c, NULL, r, n, peer, 0);
}
