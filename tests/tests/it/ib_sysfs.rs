//! InfiniBand port counters from a fake sysfs tree: every counter semantic
//! (4-byte data words, saturation, resets, missing and unreadable files,
//! several HCAs with ports in different states), the bit-error estimate, and
//! the node_exporter-compatible Prometheus names of `--once`.
use std::{process::Command, time::Duration};

use collector::ib::{rates::CounterChange, read_ports, RateTracker};

fn tree() -> tests::FakeIb {
    let t = tests::FakeIb::new("sem");
    t.active_port("mlx5_0", 1);
    t.active_port("mlx5_1", 1);
    // A down port on a second HCA port.
    t.active_port("mlx5_1", 2);
    t.write("mlx5_1", 2, "state", "1: DOWN");
    t.write("mlx5_1", 2, "phys_state", "3: Disabled");
    t.write("mlx5_1", 2, "rate", "10 Gb/sec (4X)");
    // A RoCE device like rxe: no counters/, only hw_counters/.
    let d = t.port_dir("rxe0", 1);
    std::fs::remove_dir(d.join("counters")).expect("remove counters dir");
    t.write("rxe0", 1, "state", "4: ACTIVE");
    t.write("rxe0", 1, "phys_state", "5: LinkUp");
    t.write("rxe0", 1, "rate", "10 Gb/sec (1X QDR)");
    t.write("rxe0", 1, "link_layer", "Ethernet");
    t.write("rxe0", 1, "lid", "0x0");
    t.hw_counter("rxe0", 1, "sent_pkts", 100);
    t.hw_counter("rxe0", 1, "rcvd_pkts", 90);
    t.hw_counter("rxe0", 1, "retry_exceeded_err", 0);
    t
}

#[test]
fn reads_devices_ports_and_states() {
    let _turn = tests::one_file_at_a_time(file!());
    let t = tree();
    let ports = read_ports(t.root()).unwrap();
    let names: Vec<String> = ports
        .iter()
        .map(|p| format!("{}/{}", p.device, p.port))
        .collect();
    assert_eq!(names, ["mlx5_0/1", "mlx5_1/1", "mlx5_1/2", "rxe0/1"]);
    let p = &ports[0];
    assert_eq!((p.state, p.phys_state, p.lid), (Some(4), Some(5), Some(26)));
    assert_eq!(p.rate_bytes_per_sec, Some(12_500_000_000));
    assert_eq!(p.link_layer.as_deref(), Some("InfiniBand"));
    assert_eq!(p.counters.len(), 13);
    assert!(p.read_errors.is_empty(), "{:?}", p.read_errors);
    assert_eq!((ports[2].state, ports[2].phys_state), (Some(1), Some(3)));
    let rxe = &ports[3];
    assert!(rxe.counters.is_empty());
    assert_eq!(rxe.hw_counters["sent_pkts"], 100);
    assert!(
        rxe.read_errors.is_empty(),
        "rxe has no counters/: not an error"
    );
    assert_eq!(p.entity("n017"), "n017/mlx5_0/1");
}

