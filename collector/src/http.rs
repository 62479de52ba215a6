//! The HTTP endpoint for Prometheus scrapes and probes, served by axum
//! (hyper): `GET /metrics` (gzip-compressed when the client accepts gzip,
//! as Prometheus does), `GET /healthz`, `GET /readyz`.
use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
};

use axum::{
    extract::State,
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
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
            get(|State(e): State<Exposition>, h: HeaderMap| async move {
                metrics_response(&e.render(), &h)
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

const TEXT_FORMAT: &str = "text/plain; version=0.0.4";

/// The exposition, gzip-compressed when the request accepts gzip.
fn metrics_response(text: &str, h: &HeaderMap) -> Response {
    let gzip = h
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(accepts_gzip);
    if gzip {
        match gzip_bytes(text.as_bytes()) {
            Ok(body) => {
                return (
                    [
                        (header::CONTENT_TYPE, TEXT_FORMAT),
                        (header::CONTENT_ENCODING, "gzip"),
                        (header::VARY, "Accept-Encoding"),
                    ],
                    body,
                )
                    .into_response()
            }
            // Compressing into memory does not fail; if it did, the
            // scrape still gets the plain text.
            Err(e) => {
                metrics::counter!(crate::metrics_catalog::METRICS_GZIP_ERRORS.name).increment(1);
                tracing::warn!(error = %e, "gzip of /metrics failed: sent uncompressed");
            }
        }
    }
    (
        [
            (header::CONTENT_TYPE, TEXT_FORMAT),
            (header::VARY, "Accept-Encoding"),
        ],
        text.to_string(),
    )
        .into_response()
}

/// Whether an `Accept-Encoding` value accepts gzip: `gzip`, `x-gzip` or
/// `*` with a quality above 0 (RFC 9110 §12.5.3).
fn accepts_gzip(value: &str) -> bool {
    value.split(',').any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let coding = parts.next().unwrap_or_default();
        if !["gzip", "x-gzip", "*"]
            .iter()
            .any(|c| coding.eq_ignore_ascii_case(c))
        {
            return false;
        }
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok());
        q.is_some_and(|q| q > 0.0)
    })
}

fn gzip_bytes(b: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut enc =
        flate2::write::GzEncoder::new(Vec::with_capacity(b.len() / 4), flate2::Compression::fast());
    enc.write_all(b)?;
    enc.finish()
}

/// Binds `addr` and serves (axum on hyper) until the runtime stops, within
/// the default connection limits and timeouts of [`proto::listen`]
/// (metrics label `listener="metrics"`), plain HTTP.
pub async fn serve(addr: SocketAddr, expo: Exposition) -> std::io::Result<SocketAddr> {
    serve_with(addr, expo, None).await
}

/// [`serve`] behind `web` (`--web-config-file`: TLS, client certificates,
/// basic auth; `/healthz` and `/readyz` stay open to probes).
pub async fn serve_with(
    addr: SocketAddr,
    expo: Exposition,
    web: Option<webconfig::Web>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let wrap = webconfig::Wrap {
        listener: "metrics",
        open: &["/healthz", "/readyz"],
        bearer: None,
    };
    let app = webconfig::wrap(router(expo), web.as_ref(), wrap);
    let limits = proto::listen::HttpLimitsConfig::default();
    tokio::spawn(async move {
        webconfig::serve(
            listener,
            proto::listen::Listener::new("metrics", limits.limits(), 1),
            limits.http(),
            web.as_ref(),
            app,
            std::future::pending(),
        )
        .await;
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

    /// One `/metrics` request with `accept` as its Accept-Encoding (none
    /// for `None`): (lowercased head, body bytes).
    async fn scrape(addr: SocketAddr, accept: Option<&str>) -> (String, Vec<u8>) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let extra = accept.map_or(String::new(), |a| format!("Accept-Encoding: {a}\r\n"));
        s.write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        let split = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&out[..split]).to_ascii_lowercase();
        (head, out[split + 4..].to_vec())
    }

    #[tokio::test]
    async fn metrics_are_gzipped_when_the_scraper_asks() {
        use std::io::Read as _;
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .build_recorder()
            .handle();
        let expo = Exposition::new(handle);
        let text: String = (0..2000)
            .map(|i| format!("faultline_test_metric{{gpu=\"{i}\"}} {i}\n"))
            .collect();
        expo.set_section("x", text.clone());
        let addr = serve("127.0.0.1:0".parse().unwrap(), expo).await.unwrap();

        // Prometheus's header.
        let (head, body) = scrape(addr, Some("gzip")).await;
        assert!(head.contains("\r\ncontent-encoding: gzip"), "{head}");
        assert!(head.contains("\r\nvary: accept-encoding"), "{head}");
        let mut plain = String::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_string(&mut plain)
            .unwrap();
        assert_eq!(plain, text);
        assert!(
            body.len() * 4 < text.len(),
            "{} compressed bytes for {}",
            body.len(),
            text.len()
        );

        for (accept, gzipped) in [
            (None, false),
            (Some("identity"), false),
            (Some("gzip;q=0"), false),
            (Some("deflate, GZIP;q=0.5"), true),
            (Some("*"), true),
        ] {
            let (head, body) = scrape(addr, accept).await;
            assert_eq!(
                head.contains("content-encoding: gzip"),
                gzipped,
                "{accept:?}: {head}"
            );
            if !gzipped {
                assert_eq!(String::from_utf8(body).unwrap(), text, "{accept:?}");
            }
        }
    }
}
