//! The ingest service: collectors stream windows; each origin's sequence is
//! tracked so duplicates (resends after a reconnect) are dropped and gaps
//! (spool overflow) are counted. Accepted windows can be appended to an
//! ingest log — whole windows, one JSON line each, the format `replay`
//! reads — which also restores the per-origin state after a restart.
use std::{
    collections::HashMap,
    fs::File,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use proto::record::RecordLog;

use proto::v1::{Origin, Window};
use tonic::Status;

use crate::limits::LimitsConfig;

pub mod fleet;
pub mod join;
pub mod nats;
mod seq;
mod service;
pub mod shard;
pub mod summaries;
use seq::{Budget, Seq, Verdict};
pub use service::IngestService;

/// The largest window `serve` decodes (gRPC message limit, bytes).
pub const MAX_WINDOW_BYTES: usize = 16 << 20;

#[derive(Debug, Default)]
pub struct Counters {
    pub accepted: u64,
    pub duplicates: u64,
    /// Windows never received, from sequence gaps (saturating, bounded by
    /// `max_seq_jump` per window).
    pub missing: u64,
    /// Windows refused, by reason (`seq_jump`, `seq_budget`, `clock_future`,
    /// `clock_past`, `host_cap`, `rate`).
    pub rejected: std::collections::BTreeMap<&'static str, u64>,
    /// Windows refused because the ingest log could not be written.
    pub log_errors: u64,
}

/// Sequence numbers above this are never adopted (2^53: exact in JSON, and
/// 285 million years of 1-second windows).
pub const MAX_SEQ: u64 = 1 << 53;

/// For simulated or recorded clocks (the in-process simulator, replay):
/// the `[detect.limits]` defaults without the clock checks (and without the
/// skip budget, which is wall-clock time too).
fn without_clock() -> LimitsConfig {
    LimitsConfig {
        max_future_s: 0.0,
        max_past_s: 0.0,
        max_seq_skip_per_min: 0,
        ..LimitsConfig::default()
    }
}

/// The skip budget of `[detect.limits]`.
fn budget(l: &LimitsConfig) -> Budget {
    Budget {
        max_jump: l.max_seq_jump,
        per_min: l.max_seq_skip_per_min,
    }
}

/// One host's ingest state.
#[derive(Debug)]
struct Host {
    /// (instance, boot) → its sequence.
    origins: HashMap<(String, String), Seq>,
    /// Token bucket of the per-host rate limit, and its last refill.
    tokens: f64,
    refilled: std::time::Instant,
    seen: std::time::Instant,
}

struct Inner {
    hosts: HashMap<String, Host>,
    counters: Counters,
    log: Option<RecordLog>,
    /// The last log write failed (logged once per episode).
    log_failing: bool,
    /// Ingest reads the sequence, clock and host keys.
    limits: LimitsConfig,
    swept: std::time::Instant,
}

/// Shared ingest state.
#[derive(Clone)]
pub struct IngestState {
    inner: Arc<Mutex<Inner>>,
}

/// For the in-process simulator and replay: simulated clocks, so no clock
/// checks (the `[detect.limits]` defaults otherwise).
impl Default for IngestState {
    fn default() -> Self {
        Self::new(without_clock())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("ingest log {path}: {source}")]
    Log {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A refusal: counted, logged at most once per reason and host per minute
/// by the caller's status, and exported.
fn reject(c: &mut Counters, reason: &'static str, status: Status) -> Status {
    *c.rejected.entry(reason).or_insert(0) += 1;
    metrics::counter!(crate::telemetry::INGEST_REJECTED.name, "reason" => reason).increment(1);
    status
}

impl IngestState {
    pub fn new(limits: LimitsConfig) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                hosts: HashMap::new(),
                counters: Counters::default(),
                log: None,
                log_failing: false,
                limits,
                swept: std::time::Instant::now(),
            })),
        }
    }

    /// With an ingest log at `path`: existing lines restore each origin's last
    /// sequence (a truncated last line, from a crash, is cut off, and a
    /// sequence above [`MAX_SEQ`], which no collector produces, is ignored),
    /// and new windows are appended. Lines are windows in the replay format;
    /// lines of the older summary format (`hostname`, `seq` at the top) are
    /// read too.
    pub fn with_log(path: &Path, limits: LimitsConfig) -> Result<Self, IngestError> {
        let err = |source| IngestError::Log {
            path: path.to_path_buf(),
            source,
        };
        let state = Self::new(limits);
        if path.exists() {
            let f = File::open(path).map_err(err)?;
            let mut g = state.lock();
            let mut poisoned = 0u64;
            for line in BufReader::new(f).split(b'\n') {
                let line = line.map_err(err)?;
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) else {
                    continue;
                };
                let o = v.get("origin").unwrap_or(&v);
                let s = |k: &str| o.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
                let seq = v
                    .get("seq")
                    .and_then(serde_json::Value::as_u64)
                    .unwrap_or(0);
                if seq > MAX_SEQ {
                    poisoned += 1;
                    continue;
                }
                g.restore(&s("hostname"), &s("boot_id"), &s("instance"), seq);
            }
            if poisoned > 0 {
                tracing::warn!(
                    lines = poisoned,
                    "ingest log: sequence numbers above 2^53 ignored (spoofed windows accepted by an older correlator)"
                );
            }
        }
        let log = RecordLog::open(path).map_err(err)?;
        state.lock().log = Some(log);
        Ok(state)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn last_seq(&self, o: &Origin) -> u64 {
        self.lock()
            .hosts
            .get(&o.hostname)
            .and_then(|h| h.origins.get(&(o.instance.clone(), o.boot_id.clone())))
            .map_or(0, |s| s.last)
    }

    pub fn counters(&self) -> (u64, u64, u64) {
        let g = self.lock();
        (
            g.counters.accepted,
            g.counters.duplicates,
            g.counters.missing,
        )
    }

    /// Refused windows by reason.
    pub fn rejected(&self) -> std::collections::BTreeMap<&'static str, u64> {
        self.lock().counters.rejected.clone()
    }

    /// Hosts tracked now.
    pub fn hosts(&self) -> usize {
        self.lock().hosts.len()
    }

    /// Accepts `w` unless it is a duplicate. Returns whether it was new.
    pub fn accept(&self, w: &Window) -> Result<bool, Status> {
        self.admit(w, 0)
    }

    /// As [`accept`](Self::accept), charging `w` to its host's rate limit of
    /// `rate` windows per second (one second of burst; 0 = unlimited). Every
    /// refusal is counted by reason and never changes the origin's state.
    pub fn admit(&self, w: &Window, rate: u32) -> Result<bool, Status> {
        self.admit_with(w, rate, true)
    }

    /// As [`accept`](Self::accept), for a window from a JetStream durable
    /// consumer: the stream is the sequence's authority, so an origin's
    /// first window here continues where the consumer's previous holder
    /// (this process before a restart, or a shard's dead active process)
    /// stopped, and the numbers before it are not counted missing. Windows a
    /// collector lost are still counted: in the gaps after its first
    /// window here, and by the collector itself (`dropped_before`).
    pub fn admit_stream(&self, w: &Window) -> Result<bool, Status> {
        self.admit_with(w, 0, false)
    }

    /// `first_counts`: an origin's first window counts the numbers before
    /// it as missing.
    fn admit_with(&self, w: &Window, rate: u32, first_counts: bool) -> Result<bool, Status> {
        let o = w
            .origin
            .as_ref()
            .ok_or_else(|| Status::invalid_argument("window without origin"))?;
        if o.hostname.is_empty() || o.instance.is_empty() {
            return Err(Status::invalid_argument(
                "window origin needs hostname and instance",
            ));
        }
        if w.seq == 0 {
            return Err(Status::invalid_argument("window seq must start at 1"));
        }
        let now = std::time::Instant::now();
        let mut g = self.lock();
        g.sweep(now);
        g.check_clock(w, o)?;
        g.admit(w, o, (rate, first_counts), now)
    }
}

