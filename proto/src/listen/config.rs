//! A listener's limits, and the config keys of an HTTP/1 listener's.
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The limits of one listener.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_peer: usize,
    /// The first [`Listener::new`](super::Listener::new)`(…, first_bytes)`
    /// bytes must arrive within this.
    pub handshake_timeout: Duration,
    /// A connection with nothing in progress for this long is closed.
    pub idle_timeout: Duration,
    /// A write that makes no progress for this long (a client that does
    /// not read) closes the connection.
    pub write_timeout: Duration,
}

/// The connection limits of an HTTP/1 listener as config keys (`[web.limits]`,
/// `[otlp.http_limits]`; docs/config.md).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HttpLimitsConfig {
    /// Connections in total; past it the longest-idle one is closed, or the
    /// new one when all are busy.
    pub max_connections: usize,
    /// Connections per remote address (same rule).
    pub max_connections_per_peer: usize,
    /// Seconds a new connection has to send its first byte.
    pub handshake_timeout_s: f64,
    /// Seconds a request's header may take (from its first byte, or from
    /// the end of the previous request on a kept-alive connection).
    pub header_timeout_s: f64,
    /// Seconds a request's body may take.
    pub body_timeout_s: f64,
    /// Seconds a connection may stay open with no request in progress;
    /// also the longest a response may wait on a client that does not read.
    pub idle_timeout_s: f64,
}

impl Default for HttpLimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_connections_per_peer: 64,
            handshake_timeout_s: 5.0,
            header_timeout_s: 10.0,
            body_timeout_s: 10.0,
            idle_timeout_s: 30.0,
        }
    }
}

/// Largest connection count accepted in a config (far above any file limit).
pub const MAX_CONNECTIONS: usize = 1 << 20;
/// Longest timeout accepted in a config, seconds.
pub const MAX_TIMEOUT_S: f64 = 3600.0;

/// Whether `v` is a usable timeout in seconds: (0, [`MAX_TIMEOUT_S`]].
pub fn valid_timeout(v: f64) -> bool {
    v > 0.0 && v <= MAX_TIMEOUT_S
}

/// Whether `v` is a usable connection count: 1..=[`MAX_CONNECTIONS`].
pub fn valid_count(v: usize) -> bool {
    (1..=MAX_CONNECTIONS).contains(&v)
}

impl HttpLimitsConfig {
    /// The first key out of range (without the table's prefix), and why.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        for (key, v) in [
            ("max_connections", self.max_connections),
            ("max_connections_per_peer", self.max_connections_per_peer),
        ] {
            if !valid_count(v) {
                return Some((key, "must be within 1..=1048576"));
            }
        }
        for (key, v) in [
            ("handshake_timeout_s", self.handshake_timeout_s),
            ("header_timeout_s", self.header_timeout_s),
            ("body_timeout_s", self.body_timeout_s),
            ("idle_timeout_s", self.idle_timeout_s),
        ] {
            if !valid_timeout(v) {
                return Some((key, "must be a number of seconds in (0, 3600]"));
            }
        }
        None
    }

    /// The accept-side limits.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            handshake_timeout: seconds(self.handshake_timeout_s),
            idle_timeout: seconds(self.idle_timeout_s),
            write_timeout: seconds(self.idle_timeout_s),
        }
    }

    /// The HTTP/1 timeouts.
    pub fn http(&self) -> HttpTimeouts {
        HttpTimeouts {
            header: seconds(self.header_timeout_s),
            body: seconds(self.body_timeout_s),
        }
    }
}

/// Seconds as a duration, clamped to what [`valid_timeout`] admits (an
/// unvalidated NaN or infinity must not panic).
pub fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_nan() {
        1.0
    } else {
        s.clamp(0.001, MAX_TIMEOUT_S)
    })
}

/// HTTP/1 request timeouts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HttpTimeouts {
    pub header: Duration,
    /// Not applied here: a handler reading a body bounds it with this.
    pub body: Duration,
}
