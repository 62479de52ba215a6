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
//! - `kill -9` of a shard's active correlator: its standby takes over
//!   within two 1-second windows with the open incidents under their ids,
//!   no window lost, no incident duplicated.
//! - A simulated 48-node cluster's run (faults on every leaf, one of them a
//!   switch's whose extent depends on the rest of the fabric) through 3
//!   shards by leaf, exchanging summaries, gives one correlator's
//!   incidents, opened and resolved within a window of each other.
//! - The fleet view over two shards and two clusters: one incident per
//!   cluster and entity (the same host name in two clusters is two; a host
//!   raised by two shards is one, joined), the label kept in its history,
//!   and the joined id kept across a restart of the view.
use std::{
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

/// Removes a passing test's directory (its JetStream store runs to
/// hundreds of MB) once everything declared after it has stopped; a
/// failing test's stays for a look.
struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// One test at a time: the 3-shard run keeps both cores busy for most of a
/// minute, and the others measure a takeover in wall time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `nats-server -js` on a loopback port with its store under `dir`,
/// returned once it says it is ready.
fn nats_server(port: u16, dir: &Path) -> Option<KillOnDrop> {
    let port = port.to_string();
    tests::nats_server(&[
        std::ffi::OsStr::new("-js"),
        "-a".as_ref(),
        "127.0.0.1".as_ref(),
        "-p".as_ref(),
        port.as_ref(),
        "-sd".as_ref(),
        dir.as_os_str(),
    ])
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
            cluster: String::new(),
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
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = one_at_a_time();
    let dir = tmp("nats-restart");
    let _clean = Cleanup(dir.clone());
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
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = one_at_a_time();
    let dir = tmp("nats-shards");
    let _clean = Cleanup(dir.clone());
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

/// An open incident as a web API lists it: (id, cluster, kind, entity,
/// evidence).
type Listed = (String, String, String, String, Vec<String>);

/// The open incidents a correlator's or the fleet view's web API lists, in
/// its order; `None` while its web listener is not up (a standby).
fn listed(web: &str) -> Option<Vec<Listed>> {
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
            .map(|i| {
                let ev = i["evidence"].as_array().into_iter().flatten();
                let ev = ev.filter_map(|e| e.as_str().map(String::from)).collect();
                let (id, c, k, e) = (
                    s(i, "incident_id"),
                    s(i, "cluster"),
                    s(i, "kind"),
                    s(i, "entity"),
                );
                (id, c, k, e, ev)
            })
            .collect(),
    )
}

/// The open incidents a correlator's web API lists: (id, kind, entity).
fn open_incidents(web: &str) -> Option<Vec<(String, String, String)>> {
    Some(
        listed(web)?
            .into_iter()
            .map(|(id, _, kind, entity, _)| (id, kind, entity))
            .collect(),
    )
}

/// Polls `f` every 50 ms until it returns `Some` (within 30 s).
fn until<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    until_or(what, f).unwrap_or_else(|| panic!("never: {what}"))
}

