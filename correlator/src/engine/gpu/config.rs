//! `[detect.gpu]`: the GPU detectors' thresholds (NVLink errors against
//! the fleet, and when thermal throttles on one host are one incident).
//! docs/detection.md gives the anchor of each default.
use serde::{Deserialize, Serialize};

use crate::setting::{at_least_one, pos, prob, InvalidSetting};

/// GPU judgement.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GpuConfig {
    /// NVLink data-link errors (per counter: replays, recoveries, flit and
    /// data CRC errors) per link-second a healthy link is assumed not to
    /// exceed: the floor of the fleet baseline.
    pub nvlink_reference_per_s: f64,
    /// Errors per link-second above which a link is degraded even when the
    /// whole fleet is that bad (the fleet baseline's cap).
    pub nvlink_alarm_per_s: f64,
    /// Seconds of history a link's errors are summed over (at least one
    /// window, whatever the window length).
    pub nvlink_horizon_s: f64,
    /// One-sided Poisson tail probability below which a link's errors are
    /// significant (per link, counter, window; corrected for the counters
    /// and the two scans).
    pub nvlink_significance: f64,
    /// Tail probability below which a degraded link stays degraded
    /// (hysteresis: looser than `nvlink_significance`).
    pub nvlink_clear_significance: f64,
    /// Links with a rate needed before the fleet's median is used.
    pub nvlink_min_peers: usize,
    /// Thermal throttles of this many GPUs of one host at once or more ...
    pub shared_min_gpus: usize,
    /// ... are one host incident (shared cooling) when that many of the
    /// host's GPUs throttling would be this unlikely were each throttling
    /// independently at the rate of the rest of the fleet (binomial tail).
    pub shared_significance: f64,
    /// The smallest share of GPUs assumed to throttle thermally in a
    /// fleet, whatever the rest of the fleet shows (a fleet of a few
    /// healthy hosts does not make two throttling GPUs of one host
    /// improbable by itself).
    pub shared_fleet_floor: f64,
    /// Seconds within which one GPU meeting an application-class XID for
    /// unrelated jobs is a hardware suspicion, and within which a job's
    /// XIDs on several GPUs follow the job.
    pub xid_horizon_s: f64,
    /// Unrelated jobs (different executables or users) one GPU must fail
    /// with one application-class code within `xid_horizon_s` to be
    /// suspected.
    pub xid_unrelated_jobs: usize,
    /// Seconds after a GPU's latest XID that its episode (one incident, a
    /// count per code; XID 43/45 folded in) stays live.
    pub xid_hold_s: f64,
}

impl Default for GpuConfig {
    fn default() -> Self {
        Self {
            nvlink_reference_per_s: 1.0 / 3600.0,
            nvlink_alarm_per_s: 100.0,
            nvlink_horizon_s: 300.0,
            nvlink_significance: 1e-9,
            nvlink_clear_significance: 1e-3,
            nvlink_min_peers: 16,
            shared_min_gpus: 2,
            shared_significance: 1e-3,
            shared_fleet_floor: 0.02,
            xid_horizon_s: 3600.0,
            xid_unrelated_jobs: 2,
            xid_hold_s: 600.0,
        }
    }
}

impl GpuConfig {
    /// Checks every value's range; the first bad one is the error.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        pos("gpu.nvlink_reference_per_s", self.nvlink_reference_per_s)?;
        pos("gpu.nvlink_alarm_per_s", self.nvlink_alarm_per_s)?;
        if self.nvlink_alarm_per_s < self.nvlink_reference_per_s {
            return Err(InvalidSetting::new(
                "gpu.nvlink_alarm_per_s",
                self.nvlink_alarm_per_s,
                "must not be below gpu.nvlink_reference_per_s",
            ));
        }
        pos("gpu.nvlink_horizon_s", self.nvlink_horizon_s)?;
        if self.nvlink_horizon_s > 3600.0 {
            return Err(InvalidSetting::new(
                "gpu.nvlink_horizon_s",
                self.nvlink_horizon_s,
                "must be at most 3600 s",
            ));
        }
        prob("gpu.nvlink_significance", self.nvlink_significance)?;
        prob(
            "gpu.nvlink_clear_significance",
            self.nvlink_clear_significance,
        )?;
        if self.nvlink_clear_significance < self.nvlink_significance {
            return Err(InvalidSetting::new(
                "gpu.nvlink_clear_significance",
                self.nvlink_clear_significance,
                "must not be stricter (smaller) than gpu.nvlink_significance",
            ));
        }
        at_least_one("gpu.nvlink_min_peers", self.nvlink_min_peers)?;
        if self.shared_min_gpus < 2 {
            return Err(InvalidSetting::new(
                "gpu.shared_min_gpus",
                self.shared_min_gpus,
                "must be at least 2 (one GPU is a GPU incident)",
            ));
        }
        prob("gpu.shared_significance", self.shared_significance)?;
        prob("gpu.shared_fleet_floor", self.shared_fleet_floor)?;
        for (key, v) in [
            ("gpu.xid_horizon_s", self.xid_horizon_s),
            ("gpu.xid_hold_s", self.xid_hold_s),
        ] {
            pos(key, v)?;
            if v > 86_400.0 {
                return Err(InvalidSetting::new(
                    key,
                    v,
                    "must be at most 86400 s (a day)",
                ));
            }
        }
        if self.xid_unrelated_jobs < 2 {
            return Err(InvalidSetting::new(
                "gpu.xid_unrelated_jobs",
                self.xid_unrelated_jobs,
                "must be at least 2 (one job's faults are its own)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        GpuConfig::default().validate().unwrap();
        let bad = |f: fn(&mut GpuConfig)| {
            let mut c = GpuConfig::default();
            f(&mut c);
            c.validate().unwrap_err().key
        };
        assert_eq!(
            bad(|c| c.nvlink_alarm_per_s = 1e-6),
            "gpu.nvlink_alarm_per_s"
        );
        assert_eq!(
            bad(|c| c.nvlink_clear_significance = 1e-12),
            "gpu.nvlink_clear_significance"
        );
        assert_eq!(bad(|c| c.shared_min_gpus = 1), "gpu.shared_min_gpus");
        assert_eq!(
            bad(|c| c.shared_fleet_floor = 0.0),
            "gpu.shared_fleet_floor"
        );
        assert_eq!(bad(|c| c.nvlink_horizon_s = 7200.0), "gpu.nvlink_horizon_s");
        assert_eq!(bad(|c| c.xid_unrelated_jobs = 1), "gpu.xid_unrelated_jobs");
        assert_eq!(bad(|c| c.xid_hold_s = 0.0), "gpu.xid_hold_s");
        assert_eq!(bad(|c| c.xid_horizon_s = 1e9), "gpu.xid_horizon_s");
    }
}
