//! `[stream]`: where windows go (the correlator, the spool, a record file)
//! and the credentials for the correlator. Each key with a default, a
//! bound or a flag is declared once below ([`Key`]: the defaults, the
//! checks in `config::validate`, the flags in `main.rs` and the uses read
//! it); documented in `docs/config.md`, which `config::tests` checks.
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// `--correlator URL`: where windows go; unset: nowhere.
pub const ENDPOINT: Key<&str> = Key {
    flag: Some("correlator"),
    ..Key::new(
        "stream.endpoint",
        "",
        "Stream windows to this correlator, e.g. http://127.0.0.1:50051",
    )
};
/// The on-disk spool's directory.
pub const SPOOL_DIR: Key<&str> = Key {
    flag: Some("spool-dir"),
    ..Key::new(
        "stream.spool_dir",
        "/var/lib/faultline/spool",
        "Spool directory",
    )
};
/// The spool's bound: past it the oldest windows are dropped (counted);
/// below 4096 not even one window fits.
pub const SPOOL_MAX_BYTES: Key<u64> = Key {
    min: Some(4096),
    flag: Some("spool-max-bytes"),
    shown: "64 MiB",
    ..Key::new("stream.spool_max_bytes", 64 << 20, "Spool bound in bytes")
};
/// `--record FILE`: every window also as a JSON line.
pub const RECORD: Key<&str> = Key {
    flag: Some("record"),
    ..Key::new(
        "stream.record",
        "",
        "Also write every window to FILE as JSON lines, the correlator's replay format",
    )
};
/// NATS: the JetStream stream.
pub const NATS_STREAM: Key<&str> = Key::new(
    "stream.nats_stream",
    vocab::nats::DEFAULT_STREAM,
    "NATS: the JetStream stream (created when absent)",
);
/// NATS: the subject prefix.
pub const NATS_SUBJECT: Key<&str> = Key::new(
    "stream.nats_subject",
    vocab::nats::DEFAULT_PREFIX,
    "NATS: the subject prefix",
);
/// NATS: buckets of the host-name shard key.
pub const NATS_BUCKETS: Key<u32> = Key {
    min: Some(1),
    max: Some(4096),
    ..Key::new(
        "stream.nats_buckets",
        vocab::nats::DEFAULT_BUCKETS,
        "NATS: buckets of the host-name shard key",
    )
};
/// NATS: replicas of a stream the collector creates (JetStream's limit: 5).
pub const NATS_REPLICAS: Key<usize> = Key {
    min: Some(1),
    max: Some(5),
    ..Key::new("stream.nats_replicas", 1, "NATS: replicas of the stream")
};
/// NATS: the size bound of a stream the collector creates, at least
/// 1 MiB, or [`NATS_MAX_BYTES_SERVERS`].
pub const NATS_MAX_BYTES: Key<i64> = Key {
    min: Some(1 << 20),
    ..Key::new(
        "stream.nats_max_bytes",
        vocab::nats::DEFAULT_MAX_BYTES,
        "NATS: the stream's size bound in bytes",
    )
};
/// `nats_max_bytes = -1`: the server's own store limit.
pub const NATS_MAX_BYTES_SERVERS: i64 = -1;
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 9] = [
    ENDPOINT.declared(),
    SPOOL_DIR.declared(),
    SPOOL_MAX_BYTES.declared(),
    RECORD.declared(),
    NATS_STREAM.declared(),
    NATS_SUBJECT.declared(),
    NATS_BUCKETS.declared(),
    NATS_REPLICAS.declared(),
    NATS_MAX_BYTES.declared(),
];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StreamSection {
    /// Correlator URL (`http://HOST:PORT`), or a NATS server
    /// (`nats://HOST:4222`) to publish to JetStream; unset = do not stream.
    pub endpoint: Option<String>,
    /// Directory of the on-disk spool.
    pub spool_dir: PathBuf,
    /// [`SPOOL_MAX_BYTES`].
    pub spool_max_bytes: u64,
    /// Also append every window to this file as JSON lines (the replay format).
    pub record: Option<PathBuf>,
    /// CA certificate (PEM) of the correlator; required for `https://`.
    pub tls_ca: Option<PathBuf>,
    /// This host's client certificate (PEM) for mTLS; its DNS name must be
    /// the hostname the collector reports.
    pub tls_cert: Option<PathBuf>,
    /// This host's private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// File with a bearer token (first line) for token-mode correlators.
    pub token_file: Option<PathBuf>,
    /// NATS: the JetStream stream (created when absent).
    pub nats_stream: String,
    /// NATS: the subject prefix; windows go to `<prefix>.<shard>.<host token>`.
    pub nats_subject: String,
    /// NATS: this host's shard key (its leaf switch, say); empty = a hash
    /// of the host name into `nats_buckets` buckets (`h00`…).
    pub shard: String,
    /// NATS: buckets of the host-name shard key.
    pub nats_buckets: u32,
    /// NATS: replicas of the stream when the collector creates it (the
    /// servers in a JetStream cluster that keep it; at most 5).
    pub nats_replicas: usize,
    /// NATS: the stream's size bound in bytes when the collector creates it.
    pub nats_max_bytes: i64,
    /// NATS: CA certificate (PEM) of the NATS servers; set = TLS required.
    pub nats_ca: Option<PathBuf>,
    /// NATS: this host's nkey seed file (from `faultline-correlator
    /// nats-auth`); needs `nats_ca`.
    pub nats_nkey_file: Option<PathBuf>,
}

impl StreamSection {
    /// Where windows go on NATS.
    pub fn nats(&self) -> super::nats_target::NatsTarget {
        super::nats_target::NatsTarget {
            stream: self.nats_stream.clone(),
            prefix: self.nats_subject.clone(),
            shard: self.shard.clone(),
            buckets: self.nats_buckets,
            replicas: self.nats_replicas,
            max_bytes: self.nats_max_bytes,
            ca: self.nats_ca.clone(),
            nkey_file: self.nats_nkey_file.clone(),
        }
    }

    /// The credentials for the correlator endpoint.
    pub fn auth(&self) -> super::tls::ClientAuth {
        super::tls::ClientAuth {
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            token_file: self.token_file.clone(),
        }
    }
}

impl Default for StreamSection {
    fn default() -> Self {
        Self {
            endpoint: None,
            spool_dir: SPOOL_DIR.default.into(),
            spool_max_bytes: SPOOL_MAX_BYTES.default,
            record: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            token_file: None,
            nats_stream: NATS_STREAM.default.into(),
            nats_subject: NATS_SUBJECT.default.into(),
            shard: String::new(),
            nats_buckets: NATS_BUCKETS.default,
            nats_replicas: NATS_REPLICAS.default,
            nats_max_bytes: NATS_MAX_BYTES.default,
            nats_ca: None,
            nats_nkey_file: None,
        }
    }
}

/// A correlator URL that the sender could not dial.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("is not a URL ({0})")]
    NotAUrl(#[source] tonic::codegen::http::uri::InvalidUri),
    #[error("must start with http://, https:// or nats://")]
    Scheme,
    #[error("has no host")]
    NoHost,
}

/// A correlator URL: `http` or `https` with a host, or a NATS server's
/// `nats://` URL.
pub fn check_endpoint(e: &str) -> Result<(), EndpointError> {
    let uri: tonic::codegen::http::Uri = e.parse().map_err(EndpointError::NotAUrl)?;
    if !matches!(uri.scheme_str(), Some("http" | "https" | "nats")) {
        return Err(EndpointError::Scheme);
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(EndpointError::NoHost);
    }
    Ok(())
}
