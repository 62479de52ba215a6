//! `faultline-correlator replay FILE.jsonl`: windows in the wire format as
//! JSON, one per line (`docs/replay.md`), through the same ingest and
//! detection code as live traffic; candidate updates out as JSON lines.
use std::{io::Write, path::Path};

use proto::v1::Window;

use crate::{engine::Engine, ingest::IngestState, limits::LimitsConfig};

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    // The cause is in the message, not a `source`, so that a chain
    // printer (`{:#}`) does not repeat it.
    #[error("{file}: {error}")]
    Io { file: String, error: std::io::Error },
    #[error("{file} line {line}: {error}")]
    Invalid {
        file: String,
        line: usize,
        error: LineError,
    },
}

/// Why a line is not a window ingest takes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LineError {
    /// Not a window (JSON or field error; names the field when serde knew
    /// which).
    #[error("{0}")]
    Json(String),
    #[error("more after the window: one window per line")]
    Trailing,
    #[error("field `origin.hostname` is required")]
    NoHostname,
    #[error("field `seq` must be ≥ 1")]
    ZeroSeq,
    #[error("not UTF-8 text (byte {0})")]
    NotUtf8(usize),
    #[error("longer than {MAX_LINE_BYTES} bytes without a newline: not a window log (one window per line)")]
    TooLong,
    /// Refused by ingest (the status message).
    #[error("{0}")]
    Refused(String),
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplayStats {
    pub windows: u64,
    pub skipped_invalid: u64,
    pub duplicates: u64,
    pub updates: u64,
}

/// Parses one line; the error names the field serde stopped at.
pub fn parse_line(text: &str) -> Result<Window, LineError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let w: Window = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        LineError::Json(if path.is_empty() || path == "." {
            inner
        } else {
            format!("field `{path}`: {inner}")
        })
    })?;
    de.end().map_err(|_| LineError::Trailing)?;
    if w.origin.as_ref().is_none_or(|o| o.hostname.is_empty()) {
        return Err(LineError::NoHostname);
    }
    if w.seq == 0 {
        return Err(LineError::ZeroSeq);
    }
    Ok(w)
}

/// Longest line read: a window is at most 16 MiB of protobuf on the wire
/// (the ingest message limit), a few times that as JSON.
pub const MAX_LINE_BYTES: u64 = 64 << 20;

/// Reads the next line (without its newline) into `line`, at most
/// [`MAX_LINE_BYTES`] + 1 bytes of it; false at the end of the input.
fn read_line(r: &mut impl std::io::BufRead, line: &mut Vec<u8>) -> std::io::Result<bool> {
    use std::io::{BufRead as _, Read as _};
    line.clear();
    if r.by_ref()
        .take(MAX_LINE_BYTES + 2)
        .read_until(b'\n', line)?
        == 0
    {
        return Ok(false);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    Ok(true)
}

/// Replays `path` into `engine` with the default ingest limits, writing
/// updates to `out`.
pub fn replay(
    path: &Path,
    engine: &mut Engine,
    skip_invalid: bool,
    out: &mut impl Write,
) -> Result<ReplayStats, ReplayError> {
    replay_with(path, engine, &LimitsConfig::default(), skip_invalid, out)
}

/// Ingest's limits for recorded windows: `limits` (`[detect.limits]`, as
/// `serve` takes them) less what is measured on the wall clock, which a
/// replay does not reproduce: the future/past window checks and the skip
/// budget per minute.
pub fn recorded_limits(limits: &LimitsConfig) -> LimitsConfig {
    LimitsConfig {
        max_future_s: 0.0,
        max_past_s: 0.0,
        max_seq_skip_per_min: 0,
        ..limits.clone()
    }
}

/// Replays `path` into `engine` through ingest with `limits` (see
/// [`recorded_limits`]), writing updates to `out`.
pub fn replay_with(
    path: &Path,
    engine: &mut Engine,
    limits: &LimitsConfig,
    skip_invalid: bool,
    out: &mut impl Write,
) -> Result<ReplayStats, ReplayError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|error| ReplayError::Io {
        file: file.clone(),
        error,
    })?;
    let state = IngestState::new(recorded_limits(limits));
    let mut stats = ReplayStats::default();
    let mut reader = std::io::BufReader::new(f);
    let mut line = Vec::new();
    for i in 0.. {
        if !read_line(&mut reader, &mut line).map_err(|error| ReplayError::Io {
            file: file.clone(),
            error,
        })? {
            break;
        }
        if line.len() as u64 > MAX_LINE_BYTES {
            // Not skippable: the rest of such a "line" may never end (/dev/zero).
            return Err(ReplayError::Invalid {
                file,
                line: i + 1,
                error: LineError::TooLong,
            });
        }
        let parsed = match std::str::from_utf8(&line) {
            Ok(l) if l.trim().is_empty() || l.trim_start().starts_with('#') => continue,
            Ok(l) => parse_line(l),
            Err(e) => Err(LineError::NotUtf8(e.valid_up_to() + 1)),
        };
        let mut w = match parsed {
            Ok(w) => w,
            Err(error) if skip_invalid => {
                stats.skipped_invalid += 1;
                tracing::warn!(file, line = i + 1, message = %error, "skipping invalid line");
                continue;
            }
            Err(error) => {
                return Err(ReplayError::Invalid {
                    file,
                    line: i + 1,
                    error,
                })
            }
        };
        // As the ingest service does before admitting a window.
        crate::finite::drop_non_finite(&mut w);
        match state.accept(&w) {
            Ok(true) => {}
            Ok(false) => {
                stats.duplicates += 1;
                continue;
            }
            Err(status) if skip_invalid => {
                stats.skipped_invalid += 1;
                tracing::warn!(
                    file,
                    line = i + 1,
                    message = status.message(),
                    "skipping invalid window"
                );
                continue;
            }
            Err(status) => {
                return Err(ReplayError::Invalid {
                    file,
                    line: i + 1,
                    error: LineError::Refused(status.message().to_string()),
                })
            }
        }
        stats.windows += 1;
        for u in engine.ingest(&w) {
            stats.updates += 1;
            let line = serde_json::json!({
                "ts": u.ts_unix_ms, "incident_id": u.incident_id, "state": u.state,
                "kind": u.kind, "entity": u.entity, "confidence": u.confidence,
                "evidence": u.evidence, "affected_jobs": u.affected_jobs, "runbook": u.runbook,
                "cluster": u.cluster, "severity": u.severity,
            });
            writeln!(out, "{line}").map_err(|error| ReplayError::Io {
                file: "stdout".into(),
                error,
            })?;
        }
    }
    Ok(stats)
}
