//! `[detect.limits]`: bounds on what the correlator accepts and keeps
//! (docs/security.md). One flat table read by three owners: ingest (the
//! sequence and clock checks, the host bounds), the engine (the per-window
//! caps, the per-host entities, the open incidents) and the gRPC listener
//! (`crate::conn`: connections and timeouts). Every refusal or drop is
//! counted (`faultline_ingest_rejected_total`,
//! `faultline_engine_dropped_total`). Each key is declared once below
//! ([`Key`]: its default and bounds, read by [`LimitsConfig`]'s `Default`
//! and `validate`).
use proto::{
    config_key::{Declared, Key},
    listen,
};
use serde::{Deserialize, Serialize};

use crate::setting::InvalidSetting;

/// The longest clock bound, seconds (`0` turns a clock check off).
const MAX_CLOCK_S: f64 = 1e9;
/// `max_seq_jump`.
pub const MAX_SEQ_JUMP: Key<u64> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_seq_jump",
        1_000_000,
        "Sequence numbers a window may be past its origin's last",
    )
};
/// `max_seq_skip_per_min`.
pub const MAX_SEQ_SKIP_PER_MIN: Key<u64> = Key::new(
    "limits.max_seq_skip_per_min",
    6000,
    "Sequence numbers an origin may skip per minute (0 = no budget)",
);
/// `max_future_s`.
pub const MAX_FUTURE_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(MAX_CLOCK_S),
    ..Key::new(
        "limits.max_future_s",
        120.0,
        "Seconds a window's end may lie ahead of the correlator's clock (0 = no check)",
    )
};
/// `max_past_s`.
pub const MAX_PAST_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(MAX_CLOCK_S),
    ..Key::new(
        "limits.max_past_s",
        7.0 * 86_400.0,
        "Seconds a window's end may lie behind the correlator's clock (0 = no check)",
    )
};
/// `max_hosts`.
pub const MAX_HOSTS: Key<usize> = Key {
    min: Some(1),
    ..Key::new("limits.max_hosts", 100_000, "Distinct hosts tracked")
};
/// `max_origins_per_host`.
pub const MAX_ORIGINS_PER_HOST: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_origins_per_host",
        64,
        "Collector runs remembered per host",
    )
};
/// `idle_forget_s`.
pub const IDLE_FORGET_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(MAX_CLOCK_S),
    ..Key::new(
        "limits.idle_forget_s",
        86_400.0,
        "Seconds after which a silent host is forgotten (0 = never)",
    )
};
/// `max_jobs_per_window`.
pub const MAX_JOBS_PER_WINDOW: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_jobs_per_window",
        1024,
        "Distinct jobs judged per window",
    )
};
/// `max_ranks_per_window`.
pub const MAX_RANKS_PER_WINDOW: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_ranks_per_window",
        16_384,
        "Step samples (ranks) judged per window",
    )
};
/// `max_entities_per_window`.
pub const MAX_ENTITIES_PER_WINDOW: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_entities_per_window",
        1024,
        "IB ports, GPUs and block devices (each) judged per window",
    )
};
/// `max_events_per_window`.
pub const MAX_EVENTS_PER_WINDOW: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_events_per_window",
        1024,
        "Events judged per window",
    )
};
/// `max_rows_per_window`.
pub const MAX_ROWS_PER_WINDOW: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_rows_per_window",
        16_384,
        "CUDA, verbs, workload, usage and NCCL Inspector rows (each) judged per window",
    )
};
/// `max_entities_per_host`.
pub const MAX_ENTITIES_PER_HOST: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_entities_per_host",
        4096,
        "Distinct entities remembered per host",
    )
};
/// `max_open_incidents`.
pub const MAX_OPEN_INCIDENTS: Key<usize> = Key {
    min: Some(1),
    ..Key::new("limits.max_open_incidents", 10_000, "Open incidents")
};
/// `max_open_incidents_per_host`.
pub const MAX_OPEN_INCIDENTS_PER_HOST: Key<usize> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_open_incidents_per_host",
        256,
        "Open incidents charged to one host",
    )
};
/// `max_connections`.
pub const MAX_CONNECTIONS: Key<usize> = Key {
    min: Some(1),
    max: Some(listen::MAX_CONNECTIONS),
    ..Key::new(
        "limits.max_connections",
        1000,
        "Client connections in total",
    )
};
/// `max_connections_per_peer`.
pub const MAX_CONNECTIONS_PER_PEER: Key<usize> = Key {
    min: Some(1),
    max: Some(listen::MAX_CONNECTIONS),
    ..Key::new(
        "limits.max_connections_per_peer",
        256,
        "Client connections per remote address",
    )
};
/// `max_streams_per_connection`.
pub const MAX_STREAMS_PER_CONNECTION: Key<u32> = Key {
    min: Some(1),
    ..Key::new(
        "limits.max_streams_per_connection",
        64,
        "Concurrent gRPC streams per connection",
    )
};
/// `max_connections_per_identity`.
pub const MAX_CONNECTIONS_PER_IDENTITY: Key<usize> = Key {
    min: Some(1),
    max: Some(listen::MAX_CONNECTIONS),
    ..Key::new(
        "limits.max_connections_per_identity",
        64,
        "Client connections per authenticated identity",
    )
};
/// `max_streams_per_identity`.
pub const MAX_STREAMS_PER_IDENTITY: Key<usize> = Key {
    min: Some(1),
    max: Some(listen::MAX_CONNECTIONS),
    ..Key::new(
        "limits.max_streams_per_identity",
        64,
        "Concurrent gRPC calls per authenticated identity",
    )
};
/// `max_subscriber_streams`.
pub const MAX_SUBSCRIBER_STREAMS: Key<usize> = Key {
    min: Some(1),
    max: Some(listen::MAX_CONNECTIONS),
    ..Key::new(
        "limits.max_subscriber_streams",
        256,
        "Concurrent Candidates calls in total (below max_connections)",
    )
};
/// `max_subscriber_streams_per_identity`.
pub const MAX_SUBSCRIBER_STREAMS_PER_IDENTITY: Key<usize> = Key {
    min: Some(1),
    max: Some(listen::MAX_CONNECTIONS),
    ..Key::new(
        "limits.max_subscriber_streams_per_identity",
        16,
        "Concurrent Candidates calls per authenticated identity",
    )
};
/// `handshake_timeout_s`.
pub const HANDSHAKE_TIMEOUT_S: Key<f64> = Key {
    max: Some(listen::MAX_TIMEOUT_S),
    ..Key::new(
        "limits.handshake_timeout_s",
        5.0,
        "Seconds a new connection has to send its first 24 bytes",
    )
};
/// `idle_connection_timeout_s`.
pub const IDLE_CONNECTION_TIMEOUT_S: Key<f64> = Key {
    max: Some(listen::MAX_TIMEOUT_S),
    ..Key::new(
        "limits.idle_connection_timeout_s",
        20.0,
        "Seconds a connection may stay open without an authenticated gRPC stream",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 24] = [
    MAX_SEQ_JUMP.declared(),
    MAX_SEQ_SKIP_PER_MIN.declared(),
    MAX_FUTURE_S.declared(),
    MAX_PAST_S.declared(),
    MAX_HOSTS.declared(),
    MAX_ORIGINS_PER_HOST.declared(),
    IDLE_FORGET_S.declared(),
    MAX_JOBS_PER_WINDOW.declared(),
    MAX_RANKS_PER_WINDOW.declared(),
    MAX_ENTITIES_PER_WINDOW.declared(),
    MAX_EVENTS_PER_WINDOW.declared(),
    MAX_ROWS_PER_WINDOW.declared(),
    MAX_ENTITIES_PER_HOST.declared(),
    MAX_OPEN_INCIDENTS.declared(),
    MAX_OPEN_INCIDENTS_PER_HOST.declared(),
    MAX_CONNECTIONS.declared(),
    MAX_CONNECTIONS_PER_PEER.declared(),
    MAX_STREAMS_PER_CONNECTION.declared(),
    MAX_CONNECTIONS_PER_IDENTITY.declared(),
    MAX_STREAMS_PER_IDENTITY.declared(),
    MAX_SUBSCRIBER_STREAMS.declared(),
    MAX_SUBSCRIBER_STREAMS_PER_IDENTITY.declared(),
    HANDSHAKE_TIMEOUT_S.declared(),
    IDLE_CONNECTION_TIMEOUT_S.declared(),
];

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
            max_seq_jump: MAX_SEQ_JUMP.default,
            max_seq_skip_per_min: MAX_SEQ_SKIP_PER_MIN.default,
            max_future_s: MAX_FUTURE_S.default,
            max_past_s: MAX_PAST_S.default,
            max_hosts: MAX_HOSTS.default,
            max_origins_per_host: MAX_ORIGINS_PER_HOST.default,
            idle_forget_s: IDLE_FORGET_S.default,
            max_jobs_per_window: MAX_JOBS_PER_WINDOW.default,
            max_ranks_per_window: MAX_RANKS_PER_WINDOW.default,
            max_entities_per_window: MAX_ENTITIES_PER_WINDOW.default,
            max_events_per_window: MAX_EVENTS_PER_WINDOW.default,
            max_rows_per_window: MAX_ROWS_PER_WINDOW.default,
            max_entities_per_host: MAX_ENTITIES_PER_HOST.default,
            max_open_incidents: MAX_OPEN_INCIDENTS.default,
            max_open_incidents_per_host: MAX_OPEN_INCIDENTS_PER_HOST.default,
            max_connections: MAX_CONNECTIONS.default,
            max_connections_per_peer: MAX_CONNECTIONS_PER_PEER.default,
            max_streams_per_connection: MAX_STREAMS_PER_CONNECTION.default,
            max_connections_per_identity: MAX_CONNECTIONS_PER_IDENTITY.default,
            max_streams_per_identity: MAX_STREAMS_PER_IDENTITY.default,
            max_subscriber_streams: MAX_SUBSCRIBER_STREAMS.default,
            max_subscriber_streams_per_identity: MAX_SUBSCRIBER_STREAMS_PER_IDENTITY.default,
            handshake_timeout_s: HANDSHAKE_TIMEOUT_S.default,
            idle_connection_timeout_s: IDLE_CONNECTION_TIMEOUT_S.default,
        }
    }
}

