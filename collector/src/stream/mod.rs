//! Streaming windows to the correlator: every window first goes to a bounded
//! on-disk spool, and a sender task streams the spool over gRPC (client
//! streaming; each instance's windows in order, the running instance's
//! ahead of earlier runs' backlog, `call.rs`), reconnecting with capped
//! exponential backoff and jitter. Windows the correlator refuses as from
//! the future are held aside and retried on a backoff (`held.rs`). After
//! each (re)connect the correlator's `Resume` says what it already has, so
//! the spool is pruned and resent from there; the correlator drops
//! duplicates by sequence number. When the spool is full the oldest
//! windows are dropped and counted (the next window carries the count).
//! A `nats://` endpoint publishes the spool to a NATS JetStream stream
//! instead ([`nats`]), for sharded correlators.
mod backoff;
mod call;
mod held;
pub mod nats;
mod nats_target;
mod order;
pub mod section;
pub mod sender;
pub mod spool;
/// TLS and token credentials for the correlator connection.
pub use proto::client_tls as tls;

pub use backoff::Backoff;
pub use section::{check_endpoint, EndpointError, StreamSection};
pub use sender::{spawn, SenderConfig, SenderStats};
pub use spool::Spool;
