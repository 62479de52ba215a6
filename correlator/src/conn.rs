//! The gRPC listener's connection limits (`[detect.limits]`): the workspace's
//! one implementation, [`proto::listen`], which the web UI, `/metrics` and
//! the collector's OTLP receivers use too. A client must send its first 24
//! bytes (the HTTP/2 preface or a TLS ClientHello) within
//! `handshake_timeout_s`; a connection with no authenticated stream open for
//! `idle_connection_timeout_s` is closed; at `max_connections` or
//! `max_connections_per_peer` a new connection displaces the longest-idle one,
//! and is refused only when every connection has a stream open.
pub use proto::listen::{incoming, ActivityLayer, Limits as ConnLimits, Listener};

use crate::limits::LimitsConfig;

/// The HTTP/2 client preface (and any TLS ClientHello) is at least 24 bytes.
const PREFACE: usize = 24;

/// The ingest/subscription listener (metrics label `listener="grpc"`),
/// within the connection keys of `[detect.limits]`.
pub fn grpc(l: &LimitsConfig) -> Listener {
    Listener::new("grpc", limits(l), PREFACE)
}

/// The connection part of `[detect.limits]`.
pub fn limits(l: &LimitsConfig) -> ConnLimits {
    let idle = proto::listen::seconds(l.idle_connection_timeout_s);
    ConnLimits {
        max_connections: l.max_connections,
        max_connections_per_peer: l.max_connections_per_peer,
        handshake_timeout: proto::listen::seconds(l.handshake_timeout_s),
        idle_timeout: idle,
        write_timeout: idle,
    }
}