impl LimitsConfig {
    /// Checks every value's range; the first bad one is the error.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for (key, v) in [
            (MAX_FUTURE_S, self.max_future_s),
            (MAX_PAST_S, self.max_past_s),
            (IDLE_FORGET_S, self.idle_forget_s),
        ] {
            if !key.contains(v) {
                return Err(invalid(
                    key.path,
                    v,
                    format!(
                        "must be 0 (no check) or a number of seconds up to {:e}",
                        key.hi()
                    ),
                ));
            }
        }
        for (key, v) in [
            (HANDSHAKE_TIMEOUT_S, self.handshake_timeout_s),
            (IDLE_CONNECTION_TIMEOUT_S, self.idle_connection_timeout_s),
        ] {
            // (0, max]: a zero timeout is not "no timeout".
            if !(v > 0.0 && key.contains(v)) {
                return Err(invalid(
                    key.path,
                    v,
                    format!("must be a number of seconds in (0, {}]", key.hi()),
                ));
            }
        }
        for (key, v) in [
            (MAX_CONNECTIONS, self.max_connections),
            (MAX_CONNECTIONS_PER_PEER, self.max_connections_per_peer),
            (
                MAX_CONNECTIONS_PER_IDENTITY,
                self.max_connections_per_identity,
            ),
            (MAX_STREAMS_PER_IDENTITY, self.max_streams_per_identity),
            (MAX_SUBSCRIBER_STREAMS, self.max_subscriber_streams),
            (
                MAX_SUBSCRIBER_STREAMS_PER_IDENTITY,
                self.max_subscriber_streams_per_identity,
            ),
        ] {
            if let (false, Some(lo), Some(hi)) = (key.contains(v), key.min, key.max) {
                return Err(invalid(key.path, v, format!("must be within {lo}..={hi}")));
            }
        }
        if self.max_subscriber_streams >= self.max_connections {
            return Err(InvalidSetting::new(
                MAX_SUBSCRIBER_STREAMS.path,
                self.max_subscriber_streams,
                "must be below limits.max_connections: the rest is the collectors' share",
            ));
        }
        self.counts().into_iter().try_for_each(|(key, min, v)| {
            if v < min {
                return Err(invalid(key, v, format!("must be at least {min}")));
            }
            Ok(())
        })
    }

    /// Every count with its smallest valid value.
    fn counts(&self) -> [(&'static str, u64, u64); 14] {
        fn c<T: Copy + Into<u64>>(k: Key<T>, v: T) -> (&'static str, u64, u64) {
            (k.path, k.min.map_or(0, Into::into), v.into())
        }
        let u = |k: Key<usize>, v: usize| (k.path, k.min.unwrap_or(0) as u64, v as u64);
        [
            c(MAX_SEQ_JUMP, self.max_seq_jump),
            u(MAX_HOSTS, self.max_hosts),
            u(MAX_ORIGINS_PER_HOST, self.max_origins_per_host),
            u(MAX_JOBS_PER_WINDOW, self.max_jobs_per_window),
            u(MAX_RANKS_PER_WINDOW, self.max_ranks_per_window),
            u(MAX_ENTITIES_PER_WINDOW, self.max_entities_per_window),
            u(MAX_EVENTS_PER_WINDOW, self.max_events_per_window),
            u(MAX_ROWS_PER_WINDOW, self.max_rows_per_window),
            u(MAX_ENTITIES_PER_HOST, self.max_entities_per_host),
            u(MAX_OPEN_INCIDENTS, self.max_open_incidents),
            u(
                MAX_OPEN_INCIDENTS_PER_HOST,
                self.max_open_incidents_per_host,
            ),
            u(MAX_CONNECTIONS, self.max_connections),
            u(MAX_CONNECTIONS_PER_PEER, self.max_connections_per_peer),
            c(MAX_STREAMS_PER_CONNECTION, self.max_streams_per_connection),
        ]
    }
}