/// Polls `f` every 50 ms until it returns `Some`; `None` after 30 s.
fn until_or<T>(_what: &str, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = f() {
            return Some(t);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_standby_takes_over_a_killed_shard_with_its_open_incidents() {
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = one_at_a_time();
    let dir = tmp("nats-standby");
    let _clean = Cleanup(dir.clone());
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
                "--nats-baselines-s",
                "0.5",
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
                // And an NVMe at a steady 80 µs: a baseline to hand over.
                let mut w = port_window(h, seq, down);
                w.block = vec![proto::v1::BlockStat {
                    device: "nvme0n1".into(),
                    op: "write".into(),
                    requests: 400,
                    latency_sum_ns: 400 * 80_000,
                    latency_max_ns: 160_000,
                    device_class: "nvme".into(),
                    ..Default::default()
                }];
                rt.block_on(tx.send(w)).expect("input");
            }
        }
    };
    send(1, 6);
    let down = until("the port-down incident on the active shard", || {
        open_incidents(&web_a)?
            .into_iter()
            .find(|i| i.1 == "ib_link_down" && i.2 == "n2/mlx5_0/1")
    });
    // Every host's baselines written to NATS before the kill.
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(url.as_str()).await.expect("nats"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let kv = js.get_key_value("faultline_baselines").await;
            let mut have = 0;
            if let Ok(kv) = &kv {
                for h in hosts {
                    let v = kv.get(format!("shard-1.{h}")).await.ok().flatten();
                    have += usize::from(
                        v.is_some_and(|b| String::from_utf8_lossy(&b).contains("nvme0n1")),
                    );
                }
            }
            if have == hosts.len() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "baselines of {have} hosts in NATS"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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
    // The standby gave each host's device the baseline learnt before.
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "2", &format!("http://{web_b}/metrics")])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let restored: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("faultline_engine_baselines_restored_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert_eq!(restored, hosts.len() as f64, "baselines restored");
    // Its first window of each host continues the stream: none counted
    // missing (windows 1..=6 were the dead process's).
    let missing = text
        .lines()
        .find_map(|l| l.strip_prefix("faultline_correlator_missing_windows_total "))
        .map(str::trim);
    assert_eq!(missing, Some("0"), "windows counted missing");
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

/// `curl` of `http://{addr}{path}`: (status, body); `None` while nothing
/// answers there.
fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "2", "-w", "\n%{http_code}"])
        .arg(format!("http://{addr}{path}"))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n')?;
    let code: u16 = code.trim().parse().ok().filter(|c| *c != 0)?;
    Some((code, body.to_string()))
}

/// A shard's standby is ready and scraped: `/healthz` 200 naming it a
/// standby, `/metrics` with `faultline_correlator_shard_active` 0 (and no
/// open incidents of its own), the web UI's API 503 — on its web UI's
/// address and its `--metrics-addr`. Once the active is killed it takes
/// the same addresses over: its API answers and the gauge is 1.
#[test]
fn a_standby_serves_health_and_metrics_then_its_web_ui_once_active() {
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = one_at_a_time();
    let dir = tmp("nats-standby-web");
    let _clean = Cleanup(dir.clone());
    let nport = free_port();
    let Some(_server) = nats_server(nport, &dir.join("js")) else {
        return;
    };
    let url = format!("nats://127.0.0.1:{nport}");
    let addr = || format!("127.0.0.1:{}", free_port());
    let (web_a, web_b, metrics_b) = (addr(), addr(), addr());
    let shard = |rec: &str, extra: &[&str]| {
        let mut args = vec!["--nats", &url, "--nats-consumer", "shard-7"];
        args.extend(["--nats-lease-s", "1"]);
        args.extend(extra);
        KillOnDrop(correlator_with(free_port(), &dir.join(rec), &args))
    };
    let gauge = |addr: &str| {
        let (code, text) = http_get(addr, "/metrics")?;
        assert_eq!(code, 200, "{addr}/metrics: {text}");
        text.lines()
            .find_map(|l| {
                l.strip_prefix("faultline_correlator_shard_active{consumer=\"shard-7\"} ")
            })
            .map(|v| v.trim().to_string())
    };
    let mut a = shard("a.jsonl", &["--web", &web_a]);
    until("the first correlator active", || open_incidents(&web_a));
    let _b = shard("b.jsonl", &["--web", &web_b, "--metrics-addr", &metrics_b]);
    for at in [&web_b, &metrics_b] {
        let (code, body) = until("the standby's /healthz", || http_get(at, "/healthz"));
        assert_eq!(code, 200, "{at}/healthz");
        assert!(
            body.contains("standby of shard shard-7"),
            "{at}/healthz: {body}"
        );
        assert_eq!(gauge(at).as_deref(), Some("0"), "{at}: standby's gauge");
        let (code, body) = http_get(at, "/api/open").expect("answers");
        assert_eq!(code, 503, "{at}/api/open: {body}");
        assert!(body.contains("standby"), "{body}");
    }
    let (_, text) = http_get(&web_b, "/metrics").expect("metrics");
    assert!(text.contains("faultline_build_info{"), "{text}");
    assert!(text.contains("process_resident_memory_bytes "), "{text}");
    assert!(
        !text.contains("faultline_correlator_open_incidents"),
        "a standby exports no open incidents: {text}"
    );
    assert_eq!(gauge(&web_a).as_deref(), Some("1"), "active's gauge");
    let _ = a.0.kill();
    let _ = a.0.wait();
    let killed = Instant::now();
    assert_eq!(until("the standby active", || open_incidents(&web_b)), []);
    eprintln!("standby's web UI up {:?} after the kill", killed.elapsed());
    assert_eq!(
        gauge(&web_b).as_deref(),
        Some("1"),
        "former standby's gauge"
    );
    let (code, body) = http_get(&metrics_b, "/healthz").expect("metrics listener");
    assert_eq!(
        (code, body.as_str()),
        (200, "ok\n"),
        "the real metrics listener"
    );
    assert_eq!(gauge(&metrics_b).as_deref(), Some("1"));
}

