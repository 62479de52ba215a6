//! `[detect.interference]`: tenants interfering on a shared resource
//! (`interference`). Each default's anchor is in docs/detection.md.
use serde::{Deserialize, Serialize};

use crate::setting::{pos, prob, InvalidSetting};

/// Interference between tenants on a shared resource (`interference`;
/// docs/detection.md gives each anchor).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct InterferenceConfig {
    pub enabled: bool,
    /// GPU busy fraction (NVML utilisation) at which a time-sliced GPU has
    /// no idle slots left for another context.
    pub gpu_saturation: f64,
    /// Port bytes over line rate at which a link queues (M/M/1 waiting time
    /// ρ/(1−ρ) = 4 service times at 0.8).
    pub fabric_saturation: f64,
    /// Mean requests in flight (Little's law: Σ latency / window) at which a
    /// device is never idle (iostat's %util = 100 %).
    pub storage_saturation: f64,
    /// The aggressor's load since the victim's onset over its own before.
    pub jump_ratio: f64,
    /// The aggressor's share of the resource's utilisation rise.
    pub min_share: f64,
    /// The victim's own usage per step may have grown by at most this
    /// fraction of its slowdown (else it is its own change).
    pub own_change: f64,
    /// Windows of history per (host, resource, job).
    pub history: usize,
    /// (host, resource, job) series kept.
    pub max_series: usize,
    /// Of those, at most this many per host: a host that reports usage of
    /// thousands of jobs cannot take the others' room.
    pub max_series_per_host: usize,
}

impl Default for InterferenceConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            gpu_saturation: 0.9,
            fabric_saturation: 0.8,
            storage_saturation: 1.0,
            jump_ratio: 2.0,
            min_share: 0.5,
            own_change: 0.5,
            history: 128,
            max_series: 200_000,
            max_series_per_host: 8192,
        }
    }
}

impl InterferenceConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        prob("interference.gpu_saturation", self.gpu_saturation)?;
        pos("interference.fabric_saturation", self.fabric_saturation)?;
        pos("interference.storage_saturation", self.storage_saturation)?;
        pos("interference.jump_ratio", self.jump_ratio)?;
        prob("interference.min_share", self.min_share)?;
        pos("interference.own_change", self.own_change)?;
        if self.history < 4 || self.max_series == 0 || self.max_series_per_host == 0 {
            return Err(InvalidSetting::new(
                "interference.history",
                self.history,
                "history must be at least 4 windows, max_series and max_series_per_host at least 1",
            ));
        }
        Ok(())
    }
}
