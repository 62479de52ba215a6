//! Verbs (RDMA user-space data path) probe types.

/// Work completions per (pid, QP, status).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WcKey {
    pub pid: u32,
    pub qp_num: u32,
    /// `enum ibv_wc_status` value as the provider wrote it.
    pub status: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<WcKey>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WcStats {
    pub completions: u64,
    /// Sum of `byte_len` (meaningful for receive completions).
    pub bytes: u64,
}

/// Posted work requests per (pid, QP, direction).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PostKey {
    pub pid: u32,
    pub qp_num: u32,
    /// 0 = send, 1 = receive.
    pub dir: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<PostKey>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PostStats {
    /// `post_send`/`post_recv` calls.
    pub calls: u64,
    /// Work requests in the chained lists.
    pub wrs: u64,
    /// Sum of the scatter/gather lengths.
    pub bytes: u64,
    /// Calls whose list was longer than the probe walks (counted, not summed).
    pub truncated: u64,
}

/// `ibv_modify_qp` transitions per (pid, QP, target state).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpStateKey {
    pub pid: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state` (6 = IBV_QPS_ERR).
    pub state: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<QpStateKey>() == 16);

/// `ibv_get_async_event` results per (pid, event type).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AsyncKey {
    pub pid: u32,
    pub event_type: u32,
}
const _: () = assert!(core::mem::size_of::<AsyncKey>() == 8);

/// Longest HCA device name kept (`IBV_SYSFS_NAME_MAX` is 64).
pub const DEV_NAME_LEN: usize = 64;

/// QPs a process bound to an HCA port (`ibv_modify_qp` with `IBV_QP_PORT`),
/// per (pid, device name, port): which ports a process's RDMA traffic uses.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpPortKey {
    pub pid: u32,
    /// `ibv_qp_attr.port_num`.
    pub port: u32,
    /// `qp->context->device->name`, NUL-padded.
    pub dev: [u8; DEV_NAME_LEN],
}
const _: () = assert!(core::mem::size_of::<QpPortKey>() == 8 + DEV_NAME_LEN);

impl QpPortKey {
    /// The device name's bytes up to its first NUL.
    pub fn dev_bytes(&self) -> &[u8] {
        let n = self
            .dev
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.dev.len());
        &self.dev[..n]
    }
}

/// Most completions decoded per `poll_cq` return (the verifier needs a bound).
pub const MAX_WC_PER_POLL: u32 = 32;
/// Most work requests walked per `post_send`/`post_recv` call.
pub const MAX_WR_PER_POST: u32 = 16;
/// Most scatter/gather entries summed per work request.
pub const MAX_SGE_PER_WR: u32 = 4;

/// `enum ibv_wc_status` names (libibverbs `ibv_wc_status_str`).
pub fn wc_status_name(s: u32) -> &'static str {
    match s {
        0 => "IBV_WC_SUCCESS",
        1 => "IBV_WC_LOC_LEN_ERR",
        2 => "IBV_WC_LOC_QP_OP_ERR",
        3 => "IBV_WC_LOC_EEC_OP_ERR",
        4 => "IBV_WC_LOC_PROT_ERR",
        5 => "IBV_WC_WR_FLUSH_ERR",
        6 => "IBV_WC_MW_BIND_ERR",
        7 => "IBV_WC_BAD_RESP_ERR",
        8 => "IBV_WC_LOC_ACCESS_ERR",
        9 => "IBV_WC_REM_INV_REQ_ERR",
        10 => "IBV_WC_REM_ACCESS_ERR",
        11 => "IBV_WC_REM_OP_ERR",
        12 => "IBV_WC_RETRY_EXC_ERR",
        13 => "IBV_WC_RNR_RETRY_EXC_ERR",
        14 => "IBV_WC_LOC_RDD_VIOL_ERR",
        15 => "IBV_WC_REM_INV_RD_REQ_ERR",
        16 => "IBV_WC_REM_ABORT_ERR",
        17 => "IBV_WC_INV_EECN_ERR",
        18 => "IBV_WC_INV_EEC_STATE_ERR",
        19 => "IBV_WC_FATAL_ERR",
        20 => "IBV_WC_RESP_TIMEOUT_ERR",
        21 => "IBV_WC_GENERAL_ERR",
        22 => "IBV_WC_TM_ERR",
        23 => "IBV_WC_TM_RNDV_INCOMPLETE",
        _ => "IBV_WC_UNKNOWN",
    }
}

/// `enum ibv_qp_state` names.
pub fn qp_state_name(s: u32) -> &'static str {
    match s {
        0 => "RESET",
        1 => "INIT",
        2 => "RTR",
        3 => "RTS",
        4 => "SQD",
        5 => "SQE",
        6 => "ERR",
        _ => "UNKNOWN",
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): `#[repr(C)]`, no implicit padding (sizes asserted), any bit pattern valid.
    unsafe impl aya::Pod for super::WcKey {}
    unsafe impl aya::Pod for super::WcStats {}
    unsafe impl aya::Pod for super::PostKey {}
    unsafe impl aya::Pod for super::PostStats {}
    unsafe impl aya::Pod for super::QpStateKey {}
    unsafe impl aya::Pod for super::AsyncKey {}
    unsafe impl aya::Pod for super::QpPortKey {}
}

