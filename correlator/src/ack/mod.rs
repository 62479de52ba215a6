//! Operator acknowledgements (docs/alerting.md, "Acknowledging"): who took
//! an open incident and why, optionally for a while. An acknowledged
//! incident stays open in the engine and keeps absorbing its symptoms;
//! only its notifications stop (the Alertmanager pusher silences its
//! alert). Acknowledgements are set through the web API with the operator
//! token (`[web] operator_token_file`), kept in the history database and
//! restored after a restart; one ends when the operator clears it, when its
//! time runs out, or when the incident resolves.
pub mod cli;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use proto::v1::CandidateUpdate;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::history::AckRow;

/// Acknowledged incidents kept at most (one per open incident; a fleet
/// with more open incidents than this has bigger problems).
pub const MAX_ACKS: usize = 10_000;
/// Longest `by` and `why`, in characters.
pub const MAX_BY: usize = 64;
pub const MAX_WHY: usize = 512;
/// Shortest and longest acknowledgement with a duration.
pub const MIN_FOR_S: u64 = 60;
pub const MAX_FOR_S: u64 = 30 * 86_400;

/// One acknowledgement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    pub incident_id: String,
    /// Who (free text: a user name, a ticket queue).
    pub by: String,
    /// Why (free text: "cable replacement scheduled, RITM123").
    pub why: String,
    /// When it was set (unix ms).
    pub ts_ms: i64,
    /// When it ends by itself (unix ms); `None`: when the incident resolves.
    pub until_ms: Option<i64>,
}

impl Ack {
    /// As restored from the history.
    pub fn from_row(r: &AckRow) -> Self {
        Self {
            incident_id: r.incident_id.clone(),
            by: r.by.clone(),
            why: r.why.clone(),
            ts_ms: r.ts_ms,
            until_ms: r.until_ms,
        }
    }

    /// Its `set` row for the history.
    pub fn set_row(&self) -> AckRow {
        AckRow {
            incident_id: self.incident_id.clone(),
            ts_ms: self.ts_ms,
            action: "set".into(),
            by: self.by.clone(),
            why: self.why.clone(),
            until_ms: self.until_ms,
        }
    }

    /// Whether it still holds at `now_ms`.
    pub fn holds(&self, now_ms: i64) -> bool {
        self.until_ms.is_none_or(|u| now_ms < u)
    }
}

/// A change, as the pusher and the history see it.
#[derive(Clone, Debug, PartialEq)]
pub enum AckEvent {
    Set(Ack),
    /// Cleared by an operator (`by`) or ended with its incident (`by` empty).
    Cleared {
        incident_id: String,
        by: String,
        ts_ms: i64,
    },
}

/// What an acknowledgement request asks for.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AckRequest {
    pub by: String,
    pub why: String,
    /// Seconds it holds; 0: until the incident resolves.
    pub for_s: u64,
}

/// Why an acknowledgement was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AckError {
    #[error("acknowledgement is off: set `[web] operator_token_file` to a file holding the operator token")]
    Off,
    #[error("missing or wrong operator token: send `Authorization: Bearer <token>` with the token in `[web] operator_token_file`")]
    Unauthorized,
    #[error("`by` must be 1..={MAX_BY} printable characters (who acknowledges)")]
    BadBy,
    #[error("`why` must be 1..={MAX_WHY} printable characters (the reason)")]
    BadWhy,
    #[error("`for_s` must be 0 (until resolved) or {MIN_FOR_S}..={MAX_FOR_S} seconds")]
    BadFor,
    #[error("no open incident {0}: only open incidents can be acknowledged")]
    NotOpen(String),
    #[error("incident {0} is not acknowledged")]
    NotAcked(String),
    #[error("{MAX_ACKS} incidents are acknowledged already: clear some first")]
    Full,
    #[error("`{field}` has U+{code:04X} at character {at}: control, invisible and text-direction characters are refused (they would make the text read differently from what it holds)")]
    Unprintable {
        field: &'static str,
        at: usize,
        code: u32,
    },
}

/// Whether `c` is refused in a `by` or `why`: control characters, the
/// bidirectional embeddings, overrides, isolates and marks (a reason that
/// reads backwards, or hides a part), zero-width characters and line or
/// paragraph separators.
fn refused_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

