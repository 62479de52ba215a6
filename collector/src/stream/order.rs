//! The sender's order of sending: the next unsent window (the running
//! instance's first, then earlier runs'), held windows skipped on the way,
//! and the held windows' refusals, drops and retries ([`super::held`] keeps
//! them; this is the sender's side, so `held` does not import the sender).
use std::{sync::atomic::Ordering, time::Duration};

use proto::v1::{ingest_client::IngestClient, Refusal};
use tokio::time::Instant;

use super::{
    held::{LIMIT, RETRY_MAX},
    sender::Sender,
    spool,
    tls::AuthChannel,
};

/// Held windows retried in one go once the correlator accepts them again.
const PER_ROUND: usize = 16;
/// How long one retry call may take.
const RETRY_TIMEOUT: Duration = Duration::from_secs(3);

/// Where a stream stands: the running instance's last window sent, and
/// how far the older windows (earlier runs) were sent.
#[derive(Debug, Default)]
pub(super) struct Cursor {
    current: Option<String>,
    older: Option<String>,
}

impl Cursor {
    /// `name` was sent.
    pub(super) fn sent(&mut self, name: &str, running: Option<&str>) {
        let of_running = running.is_some_and(|r| instance_is(name, r));
        if of_running {
            self.current = Some(name.to_string());
        } else {
            self.older = Some(name.to_string());
        }
    }
}

fn instance_is(name: &str, inst: &str) -> bool {
    spool::parse_name(name).is_some_and(|(i, _)| i == inst)
}

impl Sender {
    /// The next window to send on this stream: the running instance's
    /// windows first, in order (the correlator's sequence rules), then those
    /// of earlier runs (a backlog of any size never delays a new window by
    /// more than the windows already queued on the stream). Held windows
    /// are skipped; windows the correlator would refuse as from the future
    /// are held on the way.
    pub(super) fn next_unsent(&mut self, c: &mut Cursor) -> Option<String> {
        let running = self.running.clone();
        if let Some(inst) = running.as_deref() {
            let mut from = c.current.clone().unwrap_or_else(|| spool::name_of(inst, 0));
            while let Some(n) = self.spool.next_after(Some(&from)) {
                if !instance_is(&n, inst) {
                    break;
                }
                if !self.skip_held(&n) {
                    return Some(n);
                }
                c.current = Some(n.clone());
                from = n;
            }
        }
        loop {
            let n = self.spool.next_after(c.older.as_deref())?;
            if let Some(inst) = running.as_deref().filter(|i| instance_is(&n, i)) {
                // The running instance's windows were looked at above.
                c.older = Some(spool::name_of(inst, u64::MAX));
                continue;
            }
            if !self.skip_held(&n) {
                return Some(n);
            }
            c.older = Some(n);
        }
    }

    /// Whether `name` is held (now, if it ends past the horizon).
    fn skip_held(&mut self, name: &str) -> bool {
        if self.held.contains(name) {
            return true;
        }
        match self.spool.entry(name) {
            Some(e) if self.held.is_future(e.0, Instant::now()) => {
                let now = Instant::now();
                self.held.hold(name, e, false, now);
                if self.held.over_share(self.cfg.spool_max_bytes) {
                    let gone = self.held.expired(now, self.cfg.spool_max_bytes);
                    self.drop_held(&gone, "held windows over their share of the spool");
                }
                self.pending();
                true
            }
            _ => false,
        }
    }

    /// A stream ended with `status`: when the correlator refused a window
    /// as from the future, that window is held aside (and the stream
    /// restarts without it). Returns whether so.
    pub(super) fn held_refusal(&mut self, status: &tonic::Status) -> bool {
        let Some(r) = Refusal::of(status).filter(|r| !r.permanent && r.reason == "clock_future")
        else {
            return false;
        };
        let name = spool::name_of(&r.instance, r.seq);
        let Some(entry) = self.spool.entry(&name) else {
            return false;
        };
        self.held.hold(&name, entry, true, Instant::now());
        self.held_now += 1;
        if self.held.warn_once() {
            tracing::warn!(
                instance = %r.instance,
                seq = r.seq,
                correlator = %status.message(),
                retry_max_s = RETRY_MAX.as_secs(),
                limit_s = LIMIT.as_secs(),
                "the correlator refuses windows as ahead of its clock: held aside and retried, \
                 dropped if still refused after the limit; newer windows keep flowing. Fix the host's clock (NTP)"
            );
        } else {
            tracing::debug!(instance = %r.instance, seq = r.seq, "window held aside: ahead of the correlator's clock");
        }
        self.pending();
        true
    }

    /// Drops held windows from the spool, counted as `clock_future`.
    pub(super) fn drop_held(&mut self, names: &[String], why: &str) {
        for n in names {
            self.held.forget(n);
            self.spool.remove(n);
        }
        let n = names.len() as u64;
        if n == 0 {
            return;
        }
        self.stats.dropped.fetch_add(n, Ordering::Relaxed);
        self.stats.held_dropped.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(crate::metrics_catalog::WINDOWS_DROPPED.name, "reason" => "clock_future")
            .increment(n);
        tracing::warn!(
            windows = n,
            why,
            "held-aside windows dropped from the spool"
        );
        self.pending();
    }

    /// Retries held windows (due now): one call each, the one ending first
    /// first, until one is refused again (which schedules the next retry).
    pub(super) async fn retry_held(
        &mut self,
        client: &mut IngestClient<AuthChannel>,
        delivered: &mut u64,
    ) {
        let now = Instant::now();
        let gone = self.held.expired(now, self.cfg.spool_max_bytes);
        self.drop_held(
            &gone,
            "refused as from the future past the limit, or over their share of the spool",
        );
        let round_end = now + RETRY_TIMEOUT;
        for _ in 0..PER_ROUND {
            if Instant::now() >= round_end {
                // The rest next time round (accepted: due at once).
                return;
            }
            let Some(name) = self.held.candidate() else {
                return;
            };
            let Some(w) = self.spool.read(&name) else {
                self.held.forget(&name);
                continue;
            };
            metrics::counter!(crate::metrics_catalog::SPOOL_HELD_RETRIES.name).increment(1);
            self.stats.held_retries.fetch_add(1, Ordering::Relaxed);
            let call = client.stream(tokio_stream::iter([w]));
            let r = tokio::time::timeout(RETRY_TIMEOUT, call).await;
            match r {
                Ok(Ok(s)) if s.get_ref().accepted == 1 => {
                    self.spool.remove(&name);
                    self.held.accepted(&name, Instant::now());
                    *delivered += 1;
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!(crate::metrics_catalog::WINDOWS_SENT.name).increment(1);
                    self.pending();
                }
                Ok(Ok(_)) => {
                    // A duplicate: the correlator started this instance's
                    // sequence after it (a newer window went first), so it
                    // can never take it.
                    let why = "the correlator already has newer windows of their run (counted as duplicates)";
                    self.drop_held(&[name], why);
                }
                Ok(Err(status)) if self.refused(&status) => {
                    // Refused for good meanwhile (e.g. now too old).
                    self.held.forget(&name);
                }
                Ok(Err(_)) | Err(_) => {
                    self.held.retry_failed(Instant::now());
                    return;
                }
            }
        }
    }
}
