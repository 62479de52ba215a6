//! Acknowledged incidents as Alertmanager silences: one silence per
//! acknowledged incident, matching its alert's `incident_id` label, with
//! the operator as `createdBy` and the reason as `comment`. A silence is
//! leased, not set for good: it ends a lease after the last refresh (or at
//! the acknowledgement's own end, if sooner), and the pusher refreshes it
//! while the acknowledgement holds. If the correlator dies, notifications
//! come back by themselves within a lease (fail-open); a cleared or ended
//! acknowledgement expires its silence at once.
use std::{collections::HashMap, time::Duration};

use serde_json::{json, Value};

use super::rfc3339;
use crate::{
    ack::Ack,
    http_client::{request_with, Tls},
};

/// Where and how to reach Alertmanager's silences API.
pub(super) struct Target<'a> {
    pub base: &'a str,
    pub tls: Option<&'a Tls>,
    pub timeout: Duration,
}

/// A silence this pusher holds.
#[derive(Clone, Debug)]
struct Held {
    id: String,
    ends_ms: i64,
    /// The acknowledgement it stands for (`ts_ms`: a new one replaces it).
    ack_ms: i64,
    /// Its `startsAt` as Alertmanager holds it: a refresh must send it
    /// unchanged, or Alertmanager expires the silence and makes a new one
    /// (it updates an active silence in place only when the start is kept).
    starts: Option<String>,
}

/// The silences this pusher holds, by incident id.
#[derive(Debug, Default)]
pub(super) struct Silences {
    by_incident: HashMap<String, Held>,
    /// Whether the silences a previous run left were taken over.
    adopted: bool,
}

/// The comment of every silence this pusher sets (how a restarted pusher
/// recognises its own).
const COMMENT: &str = "faultline acknowledgement: ";

/// The lease of a silence for a pusher re-sending every `resend_s`: at
/// least 15 minutes and 4 re-sends.
pub(super) fn lease_ms(resend_s: f64) -> i64 {
    ((resend_s * 4_000.0) as i64).max(15 * 60_000)
}

/// The silence of `ack` ending at `ends_ms`; `held`: the one it refreshes
/// (its id and start), else a new one starting now.
fn body(ack: &Ack, held: Option<&Held>, now_ms: i64, ends_ms: i64) -> Value {
    let mut v = json!({
        "matchers": [{
            "name": "incident_id", "value": ack.incident_id, "isRegex": false, "isEqual": true,
        }],
        "startsAt": held.and_then(|h| h.starts.clone()).unwrap_or_else(|| rfc3339(now_ms)),
        "endsAt": rfc3339(ends_ms),
        "createdBy": ack.by,
        "comment": format!("{COMMENT}{}", ack.why),
    });
    if let Some(h) = held {
        v["id"] = json!(h.id);
    }
    v
}

impl Silences {
    /// Brings Alertmanager's silences in line with `want` (the
    /// acknowledgements in force): new or soon-ending ones are posted,
    /// those of gone acknowledgements expired. Failures are counted and
    /// retried at the next call.
    pub async fn sync(&mut self, want: &[Ack], now_ms: i64, lease_ms: i64, t: &Target<'_>) {
        if !self.adopted {
            self.adopt(t).await;
        }
        for ack in want {
            let held = self.by_incident.get(&ack.incident_id).cloned();
            let ends = ack
                .until_ms
                .map_or(now_ms + lease_ms, |u| u.min(now_ms + lease_ms));
            let fresh = |h: &Held| {
                h.ack_ms == ack.ts_ms && (h.ends_ms - now_ms > lease_ms / 2 || h.ends_ms >= ends)
            };
            if held.as_ref().is_some_and(fresh) {
                continue;
            }
            let sent = body(ack, held.as_ref(), now_ms, ends);
            let url = format!("{}/api/v2/silences", t.base);
            match request_with(
                "POST",
                &url,
                Some(sent.to_string().into_bytes()),
                t.timeout,
                t.tls,
            )
            .await
            {
                Ok((200..=299, reply)) => {
                    let v: Value = serde_json::from_slice(&reply).unwrap_or_default();
                    let Some(id) = v["silenceID"].as_str() else {
                        failed("set", &format!("no silenceID in {v}"));
                        continue;
                    };
                    if held.is_none() {
                        tracing::info!(incident = %ack.incident_id, silence = %id, by = %ack.by, "acknowledged incident silenced in Alertmanager");
                    }
                    metrics::counter!(crate::telemetry::ALERTS_SILENCES.name, "action" => "set")
                        .increment(1);
                    // Updated in place: its start is unchanged. A new one:
                    // its start as Alertmanager set it (clamped to its own
                    // clock), for the refreshes.
                    let starts = match held.filter(|h| h.id == id && h.starts.is_some()) {
                        Some(h) => h.starts,
                        None => starts_of(t, id).await,
                    };
                    self.by_incident.insert(
                        ack.incident_id.clone(),
                        Held {
                            id: id.to_string(),
                            ends_ms: ends,
                            ack_ms: ack.ts_ms,
                            starts,
                        },
                    );
                }
                r => failed("set", &outcome(r)),
            }
        }
        let gone: Vec<(String, String)> = self
            .by_incident
            .iter()
            .filter(|(inc, _)| !want.iter().any(|a| &a.incident_id == *inc))
            .map(|(inc, h)| (inc.clone(), h.id.clone()))
            .collect();
        for (inc, id) in gone {
            let url = format!("{}/api/v2/silence/{id}", t.base);
            match request_with("DELETE", &url, None, t.timeout, t.tls).await {
                // 404: already expired or deleted by hand.
                Ok((200..=299 | 404, _)) => {
                    tracing::info!(incident = %inc, silence = %id, "acknowledgement ended; Alertmanager silence expired");
                    metrics::counter!(crate::telemetry::ALERTS_SILENCES.name, "action" => "expired")
                        .increment(1);
                    self.by_incident.remove(&inc);
                }
                r => failed("expire", &outcome(r)),
            }
        }
    }
}

