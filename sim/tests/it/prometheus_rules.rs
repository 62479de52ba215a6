//! `deploy/prometheus`'s incident rule in a real Prometheus (Debian's,
//! started here on loopback) scraping a correlator fed by the simulator:
//! the injected link degradation fires `FaultlineIncident{kind=
//! "ib_link_degraded"}`, and when the fault goes away the incident resolves
//! and so does the alert; `FaultlineIncidentCritical` never fires.
use crate::common;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::*;

const PROMETHEUS: &str = "/usr/bin/prometheus";

fn alerts(prom: &str) -> Vec<serde_json::Value> {
    let Some(body) = get(&format!("{prom}/api/v1/alerts")) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    v["data"]["alerts"].as_array().cloned().unwrap_or_default()
}

fn wait_alerts(
    prom: &str,
    what: &str,
    limit: Duration,
    f: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let t = Instant::now();
    loop {
        let a = alerts(prom);
        if f(&a) {
            return a;
        }
        assert!(
            t.elapsed() < limit,
            "{what} within {limit:?}; alerts: {a:#?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_simulated_link_fault_fires_the_incident_alert_and_it_resolves() {
    let _turn = tests::one_file_at_a_time(file!());
    if !require(PROMETHEUS) {
        return;
    }
    let dir = out_dir("prometheus-rules");
    let ws = degraded_link_windows(&dir, 100);
    let (fault, rest): (Vec<_>, Vec<_>) = ws.into_iter().partition(|w| w.seq <= 30);
    let gone = without_port(&rest, "n000", "mlx5_5");
    let s = Serve::start(&dir.join("h.db"), &[]);

    let prom_port = free_port();
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .join("deploy/prometheus/faultline-rules.yaml");
    let conf = dir.join("prometheus.yml");
    std::fs::write(
        &conf,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: ['{}']\n\
             scrape_configs:\n\
             - job_name: faultline-correlator\n  static_configs:\n  - targets: ['{}']\n",
            rules.display(),
            s.web.trim_start_matches("http://")
        ),
    )
    .expect("prometheus.yml");
    let mut prom_child = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", conf.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start Prometheus");
    let prom = format!("http://127.0.0.1:{prom_port}");
    let t = Instant::now();
    while get(&format!("{prom}/-/ready")).is_none() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "Prometheus not ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Nothing fires before the fault (FaultlineCorrelatorAbsent is pending
    // until the first scrape; its `for` is 10 minutes).
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        alerts(&prom).iter().all(|a| a["state"] != "firing"),
        "{:#?}",
        alerts(&prom)
    );

    s.send(fault);
    let firing = wait_alerts(
        &prom,
        "FaultlineIncident firing",
        Duration::from_secs(40),
        |a| {
            a.iter().any(|a| {
                a["labels"]["alertname"] == "FaultlineIncident"
                    && a["labels"]["kind"] == "ib_link_degraded"
                    && a["state"] == "firing"
            })
        },
    );
    let a = firing
        .iter()
        .find(|a| a["labels"]["alertname"] == "FaultlineIncident")
        .expect("the alert");
    assert_eq!(a["labels"]["severity"], "warning");
    assert_eq!(
        a["annotations"]["summary"],
        "1 open faultline ib_link_degraded incident(s) of warning severity"
    );
    assert_eq!(incidents_of(&s, "ib_link_degraded")[0]["state"], "open");
    assert!(
        firing
            .iter()
            .all(|a| a["labels"]["alertname"] != "FaultlineIncidentCritical"),
        "{firing:#?}"
    );

    // The fault goes away: the incident resolves, and the alert with it.
    s.send(gone);
    wait_alerts(&prom, "the alert resolved", Duration::from_secs(40), |a| {
        !a.iter()
            .any(|a| a["labels"]["alertname"] == "FaultlineIncident")
    });
    assert_eq!(incidents_of(&s, "ib_link_degraded")[0]["state"], "resolved");
    let _ = prom_child.kill();
    let _ = prom_child.wait();
}
