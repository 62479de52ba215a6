//! The NATS JetStream transport (`stream.endpoint = "nats://…"`): the same
//! spool, drained in order by publishing each window to the stream's
//! subject `<prefix>.<shard>.<host token>` with the message id
//! `<host>/<instance>/<seq>` (JetStream drops a resend it already holds
//! within its duplicate window; the correlator drops any older resend by
//! sequence). With an nkey (`stream.nats_nkey_file`, TLS required) the
//! server lets this host publish only under its own host token, and the
//! correlator refuses a window whose origin is not the subject's host. A window
//! leaves the spool when its publish acknowledgement arrives: the stream
//! has stored it, so whichever correlator consumes the shard will get it.
//! Up to [`PIPELINE`] publishes are in flight at once.
use std::{sync::atomic::Ordering, time::Duration};

use async_nats::jetstream::{self, message::PublishMessage};
use prost::Message as _;
use proto::v1::Window;

pub use super::nats_target::{read_seed, NatsTarget};
use super::sender::{Sender, Session};

/// Publishes awaiting their acknowledgement at once.
pub const PIPELINE: usize = 64;
/// A publish acknowledgement later than this fails the session.
const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// A window's message id.
fn msg_id(w: &Window) -> String {
    let (host, inst) = w
        .origin
        .as_ref()
        .map_or(("", ""), |o| (o.hostname.as_str(), o.instance.as_str()));
    vocab::nats::msg_id(host, inst, w.seq)
}

impl Sender {
    /// One NATS connection: connect, make sure the stream exists (created
    /// here only without credentials: with them, the correlators create
    /// it), publish the spool in order until an error or the drain time
    /// ends it.
    pub(super) async fn nats_session(&mut self, target: &NatsTarget) -> Session {
        let url = self.cfg.endpoint.clone();
        let options = match target.connect_options() {
            Ok(o) => o,
            Err(e) => {
                self.unreachable_now(&url, &e);
                return Session::Failed;
            }
        };
        let client = match options.connect(url.as_str()).await {
            Ok(c) => c,
            Err(e) => {
                self.unreachable_now(&url, &e.to_string());
                return Session::Failed;
            }
        };
        let js = jetstream::new(client);
        if target.nkey_file.is_some() {
            // May only look: a stream not there yet (no correlator has
            // started) fails the publishes, and the spool keeps them.
            if let Err(e) = js.get_stream(&target.stream).await {
                tracing::warn!(stream = %target.stream, error = %e, "NATS stream not readable (the correlators create it); publishing anyway");
            }
        } else if let Err(e) = js.get_or_create_stream(target.stream_config()).await {
            self.unreachable_now(&url, &format!("stream {}: {e}", target.stream));
            return Session::Failed;
        }
        self.reachable_again(&url);
        self.set_connected(true);
        tracing::info!(endpoint = %url, stream = %target.stream, pending = self.spool.len(), "publishing to NATS JetStream");
        let (delivered, ok) = self.publish_spool(&js, target).await;
        self.set_connected(false);
        self.settle_lost();
        if self.closing.is_some() && (self.spool.is_empty() || self.closing_due()) {
            Session::Done
        } else if delivered > 0 || ok {
            Session::Progress
        } else {
            Session::Failed
        }
    }

    /// Publishes the spool, [`PIPELINE`] at a time, waiting for input when
    /// it is empty. Returns (windows confirmed, ended without error).
    async fn publish_spool(&mut self, js: &jetstream::Context, target: &NatsTarget) -> (u64, bool) {
        let mut delivered = 0u64;
        loop {
            let names: Vec<String> = self
                .spool
                .names_after(None)
                .into_iter()
                .take(PIPELINE)
                .collect();
            if names.is_empty() {
                if self.closing.is_some() {
                    return (delivered, true);
                }
                let w = self.rx.recv().await;
                self.input(w);
                continue;
            }
            let mut acks = Vec::with_capacity(names.len());
            for name in names {
                let Some(w) = self.spool.read(&name) else {
                    continue;
                };
                let publish = PublishMessage::build()
                    .payload(w.encode_to_vec().into())
                    .message_id(msg_id(&w));
                match js.send_publish(target.subject(&w), publish).await {
                    Ok(ack) => {
                        self.stats.sent.fetch_add(1, Ordering::Relaxed);
                        self.in_flight.insert(name.clone());
                        acks.push((name, ack));
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "publish to NATS failed");
                        return (delivered, false);
                    }
                }
            }
            for (name, ack) in acks {
                match tokio::time::timeout(ACK_TIMEOUT, ack).await {
                    Ok(Ok(_)) => {
                        if self.in_flight.remove(&name) {
                            self.spool.remove(&name);
                        } else {
                            self.evicted_sent.remove(&name);
                        }
                        delivered += 1;
                        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!(crate::metrics_catalog::WINDOWS_SENT.name).increment(1);
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "NATS did not store a window; resending after a reconnect");
                        self.pending();
                        return (delivered, false);
                    }
                    Err(_) => {
                        tracing::warn!("no NATS publish acknowledgement within 5 s; reconnecting");
                        self.pending();
                        return (delivered, false);
                    }
                }
            }
            self.pending();
            // Input that arrived meanwhile, without waiting.
            while let Ok(w) = self.rx.try_recv() {
                self.push(w);
            }
            if self.closing_due() {
                return (delivered, true);
            }
        }
    }
}
