//! Windows from NATS JetStream (`serve --nats URL`): a durable pull
//! consumer on the windows stream, filtered to this correlator's shard
//! subjects, feeds the same admission as the gRPC ingest ([`IngestState`]:
//! per-origin sequence, duplicates dropped, gaps counted) and the engine.
//! A message is acknowledged once the engine has taken its window (or it
//! was a duplicate, or refused for good), so a correlator that dies
//! mid-window leaves it to be redelivered to whoever consumes the shard
//! next. The stream is created with the collectors' settings when absent.
//!
//! A window's subject is `<prefix>.<shard>.<host token>`: one whose origin
//! is not the subject's host is refused (`publisher_mismatch`), so with the
//! per-host NATS credentials of `faultline-correlator nats-auth` (a host
//! may publish only under its own token) a window is bound to its
//! publisher as a gRPC window is to its certificate.
use std::{path::PathBuf, time::Duration};

use async_nats::jetstream::{self, consumer, AckKind};
use prost::Message as _;
use proto::v1::Window;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;

use super::IngestState;

/// How the correlator authenticates to NATS: TLS with `ca`, the nkey of
/// `nkey_file` (docs/scale-out.md, trust); none = plaintext, anonymous.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    pub ca: Option<PathBuf>,
    pub nkey_file: Option<PathBuf>,
}

impl Credentials {
    /// Checks `url` (`nats://HOST:PORT`) against the credentials: an nkey
    /// only over TLS (`ca`), and no user or password in the URL beside it.
    /// `flag` names the URL's option in the message.
    pub fn check(&self, flag: &str, url: &str) -> Result<(), String> {
        let Some(authority) = url.strip_prefix("nats://") else {
            return Err(format!("{flag} {url:?}: must be a nats:// URL"));
        };
        if let Some(f) = &self.nkey_file {
            if self.ca.is_none() {
                return Err(format!(
                    "--nats-nkey-file {}: needs --nats-ca (nkey credentials only over TLS to the NATS servers; docs/scale-out.md)",
                    f.display()
                ));
            }
            if authority
                .split('/')
                .next()
                .unwrap_or_default()
                .contains('@')
            {
                return Err(format!(
                    "{flag}: a user or password in the URL beside --nats-nkey-file; use one credential (the nkey)"
                ));
            }
        }
        Ok(())
    }
}

/// Largest nkey seed file read (a seed is 58 characters).
const MAX_SEED_BYTES: u64 = 4096;

/// Why a NATS connection was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("nkey seed {path}: {detail}")]
    Seed { path: String, detail: String },
    #[error(transparent)]
    Nats(#[from] async_nats::ConnectError),
}

/// The nkey seed in `path` (its first non-empty, non-`#` line) and its
/// public key.
pub fn read_seed(path: &std::path::Path) -> Result<(String, String), ConnectError> {
    let err = |detail: String| ConnectError::Seed {
        path: path.display().to_string(),
        detail,
    };
    let text = proto::bounded_read::read_to_string(path, MAX_SEED_BYTES)
        .map_err(|e| err(e.to_string()))?;
    let seed = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or_else(|| err("empty".into()))?;
    let kp = nkeys::KeyPair::from_seed(seed).map_err(|e| {
        err(format!(
            "not a user seed ({e}); generate it with `faultline-correlator nats-auth`"
        ))
    })?;
    Ok((seed.to_string(), kp.public_key()))
}

/// What to consume.
#[derive(Clone, Debug, PartialEq)]
pub struct NatsIngest {
    /// `nats://HOST:4222`.
    pub url: String,
    pub creds: Credentials,
    pub stream: String,
    /// The subject prefix the collectors publish under.
    pub prefix: String,
    /// This correlator's shards (subject tokens after the prefix); empty =
    /// every shard.
    pub shards: Vec<String>,
    /// The durable consumer's name: one per shard set, shared by the
    /// active correlator and its standby.
    pub consumer: String,
    /// Replicas of the stream and the shard buckets when this side creates
    /// them.
    pub replicas: usize,
    /// The stream's size bound when this side creates it.
    pub max_bytes: i64,
    /// How long a delivered window may go unacknowledged before it is
    /// delivered again (the shard lease's time): after a takeover, the
    /// dead holder's in-flight windows come back this long after it
    /// stopped, ahead of newer ones.
    pub ack_wait: Duration,
    /// `[detect.limits] max_future_s` (zero: no clock check): a window
    /// refused as from the future by less than [`MAX_NAK_DELAY`] more is
    /// given back to be redelivered once it is due, not dropped.
    pub max_future: Duration,
}

