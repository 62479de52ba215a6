//! One gRPC Stream call of the sender: the call runs on its own task, so
//! it is under way before the first window is queued; one window is queued
//! at a time, new input first, the running instance's windows ahead of
//! older runs' ([`Sender::next_unsent`]), held windows retried when due.
use std::{sync::atomic::Ordering, time::Duration};

use proto::v1::{ingest_client::IngestClient, Window};
use tokio::{sync::mpsc, time::Instant};
use tokio_stream::wrappers::ReceiverStream;

use super::{order::Cursor, sender::Sender, tls::AuthChannel};

/// Windows queued on a stream ahead of the correlator: a new window waits
/// behind at most these (the old 64 made it wait behind a backlog).
const STREAM_QUEUE: usize = 4;

impl Sender {
    /// Streams the spool on one call; returns true when the drain time ended
    /// it. Confirmed windows are added to `delivered`. The call runs on its
    /// own task, so it is under way before the first window is queued (it
    /// used to start only once 64 windows filled the queue and a send had
    /// waited 1 s, and the loop took new input only between batches); one
    /// window is queued at a time, new input first, held windows retried
    /// when due.
    pub(super) async fn stream(
        &mut self,
        client: &mut IngestClient<AuthChannel>,
        delivered: &mut u64,
    ) -> bool {
        let (tx, req_rx) = mpsc::channel::<Window>(STREAM_QUEUE);
        let mut stream_client = client.clone();
        let mut call =
            tokio::spawn(async move { stream_client.stream(ReceiverStream::new(req_rx)).await });
        let _abort = AbortOnDrop(call.abort_handle());
        let mut cursor = Cursor::default();
        let mut resume_tick = tokio::time::interval(self.cfg.resume_every);
        resume_tick.tick().await;
        let mut tx = Some(tx);
        loop {
            let next = match tx {
                Some(_) => self.next_unsent(&mut cursor),
                None => None,
            };
            if self.closing.is_some() && next.is_none() {
                // Everything sent: end the stream so the correlator finishes it.
                tx = None;
            }
            let drain_end = self
                .closing
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            let retry = self.held.next_retry();
            tokio::select! {
                biased;
                w = self.rx.recv(), if self.closing.is_none() => self.input(w),
                r = &mut call => {
                    let r = r.unwrap_or_else(|e| Err(tonic::Status::internal(e.to_string())));
                    self.ended(&r);
                    return self.finish(client, delivered, false).await;
                }
                permit = reserve(tx.clone()), if next.is_some() => {
                    let (Some(p), Some(name)) = (permit, next) else {
                        // The call ended: the branch above says how.
                        tx = None;
                        continue;
                    };
                    cursor.sent(&name, self.running.as_deref());
                    if let Some(w) = self.spool.read(&name) {
                        p.send(w);
                        self.stats.sent.fetch_add(1, Ordering::Relaxed);
                        self.in_flight.insert(name);
                    } else {
                        self.pending();
                    }
                }
                _ = resume_tick.tick() => match self.resume(client).await {
                    Ok(n) => *delivered += n,
                    Err(_) => return self.finish(client, delivered, false).await,
                },
                () = sleep_until_some(retry), if retry.is_some() => {
                    self.retry_held(client, delivered).await;
                }
                () = tokio::time::sleep_until(drain_end) => {
                    return self.finish(client, delivered, true).await;
                }
            }
        }
    }

    /// Stream over: learn what arrived; `done` passes through.
    pub(super) async fn finish(
        &mut self,
        client: &mut IngestClient<AuthChannel>,
        delivered: &mut u64,
        done: bool,
    ) -> bool {
        if let Ok(n) = self.resume(client).await {
            *delivered += n;
            self.settle_lost();
        }
        done
    }
}

/// Aborts the stream call's task when the stream loop returns.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A slot on the stream's queue (never, without a queue; `None` when the
/// call ended).
async fn reserve(tx: Option<mpsc::Sender<Window>>) -> Option<mpsc::OwnedPermit<Window>> {
    match tx {
        Some(t) => t.reserve_owned().await.ok(),
        None => std::future::pending().await,
    }
}

/// Sleeps until `at` (forever without one).
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
