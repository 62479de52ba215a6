//! The web UI in a real headless browser (Debian's chromium through
//! chromedriver, W3C WebDriver over loopback): the incident list shows the
//! simulator's `ib_link_degraded` incident live (it opens after the page
//! loaded), its page draws the port's series, the fabric band and the
//! affected job, a filter works; screenshots go to the test's output dir.
use crate::common;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use serde_json::{json, Value};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

struct Driver {
    base: String,
}

impl Driver {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}{path}", self.base);
        let body = body.map(|b| b.to_string().into_bytes());
        let (status, out) = rt()
            .block_on(correlator::http_client::request(
                method,
                &url,
                body,
                Duration::from_secs(30),
            ))
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"));
        let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
        assert!(status < 300, "WebDriver {method} {path}: HTTP {status} {v}");
        v["value"].clone()
    }

    fn script(&self, session: &str, js: &str) -> Value {
        self.call(
            "POST",
            &format!("/session/{session}/execute/sync"),
            Some(json!({ "script": js, "args": [] })),
        )
    }

    /// Polls `js` (an expression) until it is truthy.
    fn wait(&self, session: &str, what: &str, js: &str, limit: Duration) {
        let t = Instant::now();
        loop {
            let v = self.script(session, &format!("return !!({js});"));
            if v == Value::Bool(true) {
                return;
            }
            assert!(t.elapsed() < limit, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn screenshot(&self, session: &str, file: &std::path::Path) {
        use base64_png::decode;
        let v = self.call("GET", &format!("/session/{session}/screenshot"), None);
        let png = decode(v.as_str().unwrap_or_default());
        assert!(png.len() > 1000, "a screenshot");
        std::fs::write(file, png).expect("write the screenshot");
        eprintln!("screenshot: {}", file.display());
    }
}

/// Base64 decoding of WebDriver screenshots (standard alphabet).
mod base64_png {
    pub fn decode(s: &str) -> Vec<u8> {
        let val = |c: u8| match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        };
        let mut out = Vec::with_capacity(s.len() * 3 / 4);
        let (mut acc, mut bits) = (0u32, 0);
        for v in s.bytes().filter_map(val) {
            acc = acc << 6 | u32::from(v);
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        out
    }
}

/// chromedriver and a headless chromium session: the driver process, the
/// WebDriver client and the session id.
fn browser(dir: &std::path::Path) -> (std::process::Child, Driver, String) {
    let port = free_port();
    let cd = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let d = Driver {
        base: format!("http://127.0.0.1:{port}"),
    };
    let t = Instant::now();
    while get(&format!("{}/status", d.base)).is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "chromedriver not up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = d.call(
        "POST",
        "/session",
        Some(json!({"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
            "binary": CHROMIUM,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1100", "--user-data-dir=".to_string() + &dir.join("profile").display().to_string()]
        }}}})),
    );
    let session = s["sessionId"].as_str().expect("a session").to_string();
    (cd, d, session)
}

