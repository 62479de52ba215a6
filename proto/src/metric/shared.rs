//! The families `proto`'s own modules emit for both binaries: the
//! listeners' connection limits (`listen`) and the build (`self_telemetry`).
use super::Family;

pub const CONNECTIONS_REFUSED: Family = Family::counter(
    "faultline_connections_refused_total",
    &["listener", "reason"],
    "Connections closed at accept: a listener's connection cap or per-peer limit reached with every connection busy (listener, reason)",
);
pub const CONNECTIONS_CLOSED: Family = Family::counter(
    "faultline_connections_closed_total",
    &["listener", "reason"],
    "Connections a listener closed: slow handshake, head or body, idle, displaced at a cap, client not reading (listener, reason)",
);
pub const BUILD_INFO: Family = Family::gauge(
    "faultline_build_info",
    &["version", "revision", "rustc"],
    "The running build: version, git revision and rustc version as labels (value 1)",
);
