//! The real-NCCL part: what `nccl_workload` did (its own account), what the
//! collector recorded of it (`Window.nccl[]` rows and `nccl …` console
//! lines), and the checks that the two agree exactly: calls and bytes per
//! rank and op, each rank's rank, size and GPU, its sequence, the
//! communicator's creation and end, and the collectives' results.
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};

use super::{
    cuda::u,
    report::{Check, Outcome},
};

/// The workload's NCCL entry points besides the ops (all probed).
const LIFECYCLE: [&str; 2] = ["ncclCommInitAll", "ncclCommDestroy"];
/// What the collector names the creation of an `ncclCommInitAll` rank.
pub const INIT_ALL: &str = "ncclCommInitAll";

/// `nccl_workload run`'s own account.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NcclWorkload {
    pub pid: u32,
    pub nccl_version: Option<u64>,
    pub cudart_version: Option<u64>,
    pub nranks: i32,
    /// Rank → CUDA device.
    pub devices: BTreeMap<i32, i32>,
    /// (rank, op) → (calls, bytes).
    pub ops: BTreeMap<(i32, String), (u64, u64)>,
    /// `GroupStart` / `GroupEnd` → calls (per process; not in the rows).
    pub groups: BTreeMap<String, u64>,
    /// Ops the library does not export (not run).
    pub skipped_ops: Vec<String>,
    /// Result elements that differed (0: every one right).
    pub mismatches: Option<u64>,
    /// The first mismatch, as printed.
    pub first_mismatch: Option<String>,
}

/// The collector's `seq` counts these ops; `Send`/`Recv` are not collectives.
pub fn is_collective(op: &str) -> bool {
    !matches!(op, "Send" | "Recv")
}

/// NCCL's version number (`23203`) as `2.32.3`.
pub fn version_text(v: u64) -> String {
    if v >= 10_000 {
        format!("{}.{}.{}", v / 10_000, (v / 100) % 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v / 100) % 10, v % 100)
    }
}

impl NcclWorkload {
    pub fn to_json(&self) -> Value {
        let ops: Vec<Value> = self
            .ops
            .iter()
            .map(|((r, op), (c, b))| json!({"rank": r, "op": op, "calls": c, "bytes": b}))
            .collect();
        json!({
            "pid": self.pid,
            "nccl_version": self.nccl_version.map(version_text),
            "cudart_version": self.cudart_version,
            "nranks": self.nranks,
            "devices": self.devices.iter().map(|(r, d)| json!({"rank": r, "device": d})).collect::<Vec<_>>(),
            "ops": ops,
            "groups": self.groups,
            "skipped_ops": self.skipped_ops,
            "mismatches": self.mismatches,
        })
    }

    /// The ops it ran, by name.
    pub fn op_names(&self) -> BTreeSet<&str> {
        self.ops.keys().map(|(_, op)| op.as_str()).collect()
    }

    /// The NCCL symbols it called that the collector probes.
    pub fn probed_symbols(&self) -> Vec<String> {
        LIFECYCLE
            .iter()
            .map(|s| (*s).to_string())
            .chain(self.op_names().iter().map(|op| format!("nccl{op}")))
            .collect()
    }

    /// Collectives issued per rank (the collector's `seq` at the end).
    pub fn seq(&self) -> BTreeMap<i32, u64> {
        let mut m: BTreeMap<i32, u64> = self.devices.keys().map(|r| (*r, 0)).collect();
        for ((r, op), (c, _)) in &self.ops {
            if is_collective(op) {
                *m.entry(*r).or_default() += c;
            }
        }
        m
    }
}

pub fn parse_nccl_workload(text: &str) -> Result<NcclWorkload> {
    let mut w = NcclWorkload {
        nranks: -1,
        ..NcclWorkload::default()
    };
    let mut done = false;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&key, rest)) = words.split_first() else {
            continue;
        };
        let num = |i: usize| -> Result<u64> {
            rest.get(i)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("nccl workload line {line:?}: no number"))
        };
        let int = |i: usize| -> Result<i32> {
            rest.get(i)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("nccl workload line {line:?}: no number"))
        };
        match key {
            "pid" => w.pid = u32::try_from(num(0)?)?,
            "nccl_version" => w.nccl_version = Some(num(0)?),
            "cudart_version" => w.cudart_version = Some(num(0)?),
            "nranks" => w.nranks = int(0)?,
            "rank" if rest.get(1) == Some(&"device") => {
                w.devices.insert(int(0)?, int(2)?);
            }
            "op" => {
                let op = rest
                    .get(1)
                    .with_context(|| format!("nccl workload line {line:?}"))?;
                w.ops
                    .insert((int(0)?, (*op).to_string()), (num(2)?, num(3)?));
            }
            "group" => {
                let g = rest
                    .first()
                    .with_context(|| format!("nccl workload line {line:?}"))?;
                w.groups.insert((*g).to_string(), num(1)?);
            }
            "skipped_op" => w.skipped_ops.extend(rest.first().map(|s| (*s).to_string())),
            "mismatch" => w.first_mismatch = Some(rest.join(" ")),
            "verify" => {
                w.mismatches = Some(match rest.first() {
                    Some(&"ok") => 0,
                    Some(v) => v
                        .strip_prefix("mismatches=")
                        .and_then(|n| n.parse().ok())
                        .with_context(|| format!("nccl workload line {line:?}"))?,
                    None => bail!("nccl workload line {line:?}"),
                });
            }
            "error" => bail!("the NCCL workload failed: {}", rest.join(" ")),
            "done" => done = true,
            _ => {}
        }
    }
    if !done {
        bail!("the NCCL workload did not finish (no `done` line)");
    }
    if w.pid == 0 || w.nranks < 1 || w.devices.len() != w.nranks as usize || w.ops.is_empty() {
        bail!("the NCCL workload printed no pid, ranks or op counts");
    }
    Ok(w)
}

