//! A shard's state in JetStream, for a standby to take the shard over:
//!
//! - **Lease** (`faultline_leases` key-value bucket, entries expire after
//!   the lease time): one process per durable consumer holds the key
//!   `<consumer>` and renews it every third of the lease time with a
//!   compare-and-set on its revision. A standby tries to create the key
//!   every quarter of the lease time and becomes active when the holder
//!   has stopped renewing (killed, hung, cut off). A holder whose renewal
//!   finds another holder's revision has lost the shard: it exits, so two
//!   processes never consume one shard at once for longer than a lease.
//! - **Open incidents** (`faultline_open` bucket): the latest update of
//!   every open incident of the shard under `<consumer>.<incident id>`,
//!   deleted when it resolves. A process taking the shard restores them
//!   into its engine under the same ids, as it does from its own history.
//!
//! - **Baselines** (`faultline_baselines` bucket, a day): the detectors'
//!   own-history baselines of each host under `<consumer>.<host>`, written
//!   every `--nats-baselines-s` ([`super::summaries`]); a process taking
//!   the shard gives them back to each host's entities
//!   ([`crate::engine::handover`]).
//!
//! What is not kept: the per-origin sequence (the durable consumer resumes
//! after the last acknowledged window, and a window is acknowledged only
//! once the engine has it, so none is lost; a standby re-admits the few a
//! dead process had taken but not acknowledged) and the detectors' running
//! sums (an IB port's BER horizon refills within it).
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use prost::Message as _;
use proto::v1::CandidateUpdate;
use tokio::sync::broadcast;

use crate::engine::handover::HostBaselines;

const LEASES: &str = "faultline_leases";
const OPEN: &str = "faultline_open";
pub(super) const BASELINES: &str = "faultline_baselines";
/// How long a host's baselines are kept without a rewrite.
pub(super) const BASELINES_AGE: Duration = Duration::from_secs(86_400);

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("NATS {url}: {detail}")]
    Nats { url: String, detail: String },
    #[error("key-value bucket {bucket}: {detail}")]
    Bucket {
        bucket: &'static str,
        detail: String,
    },
}

/// The connection the shard state is kept through.
pub struct ShardState {
    js: jetstream::Context,
    consumer: String,
    /// Who holds the lease: this process (host and pid).
    holder: String,
    lease: Duration,
    replicas: usize,
}

/// The bucket of `name`, created with `max_age` when absent. Its stream is
/// created here with the key-value conventions (`KV_<bucket>`, subjects
/// `$KV.<bucket>.>`, one value per key, rollups, direct gets) instead of
/// through `create_key_value`, whose account-info request async-nats 0.52
/// cannot parse from nats-server 2.9 (Debian 13's).
pub(super) async fn bucket(
    js: &jetstream::Context,
    name: &'static str,
    max_age: Duration,
    replicas: usize,
) -> Result<kv::Store, ShardError> {
    let err = |detail: String| ShardError::Bucket {
        bucket: name,
        detail,
    };
    if let Ok(s) = js.get_key_value(name).await {
        return Ok(s);
    }
    let cfg = jetstream::stream::Config {
        name: format!("KV_{name}"),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        max_age,
        // JetStream's rule: the duplicate window may not exceed max_age.
        duplicate_window: if max_age.is_zero() {
            Duration::from_secs(120)
        } else {
            max_age.min(Duration::from_secs(120))
        },
        discard: jetstream::stream::DiscardPolicy::New,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        num_replicas: replicas.max(1),
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    };
    match js.create_stream(cfg).await {
        Ok(_) => {}
        // Another process created it meanwhile.
        Err(e)
            if matches!(
                e.kind(),
                jetstream::context::CreateStreamErrorKind::JetStream(_)
            ) => {}
        Err(e) => return Err(err(e.to_string())),
    }
    js.get_key_value(name).await.map_err(|e| err(e.to_string()))
}