/// A correlator's every update, by a gRPC subscription taken before any
/// window flows; read on a thread until `stop`.
fn subscribe_all(port: u16) -> std::sync::mpsc::Receiver<proto::v1::CandidateUpdate> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tests::runtime();
        rt.block_on(async move {
            let url = format!("http://127.0.0.1:{port}");
            let chan = loop {
                match tonic::transport::Endpoint::from_shared(url.clone())
                    .expect("url")
                    .connect()
                    .await
                {
                    Ok(c) => break c,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            let mut s = proto::v1::candidates_client::CandidatesClient::new(chan)
                .subscribe(proto::v1::SubscribeRequest::default())
                .await
                .expect("subscribe")
                .into_inner();
            let _ = tx.send(proto::v1::CandidateUpdate {
                state: "subscribed".into(),
                ..Default::default()
            });
            while let Ok(Some(u)) = s.message().await {
                if tx.send(u).is_err() {
                    return;
                }
            }
        });
    });
    rx
}

/// Incidents from updates: (kind, entity) → (opened ms, resolved ms).
type Episodes = std::collections::BTreeMap<(String, String), (i64, Option<i64>)>;

fn episodes(updates: &[proto::v1::CandidateUpdate]) -> Episodes {
    let mut by_id: std::collections::BTreeMap<&str, (String, String, i64, Option<i64>)> =
        Default::default();
    for u in updates {
        let e = by_id.entry(u.incident_id.as_str()).or_insert((
            u.kind.clone(),
            u.entity.clone(),
            u.ts_unix_ms,
            None,
        ));
        // The kind an incident ends as (a down becoming a flap keeps its id).
        e.0.clone_from(&u.kind);
        if u.state == "resolved" {
            e.3 = Some(u.ts_unix_ms);
        }
    }
    by_id
        .into_values()
        .map(|(k, e, o, r)| ((k, e), (o, r)))
        .collect()
}

