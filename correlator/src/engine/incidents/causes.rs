//! Causes and symptoms: a workload symptom attached to the open incident
//! that explains it, or its own incident superseded once a cause is found.
use proto::v1::CandidateUpdate;

use super::{family, IncidentManager};

impl IncidentManager {
    /// The open incident (its key) that `explains` accepts (kind, entity,
    /// evidence), the most confident first.
    pub fn find_cause(
        &self,
        explains: impl Fn(&str, &str, &[String]) -> bool,
    ) -> Option<(&'static str, String)> {
        self.open
            .iter()
            .filter(|(_, i)| explains(i.kind, &i.entity, &i.evidence))
            .max_by(|a, b| a.1.confidence.total_cmp(&b.1.confidence))
            .map(|(k, _)| k.clone())
    }

    /// Attaches a workload symptom (`tag` its entity, `line` its measured
    /// impact) and its job to an open incident: an `updated` when the
    /// symptom is new there or its impact moved by `update_delta`.
    pub fn attach(
        &mut self,
        key: &(&'static str, String),
        ts: i64,
        tag: &str,
        line: String,
        job: &str,
        ratio: f64,
    ) -> Option<CandidateUpdate> {
        let delta = self.cfg.update_delta;
        let i = self.open.get_mut(key)?;
        let was = i.severity;
        let news = match i.symptoms.get(tag) {
            Some((_, r)) => (ratio - r).abs() >= delta,
            None => true,
        };
        if !job.is_empty() && !i.jobs.iter().any(|j| j == job) {
            i.jobs.push(job.to_string());
        }
        if news {
            i.symptoms.insert(tag.to_string(), (line, ratio));
            i.confidence = (i.confidence + 0.05).min(0.99);
        } else if let Some(s) = i.symptoms.get_mut(tag) {
            s.0 = line;
        }
        // A slowed job may raise its severity: news even without a new
        // symptom.
        super::rate(&self.cfg.severity, &self.sizes, i);
        if !news && i.severity == was {
            return None;
        }
        Some(Self::update(ts, "updated", i))
    }

    /// An open incident's kind and evidence.
    pub fn evidence_of(&self, key: &(&'static str, String)) -> Option<(&'static str, &[String])> {
        self.open.get(key).map(|i| (i.kind, i.evidence.as_slice()))
    }

    /// Whether an incident of `kind` on `entity` is open.
    pub fn is_open(&self, kind: &'static str, entity: &str) -> bool {
        self.open
            .contains_key(&(family(kind).0, entity.to_string()))
    }

    /// Resolves an open symptom incident (`kind` on `entity`) because a
    /// root cause now explains it: one fault, one incident.
    pub fn supersede(
        &mut self,
        kind: &'static str,
        entity: &str,
        ts: i64,
        by: &(&'static str, String),
    ) -> Option<CandidateUpdate> {
        let cause = self
            .open
            .get(by)
            .map(|c| (c.id.clone(), c.kind, c.entity.clone()))?;
        let mut i = self.remove_open(&(family(kind).0, entity.to_string()))?;
        i.evidence.push(format!(
            "explained by incident {} ({} on {}): followed there",
            cause.0, cause.1, cause.2
        ));
        Some(Self::update(ts, "resolved", &i))
    }

    /// Resolves the open incidents of `members` (same family as `kind`)
    /// into the open incident of `kind` on `entity` that stands for them
    /// (a switch for its ports).
    pub fn absorb(
        &mut self,
        kind: &'static str,
        entity: &str,
        members: &[String],
        ts: i64,
    ) -> Vec<CandidateUpdate> {
        let by = (family(kind).0, entity.to_string());
        if !self.open.contains_key(&by) {
            return Vec::new();
        }
        members
            .iter()
            .filter(|m| m.as_str() != entity)
            .filter_map(|m| self.supersede(kind, m, ts, &by))
            .collect()
    }
}