#[test]
fn no_infiniband_class_means_no_ports() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-noib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(read_ports(&dir).unwrap().is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rates_in_bytes_with_resets_saturation_and_missing_files() {
    let _turn = tests::one_file_at_a_time(file!());
    let t = tree();
    let mut tr = RateTracker::new();
    assert!(
        tr.update(read_ports(t.root()).unwrap()).is_empty(),
        "first read primes"
    );

    // Window 1: 1,000,000 words received (4 MB), 250 symbol errors, 3 link
    // error recoveries; rxe sends 50 more packets.
    t.counter("mlx5_0", 1, "port_rcv_data", 1_000_000);
    t.counter("mlx5_0", 1, "port_xmit_data", 500_000);
    t.counter("mlx5_0", 1, "symbol_error", 250);
    t.counter("mlx5_0", 1, "link_error_recovery", 3);
    t.hw_counter("rxe0", 1, "sent_pkts", 150);
    std::thread::sleep(Duration::from_millis(100));
    let w = tr.update(read_ports(t.root()).unwrap());
    assert_eq!(w.len(), 4);
    let p = &w[0];
    assert_eq!(p.counters["port_rcv_data"].delta(), Some(4_000_000));
    assert_eq!(p.counters["port_xmit_data"].delta(), Some(2_000_000));
    assert_eq!(p.counters["symbol_error"].delta(), Some(250));
    assert_eq!(p.counters["link_error_recovery"].delta(), Some(3));
    let rate = p.bytes_per_sec("port_rcv_data").unwrap();
    assert!(
        rate > 4_000_000.0 / 1.0 && rate <= 4_000_000.0 / 0.1,
        "{rate}"
    );
    let ber = p.symbol_error_ratio.unwrap();
    assert!((ber - 250.0 / 32_000_000.0).abs() < 1e-12, "{ber}");
    assert_eq!(w[3].hw_counters["sent_pkts"].delta(), Some(50));

    // Window 2: a reset (driver reload) on mlx5_0: values drop.
    t.counter("mlx5_0", 1, "port_rcv_data", 10);
    t.counter("mlx5_0", 1, "symbol_error", 2);
    t.hw_counter("rxe0", 1, "sent_pkts", 5);
    // symbol_error on mlx5_1 saturates at 16 bits.
    t.counter("mlx5_1", 1, "symbol_error", 65535);
    // A missing file and a garbage file on mlx5_1/1.
    t.remove("mlx5_1", 1, "counters/link_downed");
    t.write("mlx5_1", 1, "counters/port_rcv_errors", "n/a");
    let w = tr.update(read_ports(t.root()).unwrap());
    let p = &w[0];
    assert!(matches!(
        p.counters["port_rcv_data"],
        CounterChange::Reset { delta: 40, .. }
    ));
    assert!(matches!(
        p.counters["symbol_error"],
        CounterChange::Reset { delta: 2, .. }
    ));
    assert!(p
        .counters
        .values()
        .all(|c| c.per_sec().is_none_or(|r| r >= 0.0)));
    assert!(matches!(
        w[3].hw_counters["sent_pkts"],
        CounterChange::Reset { delta: 5, .. }
    ));
    assert_eq!(tr.resets("mlx5_0", 1), 2);
    assert_eq!(tr.resets("rxe0", 1), 1);
    let q = &w[1];
    assert_eq!(q.counters["symbol_error"], CounterChange::Saturated);
    assert_eq!(q.counters["symbol_error"].per_sec(), None);
    assert!(!q.counters.contains_key("link_downed"));
    assert!(!q.counters.contains_key("port_rcv_errors"));
    let ports = read_ports(t.root()).unwrap();
    let errs: Vec<&str> = ports[1]
        .read_errors
        .iter()
        .map(|(f, _)| f.as_str())
        .collect();
    assert_eq!(errs, ["counters/port_rcv_errors"]);

    // Window 3: the saturated counter stays pinned: still no rate, no reset.
    let w = tr.update(read_ports(t.root()).unwrap());
    assert_eq!(w[1].counters["symbol_error"], CounterChange::Saturated);
    assert_eq!(tr.resets("mlx5_1", 1), 0);

    // A state change is reported.
    t.write("mlx5_0", 1, "state", "1: DOWN");
    let w = tr.update(read_ports(t.root()).unwrap());
    assert_eq!(w[0].state_change, Some((4, 1)));
}

#[test]
fn once_prints_node_exporter_compatible_values() {
    let _turn = tests::one_file_at_a_time(file!());
    let t = tree();
    t.counter("mlx5_0", 1, "port_xmit_data", 1000);
    t.counter("mlx5_0", 1, "port_rcv_data", 2500);
    t.counter("mlx5_0", 1, "symbol_error", 7);
    t.counter("mlx5_0", 1, "link_downed", 255);
    let bin = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("faultline-collector");
    let out = Command::new(&bin)
        .args(["--once", "--sysfs-root"])
        .arg(t.root())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "# TYPE faultline_infiniband_port_data_transmitted_bytes_total counter",
        "faultline_infiniband_port_data_transmitted_bytes_total{device=\"mlx5_0\",port=\"1\"} 4000",
        "faultline_infiniband_port_data_received_bytes_total{device=\"mlx5_0\",port=\"1\"} 10000",
        "faultline_infiniband_symbol_error_total{device=\"mlx5_0\",port=\"1\"} 7",
        "faultline_infiniband_link_downed_total{device=\"mlx5_0\",port=\"1\"} 255",
        "faultline_infiniband_saturated{device=\"mlx5_0\",port=\"1\",counter=\"link_downed\"} 1",
        "faultline_infiniband_state_id{device=\"mlx5_1\",port=\"2\"} 1",
        "faultline_infiniband_physical_state_id{device=\"mlx5_1\",port=\"2\"} 3",
        "faultline_infiniband_rate_bytes_per_second{device=\"mlx5_0\",port=\"1\"} 12500000000",
        "faultline_infiniband_hw_other_total{device=\"rxe0\",port=\"1\",counter=\"sent_pkts\"} 100",
        "faultline_infiniband_link_layer_info{device=\"rxe0\",port=\"1\",link_layer=\"Ethernet\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line:?} in:\n{text}");
    }
    // Every TYPE line is declared once.
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE")).collect();
    let mut dedup = types.clone();
    dedup.dedup();
    assert_eq!(types.len(), dedup.len());
}

