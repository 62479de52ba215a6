//! The sender task: spool → gRPC client stream, with resume and backoff.
use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use super::tls::{AuthChannel, BearerToken};
use proto::v1::{ingest_client::IngestClient, ResumeRequest, Window};
use tokio::{sync::mpsc, task::JoinHandle, time::Instant};
use tonic::transport::Endpoint;

use super::{held::Held, Backoff, Spool};

#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// Correlator URL, e.g. `http://127.0.0.1:50051`.
    pub endpoint: String,
    pub spool_dir: PathBuf,
    /// [`SPOOL_MAX_BYTES`](super::section::SPOOL_MAX_BYTES).
    pub spool_max_bytes: u64,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How often to ask the correlator what it has (prunes the spool).
    pub resume_every: Duration,
    /// TLS and token credentials for `endpoint` (none for `http://`).
    pub auth: super::tls::ClientAuth,
    /// For a `nats://` endpoint: the stream and subjects.
    pub nats: super::nats_target::NatsTarget,
}

/// Counters shared with the collector's main loop (and exported as metrics).
#[derive(Debug, Default)]
pub struct SenderStats {
    /// Windows written to the spool.
    pub spooled: AtomicU64,
    /// Windows sent on a stream (resends included).
    pub sent: AtomicU64,
    /// Windows confirmed by the correlator and removed from the spool.
    pub delivered: AtomicU64,
    /// Windows dropped because the spool was full.
    pub dropped: AtomicU64,
    /// Windows in the spool now.
    pub pending: AtomicU64,
    /// Damaged spool files moved to quarantine (included in `dropped`).
    pub quarantined: AtomicU64,
    /// Windows the correlator refused for good (a `permanent` refusal, e.g.
    /// `clock_past`), removed from the spool (included in `dropped`).
    pub refused: AtomicU64,
    /// Windows held aside now: refused as from the future, retried on a
    /// backoff (`held`).
    pub held: AtomicU64,
    /// Held windows dropped (past the limit, over their share, or
    /// superseded; included in `dropped`).
    pub held_dropped: AtomicU64,
    /// Retries of held windows (one call each).
    pub held_retries: AtomicU64,
    pub connected: AtomicBool,
    pub connects: AtomicU64,
}

impl SenderStats {
    pub fn summary(&self) -> String {
        format!(
            "stream: spooled {}, delivered {}, dropped {}, quarantined {}, refused {}, pending {}, sent {} (resends included), connects {}, held {}, held_dropped {}, held_retries {}",
            self.spooled.load(Ordering::Relaxed),
            self.delivered.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.quarantined.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.pending.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
            self.connects.load(Ordering::Relaxed),
            self.held.load(Ordering::Relaxed),
            self.held_dropped.load(Ordering::Relaxed),
            self.held_retries.load(Ordering::Relaxed),
        )
    }
}

/// Starts the sender. Windows sent into `rx` are spooled and streamed; when
/// `rx` closes, the task delivers what it can within `drain` and returns.
pub fn spawn(
    cfg: SenderConfig,
    rx: mpsc::Receiver<Window>,
    drain: Duration,
) -> std::io::Result<(JoinHandle<()>, Arc<SenderStats>)> {
    let spool = Spool::open(&cfg.spool_dir, cfg.spool_max_bytes)?;
    metrics::gauge!(crate::metrics_catalog::SPOOL_MAX_BYTES.name).set(cfg.spool_max_bytes as f64);
    let stats = Arc::new(SenderStats::default());
    stats.pending.store(spool.len() as u64, Ordering::Relaxed);
    let st = stats.clone();
    let h = tokio::spawn(run(cfg, spool, rx, st, drain));
    Ok((h, stats))
}

/// The longest wait between connection attempts once the input closed.
const DRAIN_RETRY: Duration = Duration::from_millis(100);

/// How long one `Resume` call may take before the attempt counts as failed.
pub(super) const RESUME_TIMEOUT: Duration = Duration::from_secs(3);

