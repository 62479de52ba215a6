//! `[otlp]`: the OTLP metrics receiver's addresses, switches, bounds and the
//! extra metric-name mapping. Documented in `docs/config.md` and `docs/otlp.md`.
//! Each key with a bound or a flag is declared once below ([`Key`]: the
//! default, [`OtlpSection::validate`] and the flags in `main.rs` read it).
use std::{collections::BTreeMap, net::SocketAddr};

use proto::{
    config_key::{Declared, Key},
    listen::HttpLimitsConfig,
};
use serde::{Deserialize, Serialize};

use super::names::Signal;

/// `--no-otlp`: both receivers.
pub const ENABLED: Key<bool> = Key {
    flag: Some("no-otlp"),
    ..Key::new(
        "otlp.enabled",
        true,
        "Disable the OTLP metrics receiver, gRPC and HTTP",
    )
};
/// `--no-otlp-grpc`.
pub const GRPC_ENABLED: Key<bool> = Key {
    flag: Some("no-otlp-grpc"),
    ..Key::new("otlp.grpc_enabled", true, "Disable the OTLP gRPC receiver")
};
/// `--otlp-grpc-addr HOST:PORT`.
pub const GRPC_ADDR: Key<&str> = Key {
    flag: Some("otlp-grpc-addr"),
    ..Key::new(
        "otlp.grpc_addr",
        "127.0.0.1:4317",
        "OTLP gRPC receiver address",
    )
};
/// `--no-otlp-http`.
pub const HTTP_ENABLED: Key<bool> = Key {
    flag: Some("no-otlp-http"),
    ..Key::new(
        "otlp.http_enabled",
        true,
        "Disable the OTLP HTTP/protobuf receiver",
    )
};
/// `--otlp-http-addr HOST:PORT`.
pub const HTTP_ADDR: Key<&str> = Key {
    flag: Some("otlp-http-addr"),
    ..Key::new(
        "otlp.http_addr",
        "127.0.0.1:4318",
        "OTLP HTTP/protobuf receiver address (`POST /v1/metrics`)",
    )
};
/// Largest request body, bytes.
pub const MAX_BODY_BYTES: Key<usize> = Key {
    min: Some(1024),
    ..Key::new(
        "otlp.max_body_bytes",
        4 << 20,
        "Largest request body accepted, bytes",
    )
};
/// Data points read from one request.
pub const MAX_POINTS_PER_REQUEST: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "otlp.max_points_per_request",
        10_000,
        "Data points read from one request",
    )
};
/// Distinct series aggregated per window.
pub const MAX_SERIES_PER_WINDOW: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "otlp.max_series_per_window",
        2048,
        "Distinct series aggregated per window",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 8] = [
    ENABLED.declared(),
    GRPC_ENABLED.declared(),
    GRPC_ADDR.declared(),
    HTTP_ENABLED.declared(),
    HTTP_ADDR.declared(),
    MAX_BODY_BYTES.declared(),
    MAX_POINTS_PER_REQUEST.declared(),
    MAX_SERIES_PER_WINDOW.declared(),
];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSection {
    /// Both receivers; `false` turns the whole OTLP layer off.
    pub enabled: bool,
    /// gRPC `MetricsService/Export`.
    pub grpc_enabled: bool,
    pub grpc_addr: String,
    /// HTTP `POST /v1/metrics` (protobuf or JSON, plain or gzip).
    pub http_enabled: bool,
    pub http_addr: String,
    /// Largest request body accepted (bytes): gRPC `ResourceExhausted`, HTTP 413 past it.
    pub max_body_bytes: usize,
    /// Data points read from one request; the rest are dropped (counted).
    pub max_points_per_request: usize,
    /// Distinct series (signal × source × model) aggregated per window.
    pub max_series_per_window: usize,
    /// Extra metric name → signal mapping, on top of the defaults (and winning over them).
    pub names: BTreeMap<String, String>,
    /// `[otlp.limits]`: connections and timeouts of each receiver's listener.
    pub limits: HttpLimitsConfig,
}

impl Default for OtlpSection {
    fn default() -> Self {
        Self {
            enabled: ENABLED.default,
            grpc_enabled: GRPC_ENABLED.default,
            grpc_addr: GRPC_ADDR.default.into(),
            http_enabled: HTTP_ENABLED.default,
            http_addr: HTTP_ADDR.default.into(),
            max_body_bytes: MAX_BODY_BYTES.default,
            max_points_per_request: MAX_POINTS_PER_REQUEST.default,
            max_series_per_window: MAX_SERIES_PER_WINDOW.default,
            names: BTreeMap::new(),
            limits: HttpLimitsConfig::default(),
        }
    }
}

/// An `[otlp]` value that cannot be used; [`SectionError::key`] names the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SectionError {
    #[error("{addr:?} is not HOST:PORT ({reason})")]
    Address {
        key: &'static str,
        addr: String,
        reason: String,
    },
    #[error("must be at least {min}, got {got}")]
    TooSmall {
        key: &'static str,
        min: usize,
        got: usize,
    },
    #[error("{limit}: {why}")]
    Limits { limit: &'static str, why: String },
    #[error("{name:?} maps to unknown signal {signal:?} (one of: {})", Signal::ALL.map(Signal::as_str).join(", "))]
    UnknownSignal { name: String, signal: String },
}

impl SectionError {
    /// The configuration key whose value is wrong.
    pub fn key(&self) -> &'static str {
        match self {
            Self::Address { key, .. } | Self::TooSmall { key, .. } => key,
            Self::Limits { .. } => "otlp.limits",
            Self::UnknownSignal { .. } => "otlp.names",
        }
    }
}

impl OtlpSection {
    pub fn validate(&self) -> Result<(), SectionError> {
        for (key, addr) in [
            (GRPC_ADDR.path, &self.grpc_addr),
            (HTTP_ADDR.path, &self.http_addr),
        ] {
            addr.parse::<SocketAddr>()
                .map_err(|e| SectionError::Address {
                    key,
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
        }
        for (k, v) in [
            (MAX_BODY_BYTES, self.max_body_bytes),
            (MAX_POINTS_PER_REQUEST, self.max_points_per_request),
            (MAX_SERIES_PER_WINDOW, self.max_series_per_window),
        ] {
            if !k.contains(v) {
                let (key, min) = (k.path, k.min.unwrap_or_default());
                return Err(SectionError::TooSmall { key, min, got: v });
            }
        }
        if let Some((limit, why)) = self.limits.invalid() {
            return Err(SectionError::Limits {
                limit,
                why: why.to_string(),
            });
        }
        for (name, signal) in &self.names {
            if Signal::parse(signal).is_none() {
                return Err(SectionError::UnknownSignal {
                    name: name.clone(),
                    signal: signal.clone(),
                });
            }
        }
        Ok(())
    }
}
