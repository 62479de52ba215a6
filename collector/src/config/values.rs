//! Values the configuration and the flags share a reading of: seconds
//! within a range, listen addresses.
use std::{net::SocketAddr, time::Duration};

use super::error::SecondsError;

/// Shortest window: below it the window timer would spin.
pub const WINDOW_MIN_SECS: f64 = 0.01;
/// Longest window: an hour.
pub const WINDOW_MAX_SECS: f64 = 3600.0;
/// Longest `--duration`: ten years.
pub const DURATION_MAX_SECS: f64 = 10.0 * 365.0 * 86400.0;

/// A number of seconds within `[min, max]` as a `Duration` (NaN, infinities
/// and out-of-range values are errors, never a panic).
pub fn seconds(v: f64, min: f64, max: f64) -> Result<Duration, SecondsError> {
    if !(v.is_finite() && v >= min && v <= max) {
        return Err(SecondsError::OutOfRange { min, max, got: v });
    }
    Duration::try_from_secs_f64(v)
        .map_err(|source| SecondsError::Unrepresentable { got: v, source })
}

/// `--duration SECONDS` (clap value parser): 0 up to ten years.
pub fn duration_arg(s: &str) -> Result<Duration, SecondsError> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| SecondsError::NotANumber(s.to_string()))?;
    seconds(v, 0.0, DURATION_MAX_SECS)
}

/// A listen address: `HOST:PORT`, or `:PORT` for every interface (as
/// node_exporter's `--web.listen-address=:9100`).
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, std::net::AddrParseError> {
    match s.strip_prefix(':') {
        Some(port) if !port.contains(':') => format!("0.0.0.0:{port}").parse(),
        _ => s.parse(),
    }
}