impl ShardState {
    pub async fn connect(
        (url, creds): (&str, &super::nats::Credentials),
        consumer: &str,
        lease: Duration,
        replicas: usize,
    ) -> Result<Self, ShardError> {
        let js = super::nats::connect(url, creds, "faultline-correlator-state")
            .await
            .map_err(|e| ShardError::Nats {
                url: url.into(),
                detail: e.to_string(),
            })?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        Ok(Self {
            js,
            consumer: consumer.into(),
            holder: format!("{}/{}", host.trim(), std::process::id()),
            lease: lease.max(Duration::from_millis(200)),
            replicas,
        })
    }

    /// The JetStream connection (for the shard's summaries).
    pub fn context(&self) -> &jetstream::Context {
        &self.js
    }

    /// Waits until this process holds the shard's lease; returns the
    /// revision to renew. Logs once while another process holds it.
    pub async fn acquire(&self) -> Result<u64, ShardError> {
        let leases = bucket(&self.js, LEASES, self.lease, self.replicas).await?;
        let mut said = false;
        loop {
            match leases
                .create(&self.consumer, self.holder.clone().into())
                .await
            {
                Ok(rev) => {
                    tracing::info!(consumer = %self.consumer, holder = %self.holder, "shard lease taken: active");
                    return Ok(rev);
                }
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                    if !said {
                        let by = leases
                            .get(&self.consumer)
                            .await
                            .ok()
                            .flatten()
                            .map(|b| String::from_utf8_lossy(&b).into_owned())
                            .unwrap_or_default();
                        tracing::info!(consumer = %self.consumer, held_by = %by, "standby: the shard's lease is held; taking over when it lapses");
                        said = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "shard lease: cannot create the key; retrying")
                }
            }
            tokio::time::sleep(self.lease / 4).await;
        }
    }

    /// Renews the lease every third of its time until renewal finds another
    /// holder, then exits the process (status 3): a supervisor restarts it
    /// as a standby.
    pub async fn keep(&self, mut rev: u64) -> Result<(), ShardError> {
        let leases = bucket(&self.js, LEASES, self.lease, self.replicas).await?;
        let consumer = self.consumer.clone();
        let holder = self.holder.clone();
        let every = self.lease / 3;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match leases.update(&consumer, holder.clone().into(), rev).await {
                    Ok(r) => rev = r,
                    Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                        match retake(&leases, &consumer, &holder).await {
                            Some(r) => rev = r,
                            None => {
                                tracing::error!(consumer = %consumer, "lost the shard lease to another process (this one stalled past the lease time): exiting so the other stays the only consumer");
                                std::process::exit(3);
                            }
                        }
                    }
                    // NATS unreachable: keep trying; the lease lapses on
                    // its own if this lasts, and the renewal then fails.
                    Err(e) => tracing::warn!(error = %e, "shard lease: renewal failed; retrying"),
                }
            }
        });
        Ok(())
    }

    /// The values of this shard's keys (`<consumer>.…`) in `name`.
    async fn values(
        &self,
        name: &'static str,
        max_age: Duration,
    ) -> Result<Vec<(String, Vec<u8>)>, ShardError> {
        let store = bucket(&self.js, name, max_age, self.replicas).await?;
        let err = |e: String| ShardError::Bucket {
            bucket: name,
            detail: e,
        };
        let mut keys = store.keys().await.map_err(|e| err(e.to_string()))?;
        let prefix = format!("{}.", self.consumer);
        let mut out = Vec::new();
        use tokio_stream::StreamExt as _;
        while let Some(k) = keys.next().await {
            let k = k.map_err(|e| err(e.to_string()))?;
            if !k.starts_with(&prefix) {
                continue;
            }
            if let Some(b) = store.get(&k).await.map_err(|e| err(e.to_string()))? {
                out.push((k, b.to_vec()));
            }
        }
        Ok(out)
    }

    /// The shard's open incidents as the previous holder last published
    /// them.
    pub async fn open_incidents(&self) -> Result<Vec<CandidateUpdate>, ShardError> {
        let mut out = Vec::new();
        for (k, b) in self.values(OPEN, Duration::ZERO).await? {
            match CandidateUpdate::decode(b.as_slice()) {
                Ok(u) => out.push(u),
                Err(e) => {
                    tracing::warn!(key = %k, error = %e, "open incident entry unreadable; skipped")
                }
            }
        }
        out.sort_by(|a, b| a.incident_id.cmp(&b.incident_id));
        Ok(out)
    }

    /// The hosts' baselines as the previous holder last wrote them.
    pub async fn baselines(&self) -> Result<Vec<HostBaselines>, ShardError> {
        let mut out = Vec::new();
        for (k, b) in self.values(BASELINES, BASELINES_AGE).await? {
            match serde_json::from_slice::<HostBaselines>(&b) {
                Ok(h) => out.push(h),
                Err(e) => {
                    tracing::warn!(key = %k, error = %e, "baselines entry unreadable; skipped")
                }
            }
        }
        Ok(out)
    }

    /// Mirrors the engine's updates into the open-incident bucket: the
    /// latest update of each open incident, deleted on resolve.
    pub async fn mirror(
        &self,
        mut updates: broadcast::Receiver<CandidateUpdate>,
    ) -> Result<(), ShardError> {
        let open = bucket(&self.js, OPEN, Duration::ZERO, self.replicas).await?;
        let consumer = self.consumer.clone();
        tokio::spawn(async move {
            loop {
                let u = match updates.recv().await {
                    Ok(u) => u,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        metrics::counter!(crate::telemetry::NATS_STATE_LAGGED.name).increment(n);
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let key = format!("{consumer}.{}", kv_key(&u.incident_id));
                let r = if u.state == "resolved" {
                    open.delete(&key).await.map_err(|e| e.to_string())
                } else {
                    open.put(&key, u.encode_to_vec().into())
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                };
                if let Err(e) = r {
                    metrics::counter!(crate::telemetry::NATS_STATE_ERRORS.name).increment(1);
                    tracing::warn!(key = %key, error = %e, "open incident not mirrored to NATS");
                }
            }
        });
        Ok(())
    }
}

