use std::collections::BTreeMap;

use super::*;

fn problem(text: &str) -> String {
    match Web::parse(text, Path::new("/nonexistent-dir")) {
        Ok(_) => panic!("accepted: {text}"),
        Err(Ok(p)) => format!("{}: {}", p.key, p.why),
        Err(Err(yaml)) => yaml,
    }
}

#[test]
fn an_empty_file_is_plain_http_without_auth() {
    for text in ["", "\n", "{}", "tls_server_config: {}\n"] {
        let w = Web::parse(text, Path::new(".")).unwrap();
        assert_eq!(w.scheme(), "http", "{text:?}");
        assert!(!w.basic_auth());
    }
}

#[test]
fn unknown_and_unsupported_keys_are_refused_by_name() {
    for (text, says) in [
        (
            "tls_server_config:\n  certfile: x\n",
            "unknown field `certfile`",
        ),
        ("basic_auth: {}\n", "unknown field `basic_auth`"),
        ("rate_limit:\n  interval: 1s\n", "rate_limit: not supported"),
        (
            "http_server_config:\n  http2: true\n",
            "http_server_config.http2:",
        ),
        (
            "http_server_config:\n  headers:\n    X-Powered-By: me\n",
            "http_server_config.headers.X-Powered-By:",
        ),
        (
            "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
            "must be one of deny, sameorigin",
        ),
        (
            "tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
            "tls_server_config.cipher_suites: not supported",
        ),
        (
            "tls_server_config:\n  client_allowed_sans: [a]\n",
            "tls_server_config.client_allowed_sans: not supported",
        ),
        (
            "basic_auth_users:\n  alice: secret\n",
            "basic_auth_users.alice: not a bcrypt hash",
        ),
        (
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n",
            "tls_server_config.cert_file: /nonexistent-dir/server.pem",
        ),
        (
            "tls_server_config:\n  key: k\n",
            "tls_server_config.cert_file: missing",
        ),
        (
            "tls_server_config:\n  min_version: TLS12\n",
            "tls_server_config.cert_file: missing",
        ),
    ] {
        let got = problem(text);
        assert!(got.contains(says), "{text:?}: {got}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcrypt_hashes_of_every_prefix_verify_and_are_cached() {
    // htpasswd writes $2y$, Python's bcrypt $2b$, older tools $2a$.
    let h = bcrypt::hash_with_result("right", 4).unwrap();
    let mut users = BTreeMap::new();
    users.insert("b".to_string(), h.format_for_version(bcrypt::Version::TwoB));
    users.insert("y".to_string(), h.format_for_version(bcrypt::Version::TwoY));
    users.insert("a".to_string(), h.format_for_version(bcrypt::Version::TwoA));
    let auth = BasicAuth::new(users).unwrap();
    for u in ["a", "b", "y"] {
        assert!(auth.verify(u, "right").await, "{u}");
        assert!(auth.verify(u, "right").await, "{u} (cached)");
        assert!(!auth.verify(u, "wrong").await, "{u}");
        assert!(!auth.verify(u, "righ").await, "{u}");
    }
    assert!(!auth.verify("nobody", "right").await);
    assert!(!auth.verify("", "").await);
}
