//! Where windows go on NATS (`stream.endpoint = "nats://…"`): the stream,
//! subject prefix and shard, the nkey seed, and the connection and stream
//! options built from them. The publishing itself is [`super::nats`]'s.
use std::{path::PathBuf, time::Duration};

use async_nats::jetstream;
use proto::v1::Window;

/// Where windows go on NATS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsTarget {
    pub stream: String,
    pub prefix: String,
    /// The configured shard key; empty = the host name's bucket.
    pub shard: String,
    pub buckets: u32,
    /// Replicas of the stream when this side creates it.
    pub replicas: usize,
    /// The stream's size bound when this side creates it.
    pub max_bytes: i64,
    /// CA certificate (PEM) of the NATS servers: TLS required.
    pub ca: Option<PathBuf>,
    /// This host's nkey seed file (`faultline-correlator nats-auth`).
    pub nkey_file: Option<PathBuf>,
}

/// Largest nkey seed file read (a seed is 58 characters).
const MAX_SEED_BYTES: u64 = 4096;

/// The nkey seed in `path` (its first non-empty line) and the public key
/// it signs as; an operator-readable error otherwise.
pub fn read_seed(path: &std::path::Path) -> Result<(String, String), String> {
    let text = proto::bounded_read::read_to_string(path, MAX_SEED_BYTES)
        .map_err(|e| format!("nkey seed {}: {e}", path.display()))?;
    let seed = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or_else(|| format!("nkey seed {}: empty", path.display()))?;
    let kp = nkeys::KeyPair::from_seed(seed).map_err(|e| {
        format!(
            "nkey seed {}: not a user seed ({e}); generate it with `faultline-correlator nats-auth`",
            path.display()
        )
    })?;
    Ok((seed.to_string(), kp.public_key()))
}

impl Default for NatsTarget {
    fn default() -> Self {
        Self {
            stream: vocab::nats::DEFAULT_STREAM.into(),
            prefix: vocab::nats::DEFAULT_PREFIX.into(),
            shard: String::new(),
            buckets: vocab::nats::DEFAULT_BUCKETS,
            replicas: 1,
            max_bytes: vocab::nats::DEFAULT_MAX_BYTES,
            ca: None,
            nkey_file: None,
        }
    }
}

impl NatsTarget {
    /// A window's subject: its host's shard and host token under the
    /// prefix.
    pub fn subject(&self, w: &Window) -> String {
        let host = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
        let shard = if self.shard.is_empty() {
            vocab::nats::host_shard(host, self.buckets)
        } else {
            self.shard.clone()
        };
        vocab::nats::subject(&self.prefix, &shard, host)
    }

    /// The connection's options: TLS with `ca`, the nkey of `nkey_file`
    /// and the inbox prefix its permissions allow.
    pub fn connect_options(&self) -> Result<async_nats::ConnectOptions, String> {
        let mut o = async_nats::ConnectOptions::new()
            .name("faultline-collector")
            .connection_timeout(Duration::from_secs(2))
            .event_callback(|e| async move {
                if let async_nats::Event::ServerError(e) = e {
                    // A permission violation among them: a seed for another
                    // host, or a shard the credentials do not cover.
                    tracing::warn!(error = %e, "NATS server error");
                }
            });
        if let Some(ca) = &self.ca {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some(f) = &self.nkey_file {
            let (seed, public) = read_seed(f)?;
            o = o
                .nkey(seed)
                .custom_inbox_prefix(vocab::nats::inbox_prefix(&public));
        }
        Ok(o)
    }

    /// The stream as this side creates it when absent: file storage, every
    /// subject under the prefix, the duplicate window.
    pub fn stream_config(&self) -> jetstream::stream::Config {
        jetstream::stream::Config {
            name: self.stream.clone(),
            subjects: vec![vocab::nats::stream_subjects(&self.prefix)],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(vocab::nats::DUPLICATE_WINDOW_S),
            num_replicas: self.replicas.max(1),
            max_age: Duration::from_secs(vocab::nats::MAX_AGE_S),
            max_bytes: self.max_bytes,
            retention: jetstream::stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        }
    }
}
