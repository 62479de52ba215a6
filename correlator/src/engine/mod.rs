//! The detection engine: windows in, candidate updates out. Pure and
//! synchronous, so the live service and `replay` run the same code.
//!
//! Per-entity state is bounded (a few recent values per port); peers are
//! compared with robust statistics (median and MAD of the latest error rate
//! of every port of the fabric); an incident manager turns detector evidence
//! into one incident per (kind, entity) episode.
pub mod baseline;
pub mod config;
pub mod gpu;
pub mod ib;
pub mod incidents;
pub mod node;
pub mod stats;
pub mod storage;
pub mod straggler;
pub mod workload;

use proto::v1::{CandidateUpdate, Window};

pub use config::DetectConfig;
pub use incidents::{Finding, IncidentManager};

/// The engine: detectors plus the incident manager.
#[derive(Debug, Default)]
pub struct Engine {
    pub ib: ib::IbDetector,
    pub gpu: gpu::GpuDetector,
    pub storage: storage::StorageDetector,
    pub node: node::NodeDetector,
    pub straggler: straggler::StragglerDetector,
    pub workload: workload::WorkloadDetector,
    pub incidents: IncidentManager,
    /// Seconds a workload symptom waits for a cause (`workload.explain_grace_s`).
    explain_grace_ms: i64,
}

impl Engine {
    /// An engine with these settings and fabric topology (port entity →
    /// link name; empty when unknown).
    pub fn new(cfg: &DetectConfig, topology: std::collections::HashMap<String, String>) -> Self {
        Self {
            ib: ib::IbDetector::new(cfg.ib.clone(), topology),
            storage: storage::StorageDetector::new(cfg.storage.clone()),
            workload: workload::WorkloadDetector::new(cfg.workload.clone()),
            straggler: straggler::StragglerDetector::new(cfg.workload.min_persist_s),
            incidents: IncidentManager::new(cfg.incidents.clone()),
            explain_grace_ms: (cfg.workload.explain_grace_s * 1000.0) as i64,
            ..Self::default()
        }
    }

    /// Processes one accepted window; returns the candidate updates it causes.
    pub fn ingest(&mut self, w: &Window) -> Vec<CandidateUpdate> {
        let host = w
            .origin
            .as_ref()
            .map_or_else(String::new, |o| o.hostname.clone());
        let jobs = jobs_of(w);
        // The grace a symptom waits for a cause covers the infrastructure
        // detectors' own persistence (two windows) and the slot in which the
        // symptom is judged (the next window of the series): three windows.
        let len_ms = (w.end_unix_ms - w.start_unix_ms).max(0);
        let mut findings = self.ib.observe(&host, w, &jobs);
        findings.extend(self.gpu.observe(&host, w, &jobs));
        findings.extend(self.storage.observe(&host, w, &jobs));
        findings.extend(self.node.observe(&host, w));
        let (slow, mut evaluated) = self.straggler.observe(&host, w);
        let mut symptoms: Vec<workload::Symptom> = slow.iter().map(|s| s.symptom()).collect();
        symptoms.extend(self.workload.observe(&host, w));
        evaluated.extend(jobs.iter().cloned());
        evaluated.extend(
            w.workload
                .iter()
                .map(|s| workload::model_entity(&s.job, &s.model)),
        );
        // A symptom on a GPU, link, device or host that a root cause sits on
        // joins that incident; otherwise, after the grace, it is its own.
        let mut joined = Vec::new();
        for s in symptoms {
            let in_window = findings
                .iter()
                .any(|f| s.explained_by(f.kind, &f.entity, &f.evidence));
            let open = self
                .incidents
                .find_cause(|k, e, ev| s.explained_by(k, e, ev))
                .is_some();
            if in_window || open {
                joined.push(s);
            } else if s.kind == "straggler"
                || w.end_unix_ms - s.since_ms >= self.explain_grace_ms.max(3 * len_ms)
                || self.incidents.is_open(s.kind, &s.entity)
            {
                findings.push(s.finding());
            }
        }
        let held: Vec<String> = joined.iter().map(|s| s.entity.clone()).collect();
        let mut out = self
            .incidents
            .apply(w.end_unix_ms, &host, evaluated, findings, &held);
        for s in joined {
            let Some(key) = self
                .incidents
                .find_cause(|k, e, ev| s.explained_by(k, e, ev))
            else {
                continue;
            };
            let line = self
                .incidents
                .evidence_of(&key)
                .map(|(kind, ev)| format!("{}; {}", s.line, s.via(kind, &key.1, ev)))
                .unwrap_or_else(|| s.line.clone());
            out.extend(self.incidents.attach(
                &key,
                w.end_unix_ms,
                &s.entity,
                line,
                &s.job,
                s.ratio,
            ));
            out.extend(
                self.incidents
                    .supersede(s.kind, &s.entity, w.end_unix_ms, &key),
            );
        }
        out
    }

    /// Open incidents, highest confidence first.
    pub fn open(&self) -> Vec<CandidateUpdate> {
        self.incidents.open()
    }
}

/// Jobs active on the window's host (from CUDA, verbs and step attribution).
fn jobs_of(w: &Window) -> Vec<String> {
    let mut j: Vec<String> = w
        .cuda
        .iter()
        .map(|c| c.job.clone())
        .chain(w.verbs.iter().map(|v| v.job.clone()))
        .chain(w.steps.iter().map(|s| s.job.clone()))
        .filter(|j| !j.is_empty())
        .collect();
    j.sort();
    j.dedup();
    j
}

/// Median of a slice (selection on a copy, O(n)); 0 for empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    let n = s.len();
    let (below, m, _) = s.select_nth_unstable_by(n / 2, f64::total_cmp);
    let hi = *m;
    if n % 2 == 1 {
        return hi;
    }
    let lo = below.iter().copied().fold(f64::MIN, f64::max);
    (lo + hi) / 2.0
}
