//! `[alertmanager]` settings.
use serde::{Deserialize, Serialize};

/// Where and how often incidents are pushed.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// Base URL of Alertmanager, `http://host:port` (off when empty;
    /// `--alertmanager URL` sets it too). Alerts go to `/api/v2/alerts`.
    pub url: String,
    /// Seconds between re-sends of every firing alert (Alertmanager forgets
    /// an alert whose `endsAt` passes: it is set to 4 re-sends ahead).
    pub resend_s: f64,
    /// Seconds one post may take.
    pub timeout_s: f64,
    /// Base URL of this correlator's web UI for the alerts' `generatorURL`
    /// (e.g. `http://correlator.example:8080`); empty: none.
    pub ui_url: String,
}

impl Default for AlertmanagerConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            resend_s: 60.0,
            timeout_s: 5.0,
            ui_url: String::new(),
        }
    }
}

impl AlertmanagerConfig {
    /// The first setting out of range, as `(key, why)`.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        if !self.url.is_empty() && !self.url.starts_with("http://") {
            return Some((
                "alertmanager.url",
                "must start with http:// (put a TLS proxy on loopback for https)",
            ));
        }
        if !(self.resend_s >= 1.0 && self.resend_s <= 3600.0) {
            return Some(("alertmanager.resend_s", "must be within 1..=3600"));
        }
        if !(self.timeout_s > 0.0 && self.timeout_s <= 60.0) {
            return Some(("alertmanager.timeout_s", "must be within 0..=60"));
        }
        None
    }
}
