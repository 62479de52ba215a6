//! Checks, why a run stopped, and the report: the verdict, `result.json`
//! and the pass/fail table.
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::{EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_NO_GPU, EXIT_PASS};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// Not applicable here: the stand-in self-test's kernel and NCCL
    /// results, the NCCL part on a node without NCCL.
    Skip,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Skip => "skip",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub name: String,
    pub outcome: Outcome,
    pub expected: String,
    pub observed: String,
}

impl Check {
    pub fn new(
        name: impl Into<String>,
        pass: bool,
        expected: impl ToString,
        observed: impl ToString,
    ) -> Self {
        Self {
            name: name.into(),
            outcome: if pass { Outcome::Pass } else { Outcome::Fail },
            expected: expected.to_string(),
            observed: observed.to_string(),
        }
    }

    /// A count that must be exactly `expected`.
    pub fn exact(name: impl Into<String>, expected: u64, observed: Option<u64>) -> Self {
        match observed {
            Some(o) => Self::new(name, o == expected, expected, o),
            None => Self::new(name, false, expected, "nothing recorded"),
        }
    }
}

/// Why the run stopped before a verdict from the checks.
#[derive(Debug, thiserror::Error)]
pub enum Halt {
    /// No GPU node, or no loadable driver: nothing can be checked here.
    #[error("no GPU: {0}")]
    NoGpu(String),
    /// A prerequisite on a GPU machine is missing (root, a C compiler,
    /// nvidia-ml-py, the collector build).
    #[error("cannot run: {0}")]
    CannotRun(String),
    /// The run broke or timed out.
    #[error("failed: {0}")]
    Failed(String),
}

impl From<anyhow::Error> for Halt {
    fn from(e: anyhow::Error) -> Self {
        Halt::Failed(format!("{e:#}"))
    }
}

/// A missing prerequisite, from the error that found it.
pub fn cannot(e: anyhow::Error) -> Halt {
    Halt::CannotRun(format!("{e:#}"))
}

pub struct Report {
    pub started: Instant,
    pub started_unix_ms: u64,
    pub standin: bool,
    pub facts: Map<String, Value>,
    pub checks: Vec<Check>,
    /// Said after the verdict's headline (a part skipped, and why).
    pub notes: Vec<String>,
}

impl Report {
    pub fn fact(&mut self, key: &str, v: impl Into<Value>) {
        self.facts.insert(key.into(), v.into());
    }

    /// Status word, exit code and the headline.
    pub fn verdict(&self, halt: Option<&Halt>) -> (&'static str, i32, String) {
        let failed = self
            .checks
            .iter()
            .filter(|c| c.outcome == Outcome::Fail)
            .count();
        let mut what = if self.standin {
            " (stand-in driver: the harness works; no GPU was tested)".to_string()
        } else {
            String::new()
        };
        let skips = self
            .checks
            .iter()
            .filter(|c| c.outcome == Outcome::Skip)
            .count();
        if skips > 0 {
            what = format!(", {skips} skipped{what}");
        }
        for n in &self.notes {
            what.push_str("; ");
            what.push_str(n);
        }
        match halt {
            Some(Halt::NoGpu(why)) => (
                "no_gpu",
                EXIT_NO_GPU,
                format!("NO GPU: {why}; nothing was checked (not a pass)"),
            ),
            Some(Halt::CannotRun(why)) => {
                ("cannot_run", EXIT_CANNOT_RUN, format!("CANNOT RUN: {why}"))
            }
            Some(Halt::Failed(why)) => ("fail", EXIT_FAIL, format!("FAIL: {why}")),
            None if self.checks.is_empty() => ("fail", EXIT_FAIL, "FAIL: no check ran".into()),
            None if failed > 0 => (
                "fail",
                EXIT_FAIL,
                format!(
                    "FAIL: {failed} of {} checks failed{}",
                    self.checks.len(),
                    self.notes
                        .iter()
                        .map(|n| format!("; {n}"))
                        .collect::<String>()
                ),
            ),
            None => (
                "pass",
                EXIT_PASS,
                format!(
                    "PASS: all {} checks passed{what}",
                    self.checks.len() - skips
                ),
            ),
        }
    }

    pub fn to_json(&self, halt: Option<&Halt>) -> Value {
        let (status, code, headline) = self.verdict(halt);
        let reason = match halt {
            Some(Halt::NoGpu(w) | Halt::CannotRun(w) | Halt::Failed(w)) => Value::from(w.clone()),
            None => Value::Null,
        };
        json!({
            "status": status,
            "exit_code": code,
            "passed": code == EXIT_PASS,
            "gpu_present": !matches!(halt, Some(Halt::NoGpu(_))) && !self.standin,
            "mode": if self.standin { "standin" } else { "gpu" },
            "headline": headline,
            "reason": reason,
            "started_unix_ms": self.started_unix_ms,
            "elapsed_s": (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            "facts": Value::Object(self.facts.clone()),
            "checks": self.checks.iter().map(|c| json!({
                "name": c.name,
                "result": c.outcome.word(),
                "expected": c.expected,
                "observed": c.observed,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The pass/fail table.
pub fn table(checks: &[Check]) -> String {
    let w_name = checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let w_exp = checks
        .iter()
        .map(|c| c.expected.len())
        .max()
        .unwrap_or(8)
        .clamp(8, 40);
    let mut s = format!(
        "{:<6} {:<w_name$}  {:<w_exp$}  observed\n",
        "result", "check", "expected"
    );
    for c in checks {
        s.push_str(&format!(
            "{:<6} {:<w_name$}  {:<w_exp$}  {}\n",
            c.outcome.word().to_uppercase(),
            c.name,
            c.expected,
            c.observed
        ));
    }
    s
}
