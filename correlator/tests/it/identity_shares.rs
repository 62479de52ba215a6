//! Slots shared among identities (`[detect.limits]`): one subscriber
//! certificate opening many `Subscribe` streams from several loopback
//! addresses cannot take every gRPC slot; a real collector's window still
//! gets through, and the refusals are counted. The flood's first 16
//! connections carry 4 streams (its per-identity subscription cap) and 12
//! refusals; the rest are refused at its per-identity connection cap.
use std::{
    net::{IpAddr, Ipv4Addr},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use proto::client_tls::ClientAuth;
use proto::v1::{
    candidates_client::CandidatesClient, ingest_client::IngestClient, SubscribeRequest,
};

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

fn client(dir: &Path, cert: &str) -> ClientAuth {
    ClientAuth {
        tls_ca: Some(dir.join("ca.pem")),
        tls_cert: Some(dir.join(format!("{cert}.pem"))),
        tls_key: Some(dir.join(format!("{cert}.key"))),
        token_file: None,
    }
}

/// Attack numbers, scaled down from the report (1,000 streams from four
/// addresses against 1,000 connections): 4 addresses × 6 connections, each
/// with one `Subscribe` stream, against `max_connections = 24`.
const ADDRS: u8 = 4;
const PER_ADDR: usize = 6;
const CONFIG: &str = "[detect.limits]
max_connections = 24
max_connections_per_peer = 8
max_subscriber_streams = 12
max_subscriber_streams_per_identity = 4
max_connections_per_identity = 16
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_subscriber_certificate_cannot_take_every_slot_from_a_collector() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-shares-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(BIN)
        .args(["certs", "--host", "n1", "--out"])
        .arg(&dir)
        .output()
        .expect("certs");
    assert!(out.status.success(), "{out:?}");
    let cfg: PathBuf = dir.join("c.toml");
    std::fs::write(&cfg, CONFIG).expect("config");
    let (port, mport) = (free_port(), free_port());
    let maddr = format!("127.0.0.1:{mport}");
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let _srv = Kill(
        Command::new(BIN)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args([
                "--tls-cert",
                &p("server.pem"),
                "--tls-key",
                &p("server.key"),
            ])
            .args(["--client-ca", &p("ca.pem"), "--config", &p("c.toml")])
            .args(["--metrics-addr", &maddr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = format!("https://127.0.0.1:{port}");

    // The subscriber's flood: one connection per stream, from 127.0.0.2..5.
    let sub = client(&dir, "subscriber");
    let (mut chans, mut held) = (Vec::new(), Vec::new());
    let mut refused = 0;
    for a in 0..ADDRS {
        for _ in 0..PER_ADDR {
            let (ep, token) = sub.endpoint(&url).expect("endpoint");
            let ep = ep.local_address(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + a))));
            let Ok(chan) = ep.connect().await else {
                refused += 1;
                continue;
            };
            let mut c = CandidatesClient::with_interceptor(chan.clone(), token);
            // The channel (its connection) stays open either way.
            chans.push(chan);
            match c.subscribe(SubscribeRequest::default()).await {
                Ok(s) => held.push(s.into_inner()),
                Err(e) => {
                    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e}");
                    // Past its streams, or (from the 17th) its connections.
                    assert!(
                        e.message()
                            .contains("limits.max_subscriber_streams_per_identity")
                            || e.message().contains("limits.max_connections_per_identity"),
                        "{e}"
                    );
                    refused += 1;
                }
            }
        }
    }

    // A real collector, from 127.0.0.1, meanwhile: its window is accepted.
    let n1 = client(&dir, "n1");
    let t = Instant::now();
    let accepted = loop {
        let (ep, token) = n1.endpoint(&url).expect("endpoint");
        let r = match ep.connect().await {
            Ok(chan) => IngestClient::with_interceptor(chan, token)
                .stream(tokio_stream::iter(vec![common::window(
                    "n1",
                    1,
                    common::now_ms(),
                )]))
                .await
                .map(|r| r.into_inner().accepted),
            Err(e) => Err(tonic::Status::unavailable(format!("connect: {e:?}"))),
        };
        match r {
            Ok(n) => break n,
            Err(e) => assert!(
                t.elapsed() < Duration::from_secs(6),
                "the collector was locked out for {:?}: {e}",
                t.elapsed()
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(accepted, 1);
    let streams = ADDRS as usize * PER_ADDR - refused;
    assert_eq!(
        streams, 4,
        "one identity holds max_subscriber_streams_per_identity streams"
    );
    let took = t.elapsed();
    let refusals = ["subscriber_identity", "identity_connections"]
        .iter()
        .map(|r| tests::metrics::counter(&maddr, "faultline_grpc_refused_total", &[("reason", r)]))
        .sum::<u64>();
    assert_eq!(refusals, (ADDRS as usize * PER_ADDR - 4) as u64);
    eprintln!("collector through after {took:?}; {refusals} subscriber streams refused");
    drop((held, chans));
    let _ = std::fs::remove_dir_all(&dir);
}
