//! The sender task: spool → gRPC client stream, with resume and backoff.
use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use proto::v1::{ingest_client::IngestClient, ResumeRequest, Window};
use tokio::{sync::mpsc, task::JoinHandle, time::Instant};
use tokio_stream::wrappers::ReceiverStream;

use super::Spool;

#[derive(Clone, Debug)]
pub struct SenderConfig {
    /// Correlator URL, e.g. `http://127.0.0.1:50051`.
    pub endpoint: String,
    pub spool_dir: PathBuf,
    pub spool_max_bytes: u64,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// How often to ask the correlator what it has (prunes the spool).
    pub resume_every: Duration,
    /// TLS and token credentials for `endpoint` (none for `http://`).
    pub auth: super::tls::ClientAuth,
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
    pub connected: AtomicBool,
    pub connects: AtomicU64,
}

impl SenderStats {
    pub fn summary(&self) -> String {
        format!(
            "stream: spooled {}, delivered {}, dropped {}, pending {}, sent {} (resends included), connects {}",
            self.spooled.load(Ordering::Relaxed),
            self.delivered.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.pending.load(Ordering::Relaxed),
            self.sent.load(Ordering::Relaxed),
            self.connects.load(Ordering::Relaxed),
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
    let stats = Arc::new(SenderStats::default());
    stats.pending.store(spool.len() as u64, Ordering::Relaxed);
    let st = stats.clone();
    let h = tokio::spawn(async move { run(cfg, spool, rx, st, drain).await });
    Ok((h, stats))
}

/// Capped exponential backoff with full jitter in [d/2, d].
fn jittered(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    let frac = 0.5 + f64::from(nanos % 1000) / 2000.0;
    d.mul_f64(frac)
}

struct Sender {
    cfg: SenderConfig,
    spool: Spool,
    stats: Arc<SenderStats>,
    /// Spool names sent on the current stream and not yet confirmed.
    in_flight: std::collections::BTreeSet<String>,
    /// Evicted from the spool after being sent: delivered or lost, decided by
    /// the next `Resume`.
    evicted_sent: std::collections::BTreeSet<String>,
    /// Origins by instance, for `Resume` of evicted windows.
    origins: std::collections::HashMap<String, proto::v1::Origin>,
}

impl Sender {
    fn push(&mut self, mut w: Window) {
        w.dropped_before = self.stats.dropped.load(Ordering::Relaxed);
        if let Some(o) = &w.origin {
            if !self.origins.contains_key(&o.instance) {
                self.origins.insert(o.instance.clone(), o.clone());
            }
        }
        match self.spool.push(&w) {
            Ok(evicted) => {
                self.stats.spooled.fetch_add(1, Ordering::Relaxed);
                let mut dropped = 0u64;
                for name in evicted {
                    if self.in_flight.remove(&name) {
                        self.evicted_sent.insert(name);
                    } else {
                        dropped += 1;
                    }
                }
                if dropped > 0 {
                    self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
                    metrics::counter!("faultline_windows_dropped_total", "reason" => "spool_full")
                        .increment(dropped);
                    tracing::warn!(dropped, "spool full: oldest windows dropped");
                }
                metrics::counter!("faultline_windows_spooled_total").increment(1);
            }
            Err(e) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("faultline_windows_dropped_total", "reason" => "spool_write")
                    .increment(1);
                tracing::warn!(error = %e, "cannot write the spool: window dropped");
            }
        }
        self.pending();
    }

    fn pending(&self) {
        self.stats
            .pending
            .store(self.spool.len() as u64, Ordering::Relaxed);
        metrics::gauge!("faultline_spool_windows").set(self.spool.len() as f64);
        metrics::gauge!("faultline_spool_bytes").set(self.spool.bytes() as f64);
    }

    /// Asks the correlator what it has of every instance in the spool and
    /// removes those windows.
    async fn resume(
        &mut self,
        client: &mut IngestClient<super::tls::AuthChannel>,
    ) -> Result<(), tonic::Status> {
        for inst in self.spool.instances() {
            let Some(name) = self
                .spool
                .names_after(None)
                .into_iter()
                .find(|n| n.starts_with(&format!("{inst}~")))
            else {
                continue;
            };
            let Some(w) = self.spool.read(&name) else {
                continue;
            };
            let reply = client
                .resume(ResumeRequest { origin: w.origin })
                .await?
                .into_inner();
            check_resume(
                &inst,
                reply.last_seq,
                self.spool.names_after(None).as_slice(),
            );
            let n = self.spool.remove_upto(&inst, reply.last_seq);
            self.in_flight.retain(|name| {
                super::spool::parse_name(name).is_none_or(|(i, s)| i != inst || s > reply.last_seq)
            });
            self.stats.delivered.fetch_add(n as u64, Ordering::Relaxed);
            metrics::counter!("faultline_windows_sent_total").increment(n as u64);
        }
        // Windows evicted after they were sent: confirmed ones were delivered.
        if !self.evicted_sent.is_empty() {
            let names: Vec<String> = self.evicted_sent.iter().cloned().collect();
            let mut last: std::collections::HashMap<String, Option<u64>> =
                std::collections::HashMap::new();
            for name in names {
                let Some((inst, seq)) = super::spool::parse_name(&name) else {
                    continue;
                };
                if !last.contains_key(&inst) {
                    let origin = proto::v1::Origin {
                        instance: inst.clone(),
                        ..self.origin_of(&inst)
                    };
                    let l = client
                        .resume(ResumeRequest {
                            origin: Some(origin),
                        })
                        .await
                        .ok()
                        .map(|r| r.into_inner().last_seq);
                    last.insert(inst.clone(), l);
                }
                if let Some(Some(l)) = last.get(&inst) {
                    if seq <= *l {
                        self.evicted_sent.remove(&name);
                        self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("faultline_windows_sent_total").increment(1);
                    }
                }
            }
        }
        self.pending();
        Ok(())
    }

    /// The origin (host, boot) of a spool instance, from any window of it
    /// seen in this process.
    fn origin_of(&self, inst: &str) -> proto::v1::Origin {
        self.origins.get(inst).cloned().unwrap_or_default()
    }

    /// After a stream ended and the correlator was asked what it has: evicted
    /// windows it does not have are lost.
    fn settle_lost(&mut self) {
        let lost = self.evicted_sent.len() as u64;
        if lost > 0 {
            self.stats.dropped.fetch_add(lost, Ordering::Relaxed);
            metrics::counter!("faultline_windows_dropped_total", "reason" => "spool_full")
                .increment(lost);
            self.evicted_sent.clear();
        }
        self.in_flight.clear();
    }
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
    metrics::counter!("faultline_resume_inconsistent_total").increment(1);
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
    mut rx: mpsc::Receiver<Window>,
    stats: Arc<SenderStats>,
    drain: Duration,
) {
    let mut s = Sender {
        cfg,
        spool,
        stats,
        in_flight: std::collections::BTreeSet::new(),
        evicted_sent: std::collections::BTreeSet::new(),
        origins: std::collections::HashMap::new(),
    };
    let mut backoff = s.cfg.backoff_min;
    let mut closing: Option<Instant> = None;
    loop {
        if closing.is_some_and(|t| Instant::now() >= t) {
            return;
        }
        // Connect (keep spooling meanwhile).
        let (endpoint, token) = match s.cfg.auth.endpoint(&s.cfg.endpoint) {
            Ok((e, token)) => (e.connect_timeout(Duration::from_secs(2)), token),
            Err(e) => {
                tracing::error!(endpoint = %s.cfg.endpoint, error = %e, "bad correlator endpoint; spooling only");
                // Keep spooling until the input closes.
                while let Some(w) = rx.recv().await {
                    s.push(w);
                }
                return;
            }
        };
        let chan = match endpoint.connect().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "correlator unreachable");
                let wait = jittered(backoff);
                backoff = (backoff * 2).min(s.cfg.backoff_max);
                let until = Instant::now() + wait;
                loop {
                    tokio::select! {
                        w = rx.recv(), if closing.is_none() => match w {
                            Some(w) => s.push(w),
                            None => closing = Some(Instant::now() + drain),
                        },
                        () = tokio::time::sleep_until(closing.map_or(until, |c| c.min(until))) => break,
                    }
                }
                continue;
            }
        };
        let mut client = IngestClient::with_interceptor(chan, token);
        if let Err(e) = s.resume(&mut client).await {
            tracing::debug!(error = %e, "resume failed");
            continue;
        }
        backoff = s.cfg.backoff_min;
        s.stats.connected.store(true, Ordering::Relaxed);
        s.stats.connects.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("faultline_correlator_connected").set(1.0);
        tracing::info!(endpoint = %s.cfg.endpoint, pending = s.spool.len(), "streaming to the correlator");

        let (tx, req_rx) = mpsc::channel::<Window>(64);
        let mut stream_client = client.clone();
        let mut call =
            Box::pin(async move { stream_client.stream(ReceiverStream::new(req_rx)).await });
        let mut last_sent: Option<String> = None;
        let mut resume_tick = tokio::time::interval(s.cfg.resume_every);
        resume_tick.tick().await;
        let mut tx = Some(tx);
        'stream: loop {
            // Send everything not yet sent on this stream, in order.
            if let Some(t) = tx.as_ref() {
                for name in s.spool.names_after(last_sent.as_deref()) {
                    let Some(w) = s.spool.read(&name) else {
                        continue;
                    };
                    match tokio::time::timeout(Duration::from_secs(1), t.send(w)).await {
                        Ok(Ok(())) => {
                            s.stats.sent.fetch_add(1, Ordering::Relaxed);
                            s.in_flight.insert(name.clone());
                            last_sent = Some(name);
                        }
                        Ok(Err(_)) => break 'stream,
                        Err(_) => break,
                    }
                }
            }
            if closing.is_some()
                && tx.is_some()
                && s.spool.names_after(last_sent.as_deref()).is_empty()
            {
                // Everything sent: end the stream so the correlator finishes it.
                tx = None;
            }
            tokio::select! {
                w = rx.recv(), if closing.is_none() => match w {
                    Some(w) => s.push(w),
                    None => closing = Some(Instant::now() + drain),
                },
                r = &mut call => {
                    if let Err(e) = r {
                        tracing::warn!(error = %e, "stream to the correlator ended");
                    }
                    break 'stream;
                }
                _ = resume_tick.tick() => {
                    if s.resume(&mut client).await.is_err() {
                        break 'stream;
                    }
                }
                () = tokio::time::sleep_until(closing.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))) => {
                    if s.resume(&mut client).await.is_ok() {
                        s.settle_lost();
                    }
                    return;
                }
            }
        }
        // Stream over: learn what arrived, then reconnect (or finish).
        if s.resume(&mut client).await.is_ok() {
            s.settle_lost();
        }
        s.stats.connected.store(false, Ordering::Relaxed);
        metrics::gauge!("faultline_correlator_connected").set(0.0);
        if closing.is_some() && s.spool.is_empty() {
            return;
        }
    }
}

#[cfg(test)]
mod resume_tests {
    use super::check_resume;

    #[test]
    fn a_resume_beyond_the_newest_spooled_window_is_inconsistent() {
        let spool: Vec<String> = (5..=10).map(|s| format!("i1~{s:020}.win")).collect();
        assert!(!check_resume("i1", 7, &spool));
        assert!(!check_resume("i1", 10, &spool));
        assert!(check_resume("i1", u64::MAX, &spool));
        assert!(check_resume("i1", 11, &spool));
        // Another instance's windows say nothing about i1.
        assert!(!check_resume("i2", 99, &spool));
    }
}
