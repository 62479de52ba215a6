//! Event streams cannot lock the web UI out: more `/api/stream` clients
//! than the caps, from several loopback addresses, filling the web
//! listener's every connection slot. The oldest streams are displaced (a
//! last `event: displaced`, then a clean end of the chunked body), counted
//! in `faultline_web_event_streams_displaced_total`, and `/healthz` and the
//! page keep answering 200 — from a new address and from a flooding one.
use std::{
    net::{Ipv4Addr, SocketAddr},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpSocket, TcpStream},
};

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// 4 addresses × 4 streams fill `max_connections = 16`; 6 streams stay.
const CONFIG: &str = "[web]
max_event_streams = 6
max_event_streams_per_peer = 2

[web.limits]
max_connections = 16
max_connections_per_peer = 4
";

async fn connect(from: u8, port: u16) -> TcpStream {
    let s = TcpSocket::new_v4().expect("socket");
    s.bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, from), 0)))
        .expect("bind");
    s.connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .expect("connect")
}

/// Reads until `done` holds for what was read, or `limit` passes.
async fn read_until(s: &mut TcpStream, limit: Duration, done: impl Fn(&str) -> bool) -> String {
    let mut got = Vec::new();
    let end = Instant::now() + limit;
    let mut b = [0u8; 4096];
    while !done(&String::from_utf8_lossy(&got)) {
        let left = end.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut b)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&b[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// One `GET path` on a new connection from 127.0.0.`from`: its status line.
async fn get(from: u8, port: u16, path: &str) -> String {
    let mut s = connect(from, port).await;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return "write failed (reset)".into();
    }
    let r = read_until(&mut s, Duration::from_secs(5), |t| t.contains("\r\n")).await;
    r.lines().next().unwrap_or("no answer (reset)").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_are_displaced_oldest_first_and_never_lock_out_healthz() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-sse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("c.toml"), CONFIG).expect("config");
    let (grpc, port) = (free_port(), free_port());
    let _srv = Kill(
        Command::new(BIN)
            .args([
                "serve",
                "--insecure",
                "--listen",
                &format!("127.0.0.1:{grpc}"),
            ])
            .args(["--web", &format!("127.0.0.1:{port}")])
            .arg("--config")
            .arg(dir.join("c.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Wait for the readiness probe's connection to go.
    assert!(get(9, port, "/healthz").await.contains("200"));

    // 16 streams, one connection each, address after address.
    let mut streams = Vec::new();
    for from in 2..6u8 {
        for _ in 0..4 {
            let mut s = connect(from, port).await;
            let req = format!("GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
            s.write_all(req.as_bytes()).await.expect("request");
            let head = read_until(&mut s, Duration::from_secs(5), |t| t.contains("\r\n\r\n")).await;
            assert!(
                head.starts_with("HTTP/1.1 200") && head.contains("text/event-stream"),
                "{head}"
            );
            streams.push(s);
        }
    }
    // Every slot is taken (16 connections); the probes and the page still
    // answer, from a new address and from a flooding one.
    let t = Instant::now();
    for (from, path) in [
        (6, "/healthz"),
        (7, "/"),
        (2, "/healthz"),
        (3, "/"),
        (8, "/healthz"),
    ] {
        let status = get(from, port, path).await;
        assert!(
            status.contains(" 200 "),
            "GET {path} from 127.0.0.{from}: {status}"
        );
    }
    let probes = t.elapsed();
    assert!(probes < Duration::from_secs(3), "{probes:?}");

    // The displaced ones got their last event and a clean end.
    let mut displaced = 0;
    for s in &mut streams {
        let t = read_until(s, Duration::from_millis(300), |t| {
            t.contains("\r\n0\r\n\r\n")
        })
        .await;
        if t.contains("event: displaced")
            && t.contains("retry: 10000")
            && t.ends_with("\r\n0\r\n\r\n")
        {
            displaced += 1;
        }
    }
    assert_eq!(displaced, 16 - 6, "all but max_event_streams displaced");

    let m = reqwest_metrics(port).await;
    let displaced_total: u64 = ["per_peer", "total"]
        .iter()
        .map(|r| {
            tests::metrics::value(
                &m,
                "faultline_web_event_streams_displaced_total",
                &[("reason", r)],
            )
            .unwrap_or(0.0) as u64
        })
        .sum();
    assert_eq!(displaced_total, 10, "{m}");
    for r in ["per_peer", "total"] {
        assert!(
            tests::metrics::value(
                &m,
                "faultline_web_event_streams_displaced_total",
                &[("reason", r)]
            )
            .unwrap_or(0.0)
                > 0.0,
            "reason {r}"
        );
    }
    eprintln!(
        "5 probes through a full listener in {probes:?}; {displaced_total} streams displaced"
    );
    drop(streams);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `/metrics` over a new connection (which may displace a stream itself).
async fn reqwest_metrics(port: u16) -> String {
    let mut s = connect(1, port).await;
    let req =
        format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("request");
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
    out
}
