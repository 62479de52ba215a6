//! `[detect.workload]`: workload symptoms (`job_slowdown`,
//! `inference_latency`, `straggler`) and how long they wait for a cause.
//! Each default's anchor is in docs/detection.md.
use serde::{Deserialize, Serialize};

use crate::setting::{pos, InvalidSetting};

/// Workload symptoms: a job's step time and a model server's latency
/// against their own history (a change-point in per-step/per-request units,
/// so the window length does not matter), and how they join a root cause.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadConfig {
    /// Smallest step-time increase (fraction) reported as a job slowdown.
    pub min_slowdown: f64,
    /// Smallest increase (fraction) of a model's mean time to first token,
    /// time per output token or request duration reported as a latency
    /// regression.
    pub min_latency_increase: f64,
    /// How many standard errors (of the mean log step time or latency over
    /// the elevated run) the increase must reach: 5 is a one-sided tail of
    /// ~3e-7 per test.
    pub z: f64,
    /// Seconds the increase must last (event time, not windows).
    pub min_persist_s: f64,
    /// Seconds a symptom waits for an infrastructure cause before it opens
    /// its own `job_slowdown` / `inference_latency` incident.
    pub explain_grace_s: f64,
    /// Observations (steps or requests) the own history needs before it
    /// judges.
    pub warm_observations: u64,
    /// Floor of the per-observation noise (standard deviation of the log
    /// step time): a perfectly steady synthetic job does not make a 1 %
    /// wobble significant.
    pub min_noise: f64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        Self {
            min_slowdown: 0.10,
            min_latency_increase: 0.25,
            z: 5.0,
            min_persist_s: 20.0,
            explain_grace_s: 20.0,
            warm_observations: 30,
            min_noise: 0.02,
        }
    }
}

impl WorkloadConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        pos("workload.min_slowdown", self.min_slowdown)?;
        pos("workload.min_latency_increase", self.min_latency_increase)?;
        pos("workload.z", self.z)?;
        pos("workload.min_persist_s", self.min_persist_s)?;
        pos("workload.min_noise", self.min_noise)?;
        if !(self.explain_grace_s.is_finite() && self.explain_grace_s >= 0.0) {
            return Err(InvalidSetting::new(
                "workload.explain_grace_s",
                self.explain_grace_s,
                "must be 0 or a positive number of seconds",
            ));
        }
        Ok(())
    }
}
