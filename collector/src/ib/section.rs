//! `[ib]`: which InfiniBand devices are read. Documented in `docs/config.md`.
//! Each key with a flag is declared once below ([`Key`]: the default and
//! the flags in `main.rs` read it).
use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// `--ib-device-include REGEX` (node_exporter's flag's alias in `main.rs`).
pub const DEVICE_INCLUDE: Key<&str> = Key {
    flag: Some("ib-device-include"),
    ..Key::new(
        "ib.device_include",
        "",
        "Read only the InfiniBand devices whose name matches this regular expression, as node_exporter's flag of the same name",
    )
};
/// `--ib-device-exclude REGEX`.
pub const DEVICE_EXCLUDE: Key<&str> = Key {
    flag: Some("ib-device-exclude"),
    ..Key::new(
        "ib.device_exclude",
        "",
        "Skip the InfiniBand devices whose name matches this regular expression, as node_exporter's flag of the same name",
    )
};
/// `--no-ib-export`: the port families off `/metrics`.
pub const EXPORT: Key<bool> = Key {
    flag: Some("no-ib-export"),
    ..Key::new(
        "ib.export",
        true,
        "Read the InfiniBand ports (for the correlator) but leave their faultline_infiniband_* families off /metrics, where node_exporter's infiniband collector already exports them",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 3] = [
    DEVICE_INCLUDE.declared(),
    DEVICE_EXCLUDE.declared(),
    EXPORT.declared(),
];

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
            export: EXPORT.default,
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