/// One rank as the collector recorded it, over the windows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankSeen {
    pub comm: String,
    pub init: String,
    pub nranks: i64,
    pub rank: i64,
    pub device: i64,
    /// The highest `seq` of its rows.
    pub seq: u64,
    /// op → (calls, bytes) summed over windows.
    pub ops: BTreeMap<String, (u64, u64)>,
    pub ended: bool,
    pub exited: bool,
    pub rows: usize,
}

/// The `Window.nccl[]` rows of one process, per (comm, rank, nranks, device).
pub fn record_nccl(windows: &[Value], pid: u32) -> Vec<RankSeen> {
    let mut by: BTreeMap<(String, i64, i64, i64), RankSeen> = BTreeMap::new();
    for row in windows
        .iter()
        .filter_map(|w| w.get("nccl").and_then(Value::as_array))
        .flatten()
        .filter(|row| u(row, "pid") == u64::from(pid))
    {
        let s = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let i = |k: &str| row.get(k).and_then(Value::as_i64).unwrap_or(-1);
        let b = |k: &str| row.get(k).and_then(Value::as_bool).unwrap_or(false);
        let key = (s("comm"), i("rank"), i("nranks"), i("device"));
        let r = by.entry(key.clone()).or_insert_with(|| RankSeen {
            comm: key.0.clone(),
            rank: key.1,
            nranks: key.2,
            device: key.3,
            ..RankSeen::default()
        });
        r.rows += 1;
        if r.init.is_empty() {
            r.init = s("init");
        }
        r.seq = r.seq.max(u(row, "seq"));
        r.ended |= b("ended");
        r.exited |= b("exited");
        for op in row
            .get("ops")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = op.get("op").and_then(Value::as_str).unwrap_or("?");
            let e = r.ops.entry(name.to_string()).or_default();
            e.0 += u(op, "calls");
            e.1 += u(op, "bytes");
        }
    }
    by.into_values().collect()
}

/// The collector's `nccl comm=… rank=R/N gpu=D pid=P seq=S … Op=C/BB`
/// console lines of one process, summed per (rank, size, GPU).
pub fn parse_nccl_console(text: &str, pid: u32) -> Vec<RankSeen> {
    let want = pid.to_string();
    let mut by: BTreeMap<(String, i64, i64, i64), RankSeen> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.trim_start().strip_prefix("nccl comm=") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let comm = words.next().unwrap_or("").to_string();
        let kv: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
        let get = |k: &str| kv.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        if get("pid") != Some(want.as_str()) {
            continue;
        }
        let (rank, nranks) = get("rank")
            .and_then(|v| v.split_once('/'))
            .map_or((-1, -1), |(r, n)| {
                (r.parse().unwrap_or(-1), n.parse().unwrap_or(-1))
            });
        let device = get("gpu").and_then(|v| v.parse().ok()).unwrap_or(-1);
        let key = (comm.clone(), rank, nranks, device);
        let r = by.entry(key).or_insert_with(|| RankSeen {
            comm,
            rank,
            nranks,
            device,
            ..RankSeen::default()
        });
        r.rows += 1;
        r.seq = r
            .seq
            .max(get("seq").and_then(|v| v.parse().ok()).unwrap_or(0));
        r.exited |= line.trim_end().ends_with("(exited)");
        for (op, v) in &kv {
            let Some((c, b)) = v.strip_suffix('B').and_then(|v| v.split_once('/')) else {
                continue;
            };
            if let (Ok(c), Ok(b)) = (c.parse::<u64>(), b.parse::<u64>()) {
                let e = r.ops.entry((*op).to_string()).or_default();
                e.0 += c;
                e.1 += b;
            }
        }
    }
    by.into_values().collect()
}

