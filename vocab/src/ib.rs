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
    /// Metric name without the `faultline_infiniband_` prefix.
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
        "port_data_transmitted_bytes_total",
        32,
        4,
        "Data octets transmitted on all VLs (the file counts 4-byte words)",
    ),
    c(
        "port_rcv_data",
        "port_data_received_bytes_total",
        32,
        4,
        "Data octets received on all VLs (the file counts 4-byte words)",
    ),
    c(
        "port_xmit_packets",
        "port_packets_transmitted_total",
        32,
        1,
        "Packets transmitted on all VLs, including errors",
    ),
    c(
        "port_rcv_packets",
        "port_packets_received_total",
        32,
        1,
        "Packets received on all VLs, including errors",
    ),
    c(
        "unicast_xmit_packets",
        "unicast_packets_transmitted_total",
        64,
        1,
        "Unicast packets transmitted, including errors",
    ),
    c(
        "unicast_rcv_packets",
        "unicast_packets_received_total",
        64,
        1,
        "Unicast packets received, including errors",
    ),
    c(
        "multicast_xmit_packets",
        "multicast_packets_transmitted_total",
        64,
        1,
        "Multicast packets transmitted, including errors",
    ),
    c(
        "multicast_rcv_packets",
        "multicast_packets_received_total",
        64,
        1,
        "Multicast packets received, including errors",
    ),
    c(
        "symbol_error",
        "symbol_error_total",
        16,
        1,
        "Minor link errors detected on one or more physical lanes",
    ),
    c(
        "link_error_recovery",
        "link_error_recovery_total",
        8,
        1,
        "Times the link recovered from an error state",
    ),
    c(
        "link_downed",
        "link_downed_total",
        8,
        1,
        "Times the link failed to recover from an error state and went down",
    ),
    c(
        "port_rcv_errors",
        "port_errors_received_total",
        16,
        1,
        "Received packets containing an error",
    ),
    c(
        "port_rcv_remote_physical_errors",
        "port_receive_remote_physical_errors_total",
        16,
        1,
        "Received packets marked with the EBP delimiter",
    ),
    c(
        "port_rcv_switch_relay_errors",
        "port_receive_switch_relay_errors_total",
        16,
        1,
        "Received packets discarded because they could not be forwarded",
    ),
    c(
        "port_xmit_discards",
        "port_discards_transmitted_total",
        16,
        1,
        "Outbound packets discarded because the port was down or congested",
    ),
    c(
        "port_rcv_discards",
        "port_discards_received_total",
        16,
        1,
        "Inbound packets discarded because the port was down or congested",
    ),
    c(
        "port_xmit_constraint_errors",
        "port_constraint_errors_transmitted_total",
        8,
        1,
        "Packets not transmitted because of constraints",
    ),
    c(
        "port_rcv_constraint_errors",
        "port_constraint_errors_received_total",
        8,
        1,
        "Received packets discarded because of constraints",
    ),
    c(
        "local_link_integrity_errors",
        "local_link_integrity_errors_total",
        4,
        1,
        "Times local physical errors exceeded the threshold",
    ),
    c(
        "excessive_buffer_overrun_errors",
        "excessive_buffer_overrun_errors_total",
        4,
        1,
        "Times consecutive flow-control update periods had buffer overruns",
    ),
    c(
        "VL15_dropped",
        "vl15_dropped_total",
        16,
        1,
        "Incoming VL15 (subnet management) packets dropped",
    ),
    c(
        "port_xmit_wait",
        "port_transmit_wait_total",
        32,
        1,
        "Ticks during which the port had data to transmit but sent none",
    ),
];

pub fn spec(file: &str) -> Option<&'static CounterSpec> {
    COUNTERS.iter().find(|s| s.file == file)
}

/// Saturation value of a counter, or `None` for counters that cannot saturate.
pub fn saturation(file: &str) -> Option<u64> {
    spec(file).and_then(|s| (s.bits < 64).then(|| (1u64 << s.bits) - 1))
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
