//! Who may read the web UI (docs/web.md):
//!
//! * the `Host` header must name this listener's own address (the one the
//!   client connected to), a loopback address, `localhost`, or a name in
//!   `[web] allowed_hosts`: a DNS-rebinding page (its own name resolving to
//!   this address) gets 403, not `/api/open`;
//! * a client beyond loopback needs the viewer token of `[web] token_file`
//!   for the pages and `/api/*` (`Authorization: Bearer TOKEN`, or HTTP
//!   Basic with the token as the password, which a browser asks for; the
//!   operator token is accepted too): without a token file, such clients get
//!   401 saying so;
//! * `/healthz` and `/metrics` are open to probes and scrapers (`/healthz`
//!   whatever its `Host`);
//! * with a web config file's `basic_auth_users` (webconfig, outside this
//!   guard), every request but `/healthz` needs a user's password or a
//!   token above; a request a user's password admitted counts as a viewer
//!   here (the Host check still applies).
//!
//! Refusals are counted in `faultline_web_refused_total{reason}` (`host`,
//! `token`).
use std::{net::IpAddr, sync::Arc};

use axum::{
    extract::{Request, State},
    http::{header, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use proto::listen::Addrs;

/// The guard's settings.
#[derive(Clone, Default)]
pub struct Guard {
    /// Lower-case names without a trailing dot.
    allowed_hosts: Arc<Vec<String>>,
    viewer: Option<Arc<str>>,
    acks: Option<Arc<crate::ack::Acks>>,
}

impl Guard {
    pub fn new(
        allowed_hosts: &[String],
        viewer: Option<String>,
        acks: Option<Arc<crate::ack::Acks>>,
    ) -> Self {
        Self {
            allowed_hosts: Arc::new(allowed_hosts.iter().map(|h| normal(h)).collect()),
            viewer: viewer.map(Arc::from),
            acks,
        }
    }

    /// Whether `host` (a `Host` header) names this server, reached at `local`.
    fn host_ok(&self, host: &str, local: Option<IpAddr>) -> bool {
        let name = host_part(host);
        if let Ok(ip) = name.parse::<IpAddr>() {
            let ip = ip.to_canonical();
            return ip.is_loopback() || Some(ip) == local;
        }
        let name = normal(name);
        name == "localhost" || name.ends_with(".localhost") || self.allowed_hosts.contains(&name)
    }

    /// Whether `auth` (an `Authorization` header) carries the viewer or the
    /// operator token.
    pub(super) fn token_ok(&self, auth: Option<&str>) -> bool {
        let Some(auth) = auth else {
            return false;
        };
        if let Some(v) = &self.viewer {
            let given = match auth.strip_prefix("Basic ") {
                Some(b64) => basic_password(b64.trim()),
                None => auth.strip_prefix("Bearer ").map(|t| t.trim().to_string()),
            };
            if given.is_some_and(|g| constant_eq(g.as_bytes(), v.as_bytes())) {
                return true;
            }
        }
        self.acks
            .as_ref()
            .is_some_and(|a| a.authorize(Some(auth)).is_ok())
    }
}

fn normal(h: &str) -> String {
    h.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The host of a `Host` header value (`name`, `name:port`, `[v6]:port`).
fn host_part(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The password of an HTTP Basic credential (`user:password`, base64).
fn basic_password(b64: &str) -> Option<String> {
    let bytes = base64_decode(b64)?;
    let text = String::from_utf8(bytes).ok()?;
    text.split_once(':').map(|(_, p)| p.to_string())
}

/// Standard base64 (with or without padding); `None` on anything else.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    if s.len() > 8192 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn refuse(reason: &'static str, status: StatusCode, message: String) -> Response {
    metrics::counter!(crate::telemetry::WEB_REFUSED.name, "reason" => reason).increment(1);
    let mut r = (status, axum::Json(serde_json::json!({ "error": message }))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Basic realm=\"faultline\", charset=\"UTF-8\""),
        );
    }
    r
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub async fn check(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if path == "/healthz" {
        return next.run(req).await;
    }
    let addrs = req.extensions().get::<Addrs>().copied();
    // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
    let local = addrs.and_then(|a| a.local).map(|a| a.ip().to_canonical());
    if let Some(host) = req.headers().get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !g.host_ok(host, local) {
            let shown: String = host
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(100)
                .collect();
            return refuse(
                "host",
                StatusCode::FORBIDDEN,
                format!("Host {shown:?} is not this server's: use its address, or add the name to [web] allowed_hosts (docs/web.md)"),
            );
        }
    }
    // Requests not from this machine's loopback need the viewer token (or
    // a web config file's basic auth user).
    let remote = addrs.is_some_and(|a| !a.peer.ip().to_canonical().is_loopback());
    let user = req.extensions().get::<webconfig::Authenticated>().is_some();
    if remote && path != "/metrics" && !user {
        let auth = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if !g.token_ok(auth) {
            let message = if g.viewer.is_none() {
                "this web UI is reachable beyond loopback: its pages and /api need the viewer token of [web] token_file, which is not set (docs/web.md); /healthz and /metrics are open"
            } else {
                "missing or wrong viewer token: send `Authorization: Bearer <token>` (or HTTP Basic with the token as the password) with the token in [web] token_file"
            };
            return refuse("token", StatusCode::UNAUTHORIZED, message.into());
        }
    }
    next.run(req).await
}
