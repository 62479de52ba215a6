//! `[detect.limits]`: bounds on what the correlator accepts and keeps
//! (docs/security.md). One flat table read by three owners: ingest (the
//! sequence and clock checks, the host bounds), the engine (the per-window
//! caps, the per-host entities, the open incidents) and the gRPC listener
//! (`crate::conn`: connections and timeouts). Every refusal or drop is
//! counted (`faultline_ingest_rejected_total`,
//! `faultline_engine_dropped_total`).
use serde::{Deserialize, Serialize};

use crate::setting::{at_least_one, InvalidSetting};

/// The `[detect.limits]` table.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// A window may be at most this many sequence numbers past its origin's last.
    pub max_seq_jump: u64,
    /// Sequence numbers an origin may skip (windows it says it lost) per
    /// minute of wall-clock time; unused allowance accumulates up to
    /// `max_seq_jump`, so chained jumps cannot move a sequence further
    /// (0 = no budget, only `max_seq_jump` per window).
    pub max_seq_skip_per_min: u64,
    /// Seconds a window's end may lie ahead of the correlator's clock (0 = no check).
    pub max_future_s: f64,
    /// Seconds a window's end may lie behind the correlator's clock (0 = no check).
    pub max_past_s: f64,
    /// Distinct hosts tracked; windows of further hosts are refused.
    pub max_hosts: usize,
    /// Collector runs remembered per host (least recently seen forgotten first).
    pub max_origins_per_host: usize,
    /// Hosts silent this long (seconds) are forgotten by ingest (0 = never).
    pub idle_forget_s: f64,
    /// Distinct jobs judged per window; the rest of the window's job data is dropped.
    pub max_jobs_per_window: usize,
    /// Step samples (ranks) judged per window.
    pub max_ranks_per_window: usize,
    /// IB ports, GPUs and block devices (each) judged per window.
    pub max_entities_per_window: usize,
    /// Events (XIDs, RDMA async events, port state changes) judged per window.
    pub max_events_per_window: usize,
    /// CUDA, verbs, workload, usage and NCCL Inspector rows (each) judged
    /// per window.
    pub max_rows_per_window: usize,
    /// Distinct IB ports, GPUs and block devices (together) remembered per
    /// host; rows naming further new ones are dropped until the host is
    /// forgotten (`idle_forget_s`).
    pub max_entities_per_host: usize,
    /// Open incidents; findings that would open more are dropped.
    pub max_open_incidents: usize,
    /// Open incidents charged to one host (the host whose window raised
    /// them; a `node_lost` to the lost host), so that one host's flood of
    /// findings cannot fill `max_open_incidents` for everyone.
    pub max_open_incidents_per_host: usize,
    /// Client connections in total; further ones are closed at accept.
    pub max_connections: usize,
    /// Client connections per remote address.
    pub max_connections_per_peer: usize,
    /// Concurrent gRPC streams per connection (HTTP/2 SETTINGS).
    pub max_streams_per_connection: u32,
    /// Client connections per authenticated identity (a client
    /// certificate's subject and names, or a token's host), whatever
    /// addresses they come from; at the cap the identity's longest-idle
    /// connection is displaced, else its request is refused.
    pub max_connections_per_identity: usize,
    /// Concurrent gRPC calls (streams) per authenticated identity.
    pub max_streams_per_identity: usize,
    /// Concurrent `Candidates` calls (subscriptions, open-incident reads)
    /// in total: below `max_connections`, so that subscribers can never
    /// hold every slot and collectors always get through.
    pub max_subscriber_streams: usize,
    /// Concurrent `Candidates` calls per authenticated identity.
    pub max_subscriber_streams_per_identity: usize,
    /// Seconds a new connection has to send its first 24 bytes (HTTP/2
    /// preface or TLS ClientHello).
    pub handshake_timeout_s: f64,
    /// Seconds a connection may stay open without an authenticated gRPC
    /// stream in progress: an HTTP/2 client that sends the preface and
    /// answers PINGs but opens no stream is closed after this.
    pub idle_connection_timeout_s: f64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_seq_jump: 1_000_000,
            max_seq_skip_per_min: 6000,
            max_future_s: 120.0,
            max_past_s: 7.0 * 86_400.0,
            max_hosts: 100_000,
            max_origins_per_host: 64,
            idle_forget_s: 86_400.0,
            max_jobs_per_window: 1024,
            max_ranks_per_window: 16_384,
            max_entities_per_window: 1024,
            max_events_per_window: 1024,
            max_rows_per_window: 16_384,
            max_entities_per_host: 4096,
            max_open_incidents: 10_000,
            max_open_incidents_per_host: 256,
            max_connections: 1000,
            max_connections_per_peer: 256,
            max_streams_per_connection: 64,
            max_connections_per_identity: 64,
            max_streams_per_identity: 64,
            max_subscriber_streams: 256,
            max_subscriber_streams_per_identity: 16,
            handshake_timeout_s: 5.0,
            idle_connection_timeout_s: 20.0,
        }
    }
}

