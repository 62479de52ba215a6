//! The HTTP endpoints of both binaries (the collector's `/metrics`, the
//! correlator's web UI and `--metrics-addr`) behind a web config file in
//! Prometheus exporter-toolkit's format, as node_exporter's
//! `--web.config.file`: `tls_server_config` (server certificate, client
//! certificates verified against a CA, TLS versions),
//! `http_server_config.headers`, `basic_auth_users` (bcrypt). The file is
//! read once at start; every key is checked then, and anything this server
//! does not implement is refused by name (docs/web.md, "Web config file").
mod auth;
mod file;
mod reload;
mod tls;

use std::{
    future::Future,
    path::{Path, PathBuf},
    sync::Arc,
};

use axum::{
    http::{HeaderName, HeaderValue},
    Router,
};
use proto::listen::{HttpTimeouts, Listener};
use proto::metric::Family;
use tokio::net::TcpListener;
use tokio_rustls::rustls;

pub use auth::{Authenticated, BasicAuth, BearerCheck};
pub use file::WebConfigFile;

/// Largest web config file read.
const MAX_FILE: u64 = 1 << 20;

/// One key's problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub why: String,
}

impl Problem {
    pub fn new(key: impl Into<String>, why: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            why: why.into(),
        }
    }
}

/// Why a web config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("web config file {path}: {why}")]
    Read { path: PathBuf, why: String },
    #[error("web config file {path}: {why}")]
    Parse { path: PathBuf, why: String },
    #[error("web config file {path}: {key}: {why}")]
    Key {
        path: PathBuf,
        key: String,
        why: String,
    },
}

/// A loaded web config file.
#[derive(Clone)]
pub struct Web {
    path: PathBuf,
    tls: Option<Arc<rustls::ServerConfig>>,
    auth: Option<Arc<BasicAuth>>,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("basic_auth", &self.auth.is_some())
            .field("headers", &self.headers.len())
            .finish()
    }
}

impl Web {
    /// Reads and checks `path` (certificates and keys included).
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let bytes =
            proto::bounded_read::read(path, MAX_FILE).map_err(|e| WebConfigError::Read {
                path: path.to_path_buf(),
                why: e.to_string(),
            })?;
        let text = String::from_utf8(bytes).map_err(|_| WebConfigError::Parse {
            path: path.to_path_buf(),
            why: "not UTF-8 text".into(),
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, dir)
            .map_err(|e| match e {
                Ok(p) => WebConfigError::Key {
                    path: path.to_path_buf(),
                    key: p.key,
                    why: p.why,
                },
                Err(why) => WebConfigError::Parse {
                    path: path.to_path_buf(),
                    why,
                },
            })
            .map(|mut w| {
                w.path = path.to_path_buf();
                w
            })
    }

    /// `text` with relative file names under `dir`: a key's problem, or a
    /// YAML error (which names the key and line).
    fn parse(text: &str, dir: &Path) -> Result<Self, Result<Problem, String>> {
        let f: WebConfigFile = if text.trim().is_empty() {
            WebConfigFile::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| Err(e.to_string()))?
        };
        if let Some((key, why)) = f.check() {
            return Err(Ok(Problem::new(key, why)));
        }
        let tls = match &f.tls_server_config {
            Some(t) => tls::server_config(t, dir).map_err(Ok)?,
            None => None,
        };
        let auth = match f.basic_auth_users {
            Some(u) if !u.is_empty() => Some(Arc::new(BasicAuth::new(u).map_err(Ok)?)),
            _ => None,
        };
        let mut headers = Vec::new();
        for (name, value) in f.http_server_config.map(|h| h.headers).unwrap_or_default() {
            // check() accepted both already.
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                headers.push((n, v));
            }
        }
        Ok(Self {
            path: PathBuf::new(),
            tls,
            auth,
            headers: Arc::new(headers),
        })
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// Whether `basic_auth_users` is set.
    pub fn basic_auth(&self) -> bool {
        self.auth.is_some()
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How a router is wrapped: its listener's name (the metric's `listener`),
/// the paths open without credentials, and an optional bearer check.
pub struct Wrap {
    pub listener: &'static str,
    pub open: &'static [&'static str],
    pub bearer: Option<BearerCheck>,
}

/// `app` behind `web`'s basic auth and headers (unchanged without `web`).
pub fn wrap(app: Router, web: Option<&Web>, w: Wrap) -> Router {
    let Some(web) = web else {
        return app;
    };
    describe();
    let gate = auth::Gate {
        auth: web.auth.clone(),
        headers: web.headers.clone(),
        listener: w.listener,
        open: w.open,
        bearer: w.bearer,
    };
    app.layer(axum::middleware::from_fn_with_state(gate, auth::gate))
}

/// Serves `app` on `listener` within `limits` ([`proto::listen`]), over TLS
/// when `web` has it, until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    limits: Listener,
    timeouts: HttpTimeouts,
    web: Option<&Web>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    use tonic::codegen::Service as _;
    let handler = move |req| {
        let mut app = app.clone();
        async move {
            match app.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        }
    };
    match web.and_then(|w| w.tls.clone()) {
        None => proto::listen::serve_http1(listener, limits, timeouts, handler, shutdown).await,
        Some(cfg) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
            let upgrade = move |c| acceptor.clone().accept(c);
            proto::listen::serve_http1_over(listener, limits, timeouts, upgrade, handler, shutdown)
                .await;
        }
    }
}

/// Requests refused by `basic_auth_users` (emitted in `auth`).
pub const AUTH_FAILURES: Family = Family::counter(
    "faultline_web_auth_failures_total",
    &["listener", "reason"],
    "Requests refused 401 by the web config file's basic_auth_users (listener; reason: missing, malformed, wrong)",
);
/// Renewed TLS files that did not load (emitted in `reload`).
pub const TLS_RELOAD_ERRORS: Family = Family::counter(
    "faultline_web_tls_reload_errors_total",
    &[],
    "Changed TLS certificate or key files of the web config file that did not load (the previous pair is still served)",
);

/// HELP text of this crate's metrics.
pub fn describe() {
    proto::metric::describe_all(&[&AUTH_FAILURES, &TLS_RELOAD_ERRORS]);
}

#[cfg(test)]
mod tests;
