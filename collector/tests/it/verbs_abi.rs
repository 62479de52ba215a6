//! The offsets the verbs probes read through user pointers
//! (`collector_common::verbs::abi`) are libibverbs' ABI: each is asserted
//! against rdma-sys's bindgen types of `<infiniband/verbs.h>`.
use std::mem::{offset_of, size_of};

use collector_common::verbs::abi;
use rdma_sys::{
    ibv_async_event, ibv_context, ibv_device, ibv_qp, ibv_qp_attr, ibv_recv_wr, ibv_send_wr,
    ibv_sge, ibv_wc,
};

fn at(o: usize) -> u64 {
    o as u64
}

#[test]
fn verbs_offsets_match_the_headers() {
    let _turn = tests::one_file_at_a_time(file!());
    assert_eq!(at(size_of::<ibv_wc>()), abi::WC_SIZE);
    assert_eq!(at(offset_of!(ibv_wc, status)), abi::WC_STATUS);
    assert_eq!(at(offset_of!(ibv_wc, byte_len)), abi::WC_BYTE_LEN);
    assert_eq!(at(offset_of!(ibv_wc, qp_num)), abi::WC_QP_NUM);
    // The probe reads status..qp_num as one block of six u32.
    assert_eq!(abi::WC_QP_NUM - abi::WC_STATUS, 5 * 4);
    assert_eq!(at(offset_of!(ibv_send_wr, next)), abi::WR_NEXT);
    assert_eq!(at(offset_of!(ibv_send_wr, sg_list)), abi::WR_SG_LIST);
    assert_eq!(at(offset_of!(ibv_send_wr, num_sge)), abi::WR_NUM_SGE);
    assert_eq!(at(offset_of!(ibv_recv_wr, next)), abi::WR_NEXT);
    assert_eq!(at(offset_of!(ibv_recv_wr, sg_list)), abi::WR_SG_LIST);
    assert_eq!(at(offset_of!(ibv_recv_wr, num_sge)), abi::WR_NUM_SGE);
    assert_eq!(at(size_of::<ibv_sge>()), abi::SGE_SIZE);
    assert_eq!(at(offset_of!(ibv_sge, length)), abi::SGE_LENGTH);
    assert_eq!(at(offset_of!(ibv_qp, qp_num)), abi::QP_QP_NUM);
    assert_eq!(at(offset_of!(ibv_qp_attr, qp_state)), abi::QP_ATTR_QP_STATE);
    // The HCA port of a QP: attr->port_num, qp->context->device->name.
    assert_eq!(at(offset_of!(ibv_qp_attr, port_num)), abi::QP_ATTR_PORT_NUM);
    assert_eq!(at(offset_of!(ibv_qp, context)), abi::QP_CONTEXT);
    assert_eq!(at(offset_of!(ibv_context, device)), abi::CONTEXT_DEVICE);
    assert_eq!(at(offset_of!(ibv_device, name)), abi::DEVICE_NAME);
    // SAFETY: ibv_device is plain C data; all zeroes is a valid value.
    let dev: ibv_device = unsafe { std::mem::zeroed() };
    assert_eq!(dev.name.len(), collector_common::verbs::DEV_NAME_LEN);
    assert_eq!(
        at(offset_of!(ibv_async_event, event_type)),
        abi::ASYNC_EVENT_TYPE
    );
}