impl LimitsConfig {
    /// Checks every value's range; the first bad one is the error.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for (key, v) in [
            ("limits.max_future_s", self.max_future_s),
            ("limits.max_past_s", self.max_past_s),
            ("limits.idle_forget_s", self.idle_forget_s),
        ] {
            if !(v.is_finite() && (0.0..=1e9).contains(&v)) {
                return Err(InvalidSetting::new(
                    key,
                    v,
                    "must be 0 (no check) or a number of seconds up to 1e9",
                ));
            }
        }
        for (key, v) in [
            ("limits.handshake_timeout_s", self.handshake_timeout_s),
            (
                "limits.idle_connection_timeout_s",
                self.idle_connection_timeout_s,
            ),
        ] {
            if !proto::listen::valid_timeout(v) {
                return Err(InvalidSetting::new(
                    key,
                    v,
                    "must be a number of seconds in (0, 3600]",
                ));
            }
        }
        for (key, v) in [
            ("limits.max_connections", self.max_connections),
            (
                "limits.max_connections_per_peer",
                self.max_connections_per_peer,
            ),
            (
                "limits.max_connections_per_identity",
                self.max_connections_per_identity,
            ),
            (
                "limits.max_streams_per_identity",
                self.max_streams_per_identity,
            ),
            ("limits.max_subscriber_streams", self.max_subscriber_streams),
            (
                "limits.max_subscriber_streams_per_identity",
                self.max_subscriber_streams_per_identity,
            ),
        ] {
            if !proto::listen::valid_count(v) {
                return Err(InvalidSetting::new(key, v, "must be within 1..=1048576"));
            }
        }
        if self.max_subscriber_streams >= self.max_connections {
            return Err(InvalidSetting::new(
                "limits.max_subscriber_streams",
                self.max_subscriber_streams,
                "must be below limits.max_connections: the rest is the collectors' share",
            ));
        }
        self.counts()
            .into_iter()
            .try_for_each(|(key, v)| at_least_one(key, v))
    }

    /// Every count, as checked to be at least 1.
    fn counts(&self) -> [(&'static str, usize); 14] {
        [
            ("limits.max_seq_jump", self.max_seq_jump as usize),
            ("limits.max_hosts", self.max_hosts),
            ("limits.max_origins_per_host", self.max_origins_per_host),
            ("limits.max_jobs_per_window", self.max_jobs_per_window),
            ("limits.max_ranks_per_window", self.max_ranks_per_window),
            (
                "limits.max_entities_per_window",
                self.max_entities_per_window,
            ),
            ("limits.max_events_per_window", self.max_events_per_window),
            ("limits.max_rows_per_window", self.max_rows_per_window),
            ("limits.max_entities_per_host", self.max_entities_per_host),
            ("limits.max_open_incidents", self.max_open_incidents),
            (
                "limits.max_open_incidents_per_host",
                self.max_open_incidents_per_host,
            ),
            ("limits.max_connections", self.max_connections),
            (
                "limits.max_connections_per_peer",
                self.max_connections_per_peer,
            ),
            (
                "limits.max_streams_per_connection",
                self.max_streams_per_connection as usize,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscribers_share_leaves_the_collectors_theirs() {
        assert!(LimitsConfig::default().validate().is_ok());
        let l = LimitsConfig {
            max_connections: 100,
            ..LimitsConfig::default()
        };
        let e = l.validate().expect_err("256 subscriber calls of 100 slots");
        assert!(
            e.to_string().contains("limits.max_subscriber_streams")
                && e.to_string().contains("below limits.max_connections"),
            "{e}"
        );
        let l = LimitsConfig {
            max_connections: 100,
            max_subscriber_streams: 25,
            ..LimitsConfig::default()
        };
        assert!(l.validate().is_ok());
        for zero in [
            LimitsConfig {
                max_connections_per_identity: 0,
                ..LimitsConfig::default()
            },
            LimitsConfig {
                max_streams_per_identity: 0,
                ..LimitsConfig::default()
            },
            LimitsConfig {
                max_subscriber_streams_per_identity: 0,
                ..LimitsConfig::default()
            },
        ] {
            assert!(zero.validate().is_err());
        }
    }
}
