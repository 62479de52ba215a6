//! InfiniBand names both sides use: what each standard port counter means
//! (its Prometheus name following node_exporter's infiniband collector,
//! `faultline_` prefix, its width in the IB PortCounters attribute, where
//! legacy counters stop at their maximum instead of wrapping, and its unit),
//! and the IBA port state names.

/// One known counter file in `counters/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterSpec {
    /// File name in `counters/`.
    pub file: &'static str,
    /// Metric name (node_exporter's, `node_` → `faultline_`).
    pub metric: &'static str,
    /// Width of the legacy PortCounters field; the value at `2^bits - 1` means
    /// "saturated" (the extended 64-bit counters never reach it in practice).
    pub bits: u32,
    /// Multiplier from the file's unit to the metric's (4 for data words → bytes).
    pub scale: u64,
    pub help: &'static str,
}

const fn c(
    file: &'static str,
    metric: &'static str,
    bits: u32,
    scale: u64,
    help: &'static str,
) -> CounterSpec {
    CounterSpec {
        file,
        metric,
        bits,
        scale,
        help,
    }
}

/// The standard counters (IBA PortCounters / PortCountersExtended).
pub const COUNTERS: &[CounterSpec] = &[
    c(
        "port_xmit_data",
        "faultline_infiniband_port_data_transmitted_bytes_total",
        32,
        4,
        "Data octets transmitted on all VLs (the file counts 4-byte words)",
    ),
    c(
        "port_rcv_data",
        "faultline_infiniband_port_data_received_bytes_total",
        32,
        4,
        "Data octets received on all VLs (the file counts 4-byte words)",
    ),
    c(
        "port_xmit_packets",
        "faultline_infiniband_port_packets_transmitted_total",
        32,
        1,
        "Packets transmitted on all VLs, including errors",
    ),
    c(
        "port_rcv_packets",
        "faultline_infiniband_port_packets_received_total",
        32,
        1,
        "Packets received on all VLs, including errors",
    ),
    c(
        "unicast_xmit_packets",
        "faultline_infiniband_unicast_packets_transmitted_total",
        64,
        1,
        "Unicast packets transmitted, including errors",
    ),
    c(
        "unicast_rcv_packets",
        "faultline_infiniband_unicast_packets_received_total",
        64,
        1,
        "Unicast packets received, including errors",
    ),
    c(
        "multicast_xmit_packets",
        "faultline_infiniband_multicast_packets_transmitted_total",
        64,
        1,
        "Multicast packets transmitted, including errors",
    ),
    c(
        "multicast_rcv_packets",
        "faultline_infiniband_multicast_packets_received_total",
        64,
        1,
        "Multicast packets received, including errors",
    ),
    c(
        "symbol_error",
        "faultline_infiniband_symbol_error_total",
        16,
        1,
        "Minor link errors detected on one or more physical lanes",
    ),
    c(
        "link_error_recovery",
        "faultline_infiniband_link_error_recovery_total",
        8,
        1,
        "Times the link recovered from an error state",
    ),
    c(
        "link_downed",
        "faultline_infiniband_link_downed_total",
        8,
        1,
        "Times the link failed to recover from an error state and went down",
    ),
    c(
        "port_rcv_errors",
        "faultline_infiniband_port_errors_received_total",
        16,
        1,
        "Received packets containing an error",
    ),
    c(
        "port_rcv_remote_physical_errors",
        "faultline_infiniband_port_receive_remote_physical_errors_total",
        16,
        1,
        "Received packets marked with the EBP delimiter",
    ),
    c(
        "port_rcv_switch_relay_errors",
        "faultline_infiniband_port_receive_switch_relay_errors_total",
        16,
        1,
        "Received packets discarded because they could not be forwarded",
    ),
    c(
        "port_xmit_discards",
        "faultline_infiniband_port_discards_transmitted_total",
        16,
        1,
        "Outbound packets discarded because the port was down or congested",
    ),
    c(
        "port_rcv_discards",
        "faultline_infiniband_port_discards_received_total",
        16,
        1,
        "Inbound packets discarded because the port was down or congested",
    ),
    c(
        "port_xmit_constraint_errors",
        "faultline_infiniband_port_constraint_errors_transmitted_total",
        8,
        1,
        "Packets not transmitted because of constraints",
    ),
    c(
        "port_rcv_constraint_errors",
        "faultline_infiniband_port_constraint_errors_received_total",
        8,
        1,
        "Received packets discarded because of constraints",
    ),
    c(
        "local_link_integrity_errors",
        "faultline_infiniband_local_link_integrity_errors_total",
        4,
        1,
        "Times local physical errors exceeded the threshold",
    ),
    c(
        "excessive_buffer_overrun_errors",
        "faultline_infiniband_excessive_buffer_overrun_errors_total",
        4,
        1,
        "Times consecutive flow-control update periods had buffer overruns",
    ),
    c(
        "VL15_dropped",
        "faultline_infiniband_vl15_dropped_total",
        16,
        1,
        "Incoming VL15 (subnet management) packets dropped",
    ),
    c(
        "port_xmit_wait",
        "faultline_infiniband_port_transmit_wait_total",
        32,
        1,
        "Ticks during which the port had data to transmit but sent none",
    ),
];

