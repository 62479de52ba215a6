//! `[detect.incidents]`: from findings to incidents (quiet period, update
//! threshold, the severity table's knobs).
use serde::{Deserialize, Serialize};

use crate::setting::{pos, within, InvalidSetting};

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
            update_delta: 0.05,
            severity: Default::default(),
        }
    }
}

impl IncidentConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        pos("incidents.quiet_s", self.quiet_s)?;
        within("incidents.update_delta", self.update_delta, 0.0, 1.0)?;
        self.severity.validate()
    }
}
