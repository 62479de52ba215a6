//! `[ib]`: which InfiniBand devices are read. Documented in `docs/config.md`.
use serde::{Deserialize, Serialize};

use super::filter::{DeviceFilter, FilterError};

/// InfiniBand ports (`[ib]`): which devices are read, as node_exporter's
/// `--collector.infiniband.device-include` / `-exclude` (regular
/// expressions matched anywhere in the device name; at most one of the two),
/// and whether their families are exported.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IbSection {
    pub device_include: Option<String>,
    pub device_exclude: Option<String>,
    /// The `faultline_infiniband_*` port families on `/metrics`. Off where
    /// node_exporter's infiniband collector already exports the same
    /// series; the ports are still read and streamed to the correlator.
    pub export: bool,
}

impl Default for IbSection {
    fn default() -> Self {
        Self {
            device_include: None,
            device_exclude: None,
            export: true,
        }
    }
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

#[cfg(test)]
mod tests {
    use crate::config::FileConfig;

    #[test]
    fn export_is_on_unless_the_file_turns_it_off() {
        let on = FileConfig::parse("[ib]\ndevice_include = \"mlx5\"\n", "f").expect("parses");
        assert!(on.ib.export);
        assert!(FileConfig::default().ib.export);
        let off = FileConfig::parse("[ib]\nexport = false\n", "f").expect("parses");
        assert!(!off.ib.export);
        assert!(FileConfig::parse("[ib]\nexport = \"no\"\n", "f").is_err());
    }
}
