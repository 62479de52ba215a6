//! From detector findings to incidents: one incident per (kind, entity)
//! episode with a stable id, streamed as opened / updated / resolved.
use std::collections::BTreeMap;

use proto::v1::CandidateUpdate;

/// Evidence of one detector for one entity in one window.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub kind: &'static str,
    pub entity: String,
    pub confidence: f64,
    pub evidence: Vec<String>,
    pub jobs: Vec<String>,
    pub runbook: String,
}

impl Finding {
    pub fn new(kind: &'static str, entity: &str, confidence: f64) -> Self {
        Self {
            kind,
            entity: entity.to_string(),
            confidence,
            evidence: Vec::new(),
            jobs: Vec::new(),
            runbook: String::new(),
        }
    }
    pub fn with_evidence(mut self, e: String) -> Self {
        self.evidence.push(e);
        self
    }
    pub fn with_evidence_list(mut self, e: Vec<String>) -> Self {
        self.evidence.extend(e);
        self
    }
    pub fn with_jobs(mut self, j: &[String]) -> Self {
        self.jobs = j.to_vec();
        self
    }
    pub fn with_runbook(mut self, r: String) -> Self {
        self.runbook = r;
        self
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// Windows of a host without a finding before its incident resolves.
    pub quiet_windows: u32,
    /// Confidence change that is worth an `updated`.
    pub update_delta: f64,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            quiet_windows: 5,
            update_delta: 0.05,
        }
    }
}

#[derive(Clone, Debug)]
struct Incident {
    id: String,
    kind: &'static str,
    entity: String,
    confidence: f64,
    evidence: Vec<String>,
    jobs: Vec<String>,
    runbook: String,
    quiet: u32,
}

#[derive(Debug, Default)]
pub struct IncidentManager {
    tuning: Tuning,
    open: BTreeMap<(&'static str, String), Incident>,
    seq: u64,
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl IncidentManager {
    pub fn new(tuning: Tuning) -> Self {
        Self {
            tuning,
            ..Self::default()
        }
    }

    fn update(ts: i64, state: &str, i: &Incident) -> CandidateUpdate {
        CandidateUpdate {
            ts_unix_ms: ts,
            incident_id: i.id.clone(),
            state: state.into(),
            kind: i.kind.into(),
            entity: i.entity.clone(),
            confidence: (i.confidence * 1000.0).round() / 1000.0,
            evidence: i.evidence.clone(),
            affected_jobs: i.jobs.clone(),
            runbook: i.runbook.clone(),
        }
    }

    /// Applies one host window's findings. Incidents of the host's entities
    /// (and of `evaluated`, e.g. `<job>/<rank>` reported by it) without a
    /// finding this window age toward resolution; a lost node that reports
    /// again is resolved at once.
    pub fn apply(
        &mut self,
        ts: i64,
        host: &str,
        evaluated: Vec<String>,
        findings: Vec<Finding>,
    ) -> Vec<CandidateUpdate> {
        let mut out = Vec::new();
        // A flapping link subsumes its individual down episodes.
        let flapping: Vec<String> = findings
            .iter()
            .filter(|f| f.kind == "ib_link_flapping")
            .map(|f| f.entity.clone())
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        for f in findings {
            if f.kind == "ib_link_down" && flapping.contains(&f.entity) {
                continue;
            }
            let key = (f.kind, f.entity.clone());
            seen.insert(key.clone());
            match self.open.get_mut(&key) {
                Some(i) => {
                    i.quiet = 0;
                    let changed = (f.confidence - i.confidence).abs() >= self.tuning.update_delta;
                    if !f.jobs.is_empty() {
                        for j in &f.jobs {
                            if !i.jobs.contains(j) {
                                i.jobs.push(j.clone());
                            }
                        }
                    }
                    // A new reporter of the same fault (the other end of a
                    // link) is new evidence even at the same confidence.
                    let reporters: Vec<String> = i
                        .evidence
                        .iter()
                        .filter(|e| e.starts_with("reported by "))
                        .cloned()
                        .collect();
                    let new_reporter = f
                        .evidence
                        .iter()
                        .any(|e| e.starts_with("reported by ") && !reporters.contains(e));
                    if changed || new_reporter {
                        i.confidence = i.confidence.max(f.confidence);
                        let mut ev = f.evidence;
                        for r in reporters {
                            if !ev.contains(&r) {
                                ev.push(r);
                            }
                        }
                        i.evidence = ev;
                        out.push(Self::update(ts, "updated", i));
                    }
                }
                None => {
                    self.seq += 1;
                    let id = format!(
                        "{:016x}",
                        fnv(&format!("{}|{}|{}|{}", f.kind, f.entity, ts, self.seq))
                    );
                    let i = Incident {
                        id,
                        kind: f.kind,
                        entity: f.entity.clone(),
                        confidence: f.confidence,
                        evidence: f.evidence,
                        jobs: f.jobs,
                        runbook: f.runbook,
                        quiet: 0,
                    };
                    out.push(Self::update(ts, "opened", &i));
                    self.open.insert(key, i);
                }
            }
        }
        // Flapping absorbs an open down incident on the same link.
        for e in &flapping {
            if let Some(i) = self.open.remove(&("ib_link_down", e.clone())) {
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        let prefix = format!("{host}/");
        let mut resolved = Vec::new();
        if !seen.contains(&("node_lost", host.to_string())) {
            if let Some(i) = self.open.remove(&("node_lost", host.to_string())) {
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        for (key, i) in self.open.iter_mut() {
            let owned = i.entity.starts_with(&prefix) || evaluated.contains(&i.entity);
            if seen.contains(key) || !owned || key.0 == "node_lost" {
                continue;
            }
            i.quiet += 1;
            if i.quiet >= self.tuning.quiet_windows {
                resolved.push(key.clone());
            }
        }
        for key in resolved {
            if let Some(i) = self.open.remove(&key) {
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        out
    }

    pub fn open(&self) -> Vec<CandidateUpdate> {
        let mut v: Vec<CandidateUpdate> = self
            .open
            .values()
            .map(|i| Self::update(0, "open", i))
            .collect();
        v.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
        v
    }
}
