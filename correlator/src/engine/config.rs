//! The `[detect]` part of the correlator's config file (`faultline-correlator
//! serve --config FILE`), assembled from the sections each detector owns
//! (`engine::<detector>::config`: its thresholds, units, defaults and
//! ranges). `docs/detection.md` gives the anchor of each default.
//!
//! Defaults come from physics and public operating points (IBTA's BER
//! limit, NVIDIA UFM/ibdiagnet practice, NVMe/SSD/HDD latency classes), not
//! from what makes the simulator pass.
use serde::{Deserialize, Serialize};

pub use super::gpu::GpuConfig;
pub use super::ib::IbConfig;
pub use super::incidents::IncidentConfig;
pub use super::interference::InterferenceConfig;
pub use super::nccl::NcclConfig;
pub use super::nfs::NfsConfig;
pub use super::storage::{ClassFloor, StorageConfig};
pub use super::workload::WorkloadConfig;
pub use crate::limits::LimitsConfig;
pub use crate::setting::InvalidSetting;

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
    pub nfs: NfsConfig,
    pub workload: WorkloadConfig,
    pub interference: InterferenceConfig,
    pub nccl: NcclConfig,
    pub incidents: IncidentConfig,
    /// `[detect.limits]`: what ingest, the engine and the gRPC listener
    /// accept and keep.
    pub limits: LimitsConfig,
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
        self.incidents.validate()?;
        self.limits.validate()
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
