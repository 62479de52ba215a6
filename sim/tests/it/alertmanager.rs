//! A real Alertmanager (Debian's prometheus-alertmanager, started here on
//! loopback) receives the simulated incident as an alert with its runbook
//! and incident id, and the alert resolves when the incident resolves: the
//! test reads Alertmanager's own webhook notifications.
use crate::common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use axum::{routing::post, Json, Router};
use common::*;

const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// A webhook receiver on loopback for Alertmanager's notifications: its
/// port and the notifications as they arrive (served for at most 2 minutes).
fn webhook() -> (u16, std::sync::mpsc::Receiver<serde_json::Value>) {
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let hook_port = free_port();
    let rt = rt();
    let hook = std::net::TcpListener::bind(("127.0.0.1", hook_port)).expect("bind the webhook");
    hook.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(hook).expect("listener");
            let app = Router::new().route(
                "/hook",
                post(move |Json(v): Json<serde_json::Value>| {
                    let tx = tx.clone();
                    async move {
                        let _ = tx.send(v);
                        "ok"
                    }
                }),
            );
            let _ = tokio::time::timeout(Duration::from_secs(120), axum::serve(l, app)).await;
        });
    });
    (hook_port, rx)
}

/// Alertmanager on loopback notifying the webhook at `hook_port`, with
/// `web_config` (its `--web.config.file`: TLS) when given. Its port.
fn alertmanager(dir: &Path, hook_port: u16, web_config: Option<&Path>) -> (Child, u16) {
    let am_port = free_port();
    let cfg = dir.join("alertmanager.yml");
    std::fs::write(
        &cfg,
        format!(
            "route:\n  receiver: hook\n  group_by: ['incident_id']\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
             receivers:\n- name: hook\n  webhook_configs:\n  - url: http://127.0.0.1:{hook_port}/hook\n    send_resolved: true\n"
        ),
    )
    .expect("write the Alertmanager config");
    let mut cmd = Command::new(ALERTMANAGER);
    cmd.arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.path={}", dir.join("am").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{am_port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(w) = web_config {
        cmd.arg(format!("--web.config.file={}", w.display()));
    }
    (cmd.spawn().expect("start Alertmanager"), am_port)
}

/// Waits for the next notification with an alert matching `f`.
fn next_alert(
    rx: &std::sync::mpsc::Receiver<serde_json::Value>,
    what: &str,
    f: &dyn Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let t = Instant::now();
    loop {
        let left = Duration::from_secs(40).saturating_sub(t.elapsed());
        let v = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {what} notification from Alertmanager"));
        if let Some(a) = v["alerts"]
            .as_array()
            .and_then(|a| a.iter().find(|a| f(a)).cloned())
        {
            return a;
        }
    }
}

