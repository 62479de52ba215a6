//! The web guard (Host names, the viewer token) and the acknowledgement's
//! text checks, through the router as the listener calls it.
use std::net::SocketAddr;

use axum::{body::Body, http::Request};
use http_body_util::BodyExt as _;
use proto::listen::Addrs;
use tonic::codegen::Service as _;

use super::*;

const VIEWER: &str = "viewer-token-0123456789";
const OPERATOR: &str = "operator-token-0123456789";

fn app(cfg: &WebConfig, viewer: Option<&str>) -> Router {
    let (updates, _) = broadcast::channel(4);
    let open = Arc::new(Mutex::new(vec![CandidateUpdate {
        incident_id: "i1".into(),
        state: "opened".into(),
        ..Default::default()
    }]));
    let state = AppState {
        history: None,
        updates,
        open,
        ingest: None,
        acks: Some(crate::ack::Acks::new(Some(OPERATOR.into()))),
    };
    router_with(state, cfg, viewer.map(str::to_string))
}

/// A request from `peer` that connected to `local`.
async fn call(
    app: &Router,
    (peer, local): (&str, &str),
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, Option<String>) {
    let mut r = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let mut req = r.body(Body::from(body.to_string())).expect("request");
    req.extensions_mut().insert(Addrs {
        peer: peer.parse::<SocketAddr>().expect("peer"),
        local: Some(local.parse::<SocketAddr>().expect("local")),
    });
    let resp = app.clone().call(req).await.expect("infallible");
    let status = resp.status().as_u16();
    let www = resp
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned(), www)
}

const LOOP: (&str, &str) = ("127.0.0.1:50000", "127.0.0.1:8080");
/// A kubelet probe or a remote browser on the pod network.
const POD: (&str, &str) = ("10.0.0.5:40000", "10.0.0.9:8080");