/// `perfquery`'s names for the PortCounters(Extended) fields (what it
/// prints for a switch port) → the sysfs file name of the same counter.
pub const PERFQUERY_NAMES: &[(&str, &str)] = &[
    ("PortXmitData", "port_xmit_data"),
    ("PortRcvData", "port_rcv_data"),
    ("PortXmitPkts", "port_xmit_packets"),
    ("PortRcvPkts", "port_rcv_packets"),
    ("PortUnicastXmitPkts", "unicast_xmit_packets"),
    ("PortUnicastRcvPkts", "unicast_rcv_packets"),
    ("PortMulticastXmitPkts", "multicast_xmit_packets"),
    ("PortMulticastRcvPkts", "multicast_rcv_packets"),
    ("SymbolErrorCounter", "symbol_error"),
    ("LinkErrorRecoveryCounter", "link_error_recovery"),
    ("LinkDownedCounter", "link_downed"),
    ("PortRcvErrors", "port_rcv_errors"),
    (
        "PortRcvRemotePhysicalErrors",
        "port_rcv_remote_physical_errors",
    ),
    ("PortRcvSwitchRelayErrors", "port_rcv_switch_relay_errors"),
    ("PortXmitDiscards", "port_xmit_discards"),
    ("PortXmitConstraintErrors", "port_xmit_constraint_errors"),
    ("PortRcvConstraintErrors", "port_rcv_constraint_errors"),
    ("LocalLinkIntegrityErrors", "local_link_integrity_errors"),
    (
        "ExcessiveBufferOverrunErrors",
        "excessive_buffer_overrun_errors",
    ),
    ("VL15Dropped", "VL15_dropped"),
    ("PortXmitWait", "port_xmit_wait"),
];

/// The sysfs file name of a `perfquery` field.
pub fn perfquery_file(name: &str) -> Option<&'static str> {
    PERFQUERY_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
}

pub fn spec(file: &str) -> Option<&'static CounterSpec> {
    COUNTERS.iter().find(|s| s.file == file)
}

/// Saturation value of a counter, or `None` for counters that cannot saturate.
pub fn saturation(file: &str) -> Option<u64> {
    spec(file).and_then(|s| (s.bits < 64).then(|| (1u64 << s.bits) - 1))
}

/// Whether `value` read from `counters/<file>` means the counter has stopped
/// at its legacy maximum. Only the exact maximum does: the kernel serves the
/// data and packet counters from PortCountersExtended (64-bit) when the HCA
/// has them, so a value above the legacy maximum is a wide counter counting
/// on, not a saturated one.
pub fn is_saturated(file: &str, value: u64) -> bool {
    saturation(file) == Some(value)
}

/// What a counter file holds on a port without a performance management
/// agent (iWARP, some RoCE functions): not a number, and not a read error.
pub const NO_PMA: &str = "N/A (no PMA)";

/// One 64-bit counter of `counters_ext/` (kernels before 4.5 kept the
/// extended PortCounters there; mlx4 still fills it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtCounterSpec {
    /// File name in `counters_ext/`.
    pub file: &'static str,
    /// Metric name (node_exporter's `legacy_*`, `node_` → `faultline_`).
    pub metric: &'static str,
    /// The `counters/` file it is the 64-bit version of.
    pub widens: &'static str,
    /// Multiplier to the metric's unit (4 for data words → bytes).
    pub scale: u64,
    pub help: &'static str,
}

const fn x(
    file: &'static str,
    metric: &'static str,
    widens: &'static str,
    scale: u64,
    help: &'static str,
) -> ExtCounterSpec {
    ExtCounterSpec {
        file,
        metric,
        widens,
        scale,
        help,
    }
}