impl Host {
    fn new(tokens: f64, now: std::time::Instant) -> Self {
        Self {
            origins: HashMap::new(),
            tokens,
            refilled: now,
            seen: now,
        }
    }

    /// Takes one window from the host's token bucket of `rate` windows per
    /// second (one second of burst); `false` when it is empty.
    fn take_token(&mut self, rate: u32, now: std::time::Instant) -> bool {
        let r = f64::from(rate);
        self.tokens = (self.tokens + now.duration_since(self.refilled).as_secs_f64() * r).min(r);
        self.refilled = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

impl Inner {
    /// Refuses a window whose end lies further ahead of or behind the
    /// correlator's clock than `max_future_s` / `max_past_s`.
    fn check_clock(&mut self, w: &Window, o: &Origin) -> Result<(), Status> {
        let lim = &self.limits;
        let c = &mut self.counters;
        let skew_ms = w.end_unix_ms.saturating_sub(vocab::time::now_unix_ms());
        if lim.max_future_s > 0.0 && skew_ms as f64 > lim.max_future_s * 1000.0 {
            // Not for good (the correlator's clock moves on): named, so the
            // collector holds this window aside and retries it on a backoff
            // while newer windows flow, instead of resending it ahead of
            // them.
            let refusal = proto::v1::Refusal {
                instance: o.instance.clone(),
                seq: w.seq,
                reason: "clock_future".into(),
                permanent: false,
                min_end_unix_ms: 0,
            };
            return Err(reject(c, "clock_future", refusal.into_status(tonic::Code::OutOfRange, format!(
                "window of {} ends {:.0} s ahead of the correlator's clock (limit {} s): fix the host's clock (NTP)",
                o.hostname, skew_ms as f64 / 1000.0, lim.max_future_s
            ))));
        }
        if lim.max_past_s > 0.0 && (-skew_ms) as f64 > lim.max_past_s * 1000.0 {
            // Refused for good (the correlator's clock only moves on): the
            // collector drops it, and every window ending before the
            // horizon, from its spool instead of resending them forever.
            let horizon_ms = w.end_unix_ms.saturating_sub(skew_ms);
            let refusal = proto::v1::Refusal {
                instance: o.instance.clone(),
                seq: w.seq,
                reason: "clock_past".into(),
                permanent: true,
                min_end_unix_ms: horizon_ms.saturating_sub((lim.max_past_s * 1000.0) as i64),
            };
            return Err(reject(c, "clock_past", refusal.into_status(tonic::Code::OutOfRange, format!(
                "window of {} ends {:.0} s before the correlator's clock (limit {} s): too old to judge, or the host's clock is wrong; refused for good",
                o.hostname, -skew_ms as f64 / 1000.0, lim.max_past_s
            ))));
        }
        Ok(())
    }

    /// Admits a window whose origin and clock passed: the host cap, the
    /// origin's sequence, the host's rate, the ingest log. `first_counts`:
    /// an origin's first window counts the numbers before it as missing.
    fn admit(
        &mut self,
        w: &Window,
        o: &Origin,
        (rate, first_counts): (u32, bool),
        now: std::time::Instant,
    ) -> Result<bool, Status> {
        if !self.hosts.contains_key(&o.hostname) && self.hosts.len() >= self.limits.max_hosts {
            return Err(reject(&mut self.counters, "host_cap", Status::resource_exhausted(format!(
                "the correlator tracks its limit of {} hosts (detect.limits.max_hosts); host {} refused",
                self.limits.max_hosts, o.hostname
            ))));
        }
        let budget = budget(&self.limits);
        let host = self
            .hosts
            .entry(o.hostname.clone())
            .or_insert_with(|| Host::new(f64::from(rate), now));
        let okey = (o.instance.clone(), o.boot_id.clone());
        let origin = host.origins.get(&okey);
        let last = origin.map(|s| s.last);
        let verdict = match origin {
            Some(s) => s.judge(w.seq, now, budget),
            None if w.seq > MAX_SEQ => Verdict::TooFar,
            None => Verdict::Next { skipped: 0 },
        };
        if let Some((reason, status)) = sequence_refusal(&self.limits, verdict, w, o, last) {
            return Err(reject(&mut self.counters, reason, status));
        }
        if rate > 0 && !host.take_token(rate, now) {
            return Err(reject(
                &mut self.counters,
                "rate",
                Status::resource_exhausted(format!(
                    "host {} exceeds {rate} windows/s over all its streams; reconnect and resume",
                    o.hostname
                )),
            ));
        }
        host.seen = now;
        if verdict == Verdict::Duplicate {
            if let Some(e) = host.origins.get_mut(&okey) {
                e.seen = now;
            }
            self.counters.duplicates += 1;
            return Ok(false);
        }
        self.append(w)?;
        match last {
            Some(l) => self.count_missing(w, o, verdict, l),
            None if first_counts => self.count_missing(w, o, verdict, 0),
            None => {}
        }
        self.set_seq(&o.hostname, okey, now, |s| match s {
            Some(s) => s.accept(w.seq, verdict, now, budget),
            None => *s = Some(Seq::new(w.seq, now, budget)),
        });
        self.counters.accepted += 1;
        Ok(true)
    }

    /// Appends `w` to the ingest log, if any. Not logged = not accepted:
    /// the collector keeps the window spooled and resends it after its
    /// backoff.
    fn append(&mut self, w: &Window) -> Result<(), Status> {
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        if let Err(e) = log.append(w) {
            self.counters.log_errors += 1;
            if !self.log_failing {
                self.log_failing = true;
                tracing::error!(error = %e, "ingest log write failed; refusing windows until it works again (free space on its filesystem)");
            }
            return Err(Status::unavailable(format!(
                "correlator ingest log write failed ({e}); retry later"
            )));
        }
        if self.log_failing {
            self.log_failing = false;
            tracing::info!("ingest log writable again");
        }
        Ok(())
    }

    /// Counts the numbers an accepted window skipped past `last` as
    /// missing (a first window counts the numbers before it too).
    fn count_missing(&mut self, w: &Window, o: &Origin, verdict: Verdict, last: u64) {
        match verdict {
            Verdict::Late => tracing::debug!(
                host = %o.hostname, instance = %o.instance, seq = w.seq, last,
                "late window fills a sequence gap"
            ),
            _ if w.seq > last + 1 => {
                let missing = w.seq - last - 1;
                self.counters.missing = self.counters.missing.saturating_add(missing);
                tracing::warn!(
                    host = %o.hostname, instance = %o.instance, from = last + 1, to = w.seq - 1,
                    collector_dropped = w.dropped_before,
                    "windows missing from this collector"
                );
            }
            _ => {}
        }
    }

    fn restore(&mut self, host: &str, boot: &str, instance: &str, seq: u64) {
        let now = std::time::Instant::now();
        if !self.hosts.contains_key(host) && self.hosts.len() >= self.limits.max_hosts {
            return;
        }
        let key = (instance.to_string(), boot.to_string());
        self.hosts
            .entry(host.to_string())
            .or_insert_with(|| Host::new(0.0, now));
        let budget = budget(&self.limits);
        self.set_seq(host, key, now, |s| match s {
            Some(s) => s.restore(seq, now),
            None => *s = Some(Seq::new(seq, now, budget)),
        });
    }

    /// Updates (or, given `None`, creates) an origin's sequence; past
    /// `max_origins_per_host` the host's least recently seen origin is
    /// forgotten (counted).
    fn set_seq(
        &mut self,
        host: &str,
        key: (String, String),
        now: std::time::Instant,
        update: impl FnOnce(&mut Option<Seq>),
    ) {
        let cap = self.limits.max_origins_per_host.max(1);
        let Some(h) = self.hosts.get_mut(host) else {
            return;
        };
        if !h.origins.contains_key(&key) && h.origins.len() >= cap {
            if let Some(old) = h
                .origins
                .iter()
                .min_by_key(|(_, s)| s.seen)
                .map(|(k, _)| k.clone())
            {
                h.origins.remove(&old);
                metrics::counter!(crate::telemetry::INGEST_FORGOTTEN.name, "what" => "origin")
                    .increment(1);
            }
        }
        let mut s = h.origins.remove(&key);
        update(&mut s);
        if let Some(mut s) = s {
            s.seen = now;
            h.origins.insert(key, s);
        }
    }

    /// Forgets hosts silent for `idle_forget_s` (at most every 10 s).
    fn sweep(&mut self, now: std::time::Instant) {
        if self.limits.idle_forget_s <= 0.0
            || now.duration_since(self.swept) < std::time::Duration::from_secs(10)
        {
            return;
        }
        self.swept = now;
        let horizon = std::time::Duration::from_secs_f64(self.limits.idle_forget_s);
        let before = self.hosts.len();
        self.hosts
            .retain(|_, h| now.duration_since(h.seen) < horizon);
        let gone = before - self.hosts.len();
        if gone > 0 {
            metrics::counter!(crate::telemetry::INGEST_FORGOTTEN.name, "what" => "host")
                .increment(gone as u64);
            tracing::info!(
                hosts = gone,
                "ingest: forgot hosts idle past detect.limits.idle_forget_s"
            );
        }
    }
}

/// The refusal (reason, status) of a window whose sequence number jumps
/// too far or over the origin's skip budget, `None` otherwise.
fn sequence_refusal(
    lim: &LimitsConfig,
    verdict: Verdict,
    w: &Window,
    o: &Origin,
    last: Option<u64>,
) -> Option<(&'static str, Status)> {
    let (reason, status) = match verdict {
        Verdict::TooFar => {
            let bound = last.map_or(MAX_SEQ, |l| l.saturating_add(lim.max_seq_jump));
            let msg = format!(
                "window seq {} of {}/{} jumps past {} (last {}, detect.limits.max_seq_jump {}): refused, never adopted",
                w.seq, o.hostname, o.instance, bound, last.unwrap_or(0), lim.max_seq_jump
            );
            ("seq_jump", Status::out_of_range(msg))
        }
        Verdict::OverBudget { skipped, allowed } => {
            let msg = format!(
                "window seq {} of {}/{} skips {skipped} sequence numbers, over the {allowed} this origin may still skip \
                 (detect.limits.max_seq_skip_per_min {}): refused, never adopted; resend later or in order",
                w.seq, o.hostname, o.instance, lim.max_seq_skip_per_min
            );
            ("seq_budget", Status::resource_exhausted(msg))
        }
        Verdict::Next { .. } | Verdict::Late | Verdict::Duplicate => return None,
    };
    Some((reason, status))
}
