//! The configuration's errors: one line naming the file and line, or the
//! key, and what to write instead. A leaf: it imports no other module of the
//! crate, so any of them could use it (they use their own error types, which
//! `config` turns into [`ConfigError::Invalid`] naming the key).
use std::time::TryFromFloatSecsError;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("config error: cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    /// The parser's words with the values they quote hidden, never the
    /// file's text (`proto::parse_error`); line 0: no position known.
    #[error("config error: {path} line {line}, column {column}: {message}")]
    Parse {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("config error: {key}: {message}")]
    Invalid { key: &'static str, message: String },
}

impl ConfigError {
    /// The value of `key` is invalid because of `why`.
    pub fn invalid(key: &'static str, why: impl std::fmt::Display) -> Self {
        Self::Invalid {
            key,
            message: why.to_string(),
        }
    }
}

/// A number of seconds that is not one, or not within its range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SecondsError {
    #[error("{0:?} is not a number of seconds")]
    NotANumber(String),
    #[error("must be a number of seconds in [{min}, {max}], got {}", show(*got))]
    OutOfRange { min: f64, max: f64, got: f64 },
    #[error("{got}: {source}")]
    Unrepresentable {
        got: f64,
        #[source]
        source: TryFromFloatSecsError,
    },
}

/// A number as the operator would write it (`1e-300`, not 300 zeros).
fn show(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e9).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}
