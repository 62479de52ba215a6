//! Incidents delivered to Alertmanager (docs/alerting.md): one alert per
//! incident, `incident_id` among its labels (route with
//! `group_by: [incident_id]`), evidence and runbook as annotations, re-sent
//! every `resend_s` while open and sent once more, resolved, when the
//! incident resolves. Alert times are the correlator's wall clock (the
//! incident's own times are in the annotations), so Alertmanager's
//! expiry works whatever the collectors' clocks say.
pub mod config;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use proto::v1::CandidateUpdate;
use serde_json::{json, Value};
use tokio::sync::broadcast;

pub mod silence;

pub use config::AlertmanagerConfig;

use crate::{
    ack::Acks,
    http_client::{request_with, Tls, TlsSetupError},
};

/// Resolved alerts kept until delivered, at most (older ones are dropped
/// and counted).
const MAX_PENDING_RESOLVED: usize = 10_000;

/// The severity label of an update: the incident's own (the engine's
/// severity table, docs/alerting.md); `warning` for an update from a
/// correlator that did not rate it.
pub fn severity(u: &CandidateUpdate) -> &str {
    if u.severity.is_empty() {
        "warning"
    } else {
        &u.severity
    }
}

/// One incident's alert: labels fixed when first seen (Alertmanager
/// identifies an alert by its labels), the rest follows the incident.
#[derive(Clone, Debug)]
struct Alert {
    labels: BTreeMap<&'static str, String>,
    latest: CandidateUpdate,
    starts_ms: i64,
    resolved_ms: Option<i64>,
}

fn rfc3339(ms: i64) -> String {
    let t = vocab::time::utc(ms).replace(' ', "T");
    format!("{t}.{:03}Z", ms.rem_euclid(1000))
}

impl Alert {
    fn new(u: &CandidateUpdate, now: i64) -> Self {
        let mut labels = BTreeMap::from([
            ("alertname", "FaultlineIncident".to_string()),
            ("incident_id", u.incident_id.clone()),
            ("kind", u.kind.clone()),
            ("entity", u.entity.clone()),
            ("host", vocab::entity::host_of(&u.entity).to_string()),
            (
                "hpc_job",
                u.affected_jobs.first().cloned().unwrap_or_default(),
            ),
            ("severity", severity(u).to_string()),
        ]);
        // Only where named: routes that match on `cluster` stay unaffected
        // by unnamed clusters.
        if !u.cluster.is_empty() {
            labels.insert("cluster", u.cluster.clone());
        }
        Self {
            labels,
            latest: u.clone(),
            starts_ms: now,
            resolved_ms: None,
        }
    }

    fn json(&self, cfg: &AlertmanagerConfig, now: i64) -> Value {
        let u = &self.latest;
        let labels: serde_json::Map<String, Value> = self
            .labels
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| ((*k).to_string(), Value::String(v.clone())))
            .collect();
        let ends = self
            .resolved_ms
            .unwrap_or(now + (4.0 * cfg.resend_s * 1000.0) as i64);
        let mut a = json!({
            "labels": labels,
            "annotations": {
                "summary": format!("{} on {} (confidence {:.2})", u.kind, u.entity, u.confidence),
                "kind": u.kind,
                "evidence": u.evidence.join("\n"),
                "runbook": u.runbook,
                "affected_jobs": u.affected_jobs.join(","),
                "incident_time": rfc3339(u.ts_unix_ms),
            },
            "startsAt": rfc3339(self.starts_ms),
            "endsAt": rfc3339(ends),
        });
        if !cfg.ui_url.is_empty() {
            a["generatorURL"] = json!(format!(
                "{}/incident?id={}",
                cfg.ui_url.trim_end_matches('/'),
                u.incident_id
            ));
        }
        a
    }
}

/// The alerts of the incidents seen so far, keyed by incident id (and,
/// for an alert resolved because its incident's severity rose, the id and
/// the old severity).
#[derive(Debug, Default)]
struct Alerts {
    by_id: BTreeMap<String, Alert>,
}

impl Alerts {
    fn apply(&mut self, u: &CandidateUpdate, now: i64) {
        // A severity that rose is a new alert (Alertmanager identifies an
        // alert by its labels): the old one resolves, same incident_id, so
        // the page goes out under the new severity's route.
        if let Some(a) = self.by_id.get(&u.incident_id) {
            let was = a.labels.get("severity").map_or("", String::as_str);
            if a.resolved_ms.is_none() && was != severity(u) {
                let old_key = format!("{}@{was}", u.incident_id);
                if let Some(mut old) = self.by_id.remove(&u.incident_id) {
                    old.resolved_ms = Some(now);
                    self.by_id.insert(old_key, old);
                }
            }
        }
        let a = self
            .by_id
            .entry(u.incident_id.clone())
            .or_insert_with(|| Alert::new(u, now));
        a.latest = u.clone();
        if u.state == "resolved" {
            a.resolved_ms = Some(now);
        }
    }