fn printable(s: &str, max: usize) -> bool {
    let n = s.chars().count();
    n > 0 && n <= max && !s.chars().any(refused_char) && !s.trim().is_empty()
}

/// The first refused character of `field`'s value `s`, as the error.
fn check_chars(field: &'static str, s: &str) -> Result<(), AckError> {
    match s.chars().enumerate().find(|(_, c)| refused_char(*c)) {
        Some((i, c)) => Err(AckError::Unprintable {
            field,
            at: i + 1,
            code: u32::from(c),
        }),
        None => Ok(()),
    }
}

/// Checks a `by` (who acknowledges or clears).
pub fn check_by(by: &str) -> Result<(), AckError> {
    check_chars("by", by)?;
    if printable(by, MAX_BY) {
        Ok(())
    } else {
        Err(AckError::BadBy)
    }
}

/// Checks a `why` (the reason): required to set, optional to clear.
pub fn check_why(why: &str, required: bool) -> Result<(), AckError> {
    check_chars("why", why)?;
    if (!required && why.is_empty()) || printable(why, MAX_WHY) {
        Ok(())
    } else {
        Err(AckError::BadWhy)
    }
}

impl AckRequest {
    /// The acknowledgement of `incident_id` at `now_ms`, or why not.
    pub fn ack(&self, incident_id: &str, now_ms: i64) -> Result<Ack, AckError> {
        check_by(&self.by)?;
        check_why(&self.why, true)?;
        if self.for_s != 0 && !(MIN_FOR_S..=MAX_FOR_S).contains(&self.for_s) {
            return Err(AckError::BadFor);
        }
        let for_ms = i64::try_from(self.for_s.saturating_mul(1000)).unwrap_or(i64::MAX);
        Ok(Ack {
            incident_id: incident_id.to_string(),
            by: self.by.trim().to_string(),
            why: self.why.trim().to_string(),
            ts_ms: now_ms,
            until_ms: (self.for_s != 0).then(|| now_ms.saturating_add(for_ms)),
        })
    }
}

/// The operator token, compared in constant time.
#[derive(Clone)]
struct Token(Vec<u8>);

impl Token {
    fn matches(&self, given: &[u8]) -> bool {
        if given.len() != self.0.len() {
            return false;
        }
        self.0
            .iter()
            .zip(given)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

/// The acknowledged incidents, shared by the web API, the pusher and the
/// history recorder.
pub struct Acks {
    by_id: Mutex<HashMap<String, Ack>>,
    events: broadcast::Sender<AckEvent>,
    token: Option<Token>,
}

impl std::fmt::Debug for Acks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Acks({})", self.lock().len())
    }
}

