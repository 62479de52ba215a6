//! The OTLP/HTTP receiver within `[otlp.limits]`, over real sockets: slow
//! clients (a partial header, or a body that stalls) are displaced or timed
//! out and never delay a real export. Before the fix, 64 connections that
//! never finished their header held every slot for 30 s while real POSTs
//! waited in the listen backlog.
#![cfg(feature = "otlp")]

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use collector::otlp::{self, OtlpSection};

async fn receiver(limits: proto::listen::HttpLimitsConfig) -> (otlp::Receiver, SocketAddr) {
    let rx = otlp::start(&OtlpSection {
        grpc_enabled: false,
        http_addr: "127.0.0.1:0".into(),
        limits,
        ..OtlpSection::default()
    })
    .await;
    let addr = rx
        .http
        .clone()
        .expect("bound")
        .expect("the HTTP receiver runs");
    (rx, addr)
}

/// An empty protobuf export: 200 and an empty response.
fn post(addr: SocketAddr) -> (String, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(
        b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .expect("send");
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    (reply, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_do_not_delay_a_real_export() {
    let _turn = tests::one_file_at_a_time(file!());
    let (_rx, addr) = receiver(proto::listen::HttpLimitsConfig::default()).await;
    // More slow clients than the default cap (256): a request line, then nothing.
    let slow = tokio::task::spawn_blocking(move || {
        (0..300)
            .filter_map(|_| {
                let mut s = TcpStream::connect(addr).ok()?;
                s.write_all(b"POST /v1/metrics HTTP/1.1\r\n").ok()?;
                Some(s)
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("slow clients");
    assert_eq!(slow.len(), 300);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (reply, took) = tokio::task::spawn_blocking(move || post(addr))
        .await
        .expect("post");
    println!("an export amid 300 slow clients answered in {took:?}");
    assert!(
        reply.starts_with("HTTP/1.1 200"),
        "{reply:?} after {took:?}"
    );
    assert!(took < Duration::from_secs(1), "{took:?}");
    drop(slow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_answered_408_after_the_body_timeout() {
    let _turn = tests::one_file_at_a_time(file!());
    let (_rx, addr) = receiver(proto::listen::HttpLimitsConfig {
        body_timeout_s: 1.0,
        ..proto::listen::HttpLimitsConfig::default()
    })
    .await;
    let (reply, took) = tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(
            b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\n0123456789",
        )
        .expect("send");
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).unwrap_or(0);
        (String::from_utf8_lossy(&buf[..n]).to_string(), t.elapsed())
    })
    .await
    .expect("slow body");
    println!("a stalled body answered in {took:?}");
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // Meanwhile and after, real exports go through.
    let (reply, _) = tokio::task::spawn_blocking(move || post(addr))
        .await
        .expect("post");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply:?}");
}
