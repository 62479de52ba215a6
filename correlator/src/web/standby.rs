//! What a process waiting for its shard's lease serves (`serve --nats`, a
//! standby; docs/scale-out.md): on the web UI's address and on
//! `--metrics-addr`, `/healthz` (200, naming it a standby of its shard, so
//! its readiness probe passes) and `/metrics` (this process's metrics,
//! `faultline_correlator_shard_active` 0 among them); anything else is 503
//! with a line saying the shard's active process serves it. The same guards
//! as the real listeners (Host names and tokens on the web UI's, the web
//! config file's TLS and basic auth on both) and the same connection
//! limits. Every response closes its connection, so no kept-alive
//! connection outlives the standby's listeners: when the process takes the
//! lease, [`Standby::end`] closes them before the real ones bind.
use std::net::SocketAddr;

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::Response,
    routing::get,
    Router,
};

use super::WebConfig;

/// The standby's listeners, served until [`Standby::end`].
pub struct Standby {
    stop: tokio::sync::watch::Sender<()>,
    served: Vec<tokio::task::JoinHandle<()>>,
}

impl Standby {
    /// Stops accepting on every standby listener and waits until their
    /// sockets are closed: the addresses are free again.
    pub async fn end(self) {
        drop(self.stop);
        for s in self.served {
            if let Err(e) = s.await {
                tracing::warn!(error = %e, "standby listener ended abnormally");
            }
        }
    }
}

/// Serves the standby of the shard whose lease is `consumer`'s on `web`
/// (the web UI's address: its guard) and `metrics` (`--metrics-addr`),
/// either or both, within `cfg`.
pub async fn serve(
    web: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    consumer: &str,
    cfg: &WebConfig,
) -> anyhow::Result<Standby> {
    let (stop, stopped) = tokio::sync::watch::channel(());
    let mut standby = Standby {
        stop,
        served: Vec::new(),
    };
    if web.is_none() && metrics.is_none() {
        return Ok(standby);
    }
    let webcfg = cfg.web_config()?;
    let listeners = [(web, ("web UI", "web")), (metrics, ("metrics", "metrics"))];
    for (addr, names) in listeners {
        let Some(addr) = addr else { continue };
        let app = router(consumer);
        let app = if names.1 == "web" {
            let g = super::guard::Guard::new(&cfg.allowed_hosts, cfg.viewer_token()?, None);
            super::guarded(app, g, webcfg.as_ref())
        } else {
            super::metrics_guarded(app, webcfg.as_ref())
        };
        let app = app.layer(axum::middleware::map_response(close));
        let mut rx = stopped.clone();
        let shutdown = async move {
            // Ends on the sender's drop.
            while rx.changed().await.is_ok() {}
        };
        let served = super::serve_router(addr, app, names, cfg, webcfg.as_ref(), shutdown).await?;
        standby.served.push(served);
        tracing::info!(%addr, consumer, "standby: /healthz and /metrics on the {} address until the shard's lease is taken", names.0);
    }
    Ok(standby)
}

/// `/healthz`, `/metrics`, and 503 for the rest.
fn router(consumer: &str) -> Router {
    let health = format!("ok: standby of shard {consumer}, waiting for its lease\n");
    let other = format!(
        "faultline-correlator: standby of shard {consumer}, waiting for its lease; the shard's active process serves the web UI and API\n"
    );
    Router::new()
        .route("/healthz", get(move || std::future::ready(health.clone())))
        .route("/metrics", get(super::metrics))
        .fallback(move || std::future::ready((StatusCode::SERVICE_UNAVAILABLE, other.clone())))
        .with_state(super::metrics_state(None))
}

/// `Connection: close` on every response.
async fn close(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    /// `GET path` with `Host: host` over a real connection: (status, the
    /// whole response).
    fn get(addr: SocketAddr, host: &str, path: &str) -> (u16, String) {
        let mut c = std::net::TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        write!(c, "GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n").expect("request");
        // The standby closes every connection after its response.
        let mut text = String::new();
        c.read_to_string(&mut text).expect("response until close");
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok());
        (status.unwrap_or(0), text)
    }

    fn free_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_standby_answers_health_and_metrics_within_the_guard_then_frees_its_address() {
        let _ = crate::telemetry::handle();
        let cfg = WebConfig {
            allowed_hosts: vec!["faultline-correlator.faultline.svc".into()],
            ..WebConfig::default()
        };
        let (web, metrics) = (free_addr(), free_addr());
        let standby = serve(Some(web), Some(metrics), "shard-h00", &cfg)
            .await
            .expect("standby");
        let port = web.port();
        let named = format!("faultline-correlator.faultline.svc:{port}");
        let (res, other) = tokio::task::spawn_blocking(move || {
            let ok = [
                get(web, "x.example", "/healthz"),
                get(web, &named, "/metrics"),
                get(web, &named, "/api/open"),
                get(metrics, "x.example", "/healthz"),
            ];
            (ok, get(web, "rebind.attacker.example", "/metrics"))
        })
        .await
        .expect("client");
        for (want, (status, text)) in [200, 200, 503, 200].into_iter().zip(&res) {
            assert_eq!(*status, want, "{text}");
            assert!(
                text.to_ascii_lowercase().contains("connection: close"),
                "{text}"
            );
        }
        assert!(
            res[0].1.contains("standby of shard shard-h00"),
            "{}",
            res[0].1
        );
        assert!(res[1].1.contains("faultline_build_info"), "{}", res[1].1);
        assert!(res[2].1.contains("standby"), "{}", res[2].1);
        // The web UI's Host check applies to the standby too.
        assert_eq!(other.0, 403, "{}", other.1);
        standby.end().await;
        // Both addresses are free as soon as end() returns.
        for a in [web, metrics] {
            std::net::TcpListener::bind(a).expect("the standby's address is free");
        }
    }
}
