//! A window the correlator refuses for good never blocks delivery: the
//! collector's real spool and sender against a real `faultline-correlator
//! serve`. A spool holding windows of a run dated eight days back (a node
//! off for a week, or a bad RTC at boot) is refused as `clock_past`; those
//! windows leave the spool — counted and logged — and every newer window
//! is delivered, in order.
use std::time::{Duration, Instant};

use collector::stream::{spawn, SenderConfig, Spool};
use proto::v1::{Origin, Window};
use tests::stream::{correlator_with, free_port, recorded_windows, tmp};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn window(instance: &str, seq: u64, end_ms: i64) -> Window {
    Window {
        origin: Some(Origin {
            hostname: "n1".into(),
            boot_id: "b".into(),
            instance: instance.into(),
            machine_id: String::new(),
            cluster: String::new(),
        }),
        seq,
        start_unix_ms: end_ms - 1000,
        end_unix_ms: end_ms,
        ..Window::default()
    }
}

#[test]
fn windows_refused_for_good_leave_the_spool_and_newer_ones_are_delivered() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("refusal");
    let record = dir.join("ingest.jsonl");
    let spool_dir = dir.join("spool");
    let port = free_port();
    let maddr = format!("127.0.0.1:{}", free_port());
    let mut corr = correlator_with(port, &record, &["--metrics-addr", &maddr]);

    // The previous run's windows, eight days old (the default max_past_s is
    // seven days). Instances sort by start time: these come first.
    let old = "0000000000000000001-7";
    let new = "1800000000000000000-8";
    let week_ago = now_ms() - 8 * 86_400_000;
    {
        let mut s = Spool::open(&spool_dir, 1 << 20).expect("spool");
        for seq in 1..=3 {
            s.push(&window(old, seq, week_ago + seq as i64 * 1000))
                .expect("spool a window");
        }
        assert_eq!(s.len(), 3);
    }

    let rt = tests::runtime();
    let stats = rt.block_on(async {
        let cfg = SenderConfig {
            endpoint: format!("http://127.0.0.1:{port}"),
            spool_dir: spool_dir.clone(),
            spool_max_bytes: 1 << 20,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            resume_every: Duration::from_secs(1),
            auth: collector::stream::tls::ClientAuth::default(),
            nats: Default::default(),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let (h, stats) = spawn(cfg, rx, Duration::from_secs(3)).expect("sender");
        for seq in 1..=5 {
            tx.send(window(new, seq, now_ms())).await.expect("input");
        }
        // Delivered: the new run's five windows reach the ingest log.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = recorded_windows(&record)
                .iter()
                .filter(|(i, _)| i == new)
                .count();
            if got == 5 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "newer windows never delivered behind the refused ones: {} ({got} of 5 recorded)",
                stats.summary()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(tx);
        tokio::time::timeout(Duration::from_secs(10), h)
            .await
            .expect("the sender ends within its drain time")
            .expect("sender task");
        stats
    });

    let rejected = tests::metrics::counter(
        &maddr,
        "faultline_ingest_rejected_total",
        &[("reason", "clock_past")],
    );
    let _ = corr.kill();
    let _ = corr.wait();
    let windows = recorded_windows(&record);
    assert_eq!(
        windows,
        (1..=5).map(|s| (new.to_string(), s)).collect::<Vec<_>>(),
        "only the new run's windows, once each and in order"
    );
    let summary = stats.summary();
    let n = |f: &std::sync::atomic::AtomicU64| f.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(n(&stats.refused), 3, "{summary}");
    assert_eq!(
        n(&stats.dropped),
        3,
        "refused windows count as dropped: {summary}"
    );
    assert_eq!(n(&stats.delivered), 5, "{summary}");
    assert_eq!(n(&stats.pending), 0, "{summary}");
    // One refusal carried the horizon: the other two old windows left the
    // spool with the first instead of costing a reconnect each.
    assert_eq!(rejected, 1, "clock_past refusals at the correlator");
    let left = Spool::open(&spool_dir, 1 << 20).expect("reopen");
    assert!(left.is_empty(), "{:?}", left.names_after(None));
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