/// The `counters_ext/` files, named as node_exporter names them.
pub const EXT_COUNTERS: &[ExtCounterSpec] = &[
    x(
        "port_xmit_data_64",
        "faultline_infiniband_legacy_data_transmitted_bytes_total",
        "port_xmit_data",
        4,
        "Data octets transmitted on all VLs, 64-bit counters_ext/ (the file counts 4-byte words)",
    ),
    x(
        "port_rcv_data_64",
        "faultline_infiniband_legacy_data_received_bytes_total",
        "port_rcv_data",
        4,
        "Data octets received on all VLs, 64-bit counters_ext/ (the file counts 4-byte words)",
    ),
    x(
        "port_xmit_packets_64",
        "faultline_infiniband_legacy_packets_transmitted_total",
        "port_xmit_packets",
        1,
        "Packets transmitted on all VLs, 64-bit counters_ext/",
    ),
    x(
        "port_rcv_packets_64",
        "faultline_infiniband_legacy_packets_received_total",
        "port_rcv_packets",
        1,
        "Packets received on all VLs, 64-bit counters_ext/",
    ),
    x(
        "port_unicast_xmit_packets",
        "faultline_infiniband_legacy_unicast_packets_transmitted_total",
        "unicast_xmit_packets",
        1,
        "Unicast packets transmitted, counters_ext/",
    ),
    x(
        "port_unicast_rcv_packets",
        "faultline_infiniband_legacy_unicast_packets_received_total",
        "unicast_rcv_packets",
        1,
        "Unicast packets received, counters_ext/",
    ),
    x(
        "port_multicast_xmit_packets",
        "faultline_infiniband_legacy_multicast_packets_transmitted_total",
        "multicast_xmit_packets",
        1,
        "Multicast packets transmitted, counters_ext/",
    ),
    x(
        "port_multicast_rcv_packets",
        "faultline_infiniband_legacy_multicast_packets_received_total",
        "multicast_rcv_packets",
        1,
        "Multicast packets received, counters_ext/",
    ),
];

pub fn ext_spec(file: &str) -> Option<&'static ExtCounterSpec> {
    EXT_COUNTERS.iter().find(|s| s.file == file)
}

/// One driver counter of `hw_counters/` that node_exporter names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwCounterSpec {
    /// File name in `hw_counters/`.
    pub file: &'static str,
    /// Metric name (node_exporter's, `node_` → `faultline_`).
    pub metric: &'static str,
    pub help: &'static str,
}

const fn h(file: &'static str, metric: &'static str, help: &'static str) -> HwCounterSpec {
    HwCounterSpec { file, metric, help }
}

/// `hw_counters/lifespan`: not a counter but the aging period of the
/// counter reads in milliseconds, exported as whole seconds (as node_exporter does).
pub const HW_LIFESPAN: &str = "lifespan";

