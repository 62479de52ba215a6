//! Logs on stderr for the correlator's and the simulator's binaries:
//! `RUST_LOG` when set (and valid), `default` otherwise; text (colour codes
//! only when stderr is a terminal and `NO_COLOR` is unset or empty) or JSON
//! lines, one object per event, for a log shipper (`--log-format json`,
//! `FAULTLINE_LOG_FORMAT`, the config file's `log_format`; the collector's
//! `collector.log_format` writes the same shape).

use serde::{Deserialize, Serialize};

/// The environment variable of `--log-format`.
pub const FORMAT_ENV: &str = "FAULTLINE_LOG_FORMAT";

/// How events are written on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`
    /// (`message` and the event's fields) and the enclosing `span`/`spans`.
    Json,
}

/// Installs the text subscriber (a no-op when one is already installed).
pub fn init(default: &str) {
    init_as(default, LogFormat::Text);
}

/// Installs the subscriber in `format` (a no-op when one is already
/// installed).
pub fn init_as(default: &str, format: LogFormat) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(vocab::term::colour(std::io::IsTerminal::is_terminal(
            &std::io::stderr(),
        )))
        .with_writer(std::io::stderr);
    let _ = match format {
        // No colour codes inside JSON strings, whatever the terminal.
        LogFormat::Json => b.with_ansi(false).json().try_init(),
        LogFormat::Text => b.try_init(),
    };
}
