//! The HTTP endpoint for Prometheus scrapes and probes, served by axum
//! (hyper): `GET /metrics`, `GET /healthz`, `GET /readyz`.
use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
};

use axum::{
    extract::State,
    http::{header, StatusCode},
    routing::get,
    Router,
};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// What the endpoint serves: the `metrics` recorder's output plus text
/// sections rendered by sources that keep their own histograms.
#[derive(Clone)]
pub struct Exposition {
    handle: PrometheusHandle,
    sections: Arc<Mutex<Vec<(&'static str, String)>>>,
    ready: Arc<AtomicBool>,
}

impl Exposition {
    pub fn new(handle: PrometheusHandle) -> Self {
        Self {
            handle,
            sections: Arc::new(Mutex::new(Vec::new())),
            ready: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Replaces the section named `name`.
    pub fn set_section(&self, name: &'static str, text: String) {
        let mut s = self
            .sections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match s.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = text,
            None => s.push((name, text)),
        }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The full Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = self.handle.render();
        let s = self
            .sections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (_, text) in s.iter() {
            out.push_str(text);
        }
        out
    }
}

/// The routes: `/metrics`, `/healthz`, `/readyz` (503 until the sources started).
fn router(expo: Exposition) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(e): State<Exposition>| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    e.render(),
                )
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(|State(e): State<Exposition>| async move {
                if e.ready.load(Ordering::Relaxed) {
                    (StatusCode::OK, "ready\n")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                }
            }),
        )
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
        .with_state(expo)
}

/// Binds `addr` and serves (axum on hyper) until the runtime stops.
pub async fn serve(addr: SocketAddr, expo: Exposition) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = router(expo);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics endpoint stopped");
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use tokio::{
        io::{AsyncReadExt, AsyncWriteExt},
        net::TcpStream,
    };

    use super::*;

    #[tokio::test]
    async fn answers_requests_sent_in_pieces_and_routes() {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .build_recorder()
            .handle();
        let expo = Exposition::new(handle);
        expo.set_section("x", "faultline_test_metric 42\n".into());
        let addr = serve("127.0.0.1:0".parse().unwrap(), expo.clone())
            .await
            .unwrap();

        let get = |path: &'static str, pieces: bool| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            if pieces {
                for part in [
                    "GET ",
                    path,
                    " HTTP/1.1\r\n",
                    "Host: x\r\n",
                    "Connection: close\r\n",
                    "\r\n",
                ] {
                    s.write_all(part.as_bytes()).await.unwrap();
                    s.flush().await.unwrap();
                }
            } else {
                s.write_all(format!("GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let m = get("/metrics", true).await;
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(
            m.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4\r\n"),
            "{m}"
        );
        assert!(m.ends_with("faultline_test_metric 42\n"), "{m}");
        assert!(get("/readyz", false).await.starts_with("HTTP/1.1 503"));
        expo.set_ready(true);
        assert!(get("/readyz", true).await.starts_with("HTTP/1.1 200"));
        assert!(get("/healthz", false).await.ends_with("ok\n"));
        assert!(get("/other", false).await.starts_with("HTTP/1.1 404"));
    }
}