/// The longest a window refused as from the future is held in the stream
/// for redelivery; one further ahead is refused for good.
pub const MAX_NAK_DELAY: Duration = Duration::from_secs(60);

impl NatsIngest {
    /// The consumer's subject filters.
    pub fn filters(&self) -> Vec<String> {
        if self.shards.is_empty() {
            vec![vocab::nats::stream_subjects(&self.prefix)]
        } else {
            self.shards
                .iter()
                .map(|s| vocab::nats::shard_subjects(&self.prefix, s))
                .collect()
        }
    }
}

/// A JetStream context on `url` (2 s to connect) with `creds`, named
/// `name` in the server's connection list; every NATS connection of the
/// correlator. With an nkey, replies come under the inbox prefix its
/// permissions allow ([`vocab::nats::inbox_prefix`]).
pub async fn connect(
    url: &str,
    creds: &Credentials,
    name: &str,
) -> Result<jetstream::Context, ConnectError> {
    let mut o = async_nats::ConnectOptions::new()
        .name(name)
        .connection_timeout(Duration::from_secs(2))
        .event_callback(|e| async move {
            if let async_nats::Event::ServerError(e) = e {
                // Permission violations among them (docs/scale-out.md).
                tracing::warn!(error = %e, "NATS server error");
            }
        });
    if let Some(ca) = &creds.ca {
        o = o.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some(f) = &creds.nkey_file {
        let (seed, public) = read_seed(f)?;
        o = o
            .nkey(seed)
            .custom_inbox_prefix(vocab::nats::inbox_prefix(&public));
    }
    Ok(jetstream::new(o.connect(url).await?))
}

/// Whether `w`, delivered on `subject`, comes from the host the subject
/// names (`<prefix>.<shard>.<host token>`); the old two-token subjects
/// name none and are refused.
pub fn publisher_matches(prefix: &str, subject: &str, w: &Window) -> bool {
    let host = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
    vocab::nats::parse_subject(prefix, subject)
        .is_some_and(|(_, token)| token == vocab::nats::host_token(host))
}

/// How a refused window is answered: a window from the future that will be
/// due within [`MAX_NAK_DELAY`] is given back for redelivery once due (not
/// final: the correlator's clock catches up); any other refusal is final.
pub fn refusal_ack(status: &tonic::Status, w: &Window, max_future: Duration) -> AckKind {
    // A named refusal says whether it is final and why; without one (an
    // older ingest), `clock_future` is the out-of-range refusal of a
    // window ahead of the clock.
    let future = match proto::v1::Refusal::of(status) {
        Some(r) => !r.permanent && r.reason == "clock_future",
        None => status.code() == tonic::Code::OutOfRange,
    };
    if !future || max_future.is_zero() {
        return AckKind::Term;
    }
    let ahead_ms = w.end_unix_ms.saturating_sub(vocab::time::now_unix_ms());
    let due_ms = ahead_ms.saturating_sub(max_future.as_millis() as i64);
    if due_ms < 0 {
        // Not a window from the future (`seq_jump` is out of range too).
        return AckKind::Term;
    }
    let wait = Duration::from_millis(due_ms as u64) + Duration::from_secs(1);
    if wait > MAX_NAK_DELAY {
        AckKind::Term
    } else {
        metrics::counter!(crate::telemetry::NATS_REDELIVERY_DELAYED.name).increment(1);
        AckKind::Nak(Some(wait))
    }
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("connecting: {0}")]
    Connect(#[from] ConnectError),
    #[error("stream: {0}")]
    Stream(String),
    #[error("consumer: {0}")]
    Consumer(String),
    #[error("engine stopped")]
    Engine,
}

/// Starts consuming; reconnects with capped backoff until the process ends.
pub fn spawn(
    cfg: NatsIngest,
    state: IngestState,
    engine: mpsc::Sender<Window>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut wait = Duration::from_millis(100);
        let mut first = true;
        loop {
            match session(&cfg, &state, &engine, std::mem::take(&mut first)).await {
                Err(SessionError::Engine) => return,
                Err(e) => {
                    metrics::gauge!(crate::telemetry::NATS_CONNECTED.name).set(0.0);
                    tracing::warn!(url = %cfg.url, error = %e, "NATS ingest interrupted; reconnecting");
                }
                Ok(()) => wait = Duration::from_millis(100),
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(5));
        }
    })
}

