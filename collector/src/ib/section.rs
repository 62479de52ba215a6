//! `[ib]`: which InfiniBand devices are read. Documented in `docs/config.md`.
use serde::{Deserialize, Serialize};

use super::filter::{DeviceFilter, FilterError};

/// InfiniBand ports (`[ib]`): which devices are read, as node_exporter's
/// `--collector.infiniband.device-include` / `-exclude` (regular
/// expressions matched anywhere in the device name; at most one of the two).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IbSection {
    pub device_include: Option<String>,
    pub device_exclude: Option<String>,
}

impl IbSection {
    /// The device filter these keys describe.
    pub fn filter(&self) -> Result<DeviceFilter, FilterError> {
        DeviceFilter::new(
            self.device_include.as_deref(),
            self.device_exclude.as_deref(),
        )
    }
}
