/*
 * Stand-in for libibverbs plus a verbs provider, for faultline's verbs
 * probes. Uses the real rdma-core headers, so every structure has the real
 * layout. Exports the libibverbs control-path functions faultline probes
 * (ibv_modify_qp, ibv_get_async_event) and provider data-path functions
 * (fakeprov_poll_cq, fakeprov_post_send, fakeprov_post_recv) with the
 * signatures of the provider ops, plus scripting hooks for the workload.
 */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#define QCAP 65536
static struct ibv_wc queue[QCAP];
static int qhead, qtail;
static int async_types[256];
static int async_ports[256];
static int ahead, atail;

void fakeprov_script_wc(uint32_t qp_num, int status, uint32_t byte_len, int count) {
    for (int i = 0; i < count && qtail < QCAP; i++) {
        struct ibv_wc *wc = &queue[qtail++];
        memset(wc, 0, sizeof *wc);
        wc->wr_id = (uint64_t)qtail;
        wc->status = (enum ibv_wc_status)status;
        wc->opcode = IBV_WC_RECV;
        wc->byte_len = byte_len;
        wc->qp_num = qp_num;
    }
}

void fakeverbs_push_async(int type, int port) {
    if (atail < 256) {
        async_types[atail] = type;
        async_ports[atail++] = port;
    }
}

__attribute__((noinline)) int fakeprov_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc) {
    (void)cq;
    int n = 0;
    while (n < num_entries && qhead < qtail) wc[n++] = queue[qhead++];
    return n;
}

__attribute__((noinline)) int fakeprov_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr) {
    if (!qp) { if (bad_wr) *bad_wr = wr; return 22; }
    return 0;
}

__attribute__((noinline)) int fakeprov_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr) {
    if (!qp) { if (bad_wr) *bad_wr = wr; return 22; }
    return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask) {
    if (!qp || !attr) return 22;
    if (attr_mask & IBV_QP_STATE) qp->state = attr->qp_state;
    return 0;
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event) {
    (void)context;
    if (ahead >= atail) return -1;
    memset(event, 0, sizeof *event);
    event->event_type = (enum ibv_event_type)async_types[ahead];
    event->element.port_num = async_ports[ahead++];
    return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }
