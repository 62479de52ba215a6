//! The correlator's config file (`faultline-correlator serve --config
//! FILE`, docs/config.md), assembled from the tables each module owns:
//! `[detect]` (the engine's thresholds and `[detect.limits]`), `[history]`,
//! `[web]` and `[alertmanager]`. Read bounded, parsed and validated here;
//! every key is optional (each table's defaults).
use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

use crate::{engine::DetectConfig, setting::InvalidSetting};

/// `serve --cluster NAME`, `FAULTLINE_CLUSTER`: incidents' default cluster.
pub const CLUSTER: Key<&str> = Key {
    flag: Some("cluster"),
    env: Some("FAULTLINE_CLUSTER"),
    ..Key::new(
        "cluster",
        "",
        "The cluster label of incidents from collectors that name none",
    )
};
/// `--log-format`, `FAULTLINE_LOG_FORMAT` (`crate::logging`).
pub const LOG_FORMAT: Key<&str> = Key {
    flag: Some("log-format"),
    env: Some(crate::logging::FORMAT_ENV),
    ..Key::new("log_format", "text", "Log format on stderr")
};
/// The keys with a flag or an environment variable, declared in the
/// tables' files (the docs test checks that their rows name them).
pub const FLAGGED: [Declared; 6] = [
    CLUSTER.declared(),
    LOG_FORMAT.declared(),
    crate::history::config::PATH.declared(),
    crate::web::LISTEN.declared(),
    crate::web::WEB_CONFIG_FILE.declared(),
    crate::alerts::config::URL.declared(),
];

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// The cluster label of incidents raised from windows whose collector
    /// names none (a collector's own `cluster` wins); unset: unnamed.
    pub cluster: Option<String>,
    /// Log format on stderr, `text` or `json` (`--log-format`,
    /// `FAULTLINE_LOG_FORMAT` win; `crate::logging`).
    pub log_format: crate::logging::LogFormat,
    /// `[detect.*]`: detection thresholds and limits (docs/detection.md).
    pub detect: DetectConfig,
    /// `[history]`: the incident and series database (docs/history.md).
    pub history: crate::history::HistoryConfig,
    /// `[web]`: the UI, API, `/metrics` and `/healthz` (docs/web.md).
    pub web: crate::web::WebConfig,
    /// `[alertmanager]`: incident delivery (docs/alerting.md).
    pub alertmanager: crate::alerts::AlertmanagerConfig,
}

/// Why the config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    // The cause is in the message (not a `source`), so that a chain printer
    // (`{:#}`) does not repeat it.
    #[error("cannot read the config file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The parser's words with the values they quote hidden, never the
    /// file's text (`proto::parse_error`); line 0: no position known.
    #[error("config file {path} line {line}, column {column}: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("config file {path}: {key}: {why}")]
    Setting {
        path: String,
        key: &'static str,
        why: &'static str,
    },
    #[error("config file {path}: {setting}")]
    Invalid {
        path: String,
        setting: InvalidSetting,
    },
}

/// Parses and validates a config file's text (`path` names it in errors).
pub fn parse(text: &str, path: &str) -> Result<DetectConfig, ConfigError> {
    parse_file(text, path).map(|f| f.detect)
}

/// Parses and validates every table of a config file.
pub fn parse_file(text: &str, path: &str) -> Result<FileConfig, ConfigError> {
    // Not `e.to_string()`: toml's `Display` quotes the offending line, and
    // a `--config` aimed at a secret (`/proc/self/environ`) would print it.
    let f: FileConfig = toml::from_str(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map_or((0, 0), |s| proto::parse_error::position(text, s.start));
        ConfigError::Parse {
            path: path.to_string(),
            line,
            column,
            message: without_text(e),
        }
    })?;
    let invalid = |setting| ConfigError::Invalid {
        path: path.to_string(),
        setting,
    };
    f.detect.validate().map_err(invalid)?;
    if f.cluster
        .as_deref()
        .is_some_and(|c| !vocab::nats::valid_cluster(c))
    {
        return Err(ConfigError::Setting {
            path: path.to_string(),
            key: "cluster",
            why: "1 to 64 letters, digits, '-' or '_'",
        });
    }
    if let Some((key, why)) = f
        .history
        .invalid()
        .or_else(|| f.web.invalid())
        .or_else(|| f.alertmanager.invalid())
    {
        return Err(ConfigError::Setting {
            path: path.to_string(),
            key,
            why,
        });
    }
    Ok(f)
}