/// The collector's probe status lines for NCCL (`probe nccl:ncclX: …`):
/// symbol → attached.
pub fn parse_probe_lines(console: &str) -> BTreeMap<String, bool> {
    console
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("probe nccl:"))
        .filter_map(|rest| {
            let (sym, state) = rest.split_once(": ")?;
            Some((sym.to_string(), state.trim() == "attached"))
        })
        .collect()
}

/// `r/n gpuD` of each rank, sorted.
fn ranks_text(v: impl IntoIterator<Item = (i64, i64, i64)>) -> String {
    let mut s: Vec<String> = v
        .into_iter()
        .map(|(r, n, d)| format!("{r}/{n} gpu{d}"))
        .collect();
    s.sort();
    s.dedup();
    if s.is_empty() {
        "none".into()
    } else {
        s.join(", ")
    }
}

/// Per rank, one op's (calls, bytes) from a view.
fn per_rank(seen: &[RankSeen], op: &str) -> BTreeMap<i64, (u64, u64)> {
    let mut m = BTreeMap::new();
    for r in seen {
        if let Some(&(c, b)) = r.ops.get(op) {
            let e: &mut (u64, u64) = m.entry(r.rank).or_default();
            e.0 += c;
            e.1 += b;
        }
    }
    m
}

/// A per-rank count check: passes when every rank's value is the workload's.
fn per_rank_check(
    name: String,
    want: &BTreeMap<i64, u64>,
    got: &BTreeMap<i64, u64>,
    any_row: bool,
) -> Check {
    let total = |m: &BTreeMap<i64, u64>| m.values().sum::<u64>();
    if !any_row {
        return Check::new(name, false, total(want), "nothing recorded");
    }
    let pass = want == got;
    let observed = if pass || total(want) != total(got) || want.len() < 2 {
        total(got).to_string()
    } else {
        format!("{} (per rank {got:?}, want {want:?})", total(got))
    };
    Check::new(name, pass, total(want), observed)
}

/// The NCCL checks: the collector's record and console against the
/// workload's account (see docs/gpu-check.md for each row).
pub fn nccl_checks(
    w: &NcclWorkload,
    rec: &[RankSeen],
    con: &[RankSeen],
    probes: &BTreeMap<String, bool>,
    standin: bool,
) -> Vec<Check> {
    let mut v = setup_checks(w, rec, con, probes);
    v.extend(count_checks(w, rec, con));
    v.extend(end_checks(w, rec, standin));
    v
}

/// The probes, the communicator, each rank's rank, size and GPU.
fn setup_checks(
    w: &NcclWorkload,
    rec: &[RankSeen],
    con: &[RankSeen],
    probes: &BTreeMap<String, bool>,
) -> Vec<Check> {
    let mut v = Vec::new();
    let missing: Vec<String> = w
        .probed_symbols()
        .into_iter()
        .filter(|s| probes.get(s) != Some(&true))
        .collect();
    v.push(Check::new(
        "nccl probes attached",
        missing.is_empty(),
        format!("{} entry points", w.probed_symbols().len()),
        if missing.is_empty() {
            "all attached".to_string()
        } else {
            format!("not attached: {}", missing.join(", "))
        },
    ));
    let comms: BTreeSet<&str> = rec.iter().map(|r| r.comm.as_str()).collect();
    let inits: BTreeSet<&str> = rec.iter().map(|r| r.init.as_str()).collect();
    let comm_ok = comms.len() == 1
        && comms.iter().all(|c| !c.starts_with("h:") && !c.is_empty())
        && inits == BTreeSet::from([INIT_ALL]);
    v.push(Check::new(
        "nccl communicator (record)",
        comm_ok,
        format!("1 communicator by {INIT_ALL}"),
        if rec.is_empty() {
            "nothing recorded".to_string()
        } else {
            format!(
                "{} communicator(s) {} by {}",
                comms.len(),
                comms.iter().copied().collect::<Vec<_>>().join(", "),
                inits.iter().copied().collect::<Vec<_>>().join(", ")
            )
        },
    ));
    let want_ranks = ranks_text(
        w.devices
            .iter()
            .map(|(r, d)| (i64::from(*r), i64::from(w.nranks), i64::from(*d))),
    );
    for (name, seen) in [
        ("nccl rank, size and GPU (record)", rec),
        ("nccl rank, size and GPU (console)", con),
    ] {
        let got = ranks_text(seen.iter().map(|r| (r.rank, r.nranks, r.device)));
        v.push(Check::new(name, got == want_ranks, &want_ranks, got));
    }
    v
}

