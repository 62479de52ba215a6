//! A real Alertmanager (Debian's prometheus-alertmanager, started here on
//! loopback) receives the simulated incident as an alert with its runbook
//! and incident id, and the alert resolves when the incident resolves: the
//! test reads Alertmanager's own webhook notifications.
mod common;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use axum::{routing::post, Json, Router};
use common::*;

const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

#[test]
fn incident_arrives_as_alert_and_resolves() {
    if !require(ALERTMANAGER) {
        return;
    }
    let dir = out_dir("alertmanager");
    let ws = degraded_link_windows(&dir, 100);
    let (fault, rest): (Vec<_>, Vec<_>) = ws.into_iter().partition(|w| w.seq <= 30);
    let gone = without_port(&rest, "n000", "mlx5_5");

    // The webhook Alertmanager notifies.
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let hook_port = free_port();
    let rt = rt();
    let hook = std::net::TcpListener::bind(("127.0.0.1", hook_port)).expect("bind the webhook");
    hook.set_nonblocking(true).expect("nonblocking");
    let server = std::thread::spawn(move || {
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
    let mut am = Command::new(ALERTMANAGER)
        .arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.path={}", dir.join("am").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{am_port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start Alertmanager");
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

    // Notifications until one matches, within a time bound.
    let next = |what: &str, f: &dyn Fn(&serde_json::Value) -> bool| -> serde_json::Value {
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
    };
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
    drop(server);
}
