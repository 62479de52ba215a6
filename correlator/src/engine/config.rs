//! Every detection threshold, with its unit and default, as the `[detect]`
//! part of the correlator's config file (`faultline-correlator serve
//! --config FILE`). `docs/detection.md` gives the anchor of each default.
//!
//! Defaults come from physics and public operating points (IBTA's BER
//! limit, NVIDIA UFM/ibdiagnet practice, NVMe/SSD/HDD latency classes), not
//! from what makes the simulator pass.
use serde::{Deserialize, Serialize};

pub use super::gpu::GpuConfig;
pub use crate::limits::LimitsConfig;
pub use crate::setting::InvalidSetting;
use crate::setting::{pos, prob, within};

/// All detector settings.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DetectConfig {
    pub ib: IbConfig,
    /// `[detect.gpu]`: NVLink errors and shared cooling (the section lives
    /// with its detector, `engine::gpu::config`).
    pub gpu: GpuConfig,
    pub storage: StorageConfig,
    /// `[detect.nfs]` (its type in `engine::nfs`).
    pub nfs: super::nfs::NfsConfig,
    pub workload: WorkloadConfig,
    pub interference: InterferenceConfig,
    pub nccl: NcclConfig,
    pub incidents: IncidentConfig,
    /// `[detect.limits]`: what ingest, the engine and the gRPC listener
    /// accept and keep.
    pub limits: LimitsConfig,
}

/// NCCL communicators (`collective_hang`, inferred step time; the
/// anchors are in `engine::nccl` and docs/detection.md).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct NcclConfig {
    pub enabled: bool,
    /// A communicator is hung when every rank has been silent this many of
    /// its median intervals between collectives (a memoryless cadence stays
    /// silent that long with probability e^-20) ...
    pub hang_intervals: f64,
    /// ... and at least this many seconds (window and clock granularity).
    pub hang_min_s: f64,
    /// Seconds after which a communicator nobody reports is forgotten.
    pub forget_s: f64,
    /// Communicators and ranks per communicator tracked (more are dropped, counted).
    pub max_communicators: usize,
    pub max_ranks: usize,
    /// Ranks tracked over all communicators together (memory bound).
    pub max_ranks_total: usize,
    /// A rank that issues a communicator's collectives this share of its
    /// interval after its fastest peer on the same host holds up the job
    /// by at least that share: a straggler (`engine::nccl_lag`) ...
    pub straggler_lag_fraction: f64,
    /// ... when the lag is also at least this many seconds (above the
    /// scheduling and data-loader jitter between ranks of one host).
    pub straggler_lag_min_s: f64,
    /// Every rank silent at one sequence is a hang when at least this
    /// share of the waiting ranks shows it from below (a CUDA call not
    /// returning, a GPU spinning) ...
    pub stuck_share: f64,
    /// ... a GPU spinning: NVML utilisation at least this (%; NCCL's
    /// kernels poll at ~100 % while they wait for peers) ...
    pub spin_util_pct: u32,
    /// ... and a port's traffic collapsed below this share of its level
    /// before is quoted with it.
    pub traffic_collapse_fraction: f64,
}

impl Default for NcclConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            hang_intervals: 20.0,
            hang_min_s: 1.0,
            forget_s: 600.0,
            max_communicators: 4096,
            max_ranks: 16_384,
            max_ranks_total: 262_144,
            straggler_lag_fraction: 0.3,
            straggler_lag_min_s: 0.01,
            stuck_share: 0.5,
            spin_util_pct: 90,
            traffic_collapse_fraction: 0.1,
        }
    }
}

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

/// InfiniBand/RoCE link judgement.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IbConfig {
    /// Reference bit error rate (errors per bit signalled) a healthy port is
    /// assumed not to exceed; the floor of the fabric baseline.
    pub reference_ber: f64,
    /// Absolute alarm line (errors per bit): a port significantly above it is
    /// degraded even when the whole fabric is that bad.
    pub alarm_ber: f64,
    /// Seconds of history the BER and retry tests sum over (at least one
    /// window, whatever the window length).
    pub horizon_s: f64,
    /// Longer horizons the BER is also judged over (seconds, each above
    /// `horizon_s`, at most 3600, at most 4), from per-minute sums: a slow
    /// rise below the alarm line shows over minutes before it shows in one.
    /// The tail probability is corrected for the number of horizons
    /// (Bonferroni over the window, `horizon_s` and these).
    pub long_horizons_s: Vec<f64>,
    /// One-sided Poisson tail probability below which a port's errors are
    /// significant (per port, per window, per test).
    pub significance: f64,
    /// Tail probability below which an already degraded port stays degraded
    /// (hysteresis: looser than `significance`).
    pub clear_significance: f64,
    /// Reference transport retries (hw_counters retransmit/timeout/sequence
    /// errors) per packet sent and received.
    pub retry_reference_per_packet: f64,
    /// A port's own history (median of recent normal windows) times this is
    /// its retry reference, for links that are noisy when healthy
    /// (emulated RoCE).
    pub own_history_factor: f64,
    /// Ports with an estimate needed before the fabric's median is used as a
    /// baseline.
    pub min_peers: usize,
    /// Downs of one port within this many seconds make it flapping.
    pub flap_horizon_s: f64,
    /// Downs (state transitions or `link_downed` increments) within
    /// `flap_horizon_s` that make a port flapping.
    pub flap_downs: usize,
    /// Ports behind one switch (from `--topology`) flagged together (same
    /// kind, within `extent_window_s`) from which they are one incident on
    /// the switch, listing them: two can be two bad cables, three at once
    /// on one switch are not chance while the rest of the fabric is clean.
    pub extent_min_ports: usize,
    /// … and only when that many flagged ports behind one switch would be
    /// this unlikely were the switch's ports flagged at the rate of the
    /// rest of the fabric (binomial tail): a fabric-wide problem is not
    /// pinned on one switch.
    pub extent_significance: f64,
    /// Seconds a port's finding counts as current for the grouping (its
    /// incident's quiet period).
    pub extent_window_s: f64,
}

