//! `serve --token-review` against a stand-in Kubernetes API server (TLS,
//! `POST /apis/authentication.k8s.io/v1/tokenreviews`): a collector's
//! projected service-account token may send windows for the node its pod
//! runs on and no other; tokens of other service accounts and unknown
//! tokens are UNAUTHENTICATED; an answer is cached (one review per token);
//! with the API server gone a new token is UNAVAILABLE (the collector
//! retries), never accepted. And `kube-tls`, the correlator's init step:
//! its server certificate made once, its CA published in a ConfigMap.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use proto::client_tls::ClientAuth;
use proto::v1::{ingest_client::IngestClient, Window};

use crate::common;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");
const OWN_TOKEN: &str = "correlator-own-token";

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

/// The review the stand-in gives `token`.
fn review_of(token: &str) -> serde_json::Value {
    let user = |name: &str, node: &str| {
        serde_json::json!({
            "authenticated": true,
            "audiences": ["faultline-correlator"],
            "user": {
                "username": name,
                "extra": { "authentication.kubernetes.io/node-name": [node] },
            },
        })
    };
    let status = match token {
        "tok-n1" => user("system:serviceaccount:faultline:faultline-collector", "n1"),
        "tok-other-sa" => user("system:serviceaccount:default:default", "n1"),
        _ => serde_json::json!({ "authenticated": false, "error": "invalid bearer token" }),
    };
    serde_json::json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status })
}

/// What the stand-in API server saw.
#[derive(Default)]
struct Seen {
    /// TokenReviews of `tok-n1`.
    n1_reviews: AtomicUsize,
    /// Merge patches of ConfigMap faultline/faultline-correlator-ca.
    patches: std::sync::Mutex<Vec<serde_json::Value>>,
}

/// A TLS API server answering TokenReviews and ConfigMap patches.
async fn api_server(pki: &Path) -> (u16, Arc<Seen>, tokio::task::JoinHandle<()>) {
    use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.join("server.pem"))
        .expect("pem")
        .collect::<Result<_, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_file(pki.join("server.key")).expect("key");
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Seen::default());
    let count = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let count = count.clone();
                        async move {
                            let authorized = req
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                == Some(&format!("Bearer {OWN_TOKEN}"));
                            let path = req.uri().path().to_string();
                            let patch = req.method() == hyper::Method::PATCH
                            && path == "/api/v1/namespaces/faultline/configmaps/faultline-correlator-ca"
                            && req.headers().get("content-type").and_then(|v| v.to_str().ok())
                                == Some("application/merge-patch+json");
                            let path_ok = path == "/apis/authentication.k8s.io/v1/tokenreviews";
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let spec: serde_json::Value =
                                serde_json::from_slice(&body).unwrap_or_default();
                            if authorized && patch {
                                count.patches.lock().expect("patches").push(spec);
                                let r = hyper::Response::new(Full::new(Bytes::from("{}")));
                                return Ok::<_, std::convert::Infallible>(r);
                            }
                            let token = spec["spec"]["token"].as_str().unwrap_or("");
                            let audience_ok =
                                spec["spec"]["audiences"][0] == "faultline-correlator";
                            if token == "tok-n1" {
                                count.n1_reviews.fetch_add(1, Ordering::SeqCst);
                            }
                            let (code, reply) = if !(authorized && path_ok && audience_ok) {
                                (401, serde_json::json!({ "kind": "Status", "code": 401 }))
                            } else {
                                (201, review_of(token))
                            };
                            let mut r =
                                hyper::Response::new(Full::new(Bytes::from(reply.to_string())));
                            *r.status_mut() = hyper::StatusCode::from_u16(code).expect("status");
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (port, seen, task)
}