pub(super) struct Sender {
    pub(super) cfg: SenderConfig,
    pub(super) spool: Spool,
    pub(super) stats: Arc<SenderStats>,
    pub(super) rx: mpsc::Receiver<Window>,
    /// Set when the input closed: deliver until then, and return.
    pub(super) closing: Option<Instant>,
    drain: Duration,
    /// Spool names sent on the current stream and not yet confirmed.
    pub(super) in_flight: std::collections::BTreeSet<String>,
    /// Evicted from the spool after being sent: delivered or lost, decided by
    /// the next `Resume` (NATS: by its publish acknowledgement).
    pub(super) evicted_sent: std::collections::BTreeSet<String>,
    /// Quarantined spool files already counted as dropped.
    quarantined_seen: u64,
    /// Failed connection attempts in the current outage (0 = connected or
    /// never failed): the first is logged at warn, the rest at debug.
    unreachable: u64,
    /// Windows removed as refused for good in the current session (progress:
    /// the next attempt follows without backoff).
    refused_now: u64,
    /// Windows held aside in the current session (progress, too).
    pub(super) held_now: u64,
    /// Windows refused as from the future, retried on a backoff.
    pub(super) held: Held,
    /// The instance of the windows this process produced: sent ahead of
    /// windows of earlier runs.
    pub(super) running: Option<String>,
}

/// How a connection attempt ended.
pub(super) enum Session {
    /// Windows were delivered: reconnect without growing the backoff.
    Progress,
    /// Nothing delivered (unreachable, refused, failed): back off.
    Failed,
    /// The input closed and the drain time is over (or nothing is left).
    Done,
}

