/*
 * A verbs workload for faultline's tests: loads the stand-in with dlopen()
 * and calls the provider's data-path functions and libibverbs' control-path
 * functions exactly as its arguments say:
 *
 *   verbs_workload LIB TOKEN...
 *     qp:N                       use a QP with qp_num N
 *     send:COUNT:WRS:SGES:LEN    COUNT post_send calls, each a chain of WRS work
 *                                requests of SGES entries of LEN bytes
 *     recv:COUNT:WRS:SGES:LEN    the same with post_recv
 *     wc:STATUS:COUNT:BYTES      queue COUNT completions with that status on the QP
 *     poll:BATCH                 poll_cq with num_entries BATCH until the queue is empty
 *     modify:STATE               ibv_modify_qp(qp, {qp_state = STATE}, IBV_QP_STATE)
 *     modifypkey                 ibv_modify_qp without IBV_QP_STATE in the mask
 *     async:TYPE:PORT            queue an async event and read it with ibv_get_async_event
 *     asyncempty                 ibv_get_async_event with nothing queued (fails)
 * Prints "ready <pid>" and "done".
 */
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *lib;
static void *sym(const char *n) {
    void *p = dlsym(lib, n);
    if (!p) { fprintf(stderr, "missing %s\n", n); exit(3); }
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    int (*poll)(struct ibv_cq *, int, struct ibv_wc *) = sym("fakeprov_poll_cq");
    int (*psend)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **) = sym("fakeprov_post_send");
    int (*precv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **) = sym("fakeprov_post_recv");
    int (*modify)(struct ibv_qp *, struct ibv_qp_attr *, int) = sym("ibv_modify_qp");
    int (*get_async)(struct ibv_context *, struct ibv_async_event *) = sym("ibv_get_async_event");
    void (*script_wc)(uint32_t, int, uint32_t, int) = sym("fakeprov_script_wc");
    void (*push_async)(int, int) = sym("fakeverbs_push_async");
    static struct ibv_qp qp;
    static struct ibv_cq cq;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char buf[4096];
    struct ibv_send_wr swr[64];
    struct ibv_recv_wr rwr[64];
    struct ibv_sge sge[64][8];
    struct ibv_wc wcs[256];
    for (int i = 2; i < argc; i++) {
        const char *t = argv[i];
        unsigned a, b, c, d;
        int s;
        if (sscanf(t, "qp:%u", &a) == 1) {
            qp.qp_num = a;
        } else if (sscanf(t, "send:%u:%u:%u:%u", &a, &b, &c, &d) == 4 || sscanf(t, "recv:%u:%u:%u:%u", &a, &b, &c, &d) == 4) {
            if (b == 0 || b > 64 || c > 8) return 2;
            int is_send = t[0] == 's';
            for (unsigned k = 0; k < b; k++) {
                for (unsigned j = 0; j < c; j++) {
                    sge[k][j].addr = (uintptr_t)buf;
                    sge[k][j].length = d;
                    sge[k][j].lkey = 1;
                }
                memset(&swr[k], 0, sizeof swr[k]);
                memset(&rwr[k], 0, sizeof rwr[k]);
                swr[k].sg_list = sge[k]; swr[k].num_sge = (int)c; swr[k].next = k + 1 < b ? &swr[k + 1] : NULL;
                rwr[k].sg_list = sge[k]; rwr[k].num_sge = (int)c; rwr[k].next = k + 1 < b ? &rwr[k + 1] : NULL;
            }
            for (unsigned n = 0; n < a; n++) {
                if (is_send) { struct ibv_send_wr *bad; if (psend(&qp, swr, &bad)) return 4; }
                else { struct ibv_recv_wr *bad; if (precv(&qp, rwr, &bad)) return 4; }
            }
        } else if (sscanf(t, "wc:%d:%u:%u", &s, &a, &b) == 3) {
            script_wc(qp.qp_num, s, b, (int)a);
        } else if (sscanf(t, "poll:%u", &a) == 1) {
            if (a == 0 || a > 256) return 2;
            while (poll(&cq, (int)a, wcs) > 0) {}
        } else if (sscanf(t, "modify:%u", &a) == 1) {
            struct ibv_qp_attr attr;
            memset(&attr, 0, sizeof attr);
            attr.qp_state = (enum ibv_qp_state)a;
            if (modify(&qp, &attr, IBV_QP_STATE)) return 4;
        } else if (!strcmp(t, "modifypkey")) {
            struct ibv_qp_attr attr;
            memset(&attr, 0, sizeof attr);
            attr.qp_state = IBV_QPS_ERR;
            if (modify(&qp, &attr, IBV_QP_PKEY_INDEX)) return 4;
        } else if (sscanf(t, "async:%u:%u", &a, &b) == 2) {
            struct ibv_async_event ev;
            push_async((int)a, (int)b);
            if (get_async(NULL, &ev)) return 4;
        } else if (!strcmp(t, "wait")) {
            /* Stay alive (so the collector keeps this process's series)
               until stdin closes. */
            printf("waiting\n");
            fflush(stdout);
            while (getchar() != EOF) {}
        } else if (!strcmp(t, "asyncempty")) {
            struct ibv_async_event ev;
            if (get_async(NULL, &ev) == 0) return 4;
        } else {
            fprintf(stderr, "unknown token %s\n", t);
            return 2;
        }
    }
    printf("done\n");
    fflush(stdout);
    return 0;
}
