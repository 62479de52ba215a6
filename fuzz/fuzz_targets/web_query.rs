//! A request to the web API as a browser or a script sends it: the first
//! byte picks the route (`/api/incidents`, `/api/entity`, `/api/offenders`,
//! `/api/incidents/{id}`), the rest is its query string (or id), bytes a
//! URI cannot hold percent-encoded. It goes through the correlator's own
//! router (axum's query extraction, the handlers, the SQLite queries) on a
//! history holding incidents and samples. The answer is 200 with JSON, or
//! a 4xx for a bad query: never a 5xx, a panic or a hang.
#![no_main]
use std::{
    fmt::Write as _,
    sync::{Arc, Mutex, OnceLock},
};

use axum::{body::Body, http::Request, Router};
use correlator::{
    history::{samples::Sample, HistoryConfig, Store},
    web::{router, AppState},
};
use libfuzzer_sys::fuzz_target;
use proto::v1::CandidateUpdate;
use tower::ServiceExt as _;

struct Fixture {
    rt: tokio::runtime::Runtime,
    app: Router,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let path =
            std::env::temp_dir().join(format!("faultline-fuzz-web-{}.db", std::process::id()));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let mut store = Store::open(&path, &HistoryConfig::default()).expect("history");
        let t0 = 1_700_000_000_000i64;
        let mut updates = Vec::new();
        for (i, (kind, entity)) in [
            ("ib_link_degraded", "n017/mlx5_2/1"),
            ("gpu_thermal_throttle", "n003/gpu3"),
            ("ib_link_degraded", "n017/mlx5_2/1"),
            ("job_slowdown", "job/4242"),
        ]
        .into_iter()
        .enumerate()
        {
            let id = format!("inc-{i}");
            for (k, state) in ["opened", "resolved"].into_iter().enumerate() {
                updates.push(CandidateUpdate {
                    ts_unix_ms: t0 + i as i64 * 600_000 + k as i64 * 120_000,
                    incident_id: id.clone(),
                    state: state.into(),
                    kind: kind.into(),
                    entity: entity.into(),
                    confidence: 0.9,
                    evidence: vec!["symbol_error +120/s".into()],
                    affected_jobs: vec!["4242".into()],
                    runbook: "check the cable".into(),
                    cluster: if i % 2 == 0 { "east" } else { "" }.into(),
                    severity: "warning".into(),
                });
            }
        }
        // A port's bit error ratio and the fleet band it is drawn against.
        let mut samples = Vec::new();
        for i in 0..300i64 {
            for (entity, signal, v) in [
                ("n017/mlx5_2/1", "ber", 1e-12 * (i % 7) as f64),
                ("fabric", "ber.median", 1e-13),
                ("fabric", "ber.p10", 1e-14),
                ("fabric", "ber.p90", 1e-12),
            ] {
                samples.push(Sample {
                    entity: entity.into(),
                    signal,
                    ts: t0 + i * 1000,
                    value: v,
                });
            }
        }
        store.write(&updates, &samples).expect("history write");
        // libFuzzer exits without running destructors: unlink the files
        // now (the open connection keeps reading them) so runs leave none.
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        let (tx, _) = tokio::sync::broadcast::channel(16);
        let state = AppState {
            history: Some(Arc::new(Mutex::new(store))),
            updates: tx,
            open: Arc::new(Mutex::new(Vec::new())),
            ingest: None,
            acks: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        Fixture {
            rt,
            app: router(state),
        }
    })
}

/// Bytes a URI's query may hold as they are; the rest percent-encoded.
fn uri_part(bytes: &[u8]) -> String {
    let mut s = String::new();
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b) {
            s.push(b as char);
        } else {
            let _ = write!(s, "%{b:02X}");
        }
    }
    s
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let part = uri_part(rest);
    let uri = match sel % 4 {
        0 => format!("/api/incidents?{part}"),
        1 => format!("/api/entity?{part}"),
        2 => format!("/api/offenders?{part}"),
        _ => format!("/api/incidents/{}", part.replace(['?', '/'], "_")),
    };
    // A stray `%` not followed by two hex digits makes no URI: hyper
    // refuses it before the router.
    let Ok(req) = Request::get(&uri).body(Body::empty()) else {
        return;
    };
    let f = fixture();
    let (status, body) = f.rt.block_on(async {
        let resp = f.app.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 26)
            .await
            .expect("body");
        (status, body)
    });
    assert!(
        !status.is_server_error(),
        "{uri} → {status}: {}",
        String::from_utf8_lossy(&body)
    );
    if status.is_success() {
        serde_json::from_slice::<serde_json::Value>(&body).expect("a 200 carries JSON");
    } else {
        assert!(status.is_client_error(), "{uri} → {status}");
    }
});
