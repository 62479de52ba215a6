//! Past one machine, first part: windows through a real NATS JetStream
//! (Debian's `nats-server`, started by the test) from the collector's real
//! spool and sender to real `faultline-correlator serve --nats` processes.
//!
//! - A NATS server killed (`SIGKILL`) and restarted while the collector
//!   publishes, down longer than the publish acknowledgement timeout,
//!   loses nothing: every window reaches the correlator's ingest log once,
//!   in order, though some were published twice.
//! - Two correlators on two shards (`--nats-shards`, each its own durable
//!   consumer) each get exactly the windows of the hosts whose shard key
//!   they own.
use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use collector::stream::{nats::NatsTarget, spawn, SenderConfig, SenderStats};
use proto::v1::{Origin, Window};
use tests::{
    stream::{correlator_with, free_port, recorded_windows, tmp},
    KillOnDrop,
};

/// `nats-server -js` on a loopback port with its store under `dir`,
/// returned once it says it is ready.
fn nats_server(port: u16, dir: &Path) -> Option<KillOnDrop> {
    let mut child = match Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            assert!(
                !tests::in_ci(),
                "nats-server missing ({e}): scripts/setup.sh installs Debian's nats-server"
            );
            eprintln!("skipping: nats-server not installed (scripts/setup.sh)");
            return None;
        }
    };
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("Server is ready") => break,
            Ok(_) => {}
            Err(e) => panic!("nats-server never became ready: {e}"),
        }
    }
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    Some(KillOnDrop(child))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn window(host: &str, seq: u64) -> Window {
    let end = now_ms();
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            boot_id: "b".into(),
            instance: format!("{host}-run"),
            machine_id: String::new(),
        }),
        seq,
        start_unix_ms: end - 1000,
        end_unix_ms: end,
        ..Window::default()
    }
}

fn sender(nats_port: u16, spool: &Path, shard: &str) -> SenderConfig {
    SenderConfig {
        endpoint: format!("nats://127.0.0.1:{nats_port}"),
        spool_dir: spool.to_path_buf(),
        spool_max_bytes: 1 << 20,
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(500),
        resume_every: Duration::from_secs(1),
        auth: collector::stream::tls::ClientAuth::default(),
        nats: NatsTarget {
            shard: shard.into(),
            ..NatsTarget::default()
        },
    }
}

/// Waits until the ingest log holds `n` windows (within 30 s).
async fn wait_for(record: &Path, n: usize, what: &str, stats: &SenderStats) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = recorded_windows(record).len();
        if got >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {got} of {n} windows recorded; {}",
            stats.summary()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn n(f: &std::sync::atomic::AtomicU64) -> u64 {
    f.load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn a_nats_server_killed_and_restarted_mid_run_loses_no_window() {
    let dir = tmp("nats-restart");
    let nport = free_port();
    let Some(server) = nats_server(nport, &dir.join("js")) else {
        return;
    };
    let record = dir.join("ingest.jsonl");
    let url = format!("nats://127.0.0.1:{nport}");
    let _corr = KillOnDrop(correlator_with(free_port(), &record, &["--nats", &url]));
    let rt = tests::runtime();
    let (rec, spool) = (record.clone(), dir.join("spool"));
    let js = dir.join("js");
    let (stats, server) = rt.block_on(async move {
        let record = rec;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let (h, stats) =
            spawn(sender(nport, &spool, ""), rx, Duration::from_secs(5)).expect("sender");
        for seq in 1..=20 {
            tx.send(window("n1", seq)).await.expect("input");
        }
        wait_for(&record, 20, "before the restart", &stats).await;
        // The server dies without a goodbye; windows keep coming (spooled).
        drop(server);
        for seq in 21..=40 {
            tx.send(window("n1", seq)).await.expect("input");
        }
        // The client buffers publishes over a short outage; this one outlasts
        // the acknowledgement timeout, so the sender gives the session up
        // and resends from the spool after reconnecting.
        let deadline = Instant::now() + Duration::from_secs(20);
        while stats.connected.load(std::sync::atomic::Ordering::Relaxed) {
            assert!(
                Instant::now() < deadline,
                "the session never ended: {}",
                stats.summary()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let server = nats_server(nport, &js).expect("restart");
        for seq in 41..=50 {
            tx.send(window("n1", seq)).await.expect("input");
        }
        wait_for(&record, 50, "after the restart", &stats).await;
        drop(tx);
        tokio::time::timeout(Duration::from_secs(15), h)
            .await
            .expect("the sender ends within its drain time")
            .expect("sender task");
        (stats, server)
    });
    drop(server);
    let got: Vec<u64> = recorded_windows(&record)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(
        got,
        (1..=50).collect::<Vec<u64>>(),
        "every window once, in order"
    );
    let summary = stats.summary();
    assert_eq!(n(&stats.delivered), 50, "{summary}");
    assert_eq!(n(&stats.dropped), 0, "{summary}");
    assert_eq!(n(&stats.pending), 0, "{summary}");
    assert!(
        n(&stats.connects) >= 2,
        "reconnected after the restart: {summary}"
    );
    // Windows published into the outage were sent again; the stream or the
    // correlator dropped the copies (the log above has each once).
    assert!(n(&stats.sent) > 50, "{summary}");
}

#[test]
fn two_correlators_on_two_shards_get_their_own_hosts_windows() {
    let dir = tmp("nats-shards");
    let nport = free_port();
    let Some(_server) = nats_server(nport, &dir.join("js")) else {
        return;
    };
    let url = format!("nats://127.0.0.1:{nport}");
    let (rec_a, rec_b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let _a = KillOnDrop(correlator_with(
        free_port(),
        &rec_a,
        &[
            "--nats",
            &url,
            "--nats-shards",
            "leaf01",
            "--nats-consumer",
            "shard-a",
        ],
    ));
    let _b = KillOnDrop(correlator_with(
        free_port(),
        &rec_b,
        &[
            "--nats",
            &url,
            "--nats-shards",
            "leaf02",
            "--nats-consumer",
            "shard-b",
        ],
    ));
    let rt = tests::runtime();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for (host, shard) in [("n1", "leaf01"), ("n2", "leaf02"), ("n3", "leaf01")] {
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let (h, stats) = spawn(
                sender(nport, &dir.join(format!("spool-{host}")), shard),
                rx,
                Duration::from_secs(5),
            )
            .expect("sender");
            for seq in 1..=10 {
                tx.send(window(host, seq)).await.expect("input");
            }
            tasks.push((tx, h, stats));
        }
        wait_for(&rec_a, 20, "shard a", &tasks[0].2).await;
        wait_for(&rec_b, 10, "shard b", &tasks[1].2).await;
        for (tx, h, _) in tasks {
            drop(tx);
            let _ = tokio::time::timeout(Duration::from_secs(15), h).await;
        }
    });
    let hosts = |r: &Path| {
        let mut v: Vec<String> = recorded_windows(r).into_iter().map(|(i, _)| i).collect();
        v.dedup();
        v.sort();
        v.dedup();
        v
    };
    assert_eq!(recorded_windows(&rec_a).len(), 20);
    assert_eq!(hosts(&rec_a), ["n1-run", "n3-run"]);
    assert_eq!(recorded_windows(&rec_b).len(), 10);
    assert_eq!(hosts(&rec_b), ["n2-run"]);
}