#[test]
fn three_shards_by_leaf_give_one_correlators_incidents() {
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = one_at_a_time();
    use sim::cluster::{topology, Cluster};
    let dir = tmp("nats-equivalence");
    let _clean = Cleanup(dir.clone());
    let nport = free_port();
    let Some(_server) = nats_server(nport, &dir.join("js")) else {
        return;
    };
    let url = format!("nats://127.0.0.1:{nport}");
    // 48 nodes behind 3 leaves (16 each); faults on every leaf, one a
    // leaf-wide switch fault, and confounders.
    let args = sim::SimArgs {
        nodes: 48,
        duration: 150.0,
        onset: 40.0,
        inject: [
            "ib-link-degrade@n003/mlx5_2/1:ber=1e-10",
            "ib-switch-degrade@leaf01:ber=1e-10,ports=4",
            "gpu-thermal@n040/gpu3",
            "storage-stall@n037/nvme0n1",
            "single-errors",
        ]
        .map(String::from)
        .to_vec(),
        ..sim::SimArgs::default()
    };
    let mut cluster = Cluster::new(args.spec());
    let faults = sim::faults::parse_all(&args.inject, &cluster, args.seed).expect("faults");
    let topo = dir.join("fabric.topo");
    std::fs::write(&topo, topology::ibnetdiscover(args.nodes)).expect("topology");
    // Simulated time is not this machine's: no clock checks.
    let cfg = dir.join("correlator.toml");
    std::fs::write(&cfg, "[detect.limits]\nmax_future_s = 0\nmax_past_s = 0\n").expect("config");
    let start = |stream: &str, prefix: &str, shards: &str, consumer: &str| {
        let port = free_port();
        let mut a = vec![
            "--nats",
            &url,
            "--nats-stream",
            stream,
            "--nats-subject",
            prefix,
            "--nats-consumer",
            consumer,
            "--config",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        a.push(cfg.display().to_string());
        a.extend(["--topology".to_string(), topo.display().to_string()]);
        if !shards.is_empty() {
            a.extend(["--nats-shards".to_string(), shards.to_string()]);
        }
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let child = KillOnDrop(correlator_with(
            port,
            &dir.join(format!("{consumer}.jsonl")),
            &a,
        ));
        let rx = subscribe_all(port);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(30)).map(|u| u.state),
            Ok("subscribed".to_string())
        );
        (child, rx)
    };
    let one = start("ONE", "one", "", "one");
    let shards: Vec<_> = (0..3)
        .map(|l| {
            start(
                "THREE",
                "three",
                &topology::leaf_name(l),
                &format!("three-{l}"),
            )
        })
        .collect();
    // Every window, to both streams: the whole run on one correlator, each
    // host's windows on its leaf's shard; slot by slot, as live collectors
    // send them.
    let mut slots = Vec::new();
    let n = (args.duration / args.window) as usize;
    for _ in 0..n {
        cluster.advance(&faults, args.onset);
        let mut slot = Vec::new();
        for node in 0..args.nodes {
            if let Some(w) = cluster.window(node) {
                slot.push((topology::leaf_name(cluster.leaf_of(node)), w));
            }
        }
        slots.push(slot);
    }
    // After them, per leaf, a marker host whose GPU falls off the bus: its
    // incident is the last update each correlator sends, so once a
    // subscriber has it every earlier update has arrived.
    let end_ms = slots
        .iter()
        .flatten()
        .last()
        .map_or(0, |(_, w)| w.end_unix_ms);
    let mut markers = Vec::new();
    for l in 0..3 {
        let leaf = topology::leaf_name(l);
        let marker = Window {
            origin: Some(Origin {
                hostname: format!("zz-marker-{leaf}"),
                boot_id: "b".into(),
                instance: "m".into(),
                machine_id: String::new(),
                cluster: String::new(),
            }),
            seq: 1,
            start_unix_ms: end_ms,
            end_unix_ms: end_ms + 1000,
            gpus: vec![proto::v1::GpuSample {
                index: 0,
                uuid: "GPU-marker".into(),
                lost: true,
                ..Default::default()
            }],
            ..Window::default()
        };
        markers.push((leaf, marker));
    }
    slots.push(markers);
    let rt = tests::runtime();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(url.as_str()).await.expect("nats"));
        // The correlators create their streams as they connect.
        for name in ["ONE", "THREE"] {
            let deadline = Instant::now() + Duration::from_secs(30);
            while js.get_stream(name).await.is_err() {
                assert!(Instant::now() < deadline, "stream {name} never created");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let summaries = js
            .get_key_value("faultline_summaries")
            .await
            .expect("summaries bucket");
        let mut watch = summaries.watch_all().await.expect("watch the summaries");
        let mut seen: std::collections::BTreeMap<String, u64> = Default::default();
        // Windows each correlator has been sent: "ONE.one", "THREE.three-<l>".
        let mut sent: std::collections::BTreeMap<String, u64> = Default::default();
        for slot in &slots {
            for (leaf, w) in slot {
                let o = w.origin.clone().unwrap_or_default();
                let id = vocab::nats::msg_id(&o.hostname, &o.instance, w.seq);
                let shard = format!("THREE.three-{}", &leaf[leaf.len() - 1..]);
                let host = vocab::nats::host_token(&o.hostname);
                for (subject, key) in [
                    (format!("one.{leaf}.{host}"), "ONE.one".to_string()),
                    (format!("three.{leaf}.{host}"), shard),
                ] {
                    use prost::Message as _;
                    let m = async_nats::jetstream::message::PublishMessage::build()
                        .payload(w.encode_to_vec().into())
                        .message_id(id.clone());
                    js.send_publish(subject, m)
                        .await
                        .expect("publish")
                        .await
                        .expect("ack");
                    *sent.entry(key).or_insert(0) += 1;
                }
            }
            // The next slot once every correlator has taken this one and
            // published its summary (what the other shards judge against).
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while sent
                .iter()
                .any(|(k, n)| seen.get(k).copied().unwrap_or(0) < *n)
            {
                use tokio_stream::StreamExt as _;
                let e = tokio::time::timeout_at(deadline, watch.next())
                    .await
                    .unwrap_or_else(|_| panic!("summaries {seen:?} of {sent:?} windows"))
                    .expect("the watch goes on")
                    .expect("a summary");
                if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&e.value) {
                    seen.insert(e.key.clone(), v["windows"].as_u64().unwrap_or(0));
                }
            }
        }
    });
    // Every update, up to the markers' (3 on the one correlator, its own on
    // each shard).
    let drain = |rx: &mpsc::Receiver<proto::v1::CandidateUpdate>, markers: usize| {
        let mut got = Vec::new();
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(120);
        while seen < markers {
            let left = deadline.saturating_duration_since(Instant::now());
            let u = rx
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{seen} of {markers} markers, then {e}"));
            if u.entity.starts_with("zz-marker-") {
                seen += usize::from(u.state == "opened");
            } else {
                got.push(u);
            }
        }
        got
    };
    let single = episodes(&drain(&one.1, 3));
    let mut sharded = Episodes::new();
    for (_, rx) in &shards {
        sharded.extend(episodes(&drain(rx, 1)));
    }
    assert!(!single.is_empty());
    let keys = |e: &Episodes| e.keys().cloned().collect::<std::collections::BTreeSet<_>>();
    // The same incidents: each shard judges its leaf against the whole
    // fabric through the others' summaries (one bad cable on leaf00 keeps
    // leaf01's four degraded ports from being one switch fault, on the
    // shard as on the one correlator).
    assert_eq!(keys(&sharded), keys(&single), "the same incidents");
    let window_ms = (args.window * 1000.0) as i64;
    for (k, (o1, r1)) in &single {
        let (o3, r3) = sharded[k];
        assert!((o1 - o3).abs() <= window_ms, "{k:?} opened {o1} vs {o3}");
        match (r1, r3) {
            (Some(a), Some(b)) => assert!((a - b).abs() <= window_ms, "{k:?} resolved {a} vs {b}"),
            (None, None) => {}
            other => panic!("{k:?}: resolved {other:?}"),
        }
    }
    eprintln!(
        "{} incidents on 1 correlator and on 3 shards: {:?}",
        single.len(),
        keys(&single)
    );
}