impl Sender {
    pub(super) fn push(&mut self, mut w: Window) {
        w.dropped_before = self.stats.dropped.load(Ordering::Relaxed);
        if let Some(o) = w.origin.as_ref().filter(|o| !o.instance.is_empty()) {
            if self.running.as_deref() != Some(o.instance.as_str()) {
                self.running = Some(o.instance.clone());
            }
        }
        match self.spool.push(&w) {
            Ok(evicted) => {
                self.stats.spooled.fetch_add(1, Ordering::Relaxed);
                let mut dropped = 0u64;
                for name in evicted {
                    self.held.forget(&name);
                    if self.in_flight.remove(&name) {
                        self.evicted_sent.insert(name);
                    } else {
                        dropped += 1;
                    }
                }
                if dropped > 0 {
                    self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
                    metrics::counter!(crate::metrics_catalog::WINDOWS_DROPPED.name, "reason" => "spool_full")
                        .increment(dropped);
                    tracing::warn!(dropped, "spool full: oldest windows dropped");
                }
                metrics::counter!(crate::metrics_catalog::WINDOWS_SPOOLED.name).increment(1);
            }
            Err(e) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                metrics::counter!(crate::metrics_catalog::WINDOWS_DROPPED.name, "reason" => "spool_write")
                    .increment(1);
                tracing::warn!(error = %e, "cannot write the spool: window dropped");
            }
        }
        self.pending();
    }

    pub(super) fn pending(&mut self) {
        // Quarantined files are windows that will never be delivered.
        let q = self.spool.quarantined - self.quarantined_seen;
        if q > 0 {
            self.quarantined_seen = self.spool.quarantined;
            self.stats.dropped.fetch_add(q, Ordering::Relaxed);
            self.stats.quarantined.fetch_add(q, Ordering::Relaxed);
        }
        self.stats
            .pending
            .store(self.spool.len() as u64, Ordering::Relaxed);
        metrics::gauge!(crate::metrics_catalog::SPOOL_WINDOWS.name).set(self.spool.len() as f64);
        metrics::gauge!(crate::metrics_catalog::SPOOL_BYTES.name).set(self.spool.bytes() as f64);
        self.stats
            .held
            .store(self.held.len() as u64, Ordering::Relaxed);
        metrics::gauge!(crate::metrics_catalog::SPOOL_HELD_WINDOWS.name)
            .set(self.held.len() as f64);
    }

    /// Nothing left to deliver but held windows (which wait for the
    /// correlator's clock, not for the drain time).
    pub(super) fn only_held_left(&self) -> bool {
        self.spool.len() <= self.held.len()
    }

    pub(super) fn closing_due(&self) -> bool {
        self.closing.is_some_and(|t| Instant::now() >= t)
    }

    /// Takes one window from the input (or notes that it closed).
    pub(super) fn input(&mut self, w: Option<Window>) {
        match w {
            Some(w) => self.push(w),
            None => self.closing = Some(Instant::now() + self.drain),
        }
    }

    /// Waits `wait`, spooling input meanwhile; returns early when the input
    /// closes (shutdown: the drain time is for delivering, not for sitting
    /// out a backoff that may be longer than it) and at the end of the drain
    /// time.
    async fn wait(&mut self, wait: Duration) {
        let until = Instant::now() + wait;
        loop {
            let end = self.closing.map_or(until, |c| c.min(until));
            tokio::select! {
                w = self.rx.recv(), if self.closing.is_none() => {
                    self.input(w);
                    if self.closing.is_some() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(end) => return,
            }
        }
    }

    /// `Resume` for one origin, bounded in time.
    async fn ask(
        client: &mut IngestClient<AuthChannel>,
        origin: proto::v1::Origin,
    ) -> Result<u64, tonic::Status> {
        let call = client.resume(ResumeRequest {
            origin: Some(origin),
        });
        match tokio::time::timeout(RESUME_TIMEOUT, call).await {
            Ok(r) => Ok(r?.into_inner().last_seq),
            Err(_) => Err(tonic::Status::deadline_exceeded(
                "the correlator did not answer Resume in time",
            )),
        }
    }

    /// Asks the correlator what it has of every instance in the spool and
    /// removes those windows. Returns how many were confirmed.
    pub(super) async fn resume(
        &mut self,
        client: &mut IngestClient<AuthChannel>,
    ) -> Result<u64, tonic::Status> {
        let mut confirmed = 0u64;
        for inst in self.spool.instances() {
            let Some(origin) = self.spool.origin(&inst).cloned() else {
                continue;
            };
            let last_seq = Self::ask(client, origin).await?;
            check_resume(&inst, last_seq, self.spool.names_after(None).as_slice());
            // Held windows stay: the correlator may still take one (a gap)
            // or count it a duplicate when it is retried.
            let n = self
                .spool
                .remove_upto(&inst, last_seq, |n| self.held.contains(n)) as u64;
            self.in_flight.retain(|name| {
                super::spool::parse_name(name).is_none_or(|(i, s)| i != inst || s > last_seq)
            });
            confirmed += n;
        }
        // Windows evicted after they were sent: confirmed ones were delivered.
        let mut last: std::collections::HashMap<String, Option<u64>> =
            std::collections::HashMap::new();
        for name in self.evicted_sent.clone() {
            let Some((inst, seq)) = super::spool::parse_name(&name) else {
                continue;
            };
            if !last.contains_key(&inst) {
                let l = match self.spool.origin(&inst).cloned() {
                    Some(o) => Self::ask(client, o).await.ok(),
                    None => None,
                };
                last.insert(inst.clone(), l);
            }
            if last.get(&inst).copied().flatten().is_some_and(|l| seq <= l) {
                self.evicted_sent.remove(&name);
                confirmed += 1;
            }
        }
        self.stats.delivered.fetch_add(confirmed, Ordering::Relaxed);
        metrics::counter!(crate::metrics_catalog::WINDOWS_SENT.name).increment(confirmed);
        self.pending();
        Ok(confirmed)
    }

    /// After a stream ended and the correlator was asked what it has: evicted
    /// windows it does not have are lost.
    pub(super) fn settle_lost(&mut self) {
        let lost = self.evicted_sent.len() as u64;
        if lost > 0 {
            self.stats.dropped.fetch_add(lost, Ordering::Relaxed);
            metrics::counter!(crate::metrics_catalog::WINDOWS_DROPPED.name, "reason" => "spool_full")
                .increment(lost);
            self.evicted_sent.clear();
        }
        self.in_flight.clear();
    }

    /// A stream ended with `status`: when the correlator refused a window for
    /// good, that window (and, given a horizon, every spooled window ending
    /// before it) leaves the spool, counted and logged, instead of being
    /// resent ahead of every newer window forever. Returns whether so.
    pub(super) fn refused(&mut self, status: &tonic::Status) -> bool {
        let Some(r) = proto::v1::Refusal::of(status).filter(|r| r.permanent) else {
            return false;
        };
        let mut gone = Vec::new();
        let name = super::spool::name_of(&r.instance, r.seq);
        if self.spool.remove(&name) {
            gone.push(name);
        }
        if r.min_end_unix_ms > 0 {
            gone.extend(self.spool.remove_ended_before(r.min_end_unix_ms));
        }
        for n in &gone {
            self.in_flight.remove(n);
            self.held.forget(n);
        }
        let n = gone.len() as u64;
        self.refused_now += n;
        self.stats.dropped.fetch_add(n, Ordering::Relaxed);
        self.stats.refused.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(crate::metrics_catalog::WINDOWS_DROPPED.name, "reason" => "refused")
            .increment(n);
        tracing::warn!(
            windows = n,
            reason = %r.reason,
            instance = %r.instance,
            seq = r.seq,
            correlator = %status.message(),
            "the correlator refused windows for good: removed from the spool, never resent"
        );
        self.pending();
        true
    }

    /// The stream call ended with `r`: a refusal for good is applied, any
    /// other error logged.
    pub(super) fn ended(
        &mut self,
        r: &Result<tonic::Response<proto::v1::StreamSummary>, tonic::Status>,
    ) {
        if let Err(e) = r {
            if !self.refused(e) && !self.held_refusal(e) {
                tracing::warn!(error = %e, "stream to the correlator ended");
            }
        }
    }

    /// A session delivering (counted as a connect) or over, in the stats
    /// and `faultline_correlator_connected`.
    pub(super) fn set_connected(&mut self, up: bool) {
        self.stats.connected.store(up, Ordering::Relaxed);
        if up {
            self.stats.connects.fetch_add(1, Ordering::Relaxed);
        }
        metrics::gauge!(crate::metrics_catalog::CORRELATOR_CONNECTED.name).set(if up {
            1.0
        } else {
            0.0
        });
    }

    /// A failed connection attempt: logged once per outage at warn.
    pub(super) fn unreachable_now(&mut self, endpoint: &str, error: &str) {
        self.unreachable += 1;
        if self.unreachable == 1 {
            tracing::warn!(
                endpoint,
                error,
                "correlator unreachable; spooling and retrying (logged once per outage)"
            );
        } else {
            tracing::debug!(
                endpoint,
                error,
                attempts = self.unreachable,
                "correlator still unreachable"
            );
        }
    }

    /// Connected after an outage: said once.
    pub(super) fn reachable_again(&mut self, endpoint: &str) {
        if self.unreachable > 0 {
            tracing::info!(
                endpoint,
                attempts = self.unreachable,
                "correlator reachable again"
            );
            self.unreachable = 0;
        }
    }

    /// One connection: connect, resume, stream the spool until the stream
    /// ends or the drain time is over.
    async fn session(&mut self) -> Session {
        if self.cfg.endpoint.starts_with("nats://") {
            let target = self.cfg.nats.clone();
            return self.nats_session(&target).await;
        }
        let (endpoint, token) = match endpoint(&self.cfg) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(endpoint = %self.cfg.endpoint, error = %e, "bad correlator endpoint; spooling only");
                // Keep spooling until the input closes.
                while let Some(w) = self.rx.recv().await {
                    self.push(w);
                }
                return Session::Done;
            }
        };
        let chan = match endpoint.connect().await {
            Ok(c) => c,
            Err(e) => {
                let url = self.cfg.endpoint.clone();
                self.unreachable_now(&url, &e.to_string());
                return Session::Failed;
            }
        };
        let url = self.cfg.endpoint.clone();
        self.reachable_again(&url);
        let mut client = IngestClient::with_interceptor(chan, token);
        self.refused_now = 0;
        self.held_now = 0;
        let mut delivered = match self.resume(&mut client).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "resume failed; retrying");
                return Session::Failed;
            }
        };
        self.set_connected(true);
        tracing::info!(endpoint = %self.cfg.endpoint, pending = self.spool.len(), "streaming to the correlator");
        let done = self.stream(&mut client, &mut delivered).await;
        self.set_connected(false);
        if done || (self.closing.is_some() && self.only_held_left()) {
            Session::Done
        } else if delivered > 0 || self.refused_now > 0 || self.held_now > 0 {
            Session::Progress
        } else {
            Session::Failed
        }
    }
}