/// The `hw_counters/` files node_exporter exports, under its names; other
/// files stay in `faultline_infiniband_hw_other_total{counter}`.
pub const HW_COUNTERS: &[HwCounterSpec] = &[
    h(
        "duplicate_request",
        "faultline_infiniband_duplicate_requests_packets_total",
        "Received duplicate requests (requests executed before)",
    ),
    h(
        "implied_nak_seq_err",
        "faultline_infiniband_implied_nak_seq_errors_total",
        "ACKs with a PSN larger than expected for an RDMA read or response",
    ),
    h(
        "local_ack_timeout_err",
        "faultline_infiniband_local_ack_timeout_errors_total",
        "Times a QP's ack timer expired at the sender (RC, XRC, DCT); still recoverable",
    ),
    h(
        "np_cnp_sent",
        "faultline_infiniband_np_cnp_packets_sent_total",
        "CNP packets sent by the notification point on ECN-marked RoCEv2 traffic",
    ),
    h(
        "np_ecn_marked_roce_packets",
        "faultline_infiniband_np_ecn_marked_roce_packets_received_total",
        "RoCEv2 packets received marked for congestion (ECN 11)",
    ),
    h(
        "out_of_buffer",
        "faultline_infiniband_out_of_buffer_drops_total",
        "Drops for lack of a WQE on the associated QPs",
    ),
    h(
        "out_of_sequence",
        "faultline_infiniband_out_of_sequence_packets_received_total",
        "Out-of-sequence packets received",
    ),
    h(
        "packet_seq_err",
        "faultline_infiniband_packet_sequence_errors_total",
        "NAK sequence error packets received; the QP retry limit was not exceeded",
    ),
    h(
        "req_cqe_error",
        "faultline_infiniband_req_cqes_errors_total",
        "Requester CQEs completed with an error",
    ),
    h(
        "req_cqe_flush_error",
        "faultline_infiniband_req_cqes_flush_errors_total",
        "Requester CQEs completed with a flush error",
    ),
    h(
        "req_remote_access_errors",
        "faultline_infiniband_req_remote_access_errors_total",
        "Remote access errors detected by the requester",
    ),
    h(
        "req_remote_invalid_request",
        "faultline_infiniband_req_remote_invalid_request_errors_total",
        "Remote invalid request errors detected by the requester",
    ),
    h(
        "resp_cqe_error",
        "faultline_infiniband_resp_cqes_errors_total",
        "Responder CQEs completed with an error",
    ),
    h(
        "resp_cqe_flush_error",
        "faultline_infiniband_resp_cqes_flush_errors_total",
        "Responder CQEs completed with a flush error",
    ),
    h(
        "resp_local_length_error",
        "faultline_infiniband_resp_local_length_errors_total",
        "Local length errors detected by the responder",
    ),
    h(
        "resp_remote_access_errors",
        "faultline_infiniband_resp_remote_access_errors_total",
        "Remote access errors detected by the responder",
    ),
    h(
        "rnr_nak_retry_err",
        "faultline_infiniband_rnr_nak_retry_packets_received_total",
        "RNR NAK packets received; the QP retry limit was not exceeded",
    ),
    h(
        "roce_adp_retrans",
        "faultline_infiniband_roce_adp_retransmits_total",
        "Adaptive retransmissions of RoCE traffic",
    ),
    h(
        "roce_adp_retrans_to",
        "faultline_infiniband_roce_adp_retransmits_timeout_total",
        "Times RoCE traffic timed out under adaptive retransmission",
    ),
    h(
        "roce_slow_restart",
        "faultline_infiniband_roce_slow_restart_used_total",
        "Times RoCE slow restart was used",
    ),
    h(
        "roce_slow_restart_cnps",
        "faultline_infiniband_roce_slow_restart_cnps_total",
        "CNPs generated by RoCE slow restart",
    ),
    h(
        "roce_slow_restart_trans",
        "faultline_infiniband_roce_slow_restart_total",
        "Times RoCE slow restart changed state to slow restart",
    ),
    h(
        "rp_cnp_handled",
        "faultline_infiniband_rp_cnp_packets_handled_total",
        "CNP packets handled by the reaction point to throttle the transmission rate",
    ),
    h(
        "rp_cnp_ignored",
        "faultline_infiniband_rp_cnp_ignored_packets_received_total",
        "CNP packets received and ignored by the reaction point",
    ),
    h(
        "rx_atomic_requests",
        "faultline_infiniband_rx_atomic_requests_total",
        "ATOMIC requests received on the associated QPs",
    ),
    h(
        "rx_dct_connect",
        "faultline_infiniband_rx_dct_connect_requests_total",
        "Connection requests received on the associated DCTs",
    ),
    h(
        "rx_icrc_encapsulated",
        "faultline_infiniband_rx_icrc_encapsulated_errors_total",
        "RoCE packets with ICRC errors",
    ),
    h(
        "rx_read_requests",
        "faultline_infiniband_rx_read_requests_total",
        "READ requests received on the associated QPs",
    ),
    h(
        "rx_write_requests",
        "faultline_infiniband_rx_write_requests_total",
        "WRITE requests received on the associated QPs",
    ),
];

pub fn hw_spec(file: &str) -> Option<&'static HwCounterSpec> {
    HW_COUNTERS.iter().find(|s| s.file == file)
}

/// IBA port states (`state` file: "4: ACTIVE").
pub fn state_name(id: u32) -> &'static str {
    match id {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "UNKNOWN",
    }
}

/// IBA physical port states (`phys_state` file: "5: LinkUp").
pub fn phys_state_name(id: u32) -> &'static str {
    match id {
        0 => "NoStateChange",
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "PhyTest",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_legacy_maximum_is_saturation() {
        // node_exporter's fixture: a busy port's 64-bit packet counter.
        assert!(!is_saturated("port_rcv_packets", 6_825_908_347));
        assert!(is_saturated("port_rcv_packets", u64::from(u32::MAX)));
        assert!(is_saturated("symbol_error", 65_535));
        assert!(!is_saturated("unicast_rcv_packets", u64::MAX));
    }

    #[test]
    fn metric_names_are_unique() {
        let mut names: Vec<&str> = COUNTERS
            .iter()
            .map(|c| c.metric)
            .chain(EXT_COUNTERS.iter().map(|c| c.metric))
            .chain(HW_COUNTERS.iter().map(|c| c.metric))
            .collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        for e in EXT_COUNTERS {
            assert!(spec(e.widens).is_some(), "{}", e.widens);
        }
    }
}