#[tokio::test]
async fn only_hosts_that_name_this_server_are_answered() {
    let cfg = WebConfig {
        allowed_hosts: vec!["faultline-correlator.faultline.svc".into()],
        ..WebConfig::default()
    };
    let a = app(&cfg, Some(VIEWER));
    let bearer = format!("Bearer {VIEWER}");
    for (host, want) in [
        ("127.0.0.1:8080", 200),
        ("localhost:8080", 200),
        ("LOCALHOST", 200),
        ("[::1]:8080", 200),
        ("10.0.0.9:8080", 200),
        ("faultline-correlator.faultline.svc:8080", 200),
        ("Faultline-Correlator.faultline.svc.", 200),
        // DNS rebinding: the attacker's name, resolving to this address.
        ("rebind.attacker.example:8080", 403),
        ("10.0.0.10:8080", 403),
        ("faultline-correlator.faultline.svc.attacker.example", 403),
    ] {
        let (s, body, _) = call(
            &a,
            POD,
            "GET",
            "/api/open",
            &[("host", host), ("authorization", &bearer)],
            "",
        )
        .await;
        assert_eq!(s, want, "Host {host}: {body}");
        if want == 403 {
            assert!(body.contains("[web] allowed_hosts"), "{body}");
        }
    }
    // Probes get /healthz whatever they send as Host.
    let (s, _, _) = call(&a, POD, "GET", "/healthz", &[("host", "x.example")], "").await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn beyond_loopback_the_pages_and_api_need_the_viewer_token() {
    let cfg = WebConfig::default();
    let host = [("host", "10.0.0.9:8080")];
    // No token file: loopback clients only; probes and scrapes open.
    let a = app(&cfg, None);
    for path in ["/", "/api/open", "/api/stream", "/assets/app.js"] {
        let (s, body, www) = call(&a, POD, "GET", path, &host, "").await;
        assert_eq!(s, 401, "{path}: {body}");
        assert!(body.contains("[web] token_file"), "{body}");
        assert!(www.is_some_and(|w| w.starts_with("Basic")));
    }
    let (s, _, _) = call(&a, POD, "GET", "/healthz", &host, "").await;
    assert_eq!(s, 200);
    let (s, _, _) = call(&a, POD, "GET", "/metrics", &host, "").await;
    assert_ne!(s, 401, "/metrics is open to scrapers");
    let (s, _, _) = call(&a, LOOP, "GET", "/api/open", &[("host", "127.0.0.1")], "").await;
    assert_eq!(s, 200, "loopback (kubectl port-forward) needs no token");
    // The same through a dual-stack listener ([::]).
    let mapped = ("[::ffff:127.0.0.1]:50000", "[::ffff:127.0.0.1]:8080");
    let (s, _, _) = call(
        &a,
        mapped,
        "GET",
        "/api/open",
        &[("host", "127.0.0.1:8080")],
        "",
    )
    .await;
    assert_eq!(s, 200, "an IPv4 loopback client of a [::] listener");
    let mapped = ("[::ffff:10.0.0.5]:50000", "[::ffff:10.0.0.9]:8080");
    let (s, _, _) = call(
        &a,
        mapped,
        "GET",
        "/api/open",
        &[("host", "10.0.0.9:8080")],
        "",
    )
    .await;
    assert_eq!(s, 401, "an IPv4 network client of a [::] listener");

    // With a token file: Bearer, Basic (a browser's prompt), the operator's.
    let a = app(&cfg, Some(VIEWER));
    let basic = |user: &str, pass: &str| {
        let raw = format!("{user}:{pass}");
        format!("Basic {}", b64(raw.as_bytes()))
    };
    for (auth, want) in [
        (format!("Bearer {VIEWER}"), 200),
        (basic("anyone", VIEWER), 200),
        (format!("Bearer {OPERATOR}"), 200),
        (format!("Bearer {VIEWER}x"), 401),
        (basic(VIEWER, "nope"), 401),
        ("Basic !!!".to_string(), 401),
    ] {
        let (s, body, _) = call(
            &a,
            POD,
            "GET",
            "/api/open",
            &[("host", "10.0.0.9:8080"), ("authorization", &auth)],
            "",
        )
        .await;
        assert_eq!(s, want, "{auth}: {body}");
    }
}

#[tokio::test]
async fn an_acknowledgement_with_a_direction_override_is_a_400() {
    let a = app(&WebConfig::default(), None);
    let bearer = format!("Bearer {OPERATOR}");
    let headers = [
        ("host", "127.0.0.1"),
        ("authorization", bearer.as_str()),
        ("content-type", "application/json"),
    ];
    let body = serde_json::json!({ "by": "alice", "why": "fixed \u{202E}kcab", "for_s": 0 });
    let (s, text, _) = call(
        &a,
        LOOP,
        "POST",
        "/api/incidents/i1/ack",
        &headers,
        &body.to_string(),
    )
    .await;
    assert_eq!(s, 400, "{text}");
    assert!(text.contains("U+202E at character 7"), "{text}");
    let body = serde_json::json!({ "by": "alice", "why": "\u{2067}" });
    let (s, text, _) = call(
        &a,
        LOOP,
        "DELETE",
        "/api/incidents/i1/ack",
        &headers,
        &body.to_string(),
    )
    .await;
    assert_eq!(s, 400, "clearing checks its why too: {text}");
    let body = serde_json::json!({ "by": "alice", "why": "new cable", "for_s": 0 });
    let (s, text, _) = call(
        &a,
        LOOP,
        "POST",
        "/api/incidents/i1/ack",
        &headers,
        &body.to_string(),
    )
    .await;
    assert_eq!(s, 200, "{text}");
}

fn b64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `htpasswd -nbBC 4 "" 'right password'` (cost 4: a fast test).
const HASH: &str = "$2y$04$B13xC9d9520dPQ0P7r4oCe.zpYWMxm/NKNIGISCD.e30e9ndNwyRG";

/// A web config file with one basic auth user, loaded.
fn basic_auth_web(name: &str) -> webconfig::Web {
    let path =
        std::env::temp_dir().join(format!("faultline-web-{name}-{}.yml", std::process::id()));
    std::fs::write(
        &path,
        format!("basic_auth_users:\n  sre: '{HASH}'\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"),
    )
    .expect("write the web config file");
    let web = webconfig::Web::load(&path).expect("load the web config file");
    let _ = std::fs::remove_file(&path);
    web
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_config_files_basic_auth_composes_with_the_tokens() {
    let (updates, _) = broadcast::channel(4);
    let state = AppState {
        history: None,
        updates,
        open: Arc::default(),
        ingest: None,
        acks: Some(crate::ack::Acks::new(Some(OPERATOR.into()))),
    };
    let web = basic_auth_web("compose");
    let a = router_behind(
        state,
        &WebConfig::default(),
        Some(VIEWER.into()),
        Some(&web),
    );
    let host = ("host", "10.0.0.9:8080");
    let right = "Basic c3JlOnJpZ2h0IHBhc3N3b3Jk".to_string();
    let viewer = format!("Bearer {VIEWER}");
    let operator = format!("Bearer {OPERATOR}");
    for (who, peer, auth, want) in [
        // A user's password admits a remote browser as a viewer.
        ("remote user", POD, Some(right.as_str()), 200),
        ("wrong password", POD, Some("Basic c3JlOndyb25n"), 401),
        (
            "unknown user",
            POD,
            Some("Basic cm9vdDpyaWdodCBwYXNzd29yZA=="),
            401,
        ),
        // The viewer token as a basic password is not a user's.
        (
            "token as password",
            POD,
            Some("Basic eDp2aWV3ZXItdG9rZW4tMDEyMzQ1Njc4OQ=="),
            401,
        ),
        // Basic auth holds on loopback too, as node_exporter's.
        ("loopback, nothing", LOOP, None, 401),
        ("loopback user", LOOP, Some(right.as_str()), 200),
        // The tokens still pass, checked even from loopback.
        ("viewer token", POD, Some(viewer.as_str()), 200),
        ("operator token", POD, Some(operator.as_str()), 200),
        (
            "loopback, bogus bearer",
            LOOP,
            Some("Bearer not-a-token-at-all"),
            401,
        ),
    ] {
        let mut headers = vec![("host", if peer == LOOP { LOOP.1 } else { POD.1 })];
        if let Some(a) = auth {
            headers.push(("authorization", a));
        }
        let (s, body, www) = call(&a, peer, "GET", "/api/open", &headers, "").await;
        assert_eq!(s, want, "{who}: {body}");
        if want == 401 {
            assert!(www.is_some_and(|w| w.starts_with("Basic")), "{who}");
        }
    }
    // Probes need nothing; the scrape needs a user now.
    let (s, _, _) = call(&a, POD, "GET", "/healthz", &[host], "").await;
    assert_eq!(s, 200);
    let (s, _, _) = call(&a, POD, "GET", "/metrics", &[host], "").await;
    assert_eq!(s, 401);
    // The Host check still applies to an admitted user.
    let (s, _, _) = call(
        &a,
        POD,
        "GET",
        "/api/open",
        &[
            ("host", "rebind.attacker.example"),
            ("authorization", &right),
        ],
        "",
    )
    .await;
    assert_eq!(s, 403);
}

/// The simulator's temporary history is closed before it is removed: a
/// running writer read the removal as "history database deleted while the
/// correlator runs" (an ERROR on Ctrl-C of scripts/run.sh), recreated the
/// file and left the 8 MiB incident journal behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finishing_removes_the_temporary_history_for_good() {
    let mut engine = crate::engine::Engine::new(&Default::default(), Default::default());
    let (updates, _) = broadcast::channel(4);
    let ingest = IngestState::new(Default::default());
    let args = UiArgs {
        web: Some("127.0.0.1:0".parse().expect("addr")),
        history: None,
        keep_serving: false,
    };
    let attached = attach(&args, &mut engine, &updates, &Arc::default(), &ingest)
        .await
        .expect("attach")
        .expect("a web UI");
    let db = attached.temp.clone().expect("a temporary history");
    assert!(db.exists());
    attached.finish().await;
    // The writer looks for a deleted file when idle (every second).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    for suffix in ["", "-wal", "-shm", "-incidents"] {
        let p = format!("{}{suffix}", db.display());
        assert!(!std::path::Path::new(&p).exists(), "{p} left behind");
    }
}

#[test]
fn web_counts_are_refused_in_their_declared_bounds() {
    for key in [MAX_EVENT_STREAMS, MAX_EVENT_STREAMS_PER_PEER] {
        let (lo, hi) = (key.min.unwrap_or(0), key.max.unwrap_or(usize::MAX));
        assert_eq!(COUNT_WHY, format!("must be within {lo}..={hi}"));
    }
    let cfg = WebConfig {
        max_event_streams_per_peer: 0,
        ..WebConfig::default()
    };
    assert_eq!(
        cfg.invalid(),
        Some(("web.max_event_streams_per_peer", COUNT_WHY))
    );
    assert_eq!(WebConfig::default().invalid(), None);
}
