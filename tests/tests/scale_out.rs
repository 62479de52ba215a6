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

/// One host's window `seq` with one NDR port, down from `down_from`.
fn port_window(host: &str, seq: u64, down_from: Option<u64>) -> Window {
    let down = down_from.is_some_and(|d| seq >= d);
    let mut w = window(host, seq);
    w.ib_ports = vec![proto::v1::IbPort {
        hca: "mlx5_0".into(),
        port: 1,
        state: if down { 1 } else { 4 },
        phys_state: if down { 3 } else { 5 },
        rate_bytes_per_sec: 50_000_000_000,
        counters: [
            ("symbol_error".to_string(), 0u64),
            ("link_downed".to_string(), 0),
        ]
        .into_iter()
        .collect(),
        link_layer: "InfiniBand".into(),
        ..Default::default()
    }];
    w
}

/// The open incidents a correlator's web API lists: (id, kind, entity);
/// `None` while its web listener is not up (a standby).
fn open_incidents(web: &str) -> Option<Vec<(String, String, String)>> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "2", &format!("http://{web}/api/open")])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let s = |x: &serde_json::Value, k: &str| x[k].as_str().unwrap_or("").to_string();
    Some(
        v["incidents"]
            .as_array()?
            .iter()
            .map(|i| (s(i, "incident_id"), s(i, "kind"), s(i, "entity")))
            .collect(),
    )
}

/// Polls `f` every 50 ms until it returns `Some` (within 30 s).
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_standby_takes_over_a_killed_shard_with_its_open_incidents() {
    let dir = tmp("nats-standby");
    let nport = free_port();
    let Some(_server) = nats_server(nport, &dir.join("js")) else {
        return;
    };
    let url = format!("nats://127.0.0.1:{nport}");
    let (rec_a, rec_b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let (web_a, web_b) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let shard = |rec: &Path, web: &str| {
        KillOnDrop(correlator_with(
            free_port(),
            rec,
            &[
                "--nats",
                &url,
                "--nats-consumer",
                "shard-1",
                "--nats-lease-s",
                "1",
                "--web",
                web,
            ],
        ))
    };
    let mut a = shard(&rec_a, &web_a);
    // Active once its web API answers (it starts after the lease).
    until("the first correlator active", || open_incidents(&web_a));
    let _b = shard(&rec_b, &web_b);
    let rt = tests::runtime();
    let hosts = ["n1", "n2", "n3"];
    let (txs, tasks): (Vec<_>, Vec<_>) = hosts
        .iter()
        .map(|h| {
            let _g = rt.enter();
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let (t, _) = spawn(
                sender(nport, &dir.join(format!("spool-{h}")), ""),
                rx,
                Duration::from_secs(5),
            )
            .expect("sender");
            (tx, t)
        })
        .unzip();
    let send = |from: u64, to: u64| {
        for seq in from..=to {
            for (h, tx) in hosts.iter().zip(&txs) {
                let down = (*h == "n2").then_some(3);
                rt.block_on(tx.send(port_window(h, seq, down)))
                    .expect("input");
            }
        }
    };
    send(1, 6);
    let down = until("the port-down incident on the active shard", || {
        open_incidents(&web_a)?
            .into_iter()
            .find(|i| i.1 == "ib_link_down" && i.2 == "n2/mlx5_0/1")
    });
    // The active shard dies without a goodbye; its standby takes over.
    let _ = a.0.kill();
    let _ = a.0.wait();
    let killed = Instant::now();
    let taken = until("the standby active", || open_incidents(&web_b));
    let takeover = killed.elapsed();
    send(7, 12);
    until("every window on the standby", || {
        let got = recorded_windows(&rec_b);
        hosts
            .iter()
            .all(|h| {
                got.iter()
                    .any(|(i, s)| *i == format!("{h}-run") && *s == 12)
            })
            .then_some(())
    });
    // The incident came back under its id, before any window of its own,
    // and is still the only one for that port.
    assert_eq!(taken, std::slice::from_ref(&down), "restored at takeover");
    let now = open_incidents(&web_b).expect("standby answers");
    assert_eq!(
        now,
        [down],
        "one incident, same id, after the standby's windows"
    );
    // No window lost: the two logs together hold every host's 1..=12.
    let mut all: Vec<(String, u64)> = recorded_windows(&rec_a);
    all.extend(recorded_windows(&rec_b));
    all.sort();
    all.dedup();
    for h in hosts {
        let seqs: Vec<u64> = all
            .iter()
            .filter(|(i, _)| *i == format!("{h}-run"))
            .map(|(_, s)| *s)
            .collect();
        assert_eq!(seqs, (1..=12).collect::<Vec<u64>>(), "{h}");
    }
    // Lease 1 s, retried every 250 ms: within two 1-second windows.
    assert!(
        takeover < Duration::from_secs(2),
        "takeover took {takeover:?}"
    );
    eprintln!("standby took over {takeover:?} after the kill");
    drop(txs);
    rt.block_on(async {
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    });
}
