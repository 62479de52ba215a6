//! Parity with node_exporter's infiniband collector: for sysfs trees of an
//! mlx4 HCA (64-bit counters in `counters_ext/`), an mlx5 HCA (extended
//! counters in `counters/`, driver counters in `hw_counters/`) and an iWARP
//! device whose counters read "N/A (no PMA)", every series node_exporter
//! exports appears in `faultline-collector --once` under the same name
//! (`node_` → `faultline_`), labels and value. The expected series are
//! written out here from node_exporter's rules (names, ×4 for data words,
//! lifespan ms → s, N/A files skipped), not computed by faultline's code.
use std::{collections::BTreeMap, process::Command};

fn collector() -> std::path::PathBuf {
    tests::bin("faultline-collector")
}

/// Series of a text exposition as `name{labels}` → value (labels as written).
fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn once(root: &std::path::Path) -> String {
    let out = Command::new(collector())
        .args(["--once", "--sysfs-root"])
        .arg(root)
        .output()
        .expect("collector runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn tree() -> tests::FakeIb {
    let t = tests::FakeIb::new("parity");
    // mlx4: 32-bit data counters in counters/, the 64-bit ones in counters_ext/.
    t.active_port("mlx4_0", 1);
    t.device_file("mlx4_0", "board_id", "MT_1090120019");
    t.device_file("mlx4_0", "fw_ver", "2.42.5000");
    t.device_file("mlx4_0", "hca_type", "MT4099");
    t.counter("mlx4_0", 1, "port_rcv_data", 4_294_967_295);
    t.counter("mlx4_0", 1, "port_xmit_data", 1_000);
    t.counter("mlx4_0", 1, "symbol_error", 7);
    for (f, v) in [
        ("port_rcv_data_64", 9_000_000_000u64),
        ("port_xmit_data_64", 8_000_000_000),
        ("port_rcv_packets_64", 7_000_000_000),
        ("port_xmit_packets_64", 6_000_000_000),
        ("port_unicast_rcv_packets", 5_000),
        ("port_unicast_xmit_packets", 4_000),
        ("port_multicast_rcv_packets", 30),
        ("port_multicast_xmit_packets", 20),
    ] {
        t.write("mlx4_0", 1, &format!("counters_ext/{f}"), &v.to_string());
    }
    // mlx5: extended counters served through counters/ (node_exporter's
    // fixture value of port_rcv_packets), hw_counters/ with lifespan.
    t.active_port("mlx5_0", 1);
    t.device_file("mlx5_0", "board_id", "SM_1141000001000");
    t.device_file("mlx5_0", "fw_ver", "14.28.2006");
    t.device_file("mlx5_0", "hca_type", "MT4118");
    t.counter("mlx5_0", 1, "port_rcv_packets", 6_825_908_347);
    t.counter("mlx5_0", 1, "port_rcv_data", 2_221_223_609);
    t.counter("mlx5_0", 1, "unicast_rcv_packets", 61_148);
    t.counter("mlx5_0", 1, "multicast_xmit_packets", 16);
    t.counter("mlx5_0", 1, "port_rcv_remote_physical_errors", 0);
    t.counter("mlx5_0", 1, "port_rcv_switch_relay_errors", 0);
    t.counter("mlx5_0", 1, "port_xmit_constraint_errors", 0);
    t.counter("mlx5_0", 1, "port_rcv_constraint_errors", 0);
    for (f, v) in [
        ("duplicate_request", 41u64),
        ("implied_nak_seq_err", 0),
        ("lifespan", 10_000),
        ("local_ack_timeout_err", 131),
        ("np_cnp_sent", 0),
        ("np_ecn_marked_roce_packets", 0),
        ("out_of_buffer", 0),
        ("out_of_sequence", 1),
        ("packet_seq_err", 1),
        ("req_cqe_error", 3_481),
        ("req_cqe_flush_error", 80),
        ("req_remote_access_errors", 0),
        ("req_remote_invalid_request", 0),
        ("resp_cqe_error", 8_109),
        ("resp_cqe_flush_error", 4_708),
        ("resp_local_length_error", 0),
        ("resp_remote_access_errors", 0),
        ("rnr_nak_retry_err", 0),
        ("roce_adp_retrans", 99),
        ("roce_adp_retrans_to", 4),
        ("roce_slow_restart", 0),
        ("roce_slow_restart_cnps", 131),
        ("roce_slow_restart_trans", 0),
        ("rp_cnp_handled", 0),
        ("rp_cnp_ignored", 0),
        ("rx_atomic_requests", 0),
        ("rx_dct_connect", 0),
        ("rx_icrc_encapsulated", 0),
        ("rx_read_requests", 175_528_982),
        ("rx_write_requests", 742_114),
        ("some_future_counter", 5),
    ] {
        t.hw_counter("mlx5_0", 1, f, v);
    }
    // iWARP: no PMA, every standard counter reads "N/A (no PMA)".
    t.active_port("i40iw0", 1);
    t.device_file("i40iw0", "fw_ver", "0.2");
    t.device_file("i40iw0", "hca_type", "I40IW");
    t.write("i40iw0", 1, "link_layer", "Ethernet");
    let counters = t.port_dir("i40iw0", 1).join("counters");
    for e in std::fs::read_dir(&counters)
        .expect("counters dir")
        .flatten()
    {
        std::fs::write(e.path(), "N/A (no PMA)\n").expect("write");
    }
    t
}

#[test]
fn every_node_exporter_series_appears_with_its_value() {
    let _turn = tests::one_file_at_a_time(file!());
    let t = tree();
    let got = series(&once(t.root()));
    let dp = |d: &str| format!("device=\"{d}\",port=\"1\"");
    let mut want: Vec<(String, f64)> = vec![
        (
            "info{device=\"mlx4_0\",board_id=\"MT_1090120019\",firmware_version=\"2.42.5000\",hca_type=\"MT4099\"}".into(),
            1.0,
        ),
        (
            "info{device=\"mlx5_0\",board_id=\"SM_1141000001000\",firmware_version=\"14.28.2006\",hca_type=\"MT4118\"}".into(),
            1.0,
        ),
        (
            "info{device=\"i40iw0\",board_id=\"\",firmware_version=\"0.2\",hca_type=\"I40IW\"}".into(),
            1.0,
        ),
    ];
    for d in ["mlx4_0", "mlx5_0", "i40iw0"] {
        want.push((format!("state_id{{{}}}", dp(d)), 4.0));
        want.push((format!("physical_state_id{{{}}}", dp(d)), 5.0));
        want.push((
            format!("rate_bytes_per_second{{{}}}", dp(d)),
            12_500_000_000.0,
        ));
    }
    let m4 = dp("mlx4_0");
    for (name, v) in [
        ("port_data_received_bytes_total", 4.0 * 4_294_967_295.0),
        ("port_data_transmitted_bytes_total", 4_000.0),
        ("symbol_error_total", 7.0),
        ("legacy_data_received_bytes_total", 36_000_000_000.0),
        ("legacy_data_transmitted_bytes_total", 32_000_000_000.0),
        ("legacy_packets_received_total", 7_000_000_000.0),
        ("legacy_packets_transmitted_total", 6_000_000_000.0),
        ("legacy_unicast_packets_received_total", 5_000.0),
        ("legacy_unicast_packets_transmitted_total", 4_000.0),
        ("legacy_multicast_packets_received_total", 30.0),
        ("legacy_multicast_packets_transmitted_total", 20.0),
        ("link_downed_total", 0.0),
        ("vl15_dropped_total", 0.0),
        ("port_transmit_wait_total", 0.0),
    ] {
        want.push((format!("{name}{{{m4}}}"), v));
    }
    let m5 = dp("mlx5_0");
    for (name, v) in [
        ("port_packets_received_total", 6_825_908_347.0),
        ("port_data_received_bytes_total", 8_884_894_436.0),
        ("unicast_packets_received_total", 61_148.0),
        ("multicast_packets_transmitted_total", 16.0),
        ("port_receive_remote_physical_errors_total", 0.0),
        ("port_receive_switch_relay_errors_total", 0.0),
        ("port_constraint_errors_transmitted_total", 0.0),
        ("port_constraint_errors_received_total", 0.0),
        ("lifespan_seconds", 10.0),
        ("duplicate_requests_packets_total", 41.0),
        ("implied_nak_seq_errors_total", 0.0),
        ("local_ack_timeout_errors_total", 131.0),
        ("np_cnp_packets_sent_total", 0.0),
        ("np_ecn_marked_roce_packets_received_total", 0.0),
        ("out_of_buffer_drops_total", 0.0),
        ("out_of_sequence_packets_received_total", 1.0),
        ("packet_sequence_errors_total", 1.0),
        ("req_cqes_errors_total", 3_481.0),
        ("req_cqes_flush_errors_total", 80.0),
        ("req_remote_access_errors_total", 0.0),
        ("req_remote_invalid_request_errors_total", 0.0),
        ("resp_cqes_errors_total", 8_109.0),
        ("resp_cqes_flush_errors_total", 4_708.0),
        ("resp_local_length_errors_total", 0.0),
        ("resp_remote_access_errors_total", 0.0),
        ("rnr_nak_retry_packets_received_total", 0.0),
        ("roce_adp_retransmits_total", 99.0),
        ("roce_adp_retransmits_timeout_total", 4.0),
        ("roce_slow_restart_used_total", 0.0),
        ("roce_slow_restart_cnps_total", 131.0),
        ("roce_slow_restart_total", 0.0),
        ("rp_cnp_packets_handled_total", 0.0),
        ("rp_cnp_ignored_packets_received_total", 0.0),
        ("rx_atomic_requests_total", 0.0),
        ("rx_dct_connect_requests_total", 0.0),
        ("rx_icrc_encapsulated_errors_total", 0.0),
        ("rx_read_requests_total", 175_528_982.0),
        ("rx_write_requests_total", 742_114.0),
    ] {
        want.push((format!("{name}{{{m5}}}"), v));
    }
    let mut missing = Vec::new();
    for (k, v) in &want {
        let key = format!("faultline_infiniband_{k}");
        match got.get(&key) {
            Some(g) if g == v => {}
            other => missing.push(format!("{key}: want {v}, got {other:?}")),
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));

    // Counters node_exporter does not name stay visible under faultline's own name.
    assert_eq!(
        got.get(&format!(
            "faultline_infiniband_hw_other_total{{{m5},counter=\"some_future_counter\"}}"
        )),
        Some(&5.0)
    );
    // A 64-bit counter above the legacy maximum is not saturated (it was,
    // and its rate dropped, before); the mlx4 32-bit data counter at its
    // maximum is.
    let saturated: Vec<&String> = got
        .keys()
        .filter(|k| k.starts_with("faultline_infiniband_saturated"))
        .collect();
    assert_eq!(
        saturated,
        [&format!(
            "faultline_infiniband_saturated{{{m4},counter=\"port_rcv_data\"}}"
        )]
    );
    // iWARP: "N/A (no PMA)" is no counter and no read error.
    let iw = dp("i40iw0");
    assert_eq!(
        got.get(&format!("faultline_infiniband_read_errors{{{iw}}}")),
        Some(&0.0)
    );
    assert_eq!(
        got.get(&format!(
            "faultline_infiniband_counters_unavailable{{{iw}}}"
        )),
        Some(&13.0)
    );
    assert!(
        !got.keys()
            .any(|k| k.contains("i40iw0") && k.contains("symbol_error")),
        "no value for an unavailable counter"
    );
}

/// A busy mlx5 port's 64-bit counters keep their rates: before, a value
/// above 2^32-1 counted as "saturated" and the window's rate was dropped.
#[test]
fn wide_counters_keep_their_rates() {
    let _turn = tests::one_file_at_a_time(file!());
    use collector::ib::{rates::CounterChange, read_ports, RateTracker};
    let t = tree();
    let mut tr = RateTracker::new();
    assert!(tr.update(read_ports(t.root()).expect("read")).is_empty());
    t.counter("mlx5_0", 1, "port_rcv_packets", 6_825_908_347 + 1_000);
    t.write("mlx4_0", 1, "counters_ext/port_rcv_data_64", "9000000500");
    let rates = tr.update(read_ports(t.root()).expect("read"));
    let of = |d: &str| rates.iter().find(|r| r.device == d).expect("port");
    assert!(matches!(
        of("mlx5_0").counters.get("port_rcv_packets"),
        Some(CounterChange::Delta { delta: 1_000, .. })
    ));
    // mlx4: the 64-bit counters_ext value stands in for the pinned 32-bit one.
    assert!(matches!(
        of("mlx4_0").counters.get("port_rcv_data"),
        Some(CounterChange::Delta { delta: 2_000, .. })
    ));
    assert!(of("i40iw0").counters.is_empty());
}
