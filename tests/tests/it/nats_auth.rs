//! The scale-out path authenticated: a real `nats-server` (Debian's 2.9)
//! with TLS and the `auth.conf` that `faultline-correlator nats-auth`
//! writes, a real `serve --nats` correlator and `fleet` view with their
//! seeds, the collector's real sender with its host's seed, and the
//! attacks of issue 47 made with the other credentials:
//!
//! - a client without a seed, or with a seed not in the file, is refused;
//! - collector n001 cannot publish to n002's subject (a NATS permission
//!   violation), and n002's windows on n001's own subject are refused
//!   `publisher_mismatch` (6 counted, no incident on n002);
//! - no collector can put the shard's lease key: the active correlator
//!   keeps consuming; no collector and not the fleet view can write the
//!   open-incidents bucket or publish incident updates; a shard's
//!   correlator cannot write another shard's keys, and the fleet view drops
//!   its update resolving the other shard's incident;
//! - a window 4 s ahead (limit 2 s) is given back and taken once due, not
//!   dropped for good;
//! - the legitimate path (collector → NATS → correlator → incident → fleet
//!   view) works with all of it on.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use collector::stream::{nats::NatsTarget, spawn, SenderConfig};
use proto::v1::{CandidateUpdate, Origin, Window};
use tests::{
    bin,
    stream::{correlator_with, free_port, recorded_windows, tmp},
    KillOnDrop,
};

/// `nats-server -c conf`, once it says it is ready; `None` when the
/// binary is missing outside CI.
fn nats_server(conf: &Path) -> Option<KillOnDrop> {
    tests::nats_server(&[std::ffi::OsStr::new("-c"), conf.as_os_str()])
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `host`'s window `seq` (instance `<host>-<run>`) with one NDR port,
/// down from `down_from`, ending `ahead_ms` after now.
fn window(host: &str, run: &str, seq: u64, down_from: Option<u64>, ahead_ms: i64) -> Window {
    let down = down_from.is_some_and(|d| seq >= d);
    let end = now_ms() + ahead_ms;
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            boot_id: "b".into(),
            instance: format!("{host}-{run}"),
            machine_id: String::new(),
            cluster: String::new(),
        }),
        seq,
        start_unix_ms: end - 1000,
        end_unix_ms: end,
        ib_ports: vec![proto::v1::IbPort {
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
        }],
        ..Window::default()
    }
}

/// A NATS client over TLS (`ca`) with the seed in `seed` (none: no
/// credentials), and the server errors it is sent.
async fn client(
    url: &str,
    ca: &Path,
    seed: Option<&Path>,
) -> Result<
    (
        async_nats::Client,
        tokio::sync::mpsc::UnboundedReceiver<String>,
    ),
    async_nats::ConnectError,
> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut o = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(2))
        .add_root_certificates(ca.to_path_buf())
        .require_tls(true)
        .event_callback(move |e| {
            let tx = tx.clone();
            async move {
                if let async_nats::Event::ServerError(e) = e {
                    let _ = tx.send(e.to_string());
                }
            }
        });
    if let Some(p) = seed {
        let (seed, public) = collector::stream::nats::read_seed(p).expect("seed");
        o = o
            .nkey(seed)
            .custom_inbox_prefix(vocab::nats::inbox_prefix(&public));
    }
    Ok((o.connect(url).await?, rx))
}

/// Publishes `payload` to `subject` as `c` and asserts the server refuses
/// it with a permission violation naming the subject.
async fn refused(
    c: &async_nats::Client,
    errors: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    subject: &str,
) {
    c.publish(subject.to_string(), b"forged".to_vec().into())
        .await
        .expect("publish");
    c.flush().await.expect("flush");
    let e = tokio::time::timeout(Duration::from_secs(5), errors.recv())
        .await
        .unwrap_or_else(|_| panic!("no permission violation for {subject}"))
        .expect("errors");
    assert!(
        e.contains("Permissions Violation") && e.contains(subject),
        "{subject}: {e}"
    );
}

/// The open incidents a web API lists: (id, kind, entity).
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

