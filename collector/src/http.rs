//! A minimal HTTP endpoint for Prometheus scrapes and probes:
//! `GET /metrics`, `GET /healthz`, `GET /readyz`. Hand-written on tokio to
//! keep the agent's dependency tree small; it answers one request per
//! connection and closes it.
use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
};

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
};

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

/// Binds `addr` and serves until the task is dropped.
pub async fn serve(addr: SocketAddr, expo: Exposition) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                continue;
            };
            let expo = expo.clone();
            tokio::spawn(async move {
                // Read until the end of the request head (or 8 KiB, or 5 s):
                // clients may send the request line in several segments.
                let mut buf = vec![0u8; 8192];
                let mut n = 0;
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
                while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    match tokio::time::timeout_at(deadline, sock.read(&mut buf[n..])).await {
                        Ok(Ok(0)) | Err(_) => break,
                        Ok(Ok(k)) => n += k,
                        Ok(Err(_)) => return,
                    }
                }
                let req = String::from_utf8_lossy(&buf[..n]);
                let path = req
                    .lines()
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .unwrap_or("/");
                let (status, ctype, body) = match path {
                    "/metrics" => ("200 OK", "text/plain; version=0.0.4", expo.render()),
                    "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
                    "/readyz" if expo.ready.load(Ordering::Relaxed) => {
                        ("200 OK", "text/plain", "ready\n".to_string())
                    }
                    "/readyz" => (
                        "503 Service Unavailable",
                        "text/plain",
                        "not ready\n".to_string(),
                    ),
                    _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
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
                for part in ["GET ", path, " HTTP/1.1\r\n", "Host: x\r\n", "\r\n"] {
                    s.write_all(part.as_bytes()).await.unwrap();
                    s.flush().await.unwrap();
                }
            } else {
                s.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
                    .await
                    .unwrap();
            }
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let m = get("/metrics", true).await;
        assert!(m.starts_with("HTTP/1.1 200 OK\r\n"), "{m}");
        assert!(m.ends_with("faultline_test_metric 42\n"), "{m}");
        assert!(get("/readyz", false).await.starts_with("HTTP/1.1 503"));
        expo.set_ready(true);
        assert!(get("/readyz", true).await.starts_with("HTTP/1.1 200"));
        assert!(get("/healthz", false).await.ends_with("ok\n"));
        assert!(get("/other", false).await.starts_with("HTTP/1.1 404"));
    }
}