    /// After missed updates: whatever is not open any more is resolved.
    fn resync(&mut self, open: &[CandidateUpdate], now: i64) {
        for a in self.by_id.values_mut() {
            if a.resolved_ms.is_none()
                && !open.iter().any(|o| o.incident_id == a.latest.incident_id)
            {
                a.resolved_ms = Some(now);
            }
        }
        for o in open {
            if !self.by_id.contains_key(&o.incident_id) {
                self.apply(o, now);
            }
        }
    }

    fn bound(&mut self) {
        let resolved: Vec<String> = self
            .by_id
            .iter()
            .filter(|(_, a)| a.resolved_ms.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        if resolved.len() > MAX_PENDING_RESOLVED {
            let n = resolved.len() - MAX_PENDING_RESOLVED;
            for k in resolved.into_iter().take(n) {
                self.by_id.remove(&k);
            }
            metrics::counter!(crate::telemetry::ALERTS_DROPPED.name).increment(n as u64);
        }
    }
}

/// Starts the pusher: incident updates from `updates`, the open incidents
/// of `open` at start (restored after a restart) and after missed updates;
/// with `acks`, each acknowledged incident's alert silenced
/// ([`silence`]). Fails when the TLS files of an `https://` URL cannot be
/// used.
pub fn spawn(
    cfg: AlertmanagerConfig,
    updates: broadcast::Receiver<CandidateUpdate>,
    open: Arc<Mutex<Vec<CandidateUpdate>>>,
    acks: Option<Arc<Acks>>,
) -> Result<tokio::task::JoinHandle<()>, TlsSetupError> {
    let tls = cfg.tls()?;
    // Present from the start, so a rule's increase() sees the first failure.
    metrics::counter!(crate::telemetry::ALERTS_FAILED.name).absolute(0);
    let pusher = Pusher {
        url: format!("{}/api/v2/alerts", cfg.url.trim_end_matches('/')),
        failing: false,
        cfg,
        tls,
    };
    Ok(tokio::spawn(pusher.run(updates, open, acks)))
}

struct Pusher {
    cfg: AlertmanagerConfig,
    url: String,
    tls: Option<Tls>,
    /// Whether the last post failed (logged once until it works again).
    failing: bool,
}

impl Pusher {
    async fn run(
        mut self,
        mut updates: broadcast::Receiver<CandidateUpdate>,
        open: Arc<Mutex<Vec<CandidateUpdate>>>,
        acks: Option<Arc<Acks>>,
    ) {
        let snapshot = || open.lock().map(|o| o.clone()).unwrap_or_default();
        let mut alerts = Alerts::default();
        alerts.resync(&snapshot(), vocab::time::now_unix_ms());
        let mut silences = silence::Silences::default();
        let mut ack_events = acks.as_ref().map(|a| a.subscribe());
        let mut tick = tokio::time::interval(Duration::from_secs_f64(self.cfg.resend_s));
        tracing::info!(url = %self.url, "pushing incidents to Alertmanager");
        loop {
            tokio::select! {
                r = updates.recv() => match r {
                    Ok(u) => alerts.apply(&u, vocab::time::now_unix_ms()),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        metrics::counter!(crate::telemetry::ALERTS_DROPPED.name).increment(n);
                        alerts.resync(&snapshot(), vocab::time::now_unix_ms());
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                // An acknowledgement set or cleared: silences now, not at the next tick.
                _ = async { ack_events.as_mut()?.recv().await.ok() }, if ack_events.is_some() => {}
                _ = tick.tick() => {}
            }
            // Everything that queued meanwhile goes in the same post.
            while let Ok(u) = updates.try_recv() {
                alerts.apply(&u, vocab::time::now_unix_ms());
            }
            if let Some(a) = &acks {
                let now = vocab::time::now_unix_ms();
                let target = silence::Target {
                    base: self.cfg.url.trim_end_matches('/'),
                    tls: self.tls.as_ref(),
                    timeout: Duration::from_secs_f64(self.cfg.timeout_s),
                };
                let lease = silence::lease_ms(self.cfg.resend_s);
                silences.sync(&a.current(now), now, lease, &target).await;
            }
            if !alerts.by_id.is_empty() {
                self.post(&mut alerts).await;
            }
        }
    }

    /// Posts every alert; resolved ones are dropped once delivered.
    async fn post(&mut self, alerts: &mut Alerts) {
        alerts.bound();
        let now = vocab::time::now_unix_ms();
        let body: Vec<Value> = alerts
            .by_id
            .values()
            .map(|a| a.json(&self.cfg, now))
            .collect();
        let n = body.len();
        let sent = serde_json::to_vec(&body).unwrap_or_default();
        let timeout = Duration::from_secs_f64(self.cfg.timeout_s);
        match request_with("POST", &self.url, Some(sent), timeout, self.tls.as_ref()).await {
            Ok((200..=299, _)) => {
                metrics::counter!(crate::telemetry::ALERTS_SENT.name).increment(n as u64);
                alerts.by_id.retain(|_, a| a.resolved_ms.is_none());
                if self.failing {
                    tracing::info!(url = %self.url, "Alertmanager reachable again");
                    self.failing = false;
                }
            }
            r => {
                metrics::counter!(crate::telemetry::ALERTS_FAILED.name).increment(1);
                if !self.failing {
                    let why = match r {
                        Ok((status, body)) => {
                            format!("HTTP {status}: {}", String::from_utf8_lossy(&body))
                        }
                        Err(e) => e.to_string(),
                    };
                    tracing::warn!(url = %self.url, error = %why, "cannot push to Alertmanager; retrying at every resend");
                    self.failing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_stay_fixed_and_resolution_sets_ends_at() {
        let cfg = AlertmanagerConfig::default();
        let mut u = CandidateUpdate {
            incident_id: "abc".into(),
            state: "opened".into(),
            kind: "ib_link_down".into(),
            entity: "n001/mlx5_0/1".into(),
            affected_jobs: vec!["job1".into()],
            runbook: "replace the cable".into(),
            ..Default::default()
        };
        let mut a = Alerts::default();
        a.apply(&u, 1_000);
        u.state = "updated".into();
        u.kind = "ib_link_flapping".into();
        u.affected_jobs = vec!["job0".into(), "job1".into()];
        a.apply(&u, 2_000);
        let j = a.by_id["abc"].json(&cfg, 2_000);
        assert_eq!(j["labels"]["kind"], "ib_link_down");
        assert_eq!(j["labels"]["hpc_job"], "job1");
        assert!(
            j["labels"].get("job").is_none(),
            "job is Prometheus's label"
        );
        assert_eq!(j["labels"]["incident_id"], "abc");
        assert_eq!(j["annotations"]["kind"], "ib_link_flapping");
        assert_eq!(j["annotations"]["runbook"], "replace the cable");
        assert_eq!(j["startsAt"], "1970-01-01T00:00:01.000Z");
        assert_eq!(j["endsAt"], "1970-01-01T00:04:02.000Z");
        u.state = "resolved".into();
        a.apply(&u, 3_500);
        assert_eq!(
            a.by_id["abc"].json(&cfg, 9_000)["endsAt"],
            "1970-01-01T00:00:03.500Z"
        );
        // Missed updates: an alert whose incident is no longer open resolves.
        let mut b = Alerts::default();
        u.state = "open".into();
        b.resync(std::slice::from_ref(&u), 5_000);
        assert_eq!(b.by_id["abc"].resolved_ms, None);
        b.resync(&[], 6_000);
        assert_eq!(b.by_id["abc"].resolved_ms, Some(6_000));
    }

    #[test]
    fn severity_is_the_incidents_and_a_rise_is_a_new_alert() {
        let cfg = AlertmanagerConfig::default();
        // An application XID under a big job: the incident says warning,
        // so does the label (the kind alone used to make it critical).
        let mut u = CandidateUpdate {
            incident_id: "x".into(),
            state: "opened".into(),
            kind: "gpu_xid".into(),
            entity: "n001/gpu0".into(),
            severity: "warning".into(),
            ..Default::default()
        };
        let mut a = Alerts::default();
        a.apply(&u, 1_000);
        assert_eq!(
            a.by_id["x"].json(&cfg, 1_000)["labels"]["severity"],
            "warning"
        );
        // The same update again changes nothing.
        a.apply(&u, 1_500);
        assert_eq!(a.by_id.len(), 1);
        // It rises: the warning alert resolves, a critical one fires with
        // the same incident_id (one Alertmanager group).
        u.state = "updated".into();
        u.severity = "critical".into();
        a.apply(&u, 2_000);
        assert_eq!(a.by_id.len(), 2);
        let old = a.by_id["x@warning"].json(&cfg, 2_000);
        assert_eq!(old["labels"]["severity"], "warning");
        assert_eq!(old["endsAt"], "1970-01-01T00:00:02.000Z");
        let new = a.by_id["x"].json(&cfg, 2_000);
        assert_eq!(new["labels"]["severity"], "critical");
        assert_eq!(new["labels"]["incident_id"], "x");
        assert_eq!(new["startsAt"], "1970-01-01T00:00:02.000Z");
        // An update from a correlator that did not rate it: warning.
        u.incident_id = "y".into();
        u.severity = String::new();
        a.apply(&u, 3_000);
        assert_eq!(
            a.by_id["y"].json(&cfg, 3_000)["labels"]["severity"],
            "warning"
        );
    }

    #[test]
    fn the_cluster_is_a_label_only_when_named() {
        let cfg = AlertmanagerConfig::default();
        let mut u = CandidateUpdate {
            incident_id: "x1".into(),
            state: "opened".into(),
            kind: "gpu_lost".into(),
            entity: "n001/gpu0".into(),
            ..Default::default()
        };
        let mut a = Alerts::default();
        a.apply(&u, 1_000);
        u.incident_id = "x2".into();
        u.cluster = "east".into();
        a.apply(&u, 1_000);
        let unnamed = a.by_id["x1"].json(&cfg, 1_000);
        assert!(unnamed["labels"].get("cluster").is_none(), "{unnamed}");
        assert_eq!(a.by_id["x2"].json(&cfg, 1_000)["labels"]["cluster"], "east");
    }
}
