//! `[detect.incidents]`: from findings to incidents (quiet period, update
//! threshold, the severity table's knobs).
use proto::config_key::Key;
use serde::{Deserialize, Serialize};

use crate::setting::{in_bounds, pos, InvalidSetting};

/// Confidence change worth an `updated`: a share, 0 to 1.
pub const UPDATE_DELTA: Key<f64> = Key {
    min: Some(0.0),
    max: Some(1.0),
    ..Key::new(
        "incidents.update_delta",
        0.05,
        "Confidence change worth an updated",
    )
};

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
    pub severity: super::severity::SeverityConfig,
}

impl Default for IncidentConfig {
    fn default() -> Self {
        Self {
            quiet_s: 30.0,
            quiet_windows: 2,
            update_delta: UPDATE_DELTA.default,
            severity: Default::default(),
        }
    }
}

impl IncidentConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        pos("incidents.quiet_s", self.quiet_s)?;
        in_bounds(&UPDATE_DELTA, self.update_delta)?;
        self.severity.validate()
    }
}