async fn send(url: &str, auth: &ClientAuth, w: Window) -> Result<u64, tonic::Status> {
    let (ep, token) = auth.endpoint(url).expect("endpoint");
    let chan = ep
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connect: {e:?}")))?;
    IngestClient::with_interceptor(chan, token)
        .stream(tokio_stream::iter(vec![w]))
        .await
        .map(|r| r.into_inner().accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projected_tokens_speak_only_for_their_pods_node() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir: PathBuf =
        std::env::temp_dir().join(format!("faultline-tokenreview-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(BIN)
        .args(["certs", "--out"])
        .arg(&dir)
        .output()
        .expect("certs");
    assert!(out.status.success(), "{out:?}");
    let own = dir.join("own-token");
    std::fs::write(&own, format!("{OWN_TOKEN}\n")).expect("own token");
    let (api_port, seen, api) = api_server(&dir).await;

    let port = free_port();
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
            .args([
                "--token-review",
                "--kube-api",
                &format!("https://127.0.0.1:{api_port}"),
            ])
            .args([
                "--kube-ca",
                &p("ca.pem"),
                "--kube-token-file",
                &p("own-token"),
            ])
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
    let with_token = |name: &str, token: &str| {
        let f = dir.join(name);
        std::fs::write(&f, format!("{token}\n")).expect("token file");
        ClientAuth {
            tls_ca: Some(dir.join("ca.pem")),
            token_file: Some(f),
            ..ClientAuth::default()
        }
    };
    let n1 = with_token("t-n1", "tok-n1");
    let now = common::now_ms();
    assert_eq!(
        send(&url, &n1, common::window("n1", 1, now))
            .await
            .expect("n1"),
        1
    );
    assert_eq!(
        send(&url, &n1, common::window("n1", 2, now))
            .await
            .expect("n1 again"),
        1
    );
    let err = send(&url, &n1, common::window("n2", 1, now))
        .await
        .expect_err("n1's token speaking for n2");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    assert_eq!(
        seen.n1_reviews.load(Ordering::SeqCst),
        1,
        "one review, then the cache"
    );

    let err = send(
        &url,
        &with_token("t-sa", "tok-other-sa"),
        common::window("n1", 3, now),
    )
    .await
    .expect_err("another service account");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    assert!(
        err.message().contains("not an accepted service account"),
        "{err}"
    );
    let err = send(
        &url,
        &with_token("t-bad", "guess"),
        common::window("n1", 3, now),
    )
    .await
    .expect_err("an unknown token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err}");
    assert!(err.message().contains("invalid bearer token"), "{err}");

    // The API server gone: a new token is not accepted, and the caller is
    // told to retry.
    api.abort();
    let err = send(
        &url,
        &with_token("t-new", "tok-new"),
        common::window("n1", 3, now),
    )
    .await
    .expect_err("no API server");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_tls_makes_the_server_certificate_once_and_publishes_its_ca() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir: PathBuf =
        std::env::temp_dir().join(format!("faultline-kubetls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let api_pki = dir.join("api");
    let out = Command::new(BIN)
        .args(["certs", "--out"])
        .arg(&api_pki)
        .output()
        .expect("certs");
    assert!(out.status.success(), "{out:?}");
    std::fs::write(dir.join("own-token"), format!("{OWN_TOKEN}\n")).expect("own token");
    let (api_port, seen, _api) = api_server(&api_pki).await;
    let tls = dir.join("tls");
    let (t, a, d) = (tls.clone(), api_pki.clone(), dir.clone());
    let run = move || {
        let (tls, api_pki, dir) = (&t, &a, &d);
        Command::new(BIN)
            .args(["kube-tls", "--dir"])
            .arg(tls)
            .args(["--server-name", "faultline-correlator.faultline.svc"])
            .args(["--namespace", "faultline"])
            .args(["--kube-api", &format!("https://127.0.0.1:{api_port}")])
            .arg("--kube-ca")
            .arg(api_pki.join("ca.pem"))
            .arg("--kube-token-file")
            .arg(dir.join("own-token"))
            .output()
            .expect("kube-tls")
    };
    let first = tokio::task::spawn_blocking(run.clone()).await.expect("run");
    assert!(first.status.success(), "{first:?}");
    assert!(
        String::from_utf8_lossy(&first.stdout).starts_with("wrote"),
        "{first:?}"
    );
    let ca = std::fs::read_to_string(tls.join("ca.pem")).expect("ca.pem");
    let server = std::fs::read(tls.join("server.pem")).expect("server.pem");
    let second = tokio::task::spawn_blocking(run).await.expect("run");
    assert!(
        String::from_utf8_lossy(&second.stdout).starts_with("kept"),
        "{second:?}"
    );
    assert_eq!(
        std::fs::read(tls.join("server.pem")).expect("server.pem"),
        server
    );
    let patches = seen.patches.lock().expect("patches").clone();
    assert_eq!(patches.len(), 2);
    for p in patches {
        assert_eq!(p, serde_json::json!({ "data": { "ca.crt": ca } }));
    }
    // The certificate names the Service and is signed by that CA.
    let cert = proto::client_tls::read_certificates(&tls.join("server.pem")).expect("pem");
    assert!(!cert.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}