/// Runs `faultline-collector --once --sysfs-root ROOT ARGS...`.
fn once(root: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(tests::bin("faultline-collector"))
        .args(["--once", "--sysfs-root"])
        .arg(root)
        .args(args)
        .output()
        .expect("run faultline-collector")
}

/// The devices with a `faultline_infiniband_state_id` series.
fn devices(out: &std::process::Output) -> Vec<String> {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut d: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("faultline_infiniband_state_id{"))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect();
    d.dedup();
    d
}

#[test]
fn device_include_and_exclude_like_node_exporter() {
    let _turn = tests::one_file_at_a_time(file!());
    let t = tree();
    t.active_port("mlx5_10", 1);
    assert_eq!(
        devices(&once(t.root(), &[])),
        ["mlx5_0", "mlx5_1", "mlx5_10", "rxe0"]
    );
    // node_exporter's flag names are accepted as they are.
    assert_eq!(
        devices(&once(
            t.root(),
            &["--collector.infiniband.device-exclude", "^rxe"]
        )),
        ["mlx5_0", "mlx5_1", "mlx5_10"]
    );
    // Matched anywhere in the name, as Go's regexp: mlx5_1 is in mlx5_10.
    assert_eq!(
        devices(&once(t.root(), &["--ib-device-include", "mlx5_1"])),
        ["mlx5_1", "mlx5_10"]
    );
    assert_eq!(
        devices(&once(t.root(), &["--ib-device-include", "^mlx5_[01]$"])),
        ["mlx5_0", "mlx5_1"]
    );
    // From the configuration file too.
    let cfg = t.root().join("collector.toml");
    std::fs::write(&cfg, "[ib]\ndevice_exclude = \"^mlx5_1\"\n").unwrap();
    assert_eq!(
        devices(&once(t.root(), &["--config", cfg.to_str().unwrap()])),
        ["mlx5_0", "rxe0"]
    );
    // Both, or a bad pattern: exit 2 with one line naming the key.
    for (args, says) in [
        (
            &["--ib-device-include", "a", "--ib-device-exclude", "b"][..],
            "config error: ib.device_include: ib.device_include and ib.device_exclude are mutually exclusive",
        ),
        (
            &["--ib-device-exclude", "mlx5_[0"][..],
            "config error: ib.device_exclude: \"mlx5_[0\" is not a regular expression",
        ),
    ] {
        let out = once(t.root(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with(&format!("faultline-collector: {says}")), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
}

#[test]
fn a_missing_optional_file_is_noted_once_not_a_read_error() {
    let _turn = tests::one_file_at_a_time(file!());
    let t = tree();
    // iWARP-like: the driver has no `lid` for this port.
    t.remove("mlx5_1", 1, "lid");
    let filter = collector::ib::DeviceFilter::default();
    let mut issues = collector::ib::ReadIssues::default();
    let mut noted = Vec::new();
    for _ in 0..3 {
        let scan = collector::ib::scan(t.root(), &filter).unwrap();
        let p = scan
            .ports
            .iter()
            .find(|p| p.device == "mlx5_1" && p.port == 1)
            .unwrap();
        assert!(p.read_errors.is_empty(), "{:?}", p.read_errors);
        assert_eq!(p.lid, None);
        assert_eq!(scan.missing.len(), 1, "{:?}", scan.missing);
        assert_eq!(
            (scan.missing[0].device.as_str(), scan.missing[0].file),
            ("mlx5_1", "lid")
        );
        noted.push(issues.account("n017", &scan));
    }
    assert_eq!(noted, [1, 0, 0], "noted in the first window only");
    // A required file is still an error, every window.
    t.remove("mlx5_1", 1, "state");
    let scan = collector::ib::scan(t.root(), &filter).unwrap();
    let p = scan.ports.iter().find(|p| p.device == "mlx5_1").unwrap();
    assert_eq!(
        p.read_errors
            .iter()
            .map(|(f, _)| f.as_str())
            .collect::<Vec<_>>(),
        ["state"]
    );
}