/// Polls `f` every 50 ms until it returns `Some` (within 20 s).
fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The PKI, the credentials and the server's configuration under `dir`:
/// (nats.conf, ca.pem, credentials directory).
fn configure(dir: &Path, port: u16) -> (PathBuf, PathBuf, PathBuf) {
    let pki = dir.join("pki");
    let ok = |c: &mut Command| {
        let out = c.output().expect("run faultline-correlator");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(Command::new(bin("faultline-correlator"))
        .args(["certs", "--server-name", "127.0.0.1", "--out"])
        .arg(&pki));
    std::fs::write(dir.join("hosts"), "# the fleet\nn001\nn002\n").expect("hosts");
    let creds = dir.join("creds");
    // And another site's credentials: their keys are not in ours.
    for out in [&creds, &dir.join("other")] {
        ok(Command::new(bin("faultline-correlator"))
            .args(["nats-auth", "--shards", "h00,h01", "--hosts"])
            .arg(dir.join("hosts"))
            .arg("--out")
            .arg(out));
    }
    let conf = dir.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "listen: 127.0.0.1:{port}\njetstream {{ store_dir: {js:?} }}\ntls {{ cert_file: {cert:?}, key_file: {key:?} }}\ninclude creds/auth.conf\n",
            js = dir.join("js"),
            cert = pki.join("server.pem"),
            key = pki.join("server.key"),
        ),
    )
    .expect("nats.conf");
    (conf, pki.join("ca.pem"), creds)
}