#[test]
fn incident_list_is_live_and_the_incident_page_draws_the_cross_layer_picture() {
    let _turn = tests::one_file_at_a_time(file!());
    if !require(CHROMEDRIVER) || !require(CHROMIUM) {
        return;
    }
    let dir = out_dir("web_ui");
    let web = free_port();
    let (mut cd, d, session) = browser(&dir);
    // The browser is up before the simulation starts (under a loaded test
    // run chromium takes seconds), and the simulation is slow, so the page
    // is open before the incident.
    let mut sim = Command::new(SIM)
        .args([
            "--nodes",
            "4",
            "--duration",
            "40",
            "--onset",
            "8",
            "--speed",
            "2",
        ])
        .args([
            "--inject",
            "ib-link-degrade@n000/mlx5_5/1",
            "--keep-serving",
        ])
        .args(["--web", &format!("127.0.0.1:{web}")])
        .arg("--history")
        .arg(dir.join("h.db"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the simulation");
    let ui = format!("http://127.0.0.1:{web}");
    let t = Instant::now();
    while get(&format!("{ui}/healthz")).is_none() {
        assert!(t.elapsed() < Duration::from_secs(20), "UI not up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let go = |path: &str| {
        d.call(
            "POST",
            &format!("/session/{session}/url"),
            Some(json!({ "url": format!("{ui}{path}") })),
        );
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        go("/");
        let row = "document.querySelector('tr[data-kind=\"ib_link_degraded\"]')";
        // Loaded before the incident: the row arrives through the live stream.
        assert_eq!(
            d.script(&session, &format!("return !!{row};")),
            Value::Bool(false),
            "the incident was there before the page: not a live test"
        );
        d.wait(
            &session,
            "the live stream",
            "document.querySelector('#live.on')",
            Duration::from_secs(10),
        );
        d.wait(&session, "the incident row", row, Duration::from_secs(40));
        // Columns: opened, state, severity, kind, entity.
        let entity = d.script(&session, &format!("return {row}.children[4].textContent;"));
        assert_eq!(entity, "n000/mlx5_5/1");
        let severity = d.script(&session, &format!("return {row}.dataset.severity;"));
        assert_eq!(severity, "warning", "a degraded link under a small job");
        d.screenshot(&session, &dir.join("incidents.png"));

        // The incident page: the port's BER with the fabric band, and the job.
        d.script(
            &session,
            &format!("{row}.querySelector('a').click(); return 1;"),
        );
        let ber = "document.querySelector('svg.chart[data-entity=\"n000/mlx5_5/1\"][data-signal=\"ber\"]')";
        d.wait(
            &session,
            "the BER chart",
            &format!("{ber} && {ber}.querySelector('path.line')"),
            Duration::from_secs(20),
        );
        let band = d.script(
            &session,
            &format!(
                "return {ber}.querySelector('path.band').getAttribute('d').split('L').length;"
            ),
        );
        assert!(
            band.as_u64().unwrap_or(0) > 10,
            "the fabric band is drawn: {band}"
        );
        let points = d.script(
            &session,
            &format!(
                "return {ber}.querySelector('path.line').getAttribute('d').split('L').length;"
            ),
        );
        assert!(
            points.as_u64().unwrap_or(0) > 5,
            "the port's series is drawn: {points}"
        );
        let job = "document.querySelector('svg.chart[data-entity=\"llm-pretrain\"][data-signal=\"step_s\"] path.line')";
        d.wait(
            &session,
            "the affected job's step time",
            job,
            Duration::from_secs(5),
        );
        let runbook = d.script(
            &session,
            "return document.getElementById('runbook').textContent;",
        );
        assert!(
            runbook.as_str().unwrap_or_default().contains("mlxlink"),
            "{runbook}"
        );
        d.screenshot(&session, &dir.join("incident.png"));

        // A filter: another kind hides it; its own kind shows it.
        go("/");
        d.wait(&session, "the list", row, Duration::from_secs(10));
        d.script(&session, "document.querySelector('select[name=kind]').value = 'gpu_xid'; document.getElementById('filters').requestSubmit(); return 1;");
        d.wait(
            &session,
            "the filtered list",
            &format!("!{row} && document.getElementById('empty')"),
            Duration::from_secs(10),
        );
        assert!(d
            .script(&session, "return location.search;")
            .as_str()
            .unwrap_or_default()
            .contains("kind=gpu_xid"));
        d.screenshot(&session, &dir.join("filtered.png"));
        d.script(&session, "document.querySelector('select[name=kind]').value = 'ib_link_degraded'; document.getElementById('filters').requestSubmit(); return 1;");
        d.wait(&session, "the row back", row, Duration::from_secs(10));
    }));
    let _ = d.call("DELETE", &format!("/session/{session}"), None);
    let _ = cd.kill();
    let _ = cd.wait();
    let _ = sim.kill();
    let _ = sim.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// The incident page's acknowledgement form in the browser, against
/// `faultline-correlator serve` with an operator token: without the token
/// the correlator's refusal is shown; with it the incident shows who
/// acknowledged it and why, and clearing it brings the form back.
#[test]
fn an_operator_acknowledges_and_clears_from_the_incident_page() {
    let _turn = tests::one_file_at_a_time(file!());
    if !require(CHROMEDRIVER) || !require(CHROMIUM) {
        return;
    }
    let dir = out_dir("web_ui_ack");
    let token = dir.join("operator.token");
    std::fs::write(&token, "3c1f5e7a9b2d4f6e8a0c1e3f5a7b9d2f\n").expect("token");
    let conf = dir.join("correlator.toml");
    std::fs::write(
        &conf,
        format!("[web]\noperator_token_file = \"{}\"\n", token.display()),
    )
    .expect("config");
    let s = Serve::start(
        &dir.join("h.db"),
        &["--config", conf.to_str().unwrap_or_default()],
    );
    s.send(degraded_link_windows(&dir, 40));
    let id = incidents_of(&s, "ib_link_degraded")
        .first()
        .and_then(|i| i["id"].as_str().map(str::to_string))
        .expect("the incident");
    let (mut cd, d, session) = browser(&dir);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.call(
            "POST",
            &format!("/session/{session}/url"),
            Some(json!({ "url": format!("{}/incident?id={id}", s.web) })),
        );
        d.wait(
            &session,
            "the form",
            "document.getElementById('ackform')",
            Duration::from_secs(20),
        );
        let fill = |token: &str| {
            d.script(
                &session,
                &format!(
                    "const f = document.getElementById('ackform'); f.by.value = 'alice'; \
                     f.why.value = 'optics swap 14:00'; f.for_s.value = '14400'; f.token.value = '{token}'; \
                     f.querySelector('button[name=ack]').click(); return 1;"
                ),
            )
        };
        fill("not-the-token");
        d.wait(
            &session,
            "the refusal",
            "document.getElementById('ackmsg').textContent.includes('wrong operator token')",
            Duration::from_secs(10),
        );
        fill("3c1f5e7a9b2d4f6e8a0c1e3f5a7b9d2f");
        d.wait(
            &session,
            "the acknowledgement",
            "(document.getElementById('ack') || {textContent: ''}).textContent.includes('alice')",
            Duration::from_secs(10),
        );
        let text = d.script(
            &session,
            "return document.getElementById('ack').textContent;",
        );
        let text = text.as_str().unwrap_or_default();
        assert!(
            text.contains("optics swap 14:00") && text.contains("until "),
            "{text}"
        );
        d.screenshot(&session, &dir.join("acknowledged.png"));
        assert_eq!(s.api("/api/acks")["acks"][0]["by"], "alice");
        d.script(
            &session,
            "const f = document.getElementById('ackform'); f.by.value = 'bob'; \
             f.querySelector('button[name=clear]').click(); return 1;",
        );
        d.wait(
            &session,
            "the acknowledgement cleared",
            "!document.getElementById('ack') && document.querySelectorAll('table.acks tr').length === 3",
            Duration::from_secs(10),
        );
        assert_eq!(s.api("/api/acks")["acks"], json!([]));
    }));
    let _ = d.call("DELETE", &format!("/session/{session}"), None);
    let _ = cd.kill();
    let _ = cd.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
