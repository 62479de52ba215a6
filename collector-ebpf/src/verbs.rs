//! Verbs uprobes: the RDMA user-space data path, which bypasses the kernel.
//!
//! `ibv_poll_cq`/`ibv_post_send`/`ibv_post_recv` are inline calls through the
//! provider's ops table, so the data-path probes attach to the provider's
//! functions (by symbol, or at an offset resolved from an opened context's
//! ops table); the control-path probes attach to libibverbs' exports.
//!
//! - provider `int poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)`
//!   → [`verbs_poll_enter`] + [`verbs_poll_return`]: each returned `ibv_wc`
//!   (48 bytes: `status` at 8, `byte_len` at 20, `qp_num` at 28) counted per
//!   (pid, QP, status).
//! - provider `int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct
//!   ibv_send_wr **bad_wr)` / `post_recv(struct ibv_qp *, struct ibv_recv_wr *,
//!   struct ibv_recv_wr **)` → [`verbs_post`] (cookie 0 send, 1 recv): the WR
//!   chain (`next` at 8, `sg_list` at 16, `num_sge` at 24; `ibv_sge.length` at 8)
//!   per (pid, QP); `ibv_qp.qp_num` at 52.
//! - `int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)`
//!   → [`verbs_modify_qp`]: with `IBV_QP_STATE` in the mask, `attr->qp_state`
//!   (offset 0) counted per (pid, QP, state); with `IBV_QP_PORT`,
//!   `attr->port_num` (offset 129) and `qp->context->device->name` counted
//!   per (pid, device, port): the HCA ports a process's QPs are bound to.
//! - `int ibv_get_async_event(struct ibv_context *, struct ibv_async_event *event)`
//!   → [`verbs_async_enter`] + [`verbs_async_return`]: `event->event_type` (offset 8).
use aya_ebpf::{
    helpers::{bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_probe_read_user, generated},
    macros::{map, uprobe, uretprobe},
    maps::HashMap,
    programs::{ProbeContext, RetProbeContext},
    EbpfContext,
};
use collector_common::{
    stat,
    verbs::{
        abi, AsyncKey, PostKey, PostStats, QpPortKey, QpStateKey, WcKey, WcStats, DEV_NAME_LEN,
        MAX_SGE_PER_WR, MAX_WC_PER_POLL, MAX_WR_PER_POST,
    },
};

use crate::{
    helpers::{add, get_or_insert},
    stats::{bump, bump_by},
};

#[map(name = "VERBS_WC")]
static VERBS_WC: HashMap<WcKey, WcStats> = HashMap::with_max_entries(16384, 0);

#[map(name = "VERBS_POST")]
static VERBS_POST: HashMap<PostKey, PostStats> = HashMap::with_max_entries(16384, 0);

#[map(name = "VERBS_QP_STATE")]
static VERBS_QP_STATE: HashMap<QpStateKey, u64> = HashMap::with_max_entries(16384, 0);

#[map(name = "VERBS_QP_PORT")]
static VERBS_QP_PORT: HashMap<QpPortKey, u64> = HashMap::with_max_entries(4096, 0);

#[map(name = "VERBS_ASYNC")]
static VERBS_ASYNC: HashMap<AsyncKey, u64> = HashMap::with_max_entries(1024, 0);

/// Entry arguments until the return probe, per thread: `[pointer, aux]`.
#[map(name = "VERBS_IN_CALL")]
static VERBS_IN_CALL: HashMap<[u64; 2], [u64; 2]> = HashMap::with_max_entries(65536, 0);

const SLOT_POLL: u64 = 0;
const SLOT_ASYNC: u64 = 1;
const IBV_QP_STATE: u64 = 1;
const IBV_QP_PORT: u64 = 1 << 5;

/// The `ibv_wc` fields faultline reads (offsets 8..32).
#[repr(C)]
#[derive(Clone, Copy)]
struct WcPart {
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm: u32,
    qp_num: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct WrHead {
    wr_id: u64,
    next: u64,
    sg_list: u64,
    num_sge: i32,
    _op: u32,
}

// The structs above are windows onto libibverbs' ABI (`abi`, asserted
// against rdma-sys in the collector's tests).
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(WcPart, byte_len) as u64 == abi::WC_BYTE_LEN - abi::WC_STATUS);
    assert!(offset_of!(WcPart, qp_num) as u64 == abi::WC_QP_NUM - abi::WC_STATUS);
    assert!(offset_of!(WrHead, next) as u64 == abi::WR_NEXT);
    assert!(offset_of!(WrHead, sg_list) as u64 == abi::WR_SG_LIST);
    assert!(offset_of!(WrHead, num_sge) as u64 == abi::WR_NUM_SGE);
    // Each scatter/gather entry is two words, its length the low half of the second.
    assert!(abi::SGE_SIZE == 16 && abi::SGE_LENGTH == 8);
};