#[test]
fn nats_with_the_generated_auth_binds_windows_to_their_publishers() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("nats-auth");
    let nport = free_port();
    let (conf, ca, creds) = configure(&dir, nport);
    let Some(_server) = nats_server(&conf) else {
        return;
    };
    let url = format!("nats://127.0.0.1:{nport}");
    let (web, metrics, fleet_web) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    std::fs::write(
        dir.join("correlator.toml"),
        "[detect.limits]\nmax_future_s = 2.0\n",
    )
    .expect("config");
    let record = dir.join("rec.jsonl");
    let seed = |name: &str| creds.join(name);
    let mut correlator = KillOnDrop(correlator_with(
        free_port(),
        &record,
        &[
            "--config",
            &dir.join("correlator.toml").display().to_string(),
            "--nats",
            &url,
            "--nats-shards",
            "h00",
            "--nats-consumer",
            "shard-h00",
            "--nats-lease-s",
            "1",
            // Baselines written often: their bucket's keys under auth too.
            "--nats-baselines-s",
            "0.5",
            "--nats-ca",
            &ca.display().to_string(),
            "--nats-nkey-file",
            &seed("correlator-h00.nk").display().to_string(),
            "--web",
            &web,
            "--metrics-addr",
            &metrics,
        ],
    ));
    let _fleet = KillOnDrop(
        Command::new(bin("faultline-correlator"))
            .args(["fleet", "--nats", &url, "--web", &fleet_web, "--nats-ca"])
            .arg(&ca)
            .arg("--nats-nkey-file")
            .arg(seed("fleet.nk"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fleet view"),
    );
    until("the correlator active", || open_incidents(&web));
    let rt = tests::runtime();
    let mismatch = || {
        tests::metrics::counter(
            &metrics,
            "faultline_ingest_rejected_total",
            &[("reason", "publisher_mismatch")],
        )
    };
    rt.block_on(async {
        // Nobody anonymous, nobody with a key the file does not name.
        let Err(e) = client(&url, &ca, None).await else {
            panic!("an anonymous client was let in");
        };
        assert!(
            e.to_string().to_lowercase().contains("authorization"),
            "{e}"
        );
        let stranger = dir.join("other").join("fleet.nk");
        assert!(client(&url, &ca, Some(&stranger)).await.is_err());

        let (n1, mut errs) = client(&url, &ca, Some(&seed("collectors/n001.nk")))
            .await
            .expect("n001");
        let js = async_nats::jetstream::new(n1.clone());
        // A window 4 s ahead of a 2 s limit: refused now, taken when due.
        use prost::Message as _;
        let future = window("n001", "future", 1, None, 4_000);
        js.publish("faultline.windows.h00.n001", future.encode_to_vec().into())
            .await
            .expect("publish")
            .await
            .expect("stored");
        // n002's subject: the server refuses.
        refused(&n1, &mut errs, "faultline.windows.h00.n002").await;
        // n002's windows on n001's own subject: stored, refused by the
        // correlator, and never an incident.
        for seq in 1..=6 {
            let w = window("n002", "forged", seq, Some(3), 0);
            js.publish("faultline.windows.h00.n001", w.encode_to_vec().into())
                .await
                .expect("publish")
                .await
                .expect("stored");
        }
        // The lease, the open incidents, incident updates: not a collector's.
        for s in [
            "$KV.faultline_leases.shard-h00",
            "$KV.faultline_open.shard-h00.forged",
            "faultline.incidents.shard-h00",
            "$JS.API.STREAM.DELETE.FAULTLINE_WINDOWS",
            "$JS.API.STREAM.PURGE.FAULTLINE_WINDOWS",
        ] {
            refused(&n1, &mut errs, s).await;
        }
        let (fl, mut ferrs) = client(&url, &ca, Some(&seed("fleet.nk")))
            .await
            .expect("fleet");
        for s in [
            "$KV.faultline_leases.shard-h00",
            "$KV.faultline_open.shard-h00.forged",
            "faultline.incidents.shard-h00",
            "faultline.windows.h00.n001",
        ] {
            refused(&fl, &mut ferrs, s).await;
        }
        let (h1, mut herrs) = client(&url, &ca, Some(&seed("correlator-h01.nk")))
            .await
            .expect("h01");
        for s in [
            "$KV.faultline_leases.shard-h00",
            "$KV.faultline_open.shard-h00.forged",
            "faultline.incidents.shard-h00",
        ] {
            refused(&h1, &mut herrs, s).await;
        }
    });
    until("6 publisher_mismatch refusals", || {
        (mismatch() >= 6).then_some(())
    });
    // The legitimate path: the collector's sender with n001's seed.
    let (tx, task) = {
        let _g = rt.enter();
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let cfg = SenderConfig {
            endpoint: url.clone(),
            spool_dir: dir.join("spool-n001"),
            spool_max_bytes: 1 << 20,
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_millis(500),
            resume_every: Duration::from_secs(1),
            auth: collector::stream::tls::ClientAuth::default(),
            nats: NatsTarget {
                shard: "h00".into(),
                ca: Some(ca.clone()),
                nkey_file: Some(seed("collectors/n001.nk")),
                ..NatsTarget::default()
            },
        };
        let (t, _) = spawn(cfg, rx, Duration::from_secs(5)).expect("sender");
        (tx, t)
    };
    for seq in 1..=6 {
        rt.block_on(tx.send(window("n001", "run", seq, Some(3), 0)))
            .expect("input");
    }
    let (id, ..) = until("n001's port-down incident", || {
        open_incidents(&web)?
            .into_iter()
            .find(|i| i.1 == "ib_link_down" && i.2 == "n001/mlx5_0/1")
    });
    assert_eq!(mismatch(), 6);
    assert!(
        open_incidents(&web)
            .expect("open")
            .iter()
            .all(|i| !i.2.starts_with("n002")),
        "an incident on n002 from forged windows"
    );
    assert_eq!(
        correlator.0.try_wait().expect("status"),
        None,
        "the correlator exited"
    );
    // Its own writes all allowed: open incidents, baselines, summaries.
    for m in [
        "faultline_nats_state_errors_total",
        "faultline_fleet_publish_errors_total",
    ] {
        assert_eq!(tests::metrics::counter(&metrics, m, &[]), 0, "{m}");
    }
    // The window from the future, taken once due (3 s after it was given back).
    until("the future window taken once due", || {
        recorded_windows(&record)
            .contains(&("n001-future".to_string(), 1))
            .then_some(())
    });
    let recorded = recorded_windows(&record);
    assert!(
        recorded.iter().all(|(i, _)| i.starts_with("n001-")),
        "{recorded:?}"
    );
    assert_eq!(
        tests::metrics::counter(
            &metrics,
            "faultline_ingest_rejected_total",
            &[("reason", "clock_future")]
        ),
        1
    );
    // The fleet view lists it; shard h01 cannot resolve it there.
    until("the incident in the fleet view", || {
        open_incidents(&fleet_web)?.into_iter().find(|i| i.0 == id)
    });
    rt.block_on(async {
        let h1 = client(&url, &ca, Some(&seed("correlator-h01.nk")))
            .await
            .expect("h01");
        let js = async_nats::jetstream::new(h1.0);
        use prost::Message as _;
        let upd = |id: &str, state: &str, entity: &str| CandidateUpdate {
            ts_unix_ms: now_ms(),
            incident_id: id.into(),
            state: state.into(),
            kind: "ib_link_down".into(),
            entity: entity.into(),
            ..Default::default()
        };
        for u in [
            upd(&id, "resolved", "n001/mlx5_0/1"),
            upd("h01-own", "opened", "n009/mlx5_0/1"),
        ] {
            js.publish("faultline.incidents.shard-h01", u.encode_to_vec().into())
                .await
                .expect("publish")
                .await
                .expect("stored");
        }
    });
    // Its own incident arrives after the forged resolve: that was dropped.
    let listed = until("shard h01's own incident in the fleet view", || {
        let l = open_incidents(&fleet_web)?;
        l.iter().any(|i| i.0 == "h01-own").then_some(l)
    });
    assert!(
        listed.iter().any(|i| i.0 == id),
        "shard h01 resolved h00's incident: {listed:?}"
    );
    assert_eq!(
        tests::metrics::counter(
            &fleet_web,
            "faultline_fleet_refused_total",
            &[("reason", "not_owner")]
        ),
        1
    );
    drop(tx);
    rt.block_on(task).expect("sender");
    let _ = std::fs::remove_dir_all(&dir);
}
