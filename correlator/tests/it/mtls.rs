//! `faultline-correlator serve` with mTLS and tokens, over real gRPC on
//! loopback, with a PKI from `faultline-correlator certs`: plaintext,
//! certificate-less, foreign-CA and wrong-token clients are refused; a host
//! certificate may send (and resume) its own host's windows only; subscribers
//! need a certificate too; `serve` without a mode refuses to start.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use proto::client_tls::ClientAuth;
use proto::v1::{
    candidates_client::CandidatesClient, ingest_client::IngestClient, ResumeRequest,
    SubscribeRequest, Window,
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

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("faultline-mtls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn pki(dir: &Path, hosts: &[&str]) {
    let mut c = Command::new(BIN);
    c.args(["certs", "--out"]).arg(dir);
    for h in hosts {
        c.args(["--host", h]);
    }
    let out = c.output().expect("certs");
    assert!(out.status.success(), "{out:?}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// Starts `serve` with `args`; returns once its port accepts connections.
fn serve(args: &[&str]) -> (Kill, u16) {
    let port = free_port();
    let child = Command::new(BIN)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve");
    let k = Kill(child);
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (k, port)
}

/// `serve` with the PKI's server certificate and one client-auth flag.
fn serve_tls(pki: &Path, auth_flag: &str, file: &Path) -> (Kill, u16) {
    serve(&[
        "--tls-cert",
        &pki.join("server.pem").to_string_lossy(),
        "--tls-key",
        &pki.join("server.key").to_string_lossy(),
        auth_flag,
        &file.to_string_lossy(),
    ])
}

fn window(host: &str, seq: u64) -> Window {
    common::window(host, seq, common::now_ms())
}

/// A call refused by the TLS handshake (with TLS 1.3 the client may see it
/// as a cancelled call, after its side of the handshake).
fn refused_at_handshake(err: &tonic::Status) -> bool {
    matches!(
        err.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unauthenticated
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
    )
}

fn client(dir: &Path, cert: Option<&str>, token: Option<&Path>) -> ClientAuth {
    ClientAuth {
        tls_ca: Some(dir.join("ca.pem")),
        tls_cert: cert.map(|c| dir.join(format!("{c}.pem"))),
        tls_key: cert.map(|c| dir.join(format!("{c}.key"))),
        token_file: token.map(Path::to_path_buf),
    }
}

/// Streams `windows` with `auth`; the gRPC outcome (connection errors too).
async fn send(
    url: &str,
    auth: &ClientAuth,
    windows: Vec<Window>,
) -> Result<proto::v1::StreamSummary, tonic::Status> {
    let (ep, token) = auth.endpoint(url).expect("endpoint");
    let chan = ep
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect: {e:?}")))?;
    IngestClient::with_interceptor(chan, token)
        .stream(tokio_stream::iter(windows))
        .await
        .map(tonic::Response::into_inner)
}

async fn resume(url: &str, auth: &ClientAuth, host: &str) -> Result<u64, tonic::Status> {
    let (ep, token) = auth.endpoint(url).expect("endpoint");
    let chan = ep
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect: {e:?}")))?;
    IngestClient::with_interceptor(chan, token)
        .resume(ResumeRequest {
            origin: window(host, 1).origin,
        })
        .await
        .map(|r| r.into_inner().last_seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_strangers_and_binds_hosts_to_their_certificates() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("pki");
    pki(&dir, &["n1", "n2"]);
    let other = tmp("other");
    pki(&other, &["n1"]);
    let ca = dir.join("ca.pem");
    let (_srv, port) = serve_tls(&dir, "--client-ca", &ca);
    let url = format!("https://127.0.0.1:{port}");

    // The host's own certificate: accepted, and Resume answers.
    let n1 = client(&dir, Some("n1"), None);
    let ok = send(&url, &n1, vec![window("n1", 1), window("n1", 2)])
        .await
        .expect("n1 sends its own windows");
    assert_eq!((ok.accepted, ok.last_seq), (2, 2));
    assert_eq!(resume(&url, &n1, "n1").await.expect("resume"), 2);

    // n1's certificate speaking for n2: refused, nothing adopted.
    let err = send(&url, &n1, vec![window("n2", 1)])
        .await
        .expect_err("n1 may not speak for n2");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    assert!(err.message().contains("\"n2\""), "{err}");
    let err = send(&url, &n1, vec![window("n1", 3), window("n2", 50)])
        .await
        .expect_err("a later window for another host ends the stream");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let err = resume(&url, &n1, "n2").await.expect_err("resume for n2");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let n2 = client(&dir, Some("n2"), None);
    assert_eq!(resume(&url, &n2, "n2").await.expect("n2 resume"), 0);

    // No client certificate: the handshake is refused.
    let anon = client(&dir, None, None);
    let err = send(&url, &anon, vec![window("n1", 9)])
        .await
        .expect_err("no certificate");
    assert!(refused_at_handshake(&err), "{err}");
    // A certificate named n1 but from another CA.
    let foreign = ClientAuth {
        tls_ca: Some(ca.clone()),
        ..client(&other, Some("n1"), None)
    };
    let err = send(&url, &foreign, vec![window("n1", 9)])
        .await
        .expect_err("foreign CA");
    assert!(refused_at_handshake(&err), "{err}");
    // Plaintext to the TLS port.
    let err = send(
        &format!("http://127.0.0.1:{port}"),
        &ClientAuth::default(),
        vec![window("n1", 9)],
    )
    .await
    .expect_err("plaintext");
    assert_ne!(err.code(), tonic::Code::Ok, "{err}");
    // None of the refused windows was adopted.
    assert_eq!(resume(&url, &n1, "n1").await.expect("resume"), 3);

    // Subscribers: a certificate is needed.
    let sub = |auth: ClientAuth| {
        let url = url.clone();
        async move {
            let (ep, token) = auth.endpoint(&url).expect("endpoint");
            let chan = ep
                .connect()
                .await
                .map_err(|e| tonic::Status::unavailable(format!("{e:?}")))?;
            CandidatesClient::with_interceptor(chan, token)
                .open_incidents(proto::v1::OpenIncidentsRequest::default())
                .await
                .map(|_| ())
        }
    };
    sub(client(&dir, Some("subscriber"), None))
        .await
        .expect("subscriber with a certificate");
    assert!(sub(client(&dir, None, None)).await.is_err());
    let (ep, token) = client(&dir, Some("subscriber"), None)
        .endpoint(&url)
        .expect("endpoint");
    let mut s = CandidatesClient::with_interceptor(ep.connect().await.expect("connect"), token);
    s.subscribe(SubscribeRequest::default())
        .await
        .expect("subscribe");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&other);
}

/// A subscriber's certificate reads incidents but sends no windows, not even
/// for a host named like the subscriber (it used to carry that name as its
/// DNS name, and so could speak for host "subscriber").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_certificate_cannot_send_windows() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("sub");
    pki(&dir, &["n1"]);
    let (_srv, port) = serve_tls(&dir, "--client-ca", &dir.join("ca.pem"));
    let url = format!("https://127.0.0.1:{port}");
    let sub = client(&dir, Some("subscriber"), None);
    for host in ["subscriber", "n1", "localhost"] {
        let err = send(&url, &sub, vec![window(host, 1)])
            .await
            .expect_err("a subscriber may not send windows");
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{host}: {err}");
        let err = resume(&url, &sub, host).await.expect_err("nor resume");
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{host}: {err}");
    }
    // It still subscribes.
    let (ep, token) = sub.endpoint(&url).expect("endpoint");
    CandidatesClient::with_interceptor(ep.connect().await.expect("connect"), token)
        .open_incidents(proto::v1::OpenIncidentsRequest::default())
        .await
        .expect("the subscriber reads incidents");
    // A subscriber named like a host is refused when the PKI is written.
    let out = Command::new(BIN)
        .args(["certs", "--out"])
        .arg(tmp("sub-clash"))
        .args(["--host", "n1", "--subscriber", "n1"])
        .output()
        .expect("certs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("both a --host and a --subscriber"),
        "{out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_bind_hosts_and_unknown_tokens_are_refused() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tmp("tok");
    pki(&dir, &[]);
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "# host token\nn1 tok-n1\n").expect("tokens");
    let (_srv, port) = serve_tls(&dir, "--token-file", &tokens);
    let url = format!("https://127.0.0.1:{port}");
    let t1 = dir.join("t1");
    std::fs::write(&t1, "tok-n1\n").expect("t1");
    let good = client(&dir, None, Some(&t1));
    let ok = send(&url, &good, vec![window("n1", 1)])
        .await
        .expect("token for n1");
    assert_eq!(ok.accepted, 1);
    let err = send(&url, &good, vec![window("n2", 1)])
        .await
        .expect_err("token for n1 speaking for n2");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let bad = dir.join("bad");
    std::fs::write(&bad, "guess\n").expect("bad");
    let err = send(&url, &client(&dir, None, Some(&bad)), vec![window("n1", 2)])
        .await
        .expect_err("unknown token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    let err = send(&url, &client(&dir, None, None), vec![window("n1", 2)])
        .await
        .expect_err("no token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_without_a_mode_refuses_to_start() {
    let _turn = tests::one_file_at_a_time(file!());
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .expect("serve");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--insecure"), "{err}");
}

/// Connection limits: past `max_connections_per_peer` a connection is closed
/// at once; a client that never sends its preface is dropped after
/// `handshake_timeout_s`; a real client then still gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_excess_connections_are_closed() {
    let _turn = tests::one_file_at_a_time(file!());
    use std::io::Read as _;
    let dir = tmp("conn");
    std::fs::create_dir_all(&dir).expect("dir");
    let cfg = dir.join("c.toml");
    std::fs::write(
        &cfg,
        "[detect.limits]\nmax_connections_per_peer = 4\nhandshake_timeout_s = 0.5\n",
    )
    .expect("cfg");
    let (_srv, port) = serve(&["--insecure", "--config", &cfg.to_string_lossy()]);
    // The readiness probe's connection may still count for a moment.
    let closed_within = |s: &std::net::TcpStream, d: Duration| {
        s.set_read_timeout(Some(d)).expect("timeout");
        let mut b = [0u8; 64];
        let mut r = s;
        // EOF or reset = closed by the server; WouldBlock/TimedOut = open.
        // (The server may first send its own HTTP/2 SETTINGS.)
        loop {
            match r.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) => {
                    return !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    )
                }
            }
        }
    };
    let t0 = Instant::now();
    let mut idle: Vec<std::net::TcpStream> = (0..4)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    // Half a preface: not enough.
    std::io::Write::write_all(&mut idle[0], b"PRI * HTTP/2.0").expect("write");
    for s in &idle {
        assert!(
            closed_within(s, Duration::from_secs(5)),
            "an idle connection was not closed"
        );
    }
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // Five at once: at least one is closed immediately (over the limit).
    let five: Vec<std::net::TcpStream> = (0..5)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    let quick = five
        .iter()
        .filter(|s| closed_within(s, Duration::from_millis(300)))
        .count();
    assert!(
        quick >= 1,
        "no connection over the per-peer limit was refused"
    );
    drop(five);
    // After the idle ones are gone, a real client works.
    let w = window("n1", 1);
    let start = Instant::now();
    loop {
        match send(
            &format!("http://127.0.0.1:{port}"),
            &ClientAuth::default(),
            vec![w.clone()],
        )
        .await
        {
            Ok(s) => {
                assert_eq!(s.accepted, 1);
                break;
            }
            Err(e) => assert!(start.elapsed() < Duration::from_secs(5), "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
