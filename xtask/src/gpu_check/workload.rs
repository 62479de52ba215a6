//! What the workload did: its own account of the calls it made.
use std::collections::BTreeMap;

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};

/// The workload's own account (`count`/`bytes` lines of `gpu_workload run`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    pub pid: u32,
    pub device: i32,
    pub kernel: String,
    pub ptx: String,
    /// Driver symbol (`cuMemcpyHtoD_v2`) → calls made.
    pub counts: BTreeMap<String, u64>,
    /// Driver symbol → bytes passed.
    pub bytes: BTreeMap<String, u64>,
    /// Elements of the result that differed from a + b (0: correct).
    pub mismatches: Option<u64>,
}

impl Workload {
    pub fn to_json(&self) -> Value {
        json!({
            "pid": self.pid,
            "device": self.device,
            "kernel": self.kernel,
            "ptx": self.ptx,
            "counts": self.counts,
            "bytes": self.bytes,
            "mismatches": self.mismatches,
        })
    }
}

pub fn parse_workload(text: &str) -> Result<Workload> {
    let mut w = Workload {
        device: -1,
        ..Workload::default()
    };
    let mut done = false;
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(key), rest) = (it.next(), it.collect::<Vec<_>>()) else {
            continue;
        };
        let num = |i: usize| -> Result<u64> {
            rest.get(i)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("workload line {line:?}: no number"))
        };
        match key {
            "pid" => w.pid = u32::try_from(num(0)?)?,
            "device" if w.pid != 0 => {
                w.device = rest
                    .first()
                    .and_then(|v| v.parse().ok())
                    .with_context(|| format!("workload line {line:?}"))?;
            }
            "kernel" => w.kernel = rest.first().map_or("", |v| v).to_string(),
            "ptx" if rest.len() == 1 => w.ptx = rest[0].to_string(),
            "count" => {
                let sym = rest
                    .first()
                    .with_context(|| format!("workload line {line:?}"))?;
                w.counts.insert((*sym).to_string(), num(1)?);
            }
            "bytes" => {
                let sym = rest
                    .first()
                    .with_context(|| format!("workload line {line:?}"))?;
                w.bytes.insert((*sym).to_string(), num(1)?);
            }
            "verify" => {
                w.mismatches = Some(match rest.first() {
                    Some(&"ok") => 0,
                    Some(v) => v
                        .strip_prefix("mismatches=")
                        .and_then(|n| n.parse().ok())
                        .with_context(|| format!("workload line {line:?}"))?,
                    None => bail!("workload line {line:?}"),
                });
            }
            "error" => bail!("the workload failed: {line}"),
            "done" => done = true,
            _ => {}
        }
    }
    if !done {
        bail!("the workload did not finish (no `done` line)");
    }
    if w.pid == 0 || !w.counts.contains_key("cuLaunchKernel") {
        bail!("the workload printed no pid or no launch count");
    }
    Ok(w)
}

/// The collector's label of a driver symbol (`cuMemcpyHtoD_v2` → `cuMemcpyHtoD`).
pub fn call_label(symbol: &str) -> &str {
    symbol.strip_suffix("_v2").unwrap_or(symbol)
}

pub fn is_sync(label: &str) -> bool {
    matches!(
        label,
        "cuStreamSynchronize" | "cuCtxSynchronize" | "cuEventSynchronize"
    )
}

pub fn is_copy(label: &str) -> bool {
    label.starts_with("cuMemcpy")
}