impl Acks {
    /// `token`: the operator token (acknowledging is refused without one).
    pub fn new(token: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            by_id: Mutex::default(),
            events: broadcast::channel(1024).0,
            token: token
                .map(|t| t.trim().as_bytes().to_vec())
                .filter(|t| !t.is_empty())
                .map(Token),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ack>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Checks an `Authorization` header against the operator token.
    pub fn authorize(&self, header: Option<&str>) -> Result<(), AckError> {
        let Some(token) = &self.token else {
            return Err(AckError::Off);
        };
        let given = header
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        if token.matches(given.as_bytes()) {
            Ok(())
        } else {
            Err(AckError::Unauthorized)
        }
    }

    /// Changes, for the pusher and the history.
    pub fn subscribe(&self) -> broadcast::Receiver<AckEvent> {
        self.events.subscribe()
    }

    /// Puts back the acknowledgements in force after a restart (the
    /// history's, on incidents it holds open; no events: Alertmanager's
    /// silences are refreshed by the pusher). Those past their end are
    /// left out.
    pub fn restore(&self, acks: impl IntoIterator<Item = Ack>, now_ms: i64) -> usize {
        let mut m = self.lock();
        for a in acks {
            if a.holds(now_ms) && m.len() < MAX_ACKS {
                m.insert(a.incident_id.clone(), a);
            }
        }
        m.len()
    }

    /// Sets (or replaces) the acknowledgement of an open incident.
    pub fn set(&self, ack: Ack, open: &[CandidateUpdate]) -> Result<(), AckError> {
        if !open.iter().any(|u| u.incident_id == ack.incident_id) {
            return Err(AckError::NotOpen(ack.incident_id));
        }
        {
            let mut m = self.lock();
            if m.len() >= MAX_ACKS && !m.contains_key(&ack.incident_id) {
                return Err(AckError::Full);
            }
            m.insert(ack.incident_id.clone(), ack.clone());
        }
        metrics::counter!(crate::telemetry::ACKS.name, "action" => "set").increment(1);
        let _ = self.events.send(AckEvent::Set(ack));
        Ok(())
    }

    /// Clears an acknowledgement (`by`: the operator; empty when it ended
    /// with its incident).
    pub fn clear(&self, incident_id: &str, by: &str, now_ms: i64) -> Result<Ack, AckError> {
        let gone = self
            .lock()
            .remove(incident_id)
            .ok_or_else(|| AckError::NotAcked(incident_id.to_string()))?;
        let action = if by.is_empty() { "ended" } else { "cleared" };
        metrics::counter!(crate::telemetry::ACKS.name, "action" => action).increment(1);
        let _ = self.events.send(AckEvent::Cleared {
            incident_id: incident_id.to_string(),
            by: by.to_string(),
            ts_ms: now_ms,
        });
        Ok(gone)
    }

    /// The acknowledgement of an incident, if it holds at `now_ms`.
    pub fn get(&self, incident_id: &str, now_ms: i64) -> Option<Ack> {
        self.lock()
            .get(incident_id)
            .filter(|a| a.holds(now_ms))
            .cloned()
    }

    /// Every acknowledgement that holds at `now_ms`; those whose time ran
    /// out are cleared (with an event).
    pub fn current(&self, now_ms: i64) -> Vec<Ack> {
        let expired: Vec<String> = self
            .lock()
            .values()
            .filter(|a| !a.holds(now_ms))
            .map(|a| a.incident_id.clone())
            .collect();
        for id in expired {
            let _ = self.clear(&id, "", now_ms);
        }
        let mut v: Vec<Ack> = self.lock().values().cloned().collect();
        v.sort_by(|a, b| a.incident_id.cmp(&b.incident_id));
        v
    }

    /// Follows the engine's updates: an incident that resolves takes its
    /// acknowledgement with it. After missed updates, the acknowledgements
    /// of incidents no longer in `open` end.
    pub fn follow(
        self: &Arc<Self>,
        mut updates: broadcast::Receiver<CandidateUpdate>,
        open: Arc<Mutex<Vec<CandidateUpdate>>>,
    ) -> tokio::task::JoinHandle<()> {
        let acks = self.clone();
        tokio::spawn(async move {
            loop {
                match updates.recv().await {
                    Ok(u) if u.state == "resolved" => {
                        let _ = acks.clear(&u.incident_id, "", u.ts_unix_ms);
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let now = vocab::time::now_unix_ms();
                        let open = open.lock().map(|o| o.clone()).unwrap_or_default();
                        acks.prune(&open, now);
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        })
    }

    /// Ends the acknowledgements of incidents not in `open`.
    pub fn prune(&self, open: &[CandidateUpdate], now_ms: i64) {
        let gone: Vec<String> = self
            .lock()
            .keys()
            .filter(|id| !open.iter().any(|u| &u.incident_id == *id))
            .cloned()
            .collect();
        for id in gone {
            let _ = self.clear(&id, "", now_ms);
        }
    }
}

/// The registry for `serve`: the operator token (`[web]
/// operator_token_file`), the acknowledgements in force restored from the
/// history, and following the engine's updates (an incident that resolves
/// ends its acknowledgement).
pub fn start(
    token: Option<String>,
    history: Option<&crate::history::Opened>,
    updates: broadcast::Receiver<CandidateUpdate>,
    open: Arc<Mutex<Vec<CandidateUpdate>>>,
) -> Result<Arc<Acks>, crate::history::HistoryError> {
    let acks = Acks::new(token);
    if let Some(h) = history {
        let rows = h
            .reader
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live_acks()?;
        let now = vocab::time::now_unix_ms();
        let n = acks.restore(rows.iter().map(Ack::from_row), now);
        if n > 0 {
            tracing::info!(restored = n, "acknowledgements restored from the history");
        }
    }
    acks.follow(updates, open);
    Ok(acks)
}

#[cfg(test)]
mod tests;
