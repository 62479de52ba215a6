//! Helpers of the history, web and alerting tests: recorded simulator
//! windows, a `serve` child process, the JSON API.
#![allow(dead_code)]
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use proto::v1::Window;

/// The simulator.
pub const SIM: &str = env!("CARGO_BIN_EXE_faultline-sim");

/// The correlator binary beside this test's target directory (`cargo
/// xtask test` builds every binary first; alone: `cargo build -p correlator`).
pub fn correlator_bin() -> PathBuf {
    let p = std::env::current_exe()
        .ok()
        .and_then(|e| {
            e.parent()
                .and_then(Path::parent)
                .map(|d| d.join("faultline-correlator"))
        })
        .unwrap_or_default();
    assert!(
        p.exists(),
        "{} missing: build it first (`cargo build -p correlator`)",
        p.display()
    );
    p
}

/// A fresh directory under the test target's temp dir.
pub fn out_dir(name: &str) -> PathBuf {
    tests::fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join(name))
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

/// Whether a missing tool fails (CI) or skips the test.
pub fn require(tool: &str) -> bool {
    if Path::new(tool).exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{tool} missing under CI: scripts/setup.sh installs it"
    );
    eprintln!("skipping: {tool} not installed (scripts/setup.sh installs it)");
    false
}

/// Windows of a simulated 4-node cluster whose link n000/mlx5_5/1 degrades
/// from second 5, as the simulator records them.
pub fn degraded_link_windows(dir: &Path, seconds: u32) -> Vec<Window> {
    let file = dir.join("windows.jsonl");
    let out = Command::new(SIM)
        .args(["--nodes", "4", "--onset", "5", "--speed", "200", "--json"])
        .args(["--duration", &seconds.to_string()])
        .args(["--inject", "ib-link-degrade@n000/mlx5_5/1"])
        .arg("--record")
        .arg(&file)
        .output()
        .expect("run the simulator");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ws: Vec<Window> = std::fs::read_to_string(&file)
        .expect("read the recorded windows")
        .lines()
        .map(|l| correlator::replay::parse_line(l).expect("a recorded window parses"))
        .collect();
    // The simulator's clock starts at a fixed epoch; the correlator refuses
    // windows far from its own clock: the run is moved to end a minute ago.
    let last = ws.iter().map(|w| w.end_unix_ms).max().unwrap_or(0);
    let now = correlator::web::api::now_ms();
    let shift = now - 60_000 - last;
    for w in &mut ws {
        w.start_unix_ms += shift;
        w.end_unix_ms += shift;
        for e in &mut w.events {
            e.unix_ms += shift;
        }
    }
    ws
}

/// The same windows without the degraded port: the fault is gone.
pub fn without_port(ws: &[Window], host: &str, hca: &str) -> Vec<Window> {
    ws.iter()
        .cloned()
        .map(|mut w| {
            if w.origin.as_ref().is_some_and(|o| o.hostname == host) {
                w.ib_ports.retain(|p| p.hca != hca);
            }
            w
        })
        .collect()
}

/// A `faultline-correlator serve` child; killed (SIGKILL) on drop.
pub struct Serve {
    pub child: Child,
    pub grpc: String,
    pub web: String,
}

impl Serve {
    pub fn start(db: &Path, extra: &[&str]) -> Self {
        let (g, w) = (free_port(), free_port());
        let child = Command::new(correlator_bin())
            .args(["serve", "--insecure", "--listen", &format!("127.0.0.1:{g}")])
            .args(["--web", &format!("127.0.0.1:{w}")])
            .arg("--history")
            .arg(db)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the correlator");
        let s = Self {
            child,
            grpc: format!("http://127.0.0.1:{g}"),
            web: format!("http://127.0.0.1:{w}"),
        };
        s.wait_until("the correlator's /healthz", Duration::from_secs(20), || {
            get(&format!("{}/healthz", s.web)).is_some()
        });
        s
    }

    /// Polls `cond` every 50 ms until true or `limit` (then fails naming `what`).
    pub fn wait_until(&self, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(t.elapsed() < limit, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// GET of the web API as JSON.
    pub fn api(&self, path: &str) -> serde_json::Value {
        let body = get(&format!("{}{path}", self.web)).unwrap_or_else(|| panic!("GET {path}"));
        serde_json::from_slice(&body).expect("JSON")
    }

    /// Streams `ws` to the ingest API and waits for the summary.
    pub fn send(&self, ws: Vec<Window>) {
        let endpoint = self.grpc.clone();
        rt().block_on(async move {
            let ch = tonic::transport::Endpoint::from_shared(endpoint)
                .expect("endpoint")
                .connect()
                .await
                .expect("connect to ingest");
            let mut c = proto::v1::ingest_client::IngestClient::new(ch);
            c.stream(tokio_stream::iter(ws))
                .await
                .expect("stream windows");
        });
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A GET returning the body on 2xx.
pub fn get(url: &str) -> Option<Vec<u8>> {
    let url = url.to_string();
    rt().block_on(async move {
        match correlator::http_client::request("GET", &url, None, Duration::from_secs(10)).await {
            Ok((200..=299, b)) => Some(b),
            _ => None,
        }
    })
}

/// The incidents of a kind in the history.
pub fn incidents_of(s: &Serve, kind: &str) -> Vec<serde_json::Value> {
    s.api(&format!("/api/incidents?kind={kind}"))["incidents"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}
