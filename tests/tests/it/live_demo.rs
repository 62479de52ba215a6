//! The live path over real gRPC on loopback: a collector streams windows from
//! a (fake) InfiniBand fabric to the correlator, one link starts taking
//! errors, and a subscriber prints the `ib_link_degraded` candidate.
use std::{
    process::{Command, Stdio},
    time::Duration,
};

use tests::bin;

#[test]
fn collector_to_correlator_to_subscriber_reports_the_degrading_link() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("live_demo") {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let url = format!("http://127.0.0.1:{port}");
    let ib = tests::FakeIb::new("live");
    for hca in 0..4 {
        for p in 1..=2 {
            ib.active_port(&format!("mlx5_{hca}"), p);
        }
    }
    let spool = std::env::temp_dir().join(format!("faultline-live-spool-{}", std::process::id()));
    let _corr = tests::KillOnDrop(
        Command::new(bin("faultline-correlator"))
            .args([
                "serve",
                "--insecure",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("correlator"),
    );
    let mut sub = tests::KillOnDrop(tests::subscriber(&url, &["--kind", "ib_link_degraded"]));
    let sub_lines = tests::lines_of(&mut sub.0);
    let mut col = tests::KillOnDrop(
        tests::streaming_collector("0.2", &url, &spool, ib.root())
            .spawn()
            .expect("collector"),
    );
    let col_lines = tests::lines_of(&mut col.0);
    let wait_window = |n: u64| loop {
        let l = col_lines
            .recv_timeout(Duration::from_secs(20))
            .expect("collector output");
        if let Some(k) = l
            .strip_prefix("window ")
            .and_then(|r| r.split(':').next())
            .and_then(|k| k.parse::<u64>().ok())
        {
            if k >= n {
                return;
            }
        }
    };
    // Healthy traffic for a few windows, then errors on one link.
    let mut words = 0u64;
    for w in 1..=30u64 {
        words += 50_000_000;
        for hca in 0..4 {
            for p in 1..=2 {
                let dev = format!("mlx5_{hca}");
                ib.counter(&dev, p, "port_rcv_data", words);
                ib.counter(&dev, p, "port_xmit_data", words);
            }
        }
        if w > 5 {
            ib.counter("mlx5_2", 1, "symbol_error", (w - 5) * 40);
        }
        wait_window(w + 1);
        if let Ok(l) = sub_lines.try_recv() {
            if l.starts_with("OPENED ib_link_degraded") {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                assert!(l.contains(&format!("{}/mlx5_2/1", host.trim())), "{l}");
                let _ = std::fs::remove_dir_all(&spool);
                return;
            }
        }
    }
    panic!("the subscriber never printed the incident");
}