/// uprobe: provider `poll_cq(cq, num_entries, wc)`: remember `wc`.
#[uprobe]
pub fn verbs_poll_enter(ctx: ProbeContext) -> u32 {
    let wc: u64 = ctx.arg(2).unwrap_or(0);
    let n: u64 = ctx.arg(1).unwrap_or(0);
    let _ = VERBS_IN_CALL.insert(&[bpf_get_current_pid_tgid(), SLOT_POLL], &[wc, n], 0);
    0
}

/// uretprobe: count each returned completion by (pid, QP, status).
#[uretprobe]
pub fn verbs_poll_return(ctx: RetProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = [pid_tgid, SLOT_POLL];
    // SAFETY: copied out before removal.
    let Some(rec) = (unsafe { VERBS_IN_CALL.get(&key) }).copied() else {
        return 0;
    };
    let _ = VERBS_IN_CALL.remove(&key);
    let ret: u64 = ctx.ret();
    let n = ret as i32;
    if n <= 0 {
        return 0;
    }
    let pid = (pid_tgid >> 32) as u32;
    let base = rec[0];
    let n = n as u32;
    for i in 0..MAX_WC_PER_POLL {
        if i >= n {
            break;
        }
        let p = base + u64::from(i) * abi::WC_SIZE + abi::WC_STATUS;
        // SAFETY: user pointer read through the checked helper.
        let Ok(wc) = (unsafe { bpf_probe_read_user(p as *const WcPart) }) else {
            break;
        };
        let k = WcKey {
            pid,
            qp_num: wc.qp_num,
            status: wc.status,
            _pad: 0,
        };
        match get_or_insert!(VERBS_WC, &k, &WcStats::default()) {
            Some(s) => {
                // SAFETY: valid map value pointer.
                unsafe {
                    add(&raw mut (*s).completions, 1);
                    add(&raw mut (*s).bytes, u64::from(wc.byte_len));
                }
                bump(stat::VERBS_WC);
            }
            None => bump(stat::VERBS_MAP_FULL),
        }
    }
    if n > MAX_WC_PER_POLL {
        bump_by(stat::VERBS_WC_UNDECODED, u64::from(n - MAX_WC_PER_POLL));
    }
    0
}

/// uprobe: provider `post_send`/`post_recv(qp, wr, bad_wr)` (cookie 0/1).
#[uprobe]
pub fn verbs_post(ctx: ProbeContext) -> u32 {
    // SAFETY: valid program context.
    let dir = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let qp: u64 = ctx.arg(0).unwrap_or(0);
    let wr: u64 = ctx.arg(1).unwrap_or(0);
    // SAFETY: user pointer read through the checked helper.
    let qp_num = unsafe { bpf_probe_read_user((qp + abi::QP_QP_NUM) as *const u32) }.unwrap_or(0);
    let mut wrs = 0u64;
    let mut bytes = 0u64;
    let mut next: u64 = wr;
    let mut sge_cut = false;
    // One read of each work request's head and one of its first
    // MAX_SGE_PER_WR scatter/gather entries (a bounded variable-size read into
    // a zeroed buffer, summed without branches): few verifier states per
    // iteration, so older kernels (6.1) accept the program.
    for _ in 0..MAX_WR_PER_POST {
        if next == 0 {
            break;
        }
        // SAFETY: user pointer read through the checked helper.
        let Ok(h) = (unsafe { bpf_probe_read_user(next as *const WrHead) }) else {
            next = 0;
            break;
        };
        wrs += 1;
        let n = if h.num_sge <= 0 { 0 } else { h.num_sge as u32 };
        sge_cut |= n > MAX_SGE_PER_WR;
        let n = if n > MAX_SGE_PER_WR {
            MAX_SGE_PER_WR
        } else {
            n
        };
        let mut sge = core::mem::MaybeUninit::<[u64; 2 * MAX_SGE_PER_WR as usize]>::uninit();
        let words = sge.as_mut_ptr().cast::<u64>();
        // Zeroed word by word: volatile stores are not turned into a memset
        // call, whose byte loop the verifier would walk for every request.
        for i in 0..2 * MAX_SGE_PER_WR as usize {
            // SAFETY: in bounds of the buffer.
            unsafe { core::ptr::write_volatile(words.add(i), 0) };
        }
        // SAFETY: `n * 16` is at most the buffer's size; on failure the helper
        // zeroes the buffer.
        unsafe {
            generated::bpf_probe_read_user(
                words.cast(),
                n * 16,
                h.sg_list as *const core::ffi::c_void,
            );
        }
        // Each entry is {addr: u64, length: u32, lkey: u32}: the length is the
        // low half of the second word.
        for i in 0..MAX_SGE_PER_WR as usize {
            // SAFETY: every word was written above.
            bytes += unsafe { core::ptr::read_volatile(words.add(2 * i + 1)) } & 0xffff_ffff;
        }
        next = h.next;
    }
    // Work requests (or scatter/gather entries) left unread.
    let truncated = next != 0 || sge_cut;
    let k = PostKey {
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        qp_num,
        dir,
        _pad: 0,
    };
    let Some(s) = get_or_insert!(VERBS_POST, &k, &PostStats::default()) else {
        bump(stat::VERBS_MAP_FULL);
        return 0;
    };
    // SAFETY: valid map value pointer.
    unsafe {
        add(&raw mut (*s).calls, 1);
        add(&raw mut (*s).wrs, wrs);
        add(&raw mut (*s).bytes, bytes);
        if truncated {
            add(&raw mut (*s).truncated, 1);
        }
    }
    0
}