/// `key = value` refused because `why`.
fn invalid(key: &'static str, value: impl ToString, why: String) -> InvalidSetting {
    InvalidSetting {
        key,
        value: value.to_string(),
        why: why.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_is_refused_in_the_words_it_always_had() {
        let err = |f: fn(&mut LimitsConfig)| {
            let mut l = LimitsConfig::default();
            f(&mut l);
            l.validate().expect_err("out of range").to_string()
        };
        type Case = (fn(&mut LimitsConfig), &'static str);
        let cases: [Case; 5] = [
            (
                |l| l.max_past_s = 2e9,
                "detect.limits.max_past_s = 2000000000: must be 0 (no check) or a number of seconds up to 1e9",
            ),
            (
                |l| l.handshake_timeout_s = 0.0,
                "detect.limits.handshake_timeout_s = 0: must be a number of seconds in (0, 3600]",
            ),
            (
                |l| l.max_connections_per_peer = 0,
                "detect.limits.max_connections_per_peer = 0: must be within 1..=1048576",
            ),
            (
                |l| l.max_seq_jump = 0,
                "detect.limits.max_seq_jump = 0: must be at least 1",
            ),
            (
                |l| l.max_streams_per_connection = 0,
                "detect.limits.max_streams_per_connection = 0: must be at least 1",
            ),
        ];
        for (set, want) in cases {
            assert_eq!(err(set), want);
        }
        assert_eq!(LimitsConfig::default().max_past_s, 7.0 * 86_400.0);
    }

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
