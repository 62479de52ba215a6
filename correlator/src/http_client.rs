//! A minimal HTTP/1.1 client over hyper (already in the tree through tonic):
//! Alertmanager (`http://`, or `https://` with a CA file and an optional
//! client certificate), the Kubernetes API (`crate::kube`, over its own TLS
//! stream through [`exchange`]) and a WebDriver server in the tests.
//! A leaf module: it imports nothing from the rest of the correlator.
use std::{path::Path, sync::Arc, time::Duration};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::{rustls, TlsConnector};

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("bad URL {0}: give http://host:port/path (or https:// with a CA file)")]
    Url(String),
    #[error("{0}: an https:// URL needs a CA file to verify the server (set the CA option)")]
    HttpsWithoutTls(String),
    #[error("{url}: {source}")]
    Io {
        url: String,
        #[source]
        source: ExchangeError,
    },
    #[error("{url}: TLS handshake failed: {detail} (check the CA file, the server's name in its certificate and the client certificate)")]
    Handshake { url: String, detail: String },
    #[error("{0}: no answer within the timeout")]
    Timeout(String),
}

/// Why one exchange over an open stream failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("connecting: {0}")]
    Connect(std::io::Error),
    #[error("HTTP: {}", chain(.0))]
    Http(#[from] hyper::Error),
    #[error("building the request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("reading the reply: {0}")]
    Reply(String),
}

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error(transparent)]
    Files(#[from] proto::client_tls::TlsError),
    #[error("{path}: {why}")]
    Bad { path: String, why: String },
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
}

/// An error with its causes ("connection error: received fatal alert:
/// CertificateRequired"), which hyper keeps out of its own message.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// TLS for `https://` requests: the server is verified against a CA file;
/// a client certificate is presented when given.
#[derive(Clone)]
pub struct Tls(TlsConnector);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// Reads the CA bundle and, when given, the client certificate and key
    /// (PEM files; a wrong file is named in the error).
    pub fn from_files(ca: &Path, client: Option<(&Path, &Path)>) -> Result<Self, TlsSetupError> {
        let bad = |path: &Path, why: String| TlsSetupError::Bad {
            path: path.display().to_string(),
            why,
        };
        let pem = proto::client_tls::read_certificates(ca)?;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&pem) {
            let c = c.map_err(|e| bad(ca, e.to_string()))?;
            roots.add(c).map_err(|e| bad(ca, e.to_string()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let cfg = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain_pem = proto::client_tls::read_certificates(cert)?;
                let chain = CertificateDer::pem_slice_iter(&chain_pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(cert, e.to_string()))?;
                let key_pem = proto::client_tls::read_private_key(key)?;
                let key_der =
                    PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| bad(key, e.to_string()))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| bad(cert, format!("does not match its key: {e}")))?
            }
        };
        Ok(Self(TlsConnector::from(Arc::new(cfg))))
    }

    /// The connector, for callers that open their own stream.
    pub fn connector(&self) -> &TlsConnector {
        &self.0
    }
}

/// Sends one plain-HTTP request (`body` as JSON when given) and returns the
/// status and the body.
pub async fn request(
    method: &str,
    url: &str,
    body: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<(u16, Vec<u8>), HttpError> {
    request_with(method, url, body, timeout, None).await
}

/// [`request`] with extra headers (`authorization`, …).
pub async fn request_with_headers(
    method: &str,
    url: &str,
    body: Option<Vec<u8>>,
    timeout: Duration,
    headers: &[(&str, &str)],
) -> Result<(u16, Vec<u8>), HttpError> {
    tokio::time::timeout(timeout, send(method, url, body, None, headers))
        .await
        .map_err(|_| HttpError::Timeout(url.to_string()))?
}

/// [`request`] for `http://` or, with `tls`, `https://` URLs.
pub async fn request_with(
    method: &str,
    url: &str,
    body: Option<Vec<u8>>,
    timeout: Duration,
    tls: Option<&Tls>,
) -> Result<(u16, Vec<u8>), HttpError> {
    tokio::time::timeout(timeout, send(method, url, body, tls, &[]))
        .await
        .map_err(|_| HttpError::Timeout(url.to_string()))?
}

async fn send(
    method: &str,
    url: &str,
    body: Option<Vec<u8>>,
    tls: Option<&Tls>,
    headers: &[(&str, &str)],
) -> Result<(u16, Vec<u8>), HttpError> {
    let uri: hyper::Uri = url.parse().map_err(|_| HttpError::Url(url.to_string()))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(HttpError::Url(url.to_string())),
    };
    let (Some(host), Some(auth)) = (uri.host(), uri.authority().cloned()) else {
        return Err(HttpError::Url(url.to_string()));
    };
    let io = |source: ExchangeError| HttpError::Io {
        url: url.to_string(),
        source,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| io(ExchangeError::Connect(e)))?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let reply = if https {
        let tls = tls.ok_or_else(|| HttpError::HttpsWithoutTls(url.to_string()))?;
        let name =
            ServerName::try_from(host.to_string()).map_err(|_| HttpError::Url(url.to_string()))?;
        let stream = tls
            .0
            .connect(name, tcp)
            .await
            .map_err(|e| HttpError::Handshake {
                url: url.to_string(),
                detail: e.to_string(),
            })?;
        exchange(
            stream,
            method,
            auth.as_str(),
            path,
            headers,
            body,
            MAX_REPLY_BYTES,
        )
        .await
    } else {
        exchange(
            tcp,
            method,
            auth.as_str(),
            path,
            headers,
            body,
            MAX_REPLY_BYTES,
        )
        .await
    };
    reply.map_err(io)
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
) -> Result<(u16, Vec<u8>), ExchangeError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "HTTP client connection ended with an error");
        }
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
    let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let bytes = http_body_util::Limited::new(resp.into_body(), max_reply)
        .collect()
        .await
        .map_err(|x| ExchangeError::Reply(x.to_string()))?
        .to_bytes();
    Ok((status, bytes.to_vec()))
}
