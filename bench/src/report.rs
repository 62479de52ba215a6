//! Writing a benchmark's JSON result, and what a failed one leaves behind.
//!
//! Every result carries `"status"`: `"ok"`, or `"failed"` with `"failures"`
//! (one reason per failed part or row) so a reader of `bench/results.json`
//! never mistakes a partial or stale result for a full one. A benchmark that
//! fails outright still leaves a file: `{"benchmark", "status": "failed",
//! "reason"}`.
use std::{
    path::{Path, PathBuf},
    sync::Mutex,
};

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::{json, Value};

/// Files written by [`write`] in this process (so `main` knows whether a
/// failing benchmark already wrote its partial result).
static WRITTEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The failures of a benchmark's parts or rows, collected while the rest
/// goes on.
#[derive(Debug, Default)]
pub struct Failures(Vec<String>);

impl Failures {
    /// Records `what` failed with `e` (printed at once on stderr).
    pub fn add(&mut self, what: &str, e: &anyhow::Error) -> String {
        let reason = format!("{what}: {e:#}");
        eprintln!("FAILED {reason}");
        self.0.push(reason.clone());
        reason
    }

    /// `Ok` with the value, or the failure recorded and `None`.
    pub fn part<T>(&mut self, what: &str, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.add(what, &e);
                None
            }
        }
    }

    /// A part's JSON, or in its place `{"status": "failed", "reason"}`.
    pub fn value(&mut self, what: &str, r: Result<Value>) -> Value {
        r.unwrap_or_else(|e| failed_part(self.add(what, &e)))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Err` listing every failure, after the result was written.
    pub fn into_result(self) -> Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        anyhow::bail!("{} failed: {}", self.0.len(), self.0.join("; "))
    }
}

/// A failed part's place in a result: `{"status": "failed", "reason"}`.
pub fn failed_part(reason: impl Into<String>) -> Value {
    json!({"status": "failed", "reason": reason.into()})
}

/// `result` as a JSON object with `"status"` (and `"failures"` when any).
pub fn with_status(result: impl Serialize, failures: &Failures) -> Result<Value> {
    let mut v = serde_json::to_value(result)?;
    let obj = v
        .as_object_mut()
        .context("a benchmark result must be a JSON object")?;
    if failures.is_empty() {
        obj.insert("status".into(), "ok".into());
    } else {
        obj.insert("status".into(), "failed".into());
        obj.insert("failures".into(), json!(failures.0));
    }
    Ok(v)
}

/// Writes `result` (with its status) to `path` and says so.
pub fn write(path: &Path, result: impl Serialize, failures: &Failures) -> Result<()> {
    let v = with_status(result, failures)?;
    std::fs::write(path, serde_json::to_string_pretty(&v)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    WRITTEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(path.to_path_buf());
    println!("wrote {}", path.display());
    Ok(())
}

/// Whether [`write`] wrote `path` in this process.
pub fn written(path: &Path) -> bool {
    WRITTEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .any(|p| p == path)
}

/// The result of a benchmark that failed before writing one.
pub fn failed_result(benchmark: &str, e: &anyhow::Error) -> Value {
    json!({"benchmark": benchmark, "status": "failed", "reason": format!("{e:#}")})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_says_whether_every_part_ran() {
        let ok = with_status(json!({"benchmark": "x", "v": 1}), &Failures::default()).unwrap();
        assert_eq!(ok["status"], "ok");
        assert!(ok.get("failures").is_none());
        let mut f = Failures::default();
        assert_eq!(f.part("throughput", Ok(3)), Some(3));
        assert_eq!(
            f.part::<u32>("footprint", Err(anyhow::anyhow!("no step times"))),
            None
        );
        let bad = with_status(json!({"benchmark": "x"}), &f).unwrap();
        assert_eq!(bad["status"], "failed");
        assert_eq!(bad["failures"], json!(["footprint: no step times"]));
        let e = f.into_result().unwrap_err().to_string();
        assert_eq!(e, "1 failed: footprint: no step times");
        assert!(with_status(json!([1]), &Failures::default()).is_err());
    }
}