impl Default for IbConfig {
    fn default() -> Self {
        Self {
            reference_ber: 1e-14,
            alarm_ber: 1e-12,
            horizon_s: 60.0,
            long_horizons_s: vec![300.0, 900.0],
            significance: 1e-9,
            clear_significance: 1e-3,
            retry_reference_per_packet: 1e-5,
            own_history_factor: 10.0,
            min_peers: 4,
            flap_horizon_s: 600.0,
            flap_downs: 2,
            extent_min_ports: 3,
            extent_significance: 1e-3,
            extent_window_s: 30.0,
        }
    }
}

/// Latency floors of one device class, in milliseconds: below them nothing
/// is slow, whatever its peers do.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassFloor {
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Block device latency judgement.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Requests per window below which a device's latency is not judged.
    pub min_requests: u64,
    /// Timed requests per window below which its p99 is not judged (the
    /// p99 of fewer requests is little more than their maximum).
    pub min_requests_p99: u64,
    /// A device is slow when its p50 or p99 is this many times its class
    /// peers' median …
    pub peer_ratio: f64,
    /// … and this many times its own history (once it has one).
    pub own_ratio: f64,
    /// Devices of a class needed for a peer comparison; with fewer, a device
    /// is judged against its own history only.
    pub min_peers: usize,
    /// Consecutive slow windows before an incident opens.
    pub persist_windows: u32,
    pub nvme: ClassFloor,
    pub ssd: ClassFloor,
    pub hdd: ClassFloor,
    pub network: ClassFloor,
    /// Loop, device-mapper, zram and unknown devices.
    pub other: ClassFloor,
    /// Seconds an open incident of a device is held, neither resolved nor
    /// counting quiet windows, while the device serves fewer than
    /// `min_requests` a window; past it the quiet period runs (0 = no hold).
    pub unobserved_hold_s: f64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            min_requests: 10,
            min_requests_p99: 200,
            peer_ratio: 2.0,
            own_ratio: 2.5,
            min_peers: 4,
            persist_windows: 2,
            nvme: ClassFloor {
                p50_ms: 0.2,
                p99_ms: 2.0,
            },
            ssd: ClassFloor {
                p50_ms: 0.5,
                p99_ms: 5.0,
            },
            hdd: ClassFloor {
                p50_ms: 10.0,
                p99_ms: 100.0,
            },
            network: ClassFloor {
                p50_ms: 2.0,
                p99_ms: 50.0,
            },
            other: ClassFloor {
                p50_ms: 1.0,
                p99_ms: 20.0,
            },
            unobserved_hold_s: 3600.0,
        }
    }
}

impl StorageConfig {
    /// Floors of a wire device class ("nvme", "ssd", "hdd", "network", …).
    pub fn floor(&self, class: &str) -> ClassFloor {
        match class {
            "nvme" => self.nvme,
            "ssd" => self.ssd,
            "hdd" => self.hdd,
            "network" => self.network,
            _ => self.other,
        }
    }
}

/// From findings to incidents.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IncidentConfig {
    /// Seconds without a finding before an incident resolves …
    pub quiet_s: f64,
    /// … and at least this many of the host's windows.
    pub quiet_windows: u32,
    /// Confidence change worth an `updated`.
    pub update_delta: f64,
    /// `[incidents.severity]`: the severity table's knobs (docs/alerting.md).
    pub severity: super::incidents::severity::SeverityConfig,
}

impl Default for IncidentConfig {
    fn default() -> Self {
        Self {
            quiet_s: 30.0,
            quiet_windows: 2,
            update_delta: 0.05,
            severity: Default::default(),
        }
    }
}

impl DetectConfig {
    /// Checks every value's range, section by section; the first bad one
    /// is the error.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        self.ib.validate()?;
        self.gpu.validate()?;
        self.storage.validate()?;
        self.nfs.validate()?;
        self.workload.validate()?;
        self.nccl.validate()?;
        self.interference.validate()?;
        pos("incidents.quiet_s", self.incidents.quiet_s)?;
        within(
            "incidents.update_delta",
            self.incidents.update_delta,
            0.0,
            1.0,
        )?;
        self.incidents.severity.validate()?;
        self.limits.validate()
    }
}