/// The fleet view's open incidents, by cluster and entity.
fn fleet_open(web: &str) -> Option<Vec<Listed>> {
    let mut l = listed(web)?;
    l.sort_by(|a, b| (&a.1, &a.3).cmp(&(&b.1, &b.3)));
    Some(l)
}

/// Starts the fleet view; its log is appended to `fleet.log` beside `db`.
fn start_fleet(url: &str, web: &str, db: &Path) -> KillOnDrop {
    KillOnDrop(
        Command::new(tests::bin("faultline-correlator"))
            .args(["fleet", "--nats", url, "--web", web, "--history"])
            .arg(db)
            .stdout(Stdio::null())
            .stderr(log_file(&db.with_file_name("fleet.log")))
            .spawn()
            .expect("start the fleet view"),
    )
}

/// A log file opened for appending, for a child's stderr.
fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open a child's log")
}

/// The last lines of each log under `dir`, for a failure message.
fn log_tails(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "log") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(15)..];
            out += &format!("--- {}\n{}\n", p.display(), tail.join("\n"));
        }
    }
    out
}

/// Sends each (host, shard, cluster, windows) through its own NATS sender
/// (instance `<host>-<shard>`) and waits for the senders to drain.
fn publish(nport: u16, dir: &Path, runs: Vec<(&str, &str, &str, Vec<Window>)>) {
    tests::runtime().block_on(async {
        let mut senders = Vec::new();
        for (host, s, cluster, windows) in runs {
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let spool = dir.join(format!("spool-{host}-{s}"));
            let (h, _) =
                spawn(sender(nport, &spool, s), rx, Duration::from_secs(5)).expect("sender");
            for mut w in windows {
                if let Some(o) = w.origin.as_mut() {
                    o.instance = format!("{host}-{s}");
                    o.cluster = cluster.into();
                }
                tx.send(w).await.expect("input");
            }
            senders.push((tx, h));
        }
        for (tx, h) in senders {
            drop(tx);
            let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
        }
    });
}

