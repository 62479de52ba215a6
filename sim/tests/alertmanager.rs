//! A real Alertmanager (Debian's prometheus-alertmanager, started here on
//! loopback) receives the simulated incident as an alert with its runbook
//! and incident id, and the alert resolves when the incident resolves: the
//! test reads Alertmanager's own webhook notifications.
mod common;

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
    assert_eq!(firing["labels"]["severity"], "warning");
    assert_eq!(firing["labels"]["job"], "llm-pretrain");
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
