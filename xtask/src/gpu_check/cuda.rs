//! What the collector saw of the workload (its console lines and its
//! record), and the CUDA checks against the workload's own account.
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::{
    report::{Check, Outcome},
    workload::{call_label, is_copy, is_sync, Workload},
    KERNEL_NAME,
};

/// The collector's console lines about one process, summed over windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsoleCuda {
    /// Kernel name → launches.
    pub kernels: BTreeMap<String, u64>,
    /// Call label → (calls, bytes).
    pub calls: BTreeMap<String, (u64, u64)>,
    /// `gpu=` values seen.
    pub devices: BTreeSet<String>,
}

/// Sums the `cuda pid=PID …` detail lines of the collector's console.
pub fn parse_console(text: &str, pid: u32) -> ConsoleCuda {
    let mut c = ConsoleCuda::default();
    let want = pid.to_string();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix("cuda ") else {
            continue;
        };
        // key=value words up to the rate, the identity or the GPU suffix.
        let kv: BTreeMap<&str, &str> = rest
            .split_whitespace()
            .take_while(|w| !w.starts_with(['(', '[', '{']))
            .filter_map(|w| w.split_once('='))
            .collect();
        if kv.get("pid") != Some(&want.as_str()) {
            continue;
        }
        let n = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        if let Some(gpu) = kv.get("gpu") {
            c.devices.insert((*gpu).to_string());
        }
        if let Some(k) = kv.get("kernel") {
            *c.kernels.entry((*k).to_string()).or_default() += n("launches");
        } else if let Some(call) = kv.get("call") {
            let e = c.calls.entry((*call).to_string()).or_default();
            e.0 += n("calls");
            e.1 += n("bytes");
        }
    }
    c
}

/// One window per line of the collector's `--record` file.
pub fn parse_record(text: &str) -> Result<Vec<Value>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("record line {}", i + 1)))
        .collect()
}

/// The wire rows (`Window.cuda[]`) of one process, summed over windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordCuda {
    pub launches: u64,
    pub sync_calls: u64,
    pub copy_bytes: u64,
    pub errors: u64,
    /// Some row's launches were a bounded-overhead estimate.
    pub sampled: bool,
    pub devices: BTreeSet<i64>,
    /// Windows with a row of the process.
    pub windows: usize,
}

pub fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

pub fn f(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

pub fn record_cuda(windows: &[Value], pid: u32) -> RecordCuda {
    let mut r = RecordCuda::default();
    for w in windows {
        let rows: Vec<&Value> = w
            .get("cuda")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|row| u(row, "pid") == u64::from(pid))
            .collect();
        if !rows.is_empty() {
            r.windows += 1;
        }
        for row in rows {
            r.launches += u(row, "launches");
            r.sync_calls += u(row, "sync_calls");
            r.copy_bytes += u(row, "copy_bytes");
            r.errors += u(row, "errors");
            r.sampled |= f(row, "launches_sampled_fraction").is_some_and(|x| x > 0.0);
            r.devices
                .insert(row.get("device").and_then(Value::as_i64).unwrap_or(-1));
        }
    }
    r
}

/// Launch, copy, sync, alloc and free counts exactly equal to the workload's,
/// its kernel's name, its device, no error and no call it did not make.
pub fn cuda_checks(w: &Workload, rec: &RecordCuda, con: &ConsoleCuda, standin: bool) -> Vec<Check> {
    let mut v = Vec::new();
    let launches = w.counts.get("cuLaunchKernel").copied().unwrap_or(0);
    v.push(if rec.sampled {
        Check::new(
            "launches (record)",
            false,
            launches,
            format!("{} (a bounded-overhead estimate)", rec.launches),
        )
    } else {
        Check::exact(
            "launches (record)",
            launches,
            (rec.windows > 0).then_some(rec.launches),
        )
    });
    v.push(Check::exact(
        format!("launches of {KERNEL_NAME} (console)"),
        launches,
        con.kernels.get(KERNEL_NAME).copied(),
    ));
    let names: Vec<&str> = con.kernels.keys().map(String::as_str).collect();
    v.push(Check::new(
        "kernel name recorded",
        names == [KERNEL_NAME] && w.kernel == KERNEL_NAME,
        KERNEL_NAME,
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        },
    ));
    let mut expected_labels = BTreeSet::new();
    let (mut syncs, mut copy_bytes) = (0, 0);
    for (sym, &n) in w.counts.iter().filter(|(s, _)| *s != "cuLaunchKernel") {
        let label = call_label(sym);
        expected_labels.insert(label.to_string());
        let seen = con.calls.get(label);
        v.push(Check::exact(format!("{label} calls"), n, seen.map(|s| s.0)));
        if let Some(&b) = w.bytes.get(sym) {
            v.push(Check::exact(format!("{label} bytes"), b, seen.map(|s| s.1)));
            if is_copy(label) {
                copy_bytes += b;
            }
        }
        if is_sync(label) {
            syncs += n;
        }
    }
    let extra: Vec<String> = con
        .calls
        .iter()
        .filter(|(l, _)| !expected_labels.contains(*l))
        .map(|(l, (n, _))| format!("{l}={n}"))
        .collect();
    v.push(Check::new(
        "no calls the workload did not make",
        extra.is_empty(),
        "none",
        if extra.is_empty() {
            "none".into()
        } else {
            extra.join(", ")
        },
    ));
    let seen = (rec.windows > 0).then_some(());
    v.push(Check::exact(
        "sync calls (record)",
        syncs,
        seen.map(|()| rec.sync_calls),
    ));
    v.push(Check::exact(
        "copy bytes (record)",
        copy_bytes,
        seen.map(|()| rec.copy_bytes),
    ));
    v.push(Check::exact(
        "call errors (record)",
        0,
        seen.map(|()| rec.errors),
    ));
    let dev = w.device.to_string();
    let rec_devs: Vec<String> = rec.devices.iter().map(i64::to_string).collect();
    let con_devs: Vec<&String> = con.devices.iter().collect();
    v.push(Check::new(
        "device attributed",
        rec_devs == [dev.clone()] && con_devs == [&dev],
        format!("gpu={dev}"),
        format!("record {rec_devs:?}, console {con_devs:?}"),
    ));
    v.push(match (standin, w.mismatches) {
        (true, m) => Check {
            name: "kernel result".into(),
            outcome: Outcome::Skip,
            expected: "c = a + b".into(),
            observed: format!(
                "stand-in driver runs no kernel ({} mismatches)",
                m.unwrap_or(0)
            ),
        },
        (false, Some(0)) => Check::new("kernel result", true, "c = a + b", "every element"),
        (false, Some(m)) => Check::new(
            "kernel result",
            false,
            "c = a + b",
            format!("{m} elements differ"),
        ),
        (false, None) => Check::new("kernel result", false, "c = a + b", "not verified"),
    });
    v
}
