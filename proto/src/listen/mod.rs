//! Accepting connections within limits, for every listener of the collector
//! and the correlator (gRPC ingest and subscriptions, the web UI, `/metrics`,
//! OTLP): at most `max_connections` in total and `max_connections_per_peer`
//! per remote address, a client must send its first bytes within
//! `handshake_timeout`, and a connection with no request (HTTP/1) or
//! authenticated stream (HTTP/2) in progress is closed after
//! `idle_timeout` — an HTTP/2 client that sends the preface and answers
//! PINGs but never opens a stream holds its slot for that long at most.
//!
//! At a limit, a new connection displaces the connection that has been idle
//! longest (for at least [`EVICT_AFTER`]) instead of being refused: slow or
//! idle connections cannot keep a real client out, even one from the same
//! address (every local process is 127.0.0.1). Only when every connection is
//! busy is the new one closed at accept. Every refusal and close is counted:
//! `faultline_connections_refused_total{listener,reason}` (`total`,
//! `per_peer`) and `faultline_connections_closed_total{listener,reason}`
//! (`handshake_timeout`, `idle`, `evicted`, `write_timeout`,
//! `header_timeout`, `body_timeout`, and `evicted_stream`: a connection
//! holding a long-lived [`Yields`] response, such as server-sent events,
//! displaced at a limit; such connections are never idle-closed, never
//! count as busy, and go longest-running first).
//!
//! A gRPC server may also tie each connection to the authenticated identity
//! of its first request ([`Listener::own`]), capping connections per
//! identity as well as per address.
//!
//! [`incoming`] feeds a tonic server (with [`ActivityLayer`] inside its
//! authentication layer, so that only authenticated streams count as
//! activity); [`serve_http1`] serves an HTTP/1 handler (web UI, OTLP/HTTP)
//! with a header read timeout as well.
mod activity;
mod config;
mod conn;
mod http1;
mod table;

pub use activity::{hold, Activity, ActivityLayer, Hold};
pub use config::{
    seconds, valid_count, valid_timeout, HttpLimitsConfig, HttpTimeouts, Limits, MAX_CONNECTIONS,
    MAX_TIMEOUT_S,
};
pub use conn::{incoming, Conn};
pub use http1::{read_body, serve_http1, serve_http1_over, Addrs, BodyError};
pub use table::{Busy, Listener, Yields, EVICT_AFTER};