/// One connection: the stream, the durable consumer, its messages.
async fn session(
    cfg: &NatsIngest,
    state: &IngestState,
    engine: &mpsc::Sender<Window>,
    first: bool,
) -> Result<(), SessionError> {
    let js = connect(&cfg.url, &cfg.creds, "faultline-correlator").await?;
    let stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: cfg.stream.clone(),
            subjects: vec![vocab::nats::stream_subjects(&cfg.prefix)],
            storage: jetstream::stream::StorageType::File,
            duplicate_window: Duration::from_secs(vocab::nats::DUPLICATE_WINDOW_S),
            num_replicas: cfg.replicas.max(1),
            max_age: Duration::from_secs(vocab::nats::MAX_AGE_S),
            max_bytes: cfg.max_bytes,
            retention: jetstream::stream::RetentionPolicy::WorkQueue,
            ..Default::default()
        })
        .await
        .map_err(|e| SessionError::Stream(e.to_string()))?;
    let mut filters = cfg.filters();
    let (filter_subject, filter_subjects) = if filters.len() == 1 {
        (filters.remove(0), Vec::new())
    } else {
        // Several filters need nats-server 2.10.
        (String::new(), filters)
    };
    let consumer: consumer::PullConsumer = stream
        .get_or_create_consumer(
            &cfg.consumer,
            consumer::pull::Config {
                durable_name: Some(cfg.consumer.clone()),
                filter_subject: filter_subject.clone(),
                filter_subjects,
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: cfg.ack_wait,
                // In flight at once: what a takeover waits out, and what a
                // slow engine sees delivered twice (dropped by sequence).
                max_ack_pending: 256,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| SessionError::Consumer(e.to_string()))?;
    let had = consumer.cached_info().config.filter_subject.clone();
    if had != filter_subject && !had.is_empty() {
        return Err(SessionError::Consumer(format!(
            "the durable consumer {} filters {had:?}, not {filter_subject:?} (the subject grammar before <prefix>.<shard>.<host>?): remove it (nats consumer rm {} {}) and restart",
            cfg.consumer, cfg.stream, cfg.consumer
        )));
    }
    if first {
        // A previous holder of this consumer (killed, or this process
        // before a restart) may have had windows in flight. JetStream gives
        // them out again once their ack wait has passed, before newer ones;
        // pulling earlier would take newer windows first, and the older
        // ones would then be refused as duplicates of an origin already
        // past them. So the first pull waits one ack wait.
        tokio::time::sleep(cfg.ack_wait + Duration::from_millis(200)).await;
    }
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| SessionError::Consumer(e.to_string()))?;
    metrics::gauge!(crate::telemetry::NATS_CONNECTED.name).set(1.0);
    tracing::info!(url = %cfg.url, stream = %cfg.stream, consumer = %cfg.consumer, "consuming windows from NATS JetStream");
    while let Some(m) = messages.next().await {
        let m = m.map_err(|e| SessionError::Consumer(e.to_string()))?;
        let kind = match Window::decode(m.payload.clone()) {
            Ok(w) if !publisher_matches(&cfg.prefix, &m.subject, &w) => {
                metrics::counter!(crate::telemetry::INGEST_REJECTED.name, "reason" => "publisher_mismatch")
                    .increment(1);
                let origin = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
                tracing::warn!(subject = %m.subject, origin, "NATS window's origin is not the host its subject names (or an old <prefix>.<shard> subject); refused");
                AckKind::Term
            }
            Ok(mut w) => {
                crate::finite::drop_non_finite(&mut w);
                match state.admit_stream(&w) {
                    Ok(true) => {
                        engine.send(w).await.map_err(|_| SessionError::Engine)?;
                        AckKind::Ack
                    }
                    Ok(false) => AckKind::Ack,
                    // Counted by reason; final but for a window due soon.
                    Err(status) => refusal_ack(&status, &w, cfg.max_future),
                }
            }
            Err(e) => {
                metrics::counter!(crate::telemetry::INGEST_REJECTED.name, "reason" => "decode")
                    .increment(1);
                tracing::warn!(subject = %m.subject, error = %e, "NATS message is not a window; dropped");
                AckKind::Term
            }
        };
        if let Err(e) = m.ack_with(kind).await {
            tracing::debug!(error = %e, "NATS ack failed (the message will be redelivered)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(host: &str, ahead_ms: i64) -> Window {
        Window {
            origin: Some(proto::v1::Origin {
                hostname: host.into(),
                instance: "i".into(),
                ..Default::default()
            }),
            seq: 1,
            end_unix_ms: vocab::time::now_unix_ms() + ahead_ms,
            ..Default::default()
        }
    }

    #[test]
    fn a_window_is_its_subjects_hosts_only() {
        let w = window("n1.example", 0);
        let p = vocab::nats::DEFAULT_PREFIX;
        assert!(publisher_matches(
            p,
            &vocab::nats::subject(p, "h01", "n1.example"),
            &w
        ));
        assert!(!publisher_matches(
            p,
            &vocab::nats::subject(p, "h01", "n2"),
            &w
        ));
        // The old two-token grammar names no host.
        assert!(!publisher_matches(p, "faultline.windows.h01", &w));
        // A host name that is itself another's token.
        assert!(!publisher_matches(
            p,
            "faultline.windows.h01.n1.example",
            &w
        ));
    }

    #[test]
    fn only_a_window_due_soon_is_given_back() {
        let limit = Duration::from_secs(120);
        let future = tonic::Status::out_of_range("ahead");
        // 130 s ahead of a 120 s limit: due in 10 s, redelivered in 11.
        match refusal_ack(&future, &window("n", 130_000), limit) {
            AckKind::Nak(Some(d)) => {
                assert!(
                    (Duration::from_secs(10)..=Duration::from_secs(11)).contains(&d),
                    "{d:?}"
                )
            }
            k => panic!("{k:?}"),
        }
        // An hour ahead: refused for good.
        assert!(matches!(
            refusal_ack(&future, &window("n", 3_600_000), limit),
            AckKind::Term
        ));
        // Other refusals: final (seq_jump is out of range too, not ahead).
        assert!(matches!(
            refusal_ack(&future, &window("n", 0), limit),
            AckKind::Term
        ));
        let past = proto::v1::Refusal {
            permanent: true,
            ..Default::default()
        }
        .into_status(tonic::Code::OutOfRange, "old");
        assert!(matches!(
            refusal_ack(&past, &window("n", 130_000), limit),
            AckKind::Term
        ));
        assert!(matches!(
            refusal_ack(
                &tonic::Status::resource_exhausted("cap"),
                &window("n", 130_000),
                limit
            ),
            AckKind::Term
        ));
        // The named, not final refusal of today's ingest.
        let named = |reason: &str| {
            proto::v1::Refusal {
                reason: reason.into(),
                permanent: false,
                ..Default::default()
            }
            .into_status(tonic::Code::OutOfRange, "ahead")
        };
        assert!(matches!(
            refusal_ack(&named("clock_future"), &window("n", 130_000), limit),
            AckKind::Nak(Some(_))
        ));
        assert!(matches!(
            refusal_ack(&named("seq_jump"), &window("n", 130_000), limit),
            AckKind::Term
        ));
    }

    #[test]
    fn an_nkey_needs_tls_and_no_second_credential() {
        let none = Credentials::default();
        assert!(none.check("--nats", "nats://h:4222").is_ok());
        assert!(none.check("--nats", "http://h:4222").is_err());
        let nkey = Credentials {
            ca: None,
            nkey_file: Some("s.nk".into()),
        };
        assert!(nkey.check("--nats", "nats://h:4222").is_err());
        let both = Credentials {
            ca: Some("ca.pem".into()),
            ..nkey
        };
        assert!(both.check("--nats", "nats://h:4222").is_ok());
        assert!(both.check("--nats", "nats://u:p@h:4222").is_err());
    }
}
