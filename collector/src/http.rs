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
                let mut buf = [0u8; 2048];
                let n = match tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    sock.read(&mut buf),
                )
                .await
                {
                    Ok(Ok(n)) => n,
                    _ => return,
                };
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