/// The `startsAt` Alertmanager holds for silence `id`; `None` when it
/// cannot be read (the next refresh then replaces the silence: harmless).
async fn starts_of(t: &Target<'_>, id: &str) -> Option<String> {
    let url = format!("{}/api/v2/silence/{id}", t.base);
    match request_with("GET", &url, None, t.timeout, t.tls).await {
        Ok((200..=299, body)) => serde_json::from_slice::<Value>(&body)
            .ok()?
            .get("startsAt")?
            .as_str()
            .map(str::to_string),
        r => {
            failed("get", &outcome(r));
            None
        }
    }
}

impl Silences {
    /// Takes over the active silences a previous run set (after a restart):
    /// those of acknowledgements still in force are refreshed under their
    /// id, the others expired, instead of leaving a second silence that
    /// outlives a cleared acknowledgement.
    async fn adopt(&mut self, t: &Target<'_>) {
        let url = format!("{}/api/v2/silences", t.base);
        let list = match request_with("GET", &url, None, t.timeout, t.tls).await {
            Ok((200..=299, body)) => {
                serde_json::from_slice::<Vec<Value>>(&body).unwrap_or_default()
            }
            r => return failed("list", &outcome(r)),
        };
        for s in list {
            if let Some((incident, id)) = own_active(&s) {
                let starts = s["startsAt"].as_str().map(str::to_string);
                tracing::info!(incident = %incident, silence = %id, "taking over a silence a previous run set");
                // Refreshed (or expired) at once: no end, no acknowledgement.
                let held = Held {
                    id,
                    ends_ms: 0,
                    ack_ms: -1,
                    starts,
                };
                self.by_incident.insert(incident, held);
            }
        }
        self.adopted = true;
    }
}

/// The incident and silence id of an active silence this pusher set.
fn own_active(s: &Value) -> Option<(String, String)> {
    let own = s["comment"].as_str()?.starts_with(COMMENT) && s["status"]["state"] == "active";
    let m = s["matchers"].as_array()?;
    if !own || m.len() != 1 || m[0]["name"] != "incident_id" {
        return None;
    }
    Some((
        m[0]["value"].as_str()?.to_string(),
        s["id"].as_str()?.to_string(),
    ))
}

fn outcome(r: Result<(u16, Vec<u8>), crate::http_client::HttpError>) -> String {
    match r {
        Ok((status, body)) => format!("HTTP {status}: {}", String::from_utf8_lossy(&body)),
        Err(e) => e.to_string(),
    }
}

fn failed(action: &'static str, why: &str) {
    metrics::counter!(crate::telemetry::ALERTS_SILENCE_FAILURES.name, "action" => action)
        .increment(1);
    tracing::warn!(action, error = %why, "Alertmanager silence request failed; retrying at the next resend");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silence_matches_the_incident_and_names_the_operator() {
        let ack = Ack {
            incident_id: "inc-9".into(),
            by: "alice".into(),
            why: "optics swap at 14:00".into(),
            ts_ms: 0,
            until_ms: None,
        };
        let held = Held {
            id: "s-1".into(),
            ends_ms: 0,
            ack_ms: -1,
            starts: Some("1970-01-01T00:00:00.500Z".into()),
        };
        let v = body(&ack, Some(&held), 1_000, 901_000);
        // A refresh keeps the start Alertmanager holds.
        assert_eq!(v["startsAt"], "1970-01-01T00:00:00.500Z");
        assert_eq!(
            body(&ack, None, 1_000, 901_000)["startsAt"],
            "1970-01-01T00:00:01.000Z"
        );
        assert_eq!(v["matchers"][0]["name"], "incident_id");
        assert_eq!(v["matchers"][0]["value"], "inc-9");
        assert_eq!(v["matchers"][0]["isEqual"], true);
        assert_eq!(v["createdBy"], "alice");
        assert_eq!(
            v["comment"],
            "faultline acknowledgement: optics swap at 14:00"
        );
        assert_eq!(v["endsAt"], "1970-01-01T00:15:01.000Z");
        assert_eq!(v["id"], "s-1");
        assert_eq!(lease_ms(60.0), 15 * 60_000);
        assert_eq!(lease_ms(600.0), 40 * 60_000);
    }

    #[test]
    fn only_its_own_active_silences_are_taken_over() {
        let mine = json!({"id": "s1", "status": {"state": "active"},
            "comment": "faultline acknowledgement: swap",
            "matchers": [{"name": "incident_id", "value": "inc-1", "isRegex": false}]});
        assert_eq!(own_active(&mine), Some(("inc-1".into(), "s1".into())));
        let mut expired = mine.clone();
        expired["status"]["state"] = json!("expired");
        let mut theirs = mine.clone();
        theirs["comment"] = json!("maintenance window");
        let mut wider = mine.clone();
        wider["matchers"] =
            json!([{"name": "incident_id", "value": "inc-1"}, {"name": "host", "value": "n1"}]);
        for other in [expired, theirs, wider] {
            assert_eq!(own_active(&other), None, "{other}");
        }
    }
}
