//! `[alertmanager]` settings. Each key with a default and a bound is
//! declared once below ([`Key`]: `Default` and [`AlertmanagerConfig::invalid`]
//! read it; a test checks each refusal's words against the bounds).
use std::path::PathBuf;

use proto::config_key::Key;
use serde::{Deserialize, Serialize};

use crate::http_client::{Tls, TlsSetupError};

/// `--alertmanager URL`: Alertmanager's base URL; empty, off.
pub const URL: Key<&str> = Key {
    flag: Some("alertmanager"),
    ..Key::new("alertmanager.url", "", "Alertmanager base URL")
};
/// Seconds between re-sends of every firing alert: 1 s to an hour.
pub const RESEND_S: Key<f64> = Key {
    min: Some(1.0),
    max: Some(3600.0),
    ..Key::new(
        "alertmanager.resend_s",
        60.0,
        "Seconds between re-sends of every firing alert",
    )
};
/// Seconds one post may take: (0, 60].
pub const TIMEOUT_S: Key<f64> = Key {
    max: Some(60.0),
    ..Key::new("alertmanager.timeout_s", 5.0, "Seconds one post may take")
};
// The refusals' words: static (`ConfigError::Setting` holds a `&'static
// str`); `tests::the_refusals_name_the_declared_bounds` checks them.
const RESEND_S_WHY: &str = "must be a number of seconds in [1, 3600]";
const TIMEOUT_S_WHY: &str = "must be a number of seconds in (0, 60]";

/// Where and how often incidents are pushed.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AlertmanagerConfig {
    /// Base URL of Alertmanager, `http://host:port` or `https://host:port`
    /// (off when empty; `--alertmanager URL` sets it too). Alerts go to
    /// `/api/v2/alerts`.
    pub url: String,
    /// PEM CA bundle that verifies Alertmanager's certificate; required for
    /// an `https://` URL (the server's name in the URL must be in its
    /// certificate).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) presented to Alertmanager, for a
    /// `--web.config.file` with `client_auth_type: RequireAndVerifyClientCert`;
    /// with `client_key`.
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
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
            ca_file: None,
            client_cert: None,
            client_key: None,
            resend_s: RESEND_S.default,
            timeout_s: TIMEOUT_S.default,
            ui_url: String::new(),
        }
    }
}

impl AlertmanagerConfig {
    /// The first setting out of range, as `(key, why)`.
    pub fn invalid(&self) -> Option<(&'static str, &'static str)> {
        let https = self.url.starts_with("https://");
        if !self.url.is_empty() && !https && !self.url.starts_with("http://") {
            return Some(("alertmanager.url", "must start with http:// or https://"));
        }
        if https && self.ca_file.is_none() {
            return Some((
                "alertmanager.ca_file",
                "is required for an https:// url: the PEM CA that signed Alertmanager's certificate",
            ));
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Some((
                "alertmanager.client_cert",
                "and alertmanager.client_key go together: set both or neither",
            ));
        }
        let tls_set = self.ca_file.is_some() || self.client_cert.is_some();
        if tls_set && !https {
            return Some((
                "alertmanager.ca_file",
                "and client_cert apply only to an https:// url: use https:// or remove them",
            ));
        }
        if !RESEND_S.contains(self.resend_s) {
            return Some((RESEND_S.path, RESEND_S_WHY));
        }
        // (0, max]: a zero timeout is not "no timeout".
        if !(self.timeout_s > 0.0 && TIMEOUT_S.contains(self.timeout_s)) {
            return Some((TIMEOUT_S.path, TIMEOUT_S_WHY));
        }
        None
    }
}

impl AlertmanagerConfig {
    /// The TLS settings of an `https://` URL, files read and checked (the
    /// file at fault is named); `None` for `http://`.
    pub fn tls(&self) -> Result<Option<Tls>, TlsSetupError> {
        let Some(ca) = self.ca_file.as_deref() else {
            return Ok(None);
        };
        let client = self.client_cert.as_deref().zip(self.client_key.as_deref());
        Tls::from_files(ca, client).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(url: &str, ca: bool, cert: bool, key: bool) -> AlertmanagerConfig {
        AlertmanagerConfig {
            url: url.into(),
            ca_file: ca.then(|| "ca.pem".into()),
            client_cert: cert.then(|| "c.pem".into()),
            client_key: key.then(|| "c.key".into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_refusals_name_the_declared_bounds() {
        let seconds = |k: Key<f64>| format!("must be a number of seconds {}", k.range_text());
        assert_eq!(seconds(RESEND_S), RESEND_S_WHY);
        assert_eq!(
            TIMEOUT_S_WHY,
            format!("must be a number of seconds in (0, {}]", TIMEOUT_S.hi())
        );
        let key = |resend_s, timeout_s| {
            AlertmanagerConfig {
                resend_s,
                timeout_s,
                ..Default::default()
            }
            .invalid()
        };
        assert_eq!(key(0.5, 5.0), Some((RESEND_S.path, RESEND_S_WHY)));
        assert_eq!(key(f64::NAN, 5.0), Some((RESEND_S.path, RESEND_S_WHY)));
        assert_eq!(key(60.0, 0.0), Some((TIMEOUT_S.path, TIMEOUT_S_WHY)));
        assert_eq!(key(60.0, 60.5), Some((TIMEOUT_S.path, TIMEOUT_S_WHY)));
        assert_eq!(key(3600.0, 60.0), None);
    }

    #[test]
    fn https_needs_a_ca_and_tls_files_need_https() {
        assert_eq!(with("", false, false, false).invalid(), None);
        assert_eq!(with("http://am:9093", false, false, false).invalid(), None);
        assert_eq!(with("https://am:9093", true, false, false).invalid(), None);
        assert_eq!(with("https://am:9093", true, true, true).invalid(), None);
        let key = |c: AlertmanagerConfig| c.invalid().map(|(k, _)| k);
        assert_eq!(
            key(with("https://am:9093", false, false, false)),
            Some("alertmanager.ca_file")
        );
        assert_eq!(
            key(with("https://am:9093", true, true, false)),
            Some("alertmanager.client_cert")
        );
        assert_eq!(
            key(with("http://am:9093", true, false, false)),
            Some("alertmanager.ca_file")
        );
        assert_eq!(
            key(with("ftp://am", false, false, false)),
            Some("alertmanager.url")
        );
    }

    #[test]
    fn a_missing_ca_file_is_named() {
        let c = with("https://am:9093", true, false, false);
        let e = c.tls().expect_err("no such file").to_string();
        assert!(e.contains("ca.pem"), "{e}");
    }
}