impl IbConfig {
    fn validate(&self) -> Result<(), InvalidSetting> {
        prob("ib.reference_ber", self.reference_ber)?;
        prob("ib.alarm_ber", self.alarm_ber)?;
        if self.alarm_ber < self.reference_ber {
            return Err(InvalidSetting::new(
                "ib.alarm_ber",
                self.alarm_ber,
                "must not be below ib.reference_ber",
            ));
        }
        pos("ib.horizon_s", self.horizon_s)?;
        if self.long_horizons_s.len() > 4
            || self
                .long_horizons_s
                .iter()
                .any(|&h| !(h > self.horizon_s && h <= 3600.0))
        {
            return Err(InvalidSetting::new(
                "ib.long_horizons_s",
                format!("{:?}", self.long_horizons_s),
                "at most 4 horizons, each above ib.horizon_s and at most 3600 s",
            ));
        }
        prob("ib.significance", self.significance)?;
        prob("ib.clear_significance", self.clear_significance)?;
        if self.clear_significance < self.significance {
            return Err(InvalidSetting::new(
                "ib.clear_significance",
                self.clear_significance,
                "must not be stricter (smaller) than ib.significance",
            ));
        }
        prob(
            "ib.retry_reference_per_packet",
            self.retry_reference_per_packet,
        )?;
        pos("ib.own_history_factor", self.own_history_factor)?;
        pos("ib.flap_horizon_s", self.flap_horizon_s)?;
        if self.flap_downs < 2 {
            return Err(InvalidSetting::new(
                "ib.flap_downs",
                self.flap_downs,
                "must be at least 2 (one down is ib_link_down)",
            ));
        }
        if self.extent_min_ports < 2 {
            return Err(InvalidSetting::new(
                "ib.extent_min_ports",
                self.extent_min_ports,
                "must be at least 2 (one port is a port incident)",
            ));
        }
        prob("ib.extent_significance", self.extent_significance)?;
        pos("ib.extent_window_s", self.extent_window_s)?;
        Ok(())
    }
}

impl StorageConfig {
    fn validate(&self) -> Result<(), InvalidSetting> {
        pos("storage.peer_ratio", self.peer_ratio)?;
        pos("storage.own_ratio", self.own_ratio)?;
        crate::setting::within(
            "storage.unobserved_hold_s",
            self.unobserved_hold_s,
            0.0,
            7.0 * 86_400.0,
        )?;
        if self.persist_windows == 0 {
            return Err(InvalidSetting::new(
                "storage.persist_windows",
                0,
                "must be at least 1",
            ));
        }
        for (p50, p99, f) in [
            ("storage.nvme.p50_ms", "storage.nvme.p99_ms", self.nvme),
            ("storage.ssd.p50_ms", "storage.ssd.p99_ms", self.ssd),
            ("storage.hdd.p50_ms", "storage.hdd.p99_ms", self.hdd),
            (
                "storage.network.p50_ms",
                "storage.network.p99_ms",
                self.network,
            ),
            ("storage.other.p50_ms", "storage.other.p99_ms", self.other),
        ] {
            pos(p50, f.p50_ms)?;
            pos(p99, f.p99_ms)?;
        }
        Ok(())
    }
}

impl WorkloadConfig {
    fn validate(&self) -> Result<(), InvalidSetting> {
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

impl NcclConfig {
    fn validate(&self) -> Result<(), InvalidSetting> {
        // A NaN or negative interval count never hangs (every comparison
        // false) or always does: both refused.
        within("nccl.hang_intervals", self.hang_intervals, 1.0, 1e6)?;
        pos("nccl.hang_min_s", self.hang_min_s)?;
        pos("nccl.forget_s", self.forget_s)?;
        pos("nccl.straggler_lag_fraction", self.straggler_lag_fraction)?;
        pos("nccl.straggler_lag_min_s", self.straggler_lag_min_s)?;
        prob("nccl.stuck_share", self.stuck_share)?;
        prob(
            "nccl.traffic_collapse_fraction",
            self.traffic_collapse_fraction,
        )?;
        if self.spin_util_pct > 100 {
            return Err(InvalidSetting::new(
                "nccl.spin_util_pct",
                f64::from(self.spin_util_pct),
                "must be a percentage, 0 to 100",
            ));
        }
        Ok(())
    }
}

impl InterferenceConfig {
    fn validate(&self) -> Result<(), InvalidSetting> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        DetectConfig::default().validate().unwrap();
        let mut c = DetectConfig::default();
        c.ib.alarm_ber = 1e-16;
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "ib.alarm_ber");
        let mut c = DetectConfig::default();
        c.ib.significance = 0.0;
        assert_eq!(c.validate().unwrap_err().key, "ib.significance");
        let mut c = DetectConfig::default();
        c.ib.flap_downs = 1;
        assert_eq!(c.validate().unwrap_err().key, "ib.flap_downs");
    }
}
