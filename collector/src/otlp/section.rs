//! `[otlp]`: the OTLP metrics receiver's addresses, switches, bounds and the
//! extra metric-name mapping. Documented in `docs/config.md` and `docs/otlp.md`.
use std::{collections::BTreeMap, net::SocketAddr};

use proto::listen::HttpLimitsConfig;
use serde::{Deserialize, Serialize};

use super::names::Signal;

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
            enabled: true,
            grpc_enabled: true,
            grpc_addr: "127.0.0.1:4317".into(),
            http_enabled: true,
            http_addr: "127.0.0.1:4318".into(),
            max_body_bytes: 4 << 20,
            max_points_per_request: 10_000,
            max_series_per_window: 2048,
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
            ("otlp.grpc_addr", &self.grpc_addr),
            ("otlp.http_addr", &self.http_addr),
        ] {
            addr.parse::<SocketAddr>()
                .map_err(|e| SectionError::Address {
                    key,
                    addr: addr.clone(),
                    reason: e.to_string(),
                })?;
        }
        for (key, v, min) in [
            ("otlp.max_body_bytes", self.max_body_bytes, 1024),
            (
                "otlp.max_points_per_request",
                self.max_points_per_request,
                1,
            ),
            ("otlp.max_series_per_window", self.max_series_per_window, 1),
        ] {
            if v < min {
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
