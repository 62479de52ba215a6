//! Where each window goes: the record file and the sender's queue; at the
//! end, the sender's outcome (a panic or cancellation in it is an error of
//! the run, logged and returned, never dropped).
use std::{sync::Arc, time::Duration};

use anyhow::{Context as _, Result};
use proto::v1 as pb;
use tokio::{sync::mpsc, task::JoinHandle};

use crate::{config::FileConfig, sources::Console, stream};

/// The running sender: its queue, its task and its counters.
struct Sender {
    tx: mpsc::Sender<pb::Window>,
    task: JoinHandle<()>,
    stats: Arc<stream::SenderStats>,
}

pub(super) struct Delivery {
    sender: Option<Sender>,
    recorder: Option<proto::record::RecordLog>,
}

/// The sender task did not return normally.
#[derive(Debug, thiserror::Error)]
pub enum SenderFailed {
    #[error("the window sender task panicked ({0}); undelivered windows stay in the spool and are sent on the next start")]
    Panicked(#[source] tokio::task::JoinError),
    #[error("the window sender task was cancelled ({0}); undelivered windows stay in the spool and are sent on the next start")]
    Cancelled(#[source] tokio::task::JoinError),
}

/// Waits for the sender task; a panic or a cancellation is logged as an
/// error and returned.
pub async fn join_sender(task: JoinHandle<()>) -> Result<(), SenderFailed> {
    let Err(e) = task.await else {
        return Ok(());
    };
    let failed = if e.is_panic() {
        SenderFailed::Panicked(e)
    } else {
        SenderFailed::Cancelled(e)
    };
    tracing::error!(error = %failed, "window sender failed");
    Err(failed)
}

impl Delivery {
    pub fn start(cfg: &FileConfig, console: Console) -> Result<Self> {
        Ok(Self {
            sender: start_sender(cfg, console)?,
            recorder: open_record(cfg)?,
        })
    }

    /// Records `wire` and queues it for the sender; a full disk or a full
    /// queue costs that window (counted), not the collector.
    pub fn publish(&mut self, wire: pb::Window) {
        if let Some(r) = self.recorder.as_mut() {
            if let Err(e) = r.append(&wire) {
                metrics::counter!(crate::metrics_catalog::RECORD_ERRORS.name).increment(1);
                tracing::warn!(error = %e, "cannot write the record file: window not recorded");
            }
        }
        if let Some(s) = &self.sender {
            if s.tx.try_send(wire).is_err() {
                metrics::counter!(crate::metrics_catalog::WINDOWS_DROPPED.name, "reason" => "queue_full")
                    .increment(1);
                tracing::warn!("sender queue full: window dropped");
            }
        }
    }

    /// Closes the queue and waits for the sender, which delivers what it can
    /// within its drain time; the rest stays spooled.
    pub async fn finish(self, console: Console) -> Result<()> {
        let Some(Sender { tx, task, stats }) = self.sender else {
            return Ok(());
        };
        drop(tx);
        let joined = join_sender(task).await;
        console.info(stats.summary());
        Ok(joined?)
    }
}

fn start_sender(cfg: &FileConfig, console: Console) -> Result<Option<Sender>> {
    let Some(endpoint) = &cfg.stream.endpoint else {
        return Ok(None);
    };
    let (tx, rx) = mpsc::channel(1024);
    let sc = stream::SenderConfig {
        endpoint: endpoint.clone(),
        spool_dir: cfg.stream.spool_dir.clone(),
        spool_max_bytes: cfg.stream.spool_max_bytes,
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(10),
        resume_every: Duration::from_secs(1),
        auth: cfg.stream.auth(),
        nats: cfg.stream.nats(),
    };
    // Unreadable credentials stop the collector here, not in the sender.
    if !endpoint.starts_with("nats://") {
        sc.auth
            .endpoint(endpoint)
            .with_context(|| format!("the correlator endpoint {endpoint}"))?;
    }
    let (task, stats) = stream::spawn(sc, rx, Duration::from_secs(3))
        .with_context(|| format!("opening the spool {}", cfg.stream.spool_dir.display()))?;
    console.info(format_args!(
        "streaming to {endpoint} (spool {})",
        cfg.stream.spool_dir.display()
    ));
    Ok(Some(Sender { tx, task, stats }))
}

fn open_record(cfg: &FileConfig) -> Result<Option<proto::record::RecordLog>> {
    let Some(p) = &cfg.stream.record else {
        return Ok(None);
    };
    let log = proto::record::RecordLog::open(p)
        .with_context(|| format!("opening the record file {}", p.display()))?;
    Ok(Some(log))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sender that panics used to end the run like one that delivered.
    #[tokio::test]
    async fn a_panicking_sender_is_an_error_of_the_run() {
        let task = tokio::spawn(async { panic!("spool corrupted beyond repair") });
        let e = join_sender(task).await.unwrap_err();
        assert!(matches!(e, SenderFailed::Panicked(_)), "{e:?}");
        let text = anyhow::Error::from(e).to_string();
        assert!(
            text.starts_with("the window sender task panicked")
                && text.ends_with("are sent on the next start"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_cancelled_sender_is_an_error_and_a_finished_one_is_not() {
        let (_keep, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = rx.await;
        });
        task.abort();
        let e = join_sender(task).await.unwrap_err();
        assert!(matches!(e, SenderFailed::Cancelled(_)), "{e:?}");
        assert!(join_sender(tokio::spawn(async {})).await.is_ok());
    }
}
