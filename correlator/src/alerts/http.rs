//! A minimal HTTP/1.1 client over hyper (already in the tree through tonic)
//! for plain `http://` endpoints on trusted networks: Alertmanager here, a
//! WebDriver server in the tests.
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
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| io(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, auth.as_str());
    if body.is_some() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| io(&e))?;
    let resp = sender.send_request(req).await.map_err(|e| io(&e))?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| io(&e))?
        .to_bytes();
    Ok((status, bytes.to_vec()))
}
