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
    pub incidents: IncidentManager,
}

impl Engine {
    /// An engine with these settings and fabric topology (port entity →
    /// link name; empty when unknown).
    pub fn new(cfg: &DetectConfig, topology: std::collections::HashMap<String, String>) -> Self {
        Self {
            ib: ib::IbDetector::new(cfg.ib.clone(), topology),
            storage: storage::StorageDetector::new(cfg.storage.clone()),
            incidents: IncidentManager::new(cfg.incidents.clone()),
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
        let mut findings = self.ib.observe(&host, w, &jobs);
        findings.extend(self.gpu.observe(&host, w, &jobs));
        findings.extend(self.storage.observe(&host, w, &jobs));
        findings.extend(self.node.observe(&host, w));
        let (slow, evaluated) = self.straggler.observe(&host, w);
        for s in slow {
            // A root cause on the rank's GPU or link absorbs the symptom.
            let gpu_entity = format!("{}/gpu{}", s.host, s.device);
            let cause = findings.iter_mut().find(|f| {
                (f.entity == gpu_entity
                    && (f.kind == "gpu_thermal_throttle" || f.kind == "gpu_power_throttle"))
                    || (f.kind == "storage_latency"
                        && f.entity.starts_with(&format!("{}/", s.host)))
                    || (f.kind == "ib_link_degraded"
                        && f.entity.starts_with(&format!("{}/", s.host))
                        && (s.hca.is_empty() || f.entity.contains(&format!("/{}/", s.hca))))
            });
            match cause {
                Some(f) => {
                    f.evidence.push(format!("explains {}", s.describe()));
                    f.confidence = (f.confidence + 0.05).min(0.99);
                    if !f.jobs.contains(&s.job) {
                        f.jobs.push(s.job.clone());
                    }
                }
                None => findings.push(s.finding()),
            }
        }
        let mut evaluated = evaluated;
        evaluated.extend(self.ib.links_of(&host));
        self.incidents
            .apply(w.end_unix_ms, &host, evaluated, findings)
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
