//! The file itself: exporter-toolkit's keys, parsed strictly. A key this
//! server does not know is refused by name (serde's `unknown field`); a key
//! it knows but does not implement is refused by [`WebConfigFile::check`]
//! with the reason, never ignored.
use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole file (docs/web.md, "Web config file").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfigFile {
    #[serde(default)]
    pub tls_server_config: Option<TlsServerConfig>,
    #[serde(default)]
    pub http_server_config: Option<HttpServerConfig>,
    /// User name → bcrypt hash.
    #[serde(default)]
    pub basic_auth_users: Option<BTreeMap<String, String>>,
    /// exporter-toolkit's request rate limit: not implemented here.
    #[serde(default)]
    pub rate_limit: Option<serde_yaml_ng::Value>,
}

/// `tls_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    pub cert: Option<String>,
    pub key: Option<String>,
    pub client_ca: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub client_auth_type: Option<String>,
    pub client_ca_file: Option<String>,
    pub client_allowed_sans: Option<Vec<String>>,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    pub cipher_suites: Option<Vec<String>>,
    pub prefer_server_cipher_suites: Option<bool>,
    pub curve_preferences: Option<Vec<String>>,
}

/// `http_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    pub http2: Option<bool>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// A key this server knows but cannot honour, or a value out of its range:
/// `(key, why)`.
pub type Refusal = (String, String);

/// The response headers exporter-toolkit allows, with the values it
/// accepts (`None`: any non-empty value).
const HEADERS: [(&str, Option<&[&str]>); 5] = [
    ("Content-Security-Policy", None),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-XSS-Protection", None),
    ("Strict-Transport-Security", None),
];

impl WebConfigFile {
    /// The first key this server refuses, and why.
    pub fn check(&self) -> Option<Refusal> {
        let refuse = |k: &str, why: &str| Some((k.to_string(), why.to_string()));
        if self.rate_limit.is_some() {
            return refuse(
                "rate_limit",
                "not supported by faultline (connections are capped by [web.limits] / the listener's limits instead); remove it",
            );
        }
        if let Some(h) = &self.http_server_config {
            if h.http2 == Some(true) {
                return refuse(
                    "http_server_config.http2",
                    "faultline serves HTTP/1.1 only (clients negotiate it over TLS); remove the key or set it to false",
                );
            }
            for (name, value) in &h.headers {
                let Some((_, allowed)) = HEADERS.iter().find(|(n, _)| n == name) else {
                    return refuse(
                        &format!("http_server_config.headers.{name}"),
                        "not a header exporter-toolkit allows (Content-Security-Policy, X-Frame-Options, X-Content-Type-Options, X-XSS-Protection, Strict-Transport-Security)",
                    );
                };
                let ok = match allowed {
                    None => !value.is_empty(),
                    Some(vals) => vals.iter().any(|v| v.eq_ignore_ascii_case(value)),
                };
                if !ok || axum::http::HeaderValue::from_str(value).is_err() {
                    let why = match allowed {
                        None => "must be a non-empty header value".to_string(),
                        Some(vals) => format!("must be one of {}", vals.join(", ")),
                    };
                    return Some((format!("http_server_config.headers.{name}"), why));
                }
            }
        }
        let t = self.tls_server_config.as_ref()?;
        if t.client_allowed_sans
            .as_ref()
            .is_some_and(|v| !v.is_empty())
        {
            return refuse(
                "tls_server_config.client_allowed_sans",
                "not supported by faultline: issue the scrapers' certificates from a CA of their own (client_ca_file) instead",
            );
        }
        if t.cipher_suites.as_ref().is_some_and(|v| !v.is_empty()) {
            return refuse(
                "tls_server_config.cipher_suites",
                "not supported by faultline: rustls offers only its safe default suites; remove the key",
            );
        }
        if t.curve_preferences.as_ref().is_some_and(|v| !v.is_empty()) {
            return refuse(
                "tls_server_config.curve_preferences",
                "not supported by faultline: rustls offers only its safe default groups; remove the key",
            );
        }
        None
    }
}