/// After a renewal found another revision: the lease lapsed (NATS was
/// unreachable longer than the lease, or restarted) and nobody took it —
/// take it again — or this holder's own write landed without its reply;
/// `None` when another process holds it.
async fn retake(leases: &kv::Store, consumer: &str, holder: &str) -> Option<u64> {
    match leases.create(consumer, holder.to_string().into()).await {
        Ok(r) => {
            tracing::warn!(
                consumer,
                "shard lease lapsed while NATS was unreachable; nobody took it: taken again"
            );
            return Some(r);
        }
        Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {}
        Err(e) => {
            tracing::warn!(error = %e, "shard lease: cannot check the holder");
            return None;
        }
    }
    let entry = leases.entry(consumer).await.ok().flatten()?;
    (entry.value.as_ref() == holder.as_bytes()).then_some(entry.revision)
}

/// An incident id as one key token (ids are hex and dashes; anything else
/// becomes `_`).
pub(super) fn kv_key(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Restores a previous holder's open incidents into `engine` under their
/// ids; returns how many (an entity already open, from the history, is
/// kept as it is).
pub fn restore(engine: &mut crate::engine::Engine, open: Vec<CandidateUpdate>) -> usize {
    open.into_iter()
        .map(|u| {
            engine.incidents.restore(crate::engine::incidents::Stored {
                id: u.incident_id,
                kind: u.kind,
                entity: u.entity,
                confidence: u.confidence,
                evidence: u.evidence,
                jobs: u.affected_jobs,
                runbook: u.runbook,
                updated_ms: u.ts_unix_ms,
                cluster: u.cluster,
                severity: u.severity,
            })
        })
        .filter(|ok| *ok)
        .count()
}