/// Calls and bytes per op and rank (record), per op (console), no other
/// op, and each rank's sequence.
fn count_checks(w: &NcclWorkload, rec: &[RankSeen], con: &[RankSeen]) -> Vec<Check> {
    let mut v = Vec::new();
    let ops: BTreeSet<String> = w.op_names().iter().map(|s| (*s).to_string()).collect();
    for op in &ops {
        let want: BTreeMap<i64, (u64, u64)> = w
            .ops
            .iter()
            .filter(|((_, o), _)| o == op)
            .map(|((r, _), cb)| (i64::from(*r), *cb))
            .collect();
        let got = per_rank(rec, op);
        let pick = |m: &BTreeMap<i64, (u64, u64)>, bytes: bool| -> BTreeMap<i64, u64> {
            m.iter()
                .map(|(r, (c, b))| (*r, if bytes { *b } else { *c }))
                .collect()
        };
        for (what, bytes) in [("calls", false), ("bytes", true)] {
            v.push(per_rank_check(
                format!("nccl {op} {what} (record)"),
                &pick(&want, bytes),
                &pick(&got, bytes),
                !rec.is_empty(),
            ));
        }
    }
    // The console's per-op sums, in one row.
    let mut off = Vec::new();
    for op in &ops {
        let want = w
            .ops
            .iter()
            .filter(|((_, o), _)| o == op)
            .fold((0, 0), |a, (_, (c, b))| (a.0 + c, a.1 + b));
        let got = con
            .iter()
            .filter_map(|r| r.ops.get(op))
            .fold((0, 0), |a, (c, b)| (a.0 + c, a.1 + b));
        if want != got {
            off.push(format!(
                "{op}={}/{}B (want {}/{}B)",
                got.0, got.1, want.0, want.1
            ));
        }
    }
    v.push(Check::new(
        "nccl calls and bytes (console)",
        off.is_empty() && !con.is_empty(),
        format!("{} ops as the workload's", ops.len()),
        if con.is_empty() {
            "nothing shown".to_string()
        } else if off.is_empty() {
            "every op equal".to_string()
        } else {
            off.join(", ")
        },
    ));
    let extra: BTreeSet<String> = rec
        .iter()
        .chain(con)
        .flat_map(|r| r.ops.keys())
        .filter(|o| !ops.contains(*o))
        .cloned()
        .collect();
    v.push(Check::new(
        "no nccl ops the workload did not make",
        extra.is_empty(),
        "none",
        if extra.is_empty() {
            "none".to_string()
        } else {
            extra.into_iter().collect::<Vec<_>>().join(", ")
        },
    ));
    let want_seq: BTreeMap<i64, u64> = w
        .seq()
        .into_iter()
        .map(|(r, s)| (i64::from(r), s))
        .collect();
    let got_seq: BTreeMap<i64, u64> = rec.iter().map(|r| (r.rank, r.seq)).collect();
    v.push(per_rank_check(
        "nccl seq (record)".into(),
        &want_seq,
        &got_seq,
        !rec.is_empty(),
    ));
    v
}

/// The communicator destroyed on every rank, and the collectives' results.
fn end_checks(w: &NcclWorkload, rec: &[RankSeen], standin: bool) -> Vec<Check> {
    let mut v = Vec::new();
    let ended: BTreeSet<i64> = rec.iter().filter(|r| r.ended).map(|r| r.rank).collect();
    let want_ended: BTreeSet<i64> = w.devices.keys().map(|r| i64::from(*r)).collect();
    v.push(Check::new(
        "nccl communicator destroyed (record)",
        ended == want_ended,
        format!("ended on {} rank(s)", want_ended.len()),
        format!("ended on {} rank(s)", ended.len()),
    ));
    v.push(match (standin, w.mismatches) {
        (true, m) => Check {
            name: "nccl collective results".into(),
            outcome: Outcome::Skip,
            expected: "every op's output".into(),
            observed: format!(
                "stand-in NCCL moves no data ({} mismatches)",
                m.unwrap_or(0)
            ),
        },
        (false, Some(0)) => Check::new(
            "nccl collective results",
            true,
            "every op's output",
            "every element",
        ),
        (false, Some(m)) => Check::new(
            "nccl collective results",
            false,
            "every op's output",
            format!(
                "{m} elements differ (first: {})",
                w.first_mismatch.as_deref().unwrap_or("?")
            ),
        ),
        (false, None) => Check::new(
            "nccl collective results",
            false,
            "every op's output",
            "not verified",
        ),
    });
    v
}

/// The one row of a skipped NCCL part.
pub fn skipped(reason: &str) -> Check {
    Check {
        name: "nccl (real NCCL part)".into(),
        outcome: Outcome::Skip,
        expected: "libnccl.so.2 on this node".into(),
        observed: format!("skipped: {reason}"),
    }
}

/// The one row of an NCCL part that broke before its checks.
pub fn broke(reason: &str) -> Check {
    Check::new("nccl (real NCCL part)", false, "ran", reason)
}
