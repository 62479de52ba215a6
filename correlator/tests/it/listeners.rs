//! Every listener of `faultline-correlator serve` within its limits, over
//! real sockets: HTTP/2 connections that send the preface and answer PINGs
//! but open no stream are closed after `idle_connection_timeout_s` and are
//! displaced by a real collector before that; slow web clients neither
//! exhaust the process's file descriptors nor delay a real request.
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use proto::v1::ingest_client::IngestClient;

use crate::common;

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

fn dir(name: &str) -> PathBuf {
    tests::scratch_dir(&format!("listeners-{name}"))
}

/// Starts `prefix… faultline-correlator serve --insecure …` with `config`;
/// returns once `port` accepts connections.
fn serve(prefix: &[&str], config: &str, args: &[&str], port: u16) -> Kill {
    let d = dir(&format!("cfg-{port}"));
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, config).expect("config");
    let (cmd, pre) = match prefix.split_first() {
        Some((c, rest)) => (*c, rest.to_vec()),
        None => (BIN, Vec::new()),
    };
    let mut c = Command::new(cmd);
    c.args(pre);
    if !prefix.is_empty() {
        c.arg(BIN);
    }
    let child = c
        .args(["serve", "--insecure", "--config"])
        .arg(&cfg)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let k = Kill(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    k
}

/// An HTTP/2 client that sends the preface and SETTINGS, acknowledges the
/// server's SETTINGS and answers its PINGs, and never opens a stream. The
/// receiver gets the instant the server closed the connection.
fn h2_idler(port: u16) -> mpsc::Receiver<Instant> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .expect("preface");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut head = [0u8; 9];
        loop {
            if s.read_exact(&mut head).is_err() {
                let _ = tx.send(Instant::now());
                return;
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let mut payload = vec![0u8; len];
            if s.read_exact(&mut payload).is_err() {
                let _ = tx.send(Instant::now());
                return;
            }
            let ack = flags & 1 != 0;
            let reply: Vec<u8> = match kind {
                4 if !ack => b"\0\0\0\x04\x01\0\0\0\0".to_vec(),
                6 if !ack => [&b"\0\0\x08\x06\x01\0\0\0\0"[..], &payload].concat(),
                _ => continue,
            };
            if s.write_all(&reply).is_err() {
                let _ = tx.send(Instant::now());
                return;
            }
        }
    });
    rx
}

/// Before the fix, four such clients held every per-peer slot for good
/// (they answer the keepalive PINGs) and a real collector got UNAVAILABLE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_h2_connections_are_displaced_then_closed_and_a_real_collector_streams() {
    let _turn = tests::one_file_at_a_time(file!());
    let (port, mport) = (free_port(), free_port());
    let maddr = format!("127.0.0.1:{mport}");
    let _srv = serve(
        &[],
        "[detect.limits]\nmax_connections_per_peer = 4\nidle_connection_timeout_s = 3\n",
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-addr",
            &maddr,
        ],
        port,
    );
    // Let the readiness probe's connection go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    let idlers: Vec<_> = (0..4).map(|_| h2_idler(port)).collect();
    // Idle for more than a second: a new connection may displace one.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let t = Instant::now();
    let url = format!("http://127.0.0.1:{port}");
    let chan = tonic::transport::Endpoint::from_shared(url)
        .expect("url")
        .connect()
        .await
        .expect("the real collector connects");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut client = IngestClient::new(chan);
    let call = tokio::spawn(async move {
        client
            .stream(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map(|r| r.into_inner())
    });
    tx.send(common::window("n1", 1, common::now_ms()))
        .await
        .expect("send");
    let admitted = t.elapsed();
    // Every idle connection is gone within the idle timeout (one displaced
    // at once, the others at 3 s), though each answered every PING.
    let closed: Vec<Duration> = idlers
        .iter()
        .map(|rx| {
            rx.recv_timeout(Duration::from_secs(6))
                .expect("an idle HTTP/2 connection was never closed")
                - t0
        })
        .collect();
    // The real stream stays open past the idle timeout: it is busy.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    tx.send(common::window("n1", 2, common::now_ms()))
        .await
        .expect("the stream is still open after the idle timeout");
    drop(tx);
    let summary = call.await.expect("task").expect("stream");
    println!("real collector admitted in {admitted:?}; idle connections closed at {closed:?}");
    assert_eq!(summary.accepted, 2);
    assert!(admitted < Duration::from_secs(1), "{admitted:?}");
    let displaced = closed
        .iter()
        .filter(|d| **d < Duration::from_secs(2))
        .count();
    assert_eq!(displaced, 1, "one idle connection made room: {closed:?}");
    assert!(
        closed
            .iter()
            .all(|d| *d >= Duration::from_millis(1300) && *d < Duration::from_millis(4500)),
        "closed after the idle timeout (3 s): {closed:?}"
    );
    let series = |r: &str| {
        tests::metrics::counter(
            &maddr,
            "faultline_connections_closed_total",
            &[("listener", "grpc"), ("reason", r)],
        )
    };
    assert_eq!(series("evicted"), 1);
    assert!(
        series("idle") >= 3,
        "idle closes counted: {}",
        series("idle")
    );
}

/// Before the fix the web listener had no cap and no header timeout: 300
/// slow clients took every descriptor (the limit here is 200) and a real
/// request waited forever.
#[test]
fn slow_web_clients_neither_exhaust_descriptors_nor_delay_a_real_request() {
    let _turn = tests::one_file_at_a_time(file!());
    let (port, web) = (free_port(), free_port());
    let _srv = serve(
        &["prlimit", "--nofile=200:200", "--"],
        "[web.limits]\nmax_connections = 64\nmax_connections_per_peer = 64\nheader_timeout_s = 30\n",
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--web",
            &format!("127.0.0.1:{web}"),
        ],
        port,
    );
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", web)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "web did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Slowloris: a request line and one header, then nothing.
    let slow: Vec<TcpStream> = (0..300)
        .filter_map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", web)).ok()?;
            s.write_all(b"GET /api/open HTTP/1.1\r\nHost: x\r\n").ok()?;
            Some(s)
        })
        .collect();
    assert!(slow.len() >= 250, "{} slow connections opened", slow.len());
    std::thread::sleep(Duration::from_millis(1300));
    let t = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", web)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n")
        .expect("send");
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    let took = t.elapsed();
    println!("a real request amid 300 slow clients answered in {took:?}");
    assert!(reply.ends_with("ok\n"), "{reply:?} after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    // The slow ones were refused or displaced, and counted.
    let series = |name: &str, r: &str| {
        tests::metrics::counter(
            &format!("127.0.0.1:{web}"),
            name,
            &[("listener", "web"), ("reason", r)],
        )
    };
    // (The per-peer check comes first: one address here.)
    let refused = series("faultline_connections_refused_total", "per_peer");
    let evicted = series("faultline_connections_closed_total", "evicted");
    println!("refused {refused}, displaced {evicted}");
    assert!(
        refused + evicted >= 300 - 64,
        "refused or displaced at the cap: {refused} + {evicted}"
    );
    assert!(evicted >= 1, "displaced: {evicted}");
    drop(slow);
}