/// The correlator's endpoint (TLS per `cfg.auth`) and bearer token.
fn endpoint(cfg: &SenderConfig) -> Result<(Endpoint, BearerToken), super::tls::TlsError> {
    let (e, token) = cfg.auth.endpoint(&cfg.endpoint)?;
    super::tls::warn_if_plaintext(&cfg.endpoint);
    Ok((e.connect_timeout(Duration::from_secs(2)), token))
}

/// The correlator claims windows of `inst` beyond the newest one in the
/// spool: it cannot have them (the spool keeps the newest windows), so
/// someone else sent windows for this collector's origin or the correlator's
/// state is wrong. Said loudly (error log, metric); returns whether so.
fn check_resume(inst: &str, last_seq: u64, spool: &[String]) -> bool {
    let newest = spool
        .iter()
        .filter_map(|n| super::spool::parse_name(n))
        .filter(|(i, _)| i == inst)
        .map(|(_, s)| s)
        .max();
    let Some(newest) = newest else {
        return false;
    };
    if last_seq <= newest {
        return false;
    }
    metrics::counter!(crate::metrics_catalog::RESUME_INCONSISTENT.name).increment(1);
    tracing::error!(
        instance = inst,
        correlator_last_seq = last_seq,
        newest_spooled = newest,
        "RESUME INCONSISTENT: the correlator claims windows this collector never produced; \
         another client may be sending windows for this host (use mTLS, docs/security.md) \
         or the correlator's ingest log is damaged"
    );
    true
}