/// The parser's message and the key it was at (`in \`detect.nccl.max_ranks\``),
/// without the file's line that toml's `Display` quotes given the input.
fn without_text(mut e: toml::de::Error) -> String {
    e.set_input(None);
    proto::parse_error::redact(&e.to_string())
}

/// The environment variable that names the config file of `serve`, `fleet`
/// and `check-config` when `--config` is not given (the collector's too).
pub const CONFIG_ENV: &str = "FAULTLINE_CONFIG";

/// Reads, parses and validates every table of a config file.
pub fn load_file(path: &std::path::Path) -> Result<FileConfig, ConfigError> {
    load_named(path, path.display().to_string())
}

/// [`load_file`] of a path that came from `FAULTLINE_CONFIG`: every error
/// names the variable, so the operator looks in the unit's or pod's
/// environment rather than at the command line.
pub fn load_file_from_env(path: &std::path::Path) -> Result<FileConfig, ConfigError> {
    load_named(path, format!("{} (from {CONFIG_ENV})", path.display()))
}

fn load_named(path: &std::path::Path, shown: String) -> Result<FileConfig, ConfigError> {
    // `/dev/zero` or a FIFO given as the config is refused, not read forever.
    let text = proto::bounded_read::read_to_string(path, proto::bounded_read::CONFIG_MAX).map_err(
        |error| ConfigError::Read {
            path: shown.clone(),
            error,
        },
    )?;
    parse_file(&text, &shown)
}

/// Reads, parses and validates a config file.
pub fn load(path: &std::path::Path) -> Result<DetectConfig, ConfigError> {
    load_file(path).map(|f| f.detect)
}

impl FileConfig {
    /// The effective configuration as TOML (`check-config`).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(self)
    }
}

#[cfg(test)]
mod doc_check;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_keys_and_errors_said_once() {
        let c = parse("[detect.workload]\nmin_slowdown = 0.2\n", "w.toml").unwrap();
        assert_eq!(c.workload.min_slowdown, 0.2);
        assert_eq!(c.workload.z, 5.0);
        let e = parse("[detect.workload]\nz = -1\n", "w.toml").unwrap_err();
        // A chain printer (`{:#}`) adds each source: the cause must be in
        // the message only, or the operator reads it twice.
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(
            e.to_string(),
            "config file w.toml: detect.workload.z = -1: must be a positive number"
        );
        let e = load(std::path::Path::new("/nonexistent/faultline.toml")).unwrap_err();
        assert!(std::error::Error::source(&e).is_none());
        assert!(e
            .to_string()
            .starts_with("cannot read the config file /nonexistent/faultline.toml: "));
    }

    #[test]
    fn file_sets_keys_and_names_mistakes() {
        let c = parse(
            "[detect.ib]\nreference_ber = 1e-15\n[detect.storage.nvme]\np50_ms = 0.3\np99_ms = 3.0\n",
            "x.toml",
        )
        .unwrap();
        assert_eq!(c.ib.reference_ber, 1e-15);
        assert_eq!(c.ib.alarm_ber, 1e-12);
        assert_eq!(c.storage.nvme.p50_ms, 0.3);
        let e = parse("[detect.ib]\nreference_bear = 1e-15\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("reference_bear"), "{e}");
        let e = parse("[detect.ib]\nsignificance = 2.0\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("detect.ib.significance = 2"), "{e}");
        assert_eq!(parse("", "x.toml").unwrap(), DetectConfig::default());
    }
}
