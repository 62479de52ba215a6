//! `[stream]`: where windows go (the correlator, the spool, a record file)
//! and the credentials for the correlator. Documented in `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StreamSection {
    /// Correlator URL (`http://HOST:PORT`), or a NATS server
    /// (`nats://HOST:4222`) to publish to JetStream; unset = do not stream.
    pub endpoint: Option<String>,
    /// Directory of the on-disk spool.
    pub spool_dir: PathBuf,
    /// Spool bound in bytes; past it the oldest windows are dropped (counted).
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
    pub fn nats(&self) -> super::nats::NatsTarget {
        super::nats::NatsTarget {
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
            spool_dir: "/var/lib/faultline/spool".into(),
            spool_max_bytes: 64 << 20,
            record: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            token_file: None,
            nats_stream: vocab::nats::DEFAULT_STREAM.into(),
            nats_subject: vocab::nats::DEFAULT_PREFIX.into(),
            shard: String::new(),
            nats_buckets: vocab::nats::DEFAULT_BUCKETS,
            nats_replicas: 1,
            nats_max_bytes: vocab::nats::DEFAULT_MAX_BYTES,
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
