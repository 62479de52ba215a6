//! A minimal HTTP/1.1 client over hyper (already in the tree through tonic)
//! for plain `http://` endpoints on trusted networks: Alertmanager here, a
//! WebDriver server in the tests. [`exchange`] speaks it over any stream
//! (the Kubernetes API client, `crate::kube`, over TLS).
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("bad URL {0}: give http://host:port/path")]
    Url(String),
    #[error("{url}: {detail}")]
    Io { url: String, detail: String },
    #[error("{0}: no answer within the timeout")]
    Timeout(String),
}

/// Sends one request (`body` as JSON when given) and returns the status
/// and the body.
pub async fn request(
    method: &str,
    url: &str,
    body: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), HttpError> {
    tokio::time::timeout(timeout, send(method, url, body))
        .await
        .map_err(|_| HttpError::Timeout(url.to_string()))?
}

async fn send(method: &str, url: &str, body: Option<Vec<u8>>) -> Result<(u16, Vec<u8>), HttpError> {
    let uri: hyper::Uri = url.parse().map_err(|_| HttpError::Url(url.to_string()))?;
    if uri.scheme_str() != Some("http") {
        return Err(HttpError::Url(url.to_string()));
    }
    let (Some(host), Some(auth)) = (uri.host(), uri.authority().cloned()) else {
        return Err(HttpError::Url(url.to_string()));
    };
    let io = |e: &dyn std::fmt::Display| HttpError::Io {
        url: url.to_string(),
        detail: e.to_string(),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((host, uri.port_u16().unwrap_or(80)))
        .await
        .map_err(|e| io(&e))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    exchange(
        stream,
        method,
        auth.as_str(),
        path,
        &[],
        body,
        MAX_REPLY_BYTES,
    )
    .await
    .map_err(|detail| HttpError::Io {
        url: url.to_string(),
        detail,
    })
}

/// Largest reply body read.
pub const MAX_REPLY_BYTES: usize = 4 << 20;

/// One request over `stream` (`body` as JSON when given, `headers` added):
/// the status and at most `max_reply` bytes of reply body.
pub async fn exchange<S>(
    stream: S,
    method: &str,
    authority: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
    max_reply: usize,
) -> Result<(u16, Vec<u8>), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|x| e(&x))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority);
    let typed = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
    if body.is_some() && !typed {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|x| e(&x))?;
    let resp = sender.send_request(req).await.map_err(|x| e(&x))?;
    let status = resp.status().as_u16();
    let bytes = http_body_util::Limited::new(resp.into_body(), max_reply)
        .collect()
        .await
        .map_err(|x| format!("reading the reply: {x}"))?
        .to_bytes();
    Ok((status, bytes.to_vec()))
}