#[test]
fn the_fleet_view_lists_every_shards_and_clusters_incidents_once() {
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = one_at_a_time();
    let dir = tmp("nats-fleet");
    let _clean = Cleanup(dir.clone());
    let nport = free_port();
    let Some(_server) = nats_server(nport, &dir.join("js")) else {
        return;
    };
    let url = format!("nats://127.0.0.1:{nport}");
    let shard = |s: &str| {
        KillOnDrop(
            Command::new(tests::bin("faultline-correlator"))
                .args(["serve", "--insecure", "--listen"])
                .arg(format!("127.0.0.1:{}", free_port()))
                .arg("--record")
                .arg(dir.join(format!("{s}.jsonl")))
                .args(["--nats", &url, "--nats-shards", s, "--nats-consumer", s])
                .stdout(Stdio::null())
                .stderr(log_file(&dir.join(format!("{s}.log"))))
                .spawn()
                .expect("start a shard"),
        )
    };
    let (_a, _b) = (shard("sa"), shard("sb"));
    let web = format!("127.0.0.1:{}", free_port());
    let db = dir.join("fleet.db");
    let fleet = start_fleet(&url, &web, &db);
    until("the fleet view's web API", || fleet_open(&web));
    let down_from = |host: &str, d: u64| (1..=6).map(|s| port_window(host, s, Some(d))).collect();
    // n1 of cluster east on shard sa and another n1, of cluster west, on
    // sb; n2 of east on both shards (moved between them mid-incident):
    // both shards raise its port down.
    publish(
        nport,
        &dir,
        vec![
            ("n1", "sa", "east", down_from("n1", 3)),
            ("n1", "sb", "west", down_from("n1", 4)),
            ("n2", "sa", "east", down_from("n2", 3)),
            ("n2", "sb", "east", down_from("n2", 4)),
        ],
    );
    let want = |n2_kind: &str| -> Vec<(String, String, String)> {
        [
            ("east", "ib_link_down", "n1/mlx5_0/1"),
            ("east", n2_kind, "n2/mlx5_0/1"),
            ("west", "ib_link_down", "n1/mlx5_0/1"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
    };
    let shape = |l: &[Listed]| -> Vec<(String, String, String)> {
        l.iter()
            .map(|i| (i.1.clone(), i.2.clone(), i.3.clone()))
            .collect()
    };
    // One incident per cluster and entity: n2's two shard incidents are
    // one, naming both.
    let mut seen = None;
    let open = until_or("three incidents in the fleet's open list", || {
        let o = fleet_open(&web);
        seen = o.clone();
        let o = o?;
        (shape(&o) == want("ib_link_down")
            && o[1]
                .4
                .iter()
                .any(|e| e.contains("joined in the fleet view")))
        .then_some(o)
    })
    .unwrap_or_else(|| {
        panic!(
            "never: three incidents; last seen {seen:#?}\n{}",
            log_tails(&dir)
        )
    });
    let joined_id = open[1].0.clone();
    // The history keeps the label: west's incidents are west's one.
    let west = until("the west incident in the fleet's history", || {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "2"])
            .arg(format!("http://{web}/api/incidents?cluster=west"))
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let ids: Vec<String> = v["incidents"]
            .as_array()?
            .iter()
            .filter_map(|i| i["id"].as_str().map(String::from))
            .collect();
        (!ids.is_empty()).then_some(ids)
    });
    assert_eq!(west, [open[2].0.clone()]);
    // The fleet view restarts; then n2's port comes up and goes down again
    // on shard sb: its incident there turns flapping, and the view, which
    // rebuilt its joins from the stream, keeps the joined id.
    drop(fleet);
    let _fleet = start_fleet(&url, &web, &db);
    until("the restarted fleet view's web API", || fleet_open(&web));
    let flap = (7..=10)
        .map(|s| port_window("n2", s, (s != 7).then_some(8)))
        .collect();
    publish(nport, &dir, vec![("n2", "sb", "east", flap)]);
    let open = until("n2 flapping under the joined id", || {
        let o = fleet_open(&web)?;
        (shape(&o) == want("ib_link_flapping")).then_some(o)
    });
    assert_eq!(open[1].0, joined_id, "{open:?}");
}