/// Byte offsets and sizes in libibverbs' ABI (`<infiniband/verbs.h>`,
/// x86-64) that the verbs probes read through user pointers. Asserted
/// against rdma-sys's bindings in `collector/tests/it/verbs_abi.rs`.
pub mod abi {
    /// `sizeof(struct ibv_wc)`: the stride of the `wc` array of `poll_cq`.
    pub const WC_SIZE: u64 = 48;
    /// `offsetof(struct ibv_wc, status)`: start of the fields read
    /// (status, opcode, vendor_err, byte_len, imm_data, qp_num).
    pub const WC_STATUS: u64 = 8;
    /// `offsetof(struct ibv_wc, byte_len)`.
    pub const WC_BYTE_LEN: u64 = 20;
    /// `offsetof(struct ibv_wc, qp_num)`.
    pub const WC_QP_NUM: u64 = 28;
    /// `offsetof(struct ibv_send_wr, next)` (also `ibv_recv_wr`).
    pub const WR_NEXT: u64 = 8;
    /// `offsetof(struct ibv_send_wr, sg_list)` (also `ibv_recv_wr`).
    pub const WR_SG_LIST: u64 = 16;
    /// `offsetof(struct ibv_send_wr, num_sge)` (also `ibv_recv_wr`).
    pub const WR_NUM_SGE: u64 = 24;
    /// `sizeof(struct ibv_sge)`.
    pub const SGE_SIZE: u64 = 16;
    /// `offsetof(struct ibv_sge, length)`.
    pub const SGE_LENGTH: u64 = 8;
    /// `offsetof(struct ibv_qp, qp_num)`.
    pub const QP_QP_NUM: u64 = 52;
    /// `offsetof(struct ibv_qp_attr, qp_state)`.
    pub const QP_ATTR_QP_STATE: u64 = 0;
    /// `offsetof(struct ibv_async_event, event_type)`.
    pub const ASYNC_EVENT_TYPE: u64 = 8;
    /// `offsetof(struct ibv_qp_attr, port_num)` (a `uint8_t`).
    pub const QP_ATTR_PORT_NUM: u64 = 129;
    /// `offsetof(struct ibv_qp, context)`.
    pub const QP_CONTEXT: u64 = 0;
    /// `offsetof(struct ibv_context, device)`.
    pub const CONTEXT_DEVICE: u64 = 0;
    /// `offsetof(struct ibv_device, name)`.
    pub const DEVICE_NAME: u64 = 24;
}