/// uprobe: `ibv_modify_qp(qp, attr, attr_mask)`.
#[uprobe]
pub fn verbs_modify_qp(ctx: ProbeContext) -> u32 {
    let qp: u64 = ctx.arg(0).unwrap_or(0);
    let attr: u64 = ctx.arg(1).unwrap_or(0);
    let mask: u64 = ctx.arg(2).unwrap_or(0);
    if mask & IBV_QP_PORT != 0 {
        qp_port(qp, attr);
    }
    if mask & IBV_QP_STATE == 0 {
        return 0;
    }
    // SAFETY: user pointers read through the checked helper.
    let state = unsafe { bpf_probe_read_user((attr + abi::QP_ATTR_QP_STATE) as *const u32) }
        .unwrap_or(u32::MAX);
    let qp_num = unsafe { bpf_probe_read_user((qp + abi::QP_QP_NUM) as *const u32) }.unwrap_or(0);
    let k = QpStateKey {
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        qp_num,
        state,
        _pad: 0,
    };
    match get_or_insert!(VERBS_QP_STATE, &k, &0) {
        Some(p) => add(p, 1),
        None => bump(stat::VERBS_MAP_FULL),
    }
    0
}

/// Counts one QP bound to `attr->port_num` of `qp->context->device`.
#[inline(always)]
fn qp_port(qp: u64, attr: u64) {
    // SAFETY (all reads): user pointers read through the checked helper.
    let port =
        unsafe { bpf_probe_read_user((attr + abi::QP_ATTR_PORT_NUM) as *const u8) }.unwrap_or(0);
    let ctx = unsafe { bpf_probe_read_user((qp + abi::QP_CONTEXT) as *const u64) }.unwrap_or(0);
    let dev = if ctx == 0 {
        0
    } else {
        unsafe { bpf_probe_read_user((ctx + abi::CONTEXT_DEVICE) as *const u64) }.unwrap_or(0)
    };
    let mut k = QpPortKey {
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        port: u32::from(port),
        dev: [0; DEV_NAME_LEN],
    };
    if dev != 0 {
        // SAFETY: the buffer is DEV_NAME_LEN bytes; the helper NUL-terminates
        // and zero-fills nothing past the string (the buffer starts zeroed).
        unsafe {
            generated::bpf_probe_read_user_str(
                k.dev.as_mut_ptr().cast(),
                DEV_NAME_LEN as u32,
                (dev + abi::DEVICE_NAME) as *const core::ffi::c_void,
            );
        }
    }
    match get_or_insert!(VERBS_QP_PORT, &k, &0) {
        Some(p) => add(p, 1),
        None => bump(stat::VERBS_MAP_FULL),
    }
}

/// uprobe: `ibv_get_async_event(context, event)`: remember `event`.
#[uprobe]
pub fn verbs_async_enter(ctx: ProbeContext) -> u32 {
    let ev: u64 = ctx.arg(1).unwrap_or(0);
    let _ = VERBS_IN_CALL.insert(&[bpf_get_current_pid_tgid(), SLOT_ASYNC], &[ev, 0], 0);
    0
}

/// uretprobe: on success count `event->event_type`.
#[uretprobe]
pub fn verbs_async_return(ctx: RetProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = [pid_tgid, SLOT_ASYNC];
    // SAFETY: copied out before removal.
    let Some(rec) = (unsafe { VERBS_IN_CALL.get(&key) }).copied() else {
        return 0;
    };
    let _ = VERBS_IN_CALL.remove(&key);
    let ret: u64 = ctx.ret();
    if ret as i32 != 0 {
        return 0;
    }
    // SAFETY: user pointer read through the checked helper.
    let Ok(t) = (unsafe { bpf_probe_read_user((rec[0] + abi::ASYNC_EVENT_TYPE) as *const u32) })
    else {
        return 0;
    };
    let k = AsyncKey {
        pid: (pid_tgid >> 32) as u32,
        event_type: t,
    };
    match get_or_insert!(VERBS_ASYNC, &k, &0) {
        Some(p) => add(p, 1),
        None => bump(stat::VERBS_MAP_FULL),
    }
    0
}