#[test]
fn incident_arrives_as_alert_and_resolves() {
    let _turn = tests::one_file_at_a_time(file!());
    if !require(ALERTMANAGER) {
        return;
    }
    let dir = out_dir("alertmanager");
    let ws = degraded_link_windows(&dir, 100);
    let (fault, rest): (Vec<_>, Vec<_>) = ws.into_iter().partition(|w| w.seq <= 30);
    let gone = without_port(&rest, "n000", "mlx5_5");

    let (hook_port, rx) = webhook();
    let (mut am, am_port) = alertmanager(&dir, hook_port, None);
    let am_url = format!("http://127.0.0.1:{am_port}");
    let t = Instant::now();
    while get(&format!("{am_url}/-/ready")).is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "Alertmanager not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let conf = dir.join("correlator.toml");
    std::fs::write(
        &conf,
        format!("[alertmanager]\nurl = \"{am_url}\"\nresend_s = 1\nui_url = \"http://127.0.0.1:8080\"\n"),
    )
    .expect("write the correlator config");
    let s = Serve::start(
        &dir.join("h.db"),
        &["--config", conf.to_str().unwrap_or_default()],
    );
    s.send(fault);

    let next = |what: &str, f: &dyn Fn(&serde_json::Value) -> bool| next_alert(&rx, what, f);
    let firing = next("firing", &|a| {
        a["status"] == "firing" && a["labels"]["kind"] == "ib_link_degraded"
    });
    let id = firing["labels"]["incident_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let stored = incidents_of(&s, "ib_link_degraded");
    assert_eq!(
        stored[0]["id"],
        id.as_str(),
        "alert and history name one incident"
    );
    assert_eq!(firing["labels"]["entity"], "n000/mlx5_5/1");
    assert_eq!(firing["labels"]["host"], "n000");
    // Severity from the incident: the link carries a 32-GPU job, under
    // detect.incidents.severity.large_job_gpus (256): a warning, and the
    // web UI's JSON (from the history) says the same.
    assert_eq!(firing["labels"]["severity"], "warning");
    assert_eq!(stored[0]["severity"], "warning");
    assert_eq!(firing["labels"]["hpc_job"], "llm-pretrain");
    let runbook = firing["annotations"]["runbook"]
        .as_str()
        .unwrap_or_default();
    assert!(runbook.contains("mlxlink -d mlx5_5 -p 1"), "{firing}");
    assert!(
        firing["annotations"]["evidence"]
            .as_str()
            .unwrap_or_default()
            .contains("BER"),
        "{firing}"
    );
    assert_eq!(
        firing["generatorURL"],
        format!("http://127.0.0.1:8080/incident?id={id}").as_str()
    );

    // The fault goes away: the incident resolves, and so does the alert.
    s.send(gone);
    let resolved = next("resolved", &|a| {
        a["status"] == "resolved" && a["labels"]["incident_id"] == id.as_str()
    });
    assert_eq!(resolved["labels"]["kind"], "ib_link_degraded");
    assert_eq!(incidents_of(&s, "ib_link_degraded")[0]["state"], "resolved");
    let _ = am.kill();
    let _ = am.wait();
    drop(s);
}

/// Faultline's metric `name` (no labels) on the correlator's `/metrics`, 0 when absent.
fn counter(s: &Serve, name: &str) -> f64 {
    let text = get(&format!("{}/metrics", s.web)).unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Alertmanager served over HTTPS and requiring a client certificate
/// (its own `--web.config.file`, `RequireAndVerifyClientCert`): a correlator
/// without the client certificate is refused and counts the failure; one
/// with the CA file and its client certificate delivers the incident.
#[test]
fn incident_reaches_an_https_alertmanager_that_requires_a_client_certificate() {
    let _turn = tests::one_file_at_a_time(file!());
    if !require(ALERTMANAGER) {
        return;
    }
    let dir = out_dir("alertmanager-tls");
    let pki = dir.join("pki");
    correlator::certs::write_pki(&correlator::certs::CertsArgs {
        out: pki.clone(),
        server_names: vec!["127.0.0.1".into(), "localhost".into()],
        hosts: vec!["correlator".into()],
        subscribers: vec![],
    })
    .expect("write a test PKI");
    let web_config = dir.join("web.yml");
    std::fs::write(
        &web_config,
        format!(
            "tls_server_config:\n  cert_file: {0}/server.pem\n  key_file: {0}/server.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {0}/ca.pem\n",
            pki.display()
        ),
    )
    .expect("write the Alertmanager web config");
    let (hook_port, rx) = webhook();
    let (mut am, am_port) = alertmanager(&dir, hook_port, Some(&web_config));
    let am_url = format!("https://127.0.0.1:{am_port}");
    let p = |f: &str| pki.join(f).display().to_string();
    let tls = correlator::http_client::Tls::from_files(
        &pki.join("ca.pem"),
        Some((&pki.join("correlator.pem"), &pki.join("correlator.key"))),
    )
    .expect("client TLS");
    let t = Instant::now();
    let ready = || {
        rt().block_on(correlator::http_client::request_with(
            "GET",
            &format!("{am_url}/-/ready"),
            None,
            Duration::from_secs(5),
            Some(&tls),
        ))
    };
    while !matches!(ready(), Ok((200, _))) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "Alertmanager (TLS) not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ws = degraded_link_windows(&dir, 100);
    let fault: Vec<_> = ws.into_iter().filter(|w| w.seq <= 30).collect();

    // The CA alone: the server is verified, but Alertmanager refuses a
    // client without a certificate.
    let conf = dir.join("no-client-cert.toml");
    std::fs::write(
        &conf,
        format!(
            "[alertmanager]\nurl = \"{am_url}\"\nca_file = \"{}\"\nresend_s = 1\n",
            p("ca.pem")
        ),
    )
    .expect("write the correlator config");
    let s = Serve::start(
        &dir.join("a.db"),
        &["--config", conf.to_str().unwrap_or_default()],
    );
    s.send(fault.clone());
    s.wait_until("a refused post", Duration::from_secs(30), || {
        counter(&s, "faultline_alerts_failed_total") >= 1.0
    });
    assert_eq!(counter(&s, "faultline_alerts_sent_total"), 0.0);
    drop(s);

    // With the client certificate the same incident is delivered.
    let conf = dir.join("mtls.toml");
    std::fs::write(
        &conf,
        format!(
            "[alertmanager]\nurl = \"{am_url}\"\nca_file = \"{}\"\nclient_cert = \"{}\"\nclient_key = \"{}\"\nresend_s = 1\n",
            p("ca.pem"),
            p("correlator.pem"),
            p("correlator.key")
        ),
    )
    .expect("write the correlator config");
    let s = Serve::start(
        &dir.join("b.db"),
        &["--config", conf.to_str().unwrap_or_default()],
    );
    s.send(fault);
    let firing = next_alert(&rx, "firing (mTLS)", &|a| {
        a["status"] == "firing" && a["labels"]["kind"] == "ib_link_degraded"
    });
    assert_eq!(firing["labels"]["entity"], "n000/mlx5_5/1");
    assert!(counter(&s, "faultline_alerts_sent_total") >= 1.0);
    let _ = am.kill();
    let _ = am.wait();
}

/// Alertmanager's view of one incident's alert: its state (`active`,
/// `suppressed`) and the silences that hold it.
fn am_alert(am_url: &str, id: &str) -> Option<(String, Vec<String>)> {
    let body = get(&format!("{am_url}/api/v2/alerts"))?;
    let v: Vec<serde_json::Value> = serde_json::from_slice(&body).ok()?;
    let a = v.iter().find(|a| a["labels"]["incident_id"] == id)?;
    let silenced = a["status"]["silencedBy"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Some((a["status"]["state"].as_str()?.to_string(), silenced))
}

/// `faultline-correlator ack …` against `s`: exit status and output.
fn ack_cli(s: &Serve, token_file: &Path, id: &str, extra: &[&str]) -> (bool, String) {
    let out = Command::new(correlator_bin())
        .args(["ack", id, "--web", &s.web, "--by", "alice"])
        .arg("--token-file")
        .arg(token_file)
        .args(extra)
        .output()
        .expect("run faultline-correlator ack");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// An operator acknowledges an open incident: Alertmanager holds its alert
/// in a silence naming the operator (state `suppressed`: no notification),
/// while the incident stays open in the engine. A wrong token is refused.
/// The acknowledgement survives a correlator restart (no second silence),
/// clearing it makes the alert active again, and the incident's later
/// resolution is notified as usual.
#[test]
fn an_acknowledged_incident_is_silenced_in_alertmanager_and_stays_open() {
    let _turn = tests::one_file_at_a_time(file!());
    if !require(ALERTMANAGER) {
        return;
    }
    let dir = out_dir("alertmanager-ack");
    let ws = degraded_link_windows(&dir, 100);
    let (fault, rest): (Vec<_>, Vec<_>) = ws.into_iter().partition(|w| w.seq <= 30);
    let (more, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|w| w.seq <= 60);
    let gone = without_port(&rest, "n000", "mlx5_5");
    let (hook_port, rx) = webhook();
    let (mut am, am_port) = alertmanager(&dir, hook_port, None);
    let am_url = format!("http://127.0.0.1:{am_port}");
    let t = Instant::now();
    while get(&format!("{am_url}/-/ready")).is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "Alertmanager not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let token = dir.join("operator.token");
    std::fs::write(&token, "9f1c0c52b1e84d4a8e3f2a7d6b5c4e3f\n").expect("token");
    let wrong = dir.join("wrong.token");
    std::fs::write(&wrong, "0000000000000000000000000000000\n").expect("token");
    let conf = dir.join("correlator.toml");
    std::fs::write(
        &conf,
        format!(
            "[alertmanager]\nurl = \"{am_url}\"\nresend_s = 1\n[web]\noperator_token_file = \"{}\"\n",
            token.display()
        ),
    )
    .expect("write the correlator config");
    let db = dir.join("h.db");
    let s = Serve::start(&db, &["--config", conf.to_str().unwrap_or_default()]);
    s.send(fault);
    let firing = next_alert(&rx, "firing", &|a| {
        a["status"] == "firing" && a["labels"]["kind"] == "ib_link_degraded"
    });
    let id = firing["labels"]["incident_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let (ok, out) = ack_cli(&s, &wrong, &id, &["--why", "x"]);
    assert!(!ok && out.contains("wrong operator token"), "{out}");
    let (ok, out) = ack_cli(&s, &token, &id, &["--why", "optics swap tonight"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("acknowledged by alice until it resolves"),
        "{out}"
    );
    let mut silence = String::new();
    s.wait_until(
        "the alert suppressed by a silence",
        Duration::from_secs(20),
        || match am_alert(&am_url, &id) {
            Some((state, by)) if state == "suppressed" && by.len() == 1 => {
                silence = by[0].clone();
                true
            }
            _ => false,
        },
    );
    let silences: serde_json::Value = serde_json::from_slice(
        &get(&format!("{am_url}/api/v2/silence/{silence}")).expect("silence"),
    )
    .expect("JSON");
    assert_eq!(silences["createdBy"], "alice");
    assert_eq!(
        silences["comment"],
        "faultline acknowledgement: optics swap tonight"
    );
    // Still open in the engine, with the acknowledgement on record.
    let open = s.api("/api/open");
    assert!(
        open["incidents"]
            .as_array()
            .is_some_and(|o| o.iter().any(|i| i["incident_id"] == id.as_str())),
        "{open}"
    );
    let inc = s.api(&format!("/api/incidents/{id}"));
    assert_eq!(inc["ack"]["by"], "alice", "{inc}");
    assert_eq!(inc["acks"][0]["action"], "set", "{inc}");
    assert_eq!(inc["incident"]["state"], "open");
    // Thirty more windows of the fault: still one open incident that
    // explains the job, and no incident of the job's own.
    s.send(more);
    let inc = s.api(&format!("/api/incidents/{id}"));
    assert_eq!(inc["incident"]["state"], "open", "{inc}");
    assert_eq!(
        inc["incident"]["jobs"],
        serde_json::json!(["llm-pretrain"]),
        "{inc}"
    );
    assert_eq!(incidents_of(&s, "ib_link_degraded").len(), 1);
    assert!(incidents_of(&s, "job_slowdown").is_empty());

    // A restart: the acknowledgement is restored and its silence taken
    // over, not doubled.
    s.kill9();
    let s = Serve::start(&db, &["--config", conf.to_str().unwrap_or_default()]);
    let acks = s.api("/api/acks");
    assert_eq!(acks["acks"][0]["incident_id"], id.as_str(), "{acks}");
    std::thread::sleep(Duration::from_secs(3));
    match am_alert(&am_url, &id) {
        Some((state, by)) => {
            assert_eq!((state.as_str(), by), ("suppressed", vec![silence.clone()]))
        }
        None => panic!("alert gone"),
    }

    // Cleared: the silence expires and the alert is active again.
    let (ok, out) = ack_cli(&s, &token, &id, &["--clear"]);
    assert!(ok && out.contains("acknowledgement cleared"), "{out}");
    s.wait_until(
        "the alert active again",
        Duration::from_secs(20),
        || matches!(am_alert(&am_url, &id), Some((state, _)) if state == "active"),
    );
    let inc = s.api(&format!("/api/incidents/{id}"));
    assert!(inc["ack"].is_null(), "{inc}");
    assert_eq!(inc["acks"][1]["action"], "cleared", "{inc}");

    // The fault goes away: its resolution is notified.
    s.send(gone);
    next_alert(&rx, "resolved", &|a| {
        a["status"] == "resolved" && a["labels"]["incident_id"] == id.as_str()
    });
    let _ = am.kill();
    let _ = am.wait();
}

/// The same degraded link under a 1,024-GPU job (its NCCL ranks report a
/// world of 1,024): the incident is critical, and so are Alertmanager's
/// notification, the web UI's JSON, the history and the open list.
#[test]
fn a_degraded_link_under_a_1024_gpu_job_pages_as_critical() {
    let _turn = tests::one_file_at_a_time(file!());
    if !require(ALERTMANAGER) {
        return;
    }
    let dir = out_dir("alertmanager-severity");
    let mut ws = degraded_link_windows(&dir, 40);
    for w in &mut ws {
        for n in &mut w.nccl {
            if n.job == "llm-pretrain" {
                n.nranks = 1024;
            }
        }
    }
    let (hook_port, rx) = webhook();
    let (mut am, am_port) = alertmanager(&dir, hook_port, None);
    let am_url = format!("http://127.0.0.1:{am_port}");
    let t = Instant::now();
    while get(&format!("{am_url}/-/ready")).is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "Alertmanager not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let conf = dir.join("correlator.toml");
    std::fs::write(
        &conf,
        format!("[alertmanager]\nurl = \"{am_url}\"\nresend_s = 1\n"),
    )
    .expect("write the correlator config");
    let s = Serve::start(
        &dir.join("h.db"),
        &["--config", conf.to_str().unwrap_or_default()],
    );
    s.send(ws);
    let firing = next_alert(&rx, "firing", &|a| {
        a["status"] == "firing" && a["labels"]["kind"] == "ib_link_degraded"
    });
    assert_eq!(firing["labels"]["severity"], "critical", "{firing}");
    assert_eq!(firing["labels"]["hpc_job"], "llm-pretrain");
    let stored = incidents_of(&s, "ib_link_degraded");
    assert_eq!(stored[0]["id"], firing["labels"]["incident_id"]);
    assert_eq!(stored[0]["severity"], "critical");
    let critical = s.api("/api/incidents?severity=critical")["incidents"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(critical >= 1, "the history filters on severity");
    let open = s.api("/api/open")["incidents"].clone();
    assert!(
        open.as_array()
            .into_iter()
            .flatten()
            .any(|u| u["kind"] == "ib_link_degraded" && u["severity"] == "critical"),
        "{open}"
    );
    let _ = am.kill();
    let _ = am.wait();
    drop(s);
}