async fn run(
    cfg: SenderConfig,
    spool: Spool,
    rx: mpsc::Receiver<Window>,
    stats: Arc<SenderStats>,
    drain: Duration,
) {
    let mut backoff = Backoff::new(cfg.backoff_min, cfg.backoff_max);
    let mut s = Sender {
        cfg,
        spool,
        stats,
        rx,
        closing: None,
        drain,
        in_flight: std::collections::BTreeSet::new(),
        evicted_sent: std::collections::BTreeSet::new(),
        quarantined_seen: 0,
        unreachable: 0,
        refused_now: 0,
        held_now: 0,
        held: Held::default(),
        running: None,
    };
    s.pending();
    loop {
        if s.closing_due() {
            return;
        }
        match s.session().await {
            Session::Done => return,
            Session::Progress => backoff.reset(),
            Session::Failed => {}
        }
        if s.closing_due() || (s.closing.is_some() && s.only_held_left()) {
            return;
        }
        let mut wait = backoff.next_wait();
        if s.closing.is_some() {
            // Draining: retry at a short fixed interval until the drain time
            // ends, so a correlator that comes back during it gets the spool.
            wait = wait.min(DRAIN_RETRY);
        }
        s.wait(wait).await;
    }
}

#[cfg(test)]
#[path = "sender_tests.rs"]
mod tests;
