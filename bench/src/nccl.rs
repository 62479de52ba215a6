//! NCCL probes' overhead on a collective-heavy stand-in: `nccl_storm` (one
//! process, THREADS threads each driving NDEV communicators from one
//! `ncclCommInitAll`, so no rank ever waits for another process) loops over
//! `ncclGroupStart`, NDEV × (`ncclAllReduce` + WORK_NS of CPU standing in
//! for NCCL's own enqueue work), `ncclGroupEnd`, on the stand-in
//! `libnccl.so.2`. Measured side by side in one run, order rotated per
//! round: no probes, faultline's NCCL probes (the collector's probe set with
//! only NCCL on, configured to the stand-in), and the peer (bpftrace
//! `count()` on the same symbols faultline attaches). Throughput is the
//! stand-in's own count of NCCL calls over its own run time; faultline's
//! per-op counts (and all-reduce bytes, and communicators) are checked
//! against the stand-in's, bpftrace's total against the calls it made.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{ensure, Context as _, Result};
use collector::{
    nccl_lib::Search,
    probes::{ProbeOptions, ProbeState, Probes},
};
use collector_common::nccl::op;
use serde::Serialize;

use crate::{peer::Bpftrace, report::Failures};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rounds; each runs every configuration once, order rotated per round.
    #[arg(long, default_value_t = 5)]
    rounds: u32,
    /// Seconds the stand-in runs per measurement.
    #[arg(long, default_value_t = 1.5)]
    seconds: f64,
    /// Threads, each with its own `ncclCommInitAll` communicators.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// Communicators ("GPUs") per thread: all-reduces per group.
    #[arg(long, default_value_t = 4)]
    ndev: u32,
    /// CPU work after each all-reduce, ns (NCCL's own host-side enqueue).
    #[arg(long, default_value_t = 10_000)]
    work_ns: u64,
    /// The stand-in's build: `push` (entries `push %rbp`, as every probed
    /// API of NVIDIA's libnccl.so.2 starts: an emulated instruction for
    /// faultline and bpftrace alike) or `plain` (the tests' gcc -O2 build:
    /// `ncclAllReduce` starts with the datatype check, single-stepped for
    /// bpftrace, which probes the symbol, while faultline probes the
    /// emulated jump after it; the groups start `sub $8,%rsp`).
    #[arg(long, value_enum, default_value_t = Build::Push)]
    entry: Build,
}

/// The stand-in's builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum Build {
    Push,
    Plain,
}

impl Args {
    /// The result file of this build.
    pub fn result_file(&self) -> &'static str {
        match self.entry {
            Build::Push => "nccl.json",
            Build::Plain => "nccl_plain.json",
        }
    }

    fn library(&self) -> PathBuf {
        match self.entry {
            Build::Push => tests::fake_nccl_push(),
            Build::Plain => tests::fake_nccl(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Config {
    Without,
    Faultline,
    Bpftrace,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Self::Without => "without probes",
            Self::Faultline => "faultline NCCL probes",
            Self::Bpftrace => "bpftrace count()",
        }
    }
}

/// What the stand-in says it did.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Truth {
    /// NCCL calls in the timed loop (all-reduces + group starts + ends).
    calls: u64,
    seconds: f64,
    allreduce: u64,
    group_start: u64,
    group_end: u64,
    /// `ncclCommInitAll` calls (one per thread) and `ncclCommDestroy` calls.
    init: u64,
    destroy: u64,
}

/// One measurement.
struct Measured {
    truth: Truth,
    /// What the tool counted over the calls it should have seen.
    count_over_truth: Option<f64>,
    /// Faultline: every op, the all-reduce bytes and the communicators
    /// equal the stand-in's; bpftrace: its total equals the calls made.
    exact: Option<bool>,
    /// Why not exact.
    mismatch: Option<String>,
}

#[derive(Serialize)]
struct Row {
    config: Config,
    label: &'static str,
    calls_per_sec: Vec<f64>,
    median_calls_per_sec: f64,
    /// Per-round throughput / the same round's without.
    paired_ratios: Vec<f64>,
    median_ratio_over_without: f64,
    /// Time the probes add per NCCL call, per thread: `threads × (1/x −
    /// 1/without)` of each round, median, ns.
    median_added_ns_per_call: f64,
    /// What the tool counted / the stand-in's truth, per round (empty for "without").
    count_over_truth: Vec<f64>,
    /// Every round counted exactly (None for "without").
    exact: Option<bool>,
    mismatches: Vec<String>,
    /// In-kernel program time per NCCL call (BPF run-time stats, one
    /// separate pass after the timed rounds), ns.
    program_ns_per_call: Option<f64>,
    /// Why this configuration stopped being measured, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    workload: String,
    build: Build,
    library: String,
    rounds: u32,
    seconds: f64,
    /// The symbols both tools attach, and the instruction kind faultline's
    /// probe sits on in each.
    symbols: Vec<Placed>,
    /// The same, in NVIDIA's libnccl.so.2 from the wheel when installed.
    real_nccl: Vec<Placed>,
    uprobe_hit_cost_ns: f64,
    peer: String,
    rows: Vec<Row>,
}

#[derive(Serialize)]
struct Placed {
    symbol: String,
    /// Bytes past the symbol where faultline probes.
    skip: u64,
    kind: &'static str,
}

/// The symbols faultline attaches in `lib` (`pncclX` where both names
/// share an address) and where.
fn placed(lib: &Path) -> Result<Vec<Placed>> {
    let resolved = collector::probes::nccl::resolve(lib, collector::probes::nccl::NCCL_APIS)
        .map_err(anyhow::Error::msg)?;
    let symbols: Vec<String> = resolved
        .into_iter()
        .filter_map(|r| r.ok())
        .map(|(s, _)| s)
        .collect();
    let places = collector::probes::entry::placements_of(lib, symbols.iter().map(String::as_str));
    Ok(symbols
        .into_iter()
        .zip(places)
        .map(|(symbol, p)| Placed {
            symbol,
            skip: p.skip,
            kind: p.kind.name(),
        })
        .collect())
}

struct Storm {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    pid: u32,
}

fn spawn(a: &Args, seconds: f64) -> Result<Storm> {
    let mut child = Command::new(tests::nccl_storm())
        .arg(a.library())
        .args([
            a.threads.to_string(),
            a.ndev.to_string(),
            seconds.to_string(),
            a.work_ns.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning nccl_storm")?;
    let lines = tests::lines_of(&mut child);
    let pid = lines
        .recv_timeout(crate::wait::READY)
        .ok()
        .and_then(|l| l.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()))
        .context("nccl_storm did not start")?;
    Ok(Storm { child, lines, pid })
}

/// Parses the stand-in's end line.
fn parse_truth(line: &str) -> Option<Truth> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let get = |key: &str| -> Option<&str> {
        f.iter()
            .position(|w| *w == key)
            .and_then(|i| f.get(i + 1))
            .copied()
    };
    let int = |key: &str| -> Option<u64> { get(key)?.parse().ok() };
    Some(Truth {
        calls: int("calls")?,
        seconds: get("seconds")?.parse().ok()?,
        allreduce: int("allreduce")?,
        group_start: int("group_start")?,
        group_end: int("group_end")?,
        init: int("init")?,
        destroy: int("destroy")?,
    })
}

/// Waits for the stand-in's end line.
fn finish(s: Storm) -> Result<Truth> {
    let Storm {
        mut child, lines, ..
    } = s;
    let status = child.wait()?;
    ensure!(status.success(), "nccl_storm failed: {status}");
    lines
        .iter()
        .find_map(|l| l.starts_with("calls ").then(|| parse_truth(&l)).flatten())
        .context("nccl_storm printed no count")
}

fn options(a: &Args) -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: false,
        cuda: false,
        verbs: false,
        nccl: true,
        nccl_search: Search {
            configured: vec![a.library()],
            ld_cache: false,
            proc_root: None,
        },
        ..ProbeOptions::default()
    }
}

/// Faultline's probes, every one the storm calls attached.
fn load_probes(a: &Args) -> Result<Probes> {
    let p = Probes::load(&options(a))?;
    for name in [
        "nccl:ncclAllReduce",
        "nccl:ncclGroupStart",
        "nccl:ncclGroupEnd",
        "nccl:ncclCommInitAll",
    ] {
        let s = p
            .status()
            .iter()
            .find(|s| s.name == name)
            .with_context(|| format!("no status for {name}"))?;
        ensure!(s.state == ProbeState::Attached, "{s}");
    }
    Ok(p)
}

/// Faultline's counts for `pid` against the stand-in's truth.
fn check_faultline(p: &Probes, pid: u32, a: &Args, t: &Truth) -> Result<Measured> {
    let maps = p.nccl_maps()?;
    let calls = |o: u32| -> u64 {
        maps.ops
            .iter()
            .filter(|(k, _)| k.pid == pid && k.op == o)
            .map(|(_, v)| v.calls)
            .sum()
    };
    let ar_bytes: u64 = maps
        .ops
        .iter()
        .filter(|(k, _)| k.pid == pid && k.op == op::ALL_REDUCE)
        .map(|(_, v)| v.bytes)
        .sum();
    let (ar, gs, ge) = (
        calls(op::ALL_REDUCE),
        calls(op::GROUP_START),
        calls(op::GROUP_END),
    );
    let comms: Vec<_> = maps
        .comms
        .iter()
        .filter(|((p, _), _)| *p == pid)
        .map(|(_, c)| c)
        .collect();
    let want_comms = u64::from(a.threads) * u64::from(a.ndev);
    let ended = comms.iter().filter(|c| c.ended == 1).count() as u64;
    let ranks_ok = comms.iter().all(|c| c.nranks == a.ndev as i32);
    let mut why = Vec::new();
    for (what, got, want) in [
        ("ncclAllReduce calls", ar, t.allreduce),
        ("ncclGroupStart calls", gs, t.group_start),
        ("ncclGroupEnd calls", ge, t.group_end),
        ("all-reduce bytes", ar_bytes, t.allreduce * 1024 * 4),
        ("communicators", comms.len() as u64, want_comms),
        ("destroyed communicators", ended, t.destroy),
    ] {
        if got != want {
            why.push(format!("{what}: counted {got}, stand-in {want}"));
        }
    }
    if !ranks_ok {
        why.push(format!("a communicator's nranks is not {}", a.ndev));
    }
    Ok(Measured {
        truth: *t,
        count_over_truth: Some((ar + gs + ge) as f64 / t.calls.max(1) as f64),
        exact: Some(why.is_empty()),
        mismatch: (!why.is_empty()).then(|| why.join("; ")),
    })
}

/// The bpftrace program: `count()` on every symbol faultline attaches.
fn peer_program(lib: &Path, symbols: &[Placed]) -> String {
    let probes: Vec<String> = symbols
        .iter()
        .map(|s| format!("uprobe:{}:{}", lib.display(), s.symbol))
        .collect();
    format!("{} {{ @ = count(); }}", probes.join(",\n"))
}

fn measure(c: Config, a: &Args, symbols: &[Placed]) -> Result<Measured> {
    Ok(match c {
        Config::Without => Measured {
            truth: finish(spawn(a, a.seconds)?)?,
            count_over_truth: None,
            exact: None,
            mismatch: None,
        },
        Config::Faultline => {
            let p = load_probes(a)?;
            let s = spawn(a, a.seconds)?;
            let pid = s.pid;
            let t = finish(s)?;
            check_faultline(&p, pid, a, &t)?
        }
        Config::Bpftrace => {
            let b = Bpftrace::start(&peer_program(&a.library(), symbols))?;
            let t = finish(spawn(a, a.seconds)?)?;
            let counted = crate::peer::count_printed(&b.stop()?);
            // Every call the stand-in made to an attached symbol.
            let want = t.calls + t.init + t.destroy;
            Measured {
                truth: t,
                count_over_truth: Some(counted as f64 / want.max(1) as f64),
                exact: Some(counted == want),
                mismatch: (counted != want)
                    .then(|| format!("bpftrace counted {counted}, stand-in made {want} calls")),
            }
        }
    })
}

/// Seconds of each run of the program-cost pass.
const STATS_SECONDS: f64 = 1.0;

/// In-kernel program time per NCCL call for faultline and the peer, one
/// run each with BPF run-time statistics on.
fn program_costs(a: &Args, symbols: &[Placed], peer: bool) -> Result<(f64, Option<f64>)> {
    let _stats = collector::probes::enable_run_stats().context("BPF_ENABLE_STATS")?;
    let p = load_probes(a)?;
    finish(spawn(a, STATS_SECONDS)?)?;
    let (runs, ns) = p
        .program_run_stats()
        .iter()
        .filter(|(n, _, _)| n.starts_with("nccl_"))
        .fold((0u64, 0u64), |(r, t), (_, c, n)| (r + c, t + n));
    drop(p);
    let faultline = ns as f64 / runs.max(1) as f64;
    if !peer {
        return Ok((faultline, None));
    }
    let b = Bpftrace::start(&peer_program(&a.library(), symbols))?;
    finish(spawn(a, STATS_SECONDS)?)?;
    let costs = b.run_stats();
    b.stop()?;
    let (runs, ns) = costs.iter().fold((0u64, 0f64), |(r, t), c| {
        (r + c.runs, t + c.ns_per_run * c.runs as f64)
    });
    Ok((faultline, Some(ns / runs.max(1) as f64)))
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    ensure!(
        a.rounds > 0 && a.seconds > 0.0 && a.threads > 0 && a.ndev > 0,
        "rounds, seconds, threads and ndev must be positive"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _g = rt.enter();
    let lib = a.library();
    let symbols = placed(&lib)?;
    let kind = collector::probes::entry::placement_of(&lib, "pncclAllReduce").kind;
    let hit_ns = collector::probes::measure_uprobe_hit_ns(kind, 500)?;
    let real_nccl = tests::nvidia_wheel_file("nccl/lib/libnccl.so.2")
        .map(|p| placed(&p))
        .transpose()?
        .unwrap_or_default();
    let mut configs = vec![Config::Without, Config::Faultline];
    let peer = crate::peer::available();
    if peer {
        configs.push(Config::Bpftrace);
    } else {
        println!("bpftrace not found: no peer row (scripts/setup.sh installs it)");
    }
    let n = configs.len();
    let mut tput: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut added: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut counts: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut exact: Vec<Option<bool>> = vec![None; n];
    let mut mismatches: Vec<Vec<String>> = vec![Vec::new(); n];
    // A configuration that fails is reported as failed and left out of the
    // later rounds; the others go on.
    let mut failed: Vec<Option<String>> = vec![None; n];
    let mut failures = Failures::default();
    for round in 0..a.rounds as usize {
        let mut this: Vec<Option<f64>> = vec![None; n];
        for k in 0..n {
            let i = (round + k) % n;
            if failed[i].is_some() {
                continue;
            }
            let m = measure(configs[i], a, &symbols).and_then(|m| {
                ensure!(
                    m.truth.seconds > 0.0 && m.truth.calls > 0,
                    "nccl_storm made no calls"
                );
                Ok(m)
            });
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    let what = format!("{} round {round}", configs[i].label());
                    failed[i] = Some(failures.add(&what, &e));
                    continue;
                }
            };
            this[i] = Some(m.truth.calls as f64 / m.truth.seconds);
            if let Some(c) = m.count_over_truth {
                counts[i].push(c);
            }
            if let Some(e) = m.exact {
                exact[i] = Some(exact[i].unwrap_or(true) && e);
            }
            mismatches[i].extend(m.mismatch.map(|w| format!("round {round}: {w}")));
        }
        for i in 0..n {
            let Some(x) = this[i] else { continue };
            tput[i].push(x);
            if let Some(base) = this[0] {
                ratios[i].push(x / base.max(1e-9));
                added[i].push(f64::from(a.threads) * 1e9 * (1.0 / x - 1.0 / base));
            }
        }
    }
    let peer_ok = configs
        .iter()
        .position(|&c| c == Config::Bpftrace)
        .is_some_and(|i| failed[i].is_none());
    let (fl_ns, peer_ns) = failures
        .part("program cost pass", program_costs(a, &symbols, peer_ok))
        .map_or((None, None), |(f, p)| (Some(f), p));
    let rows: Vec<Row> = configs
        .iter()
        .enumerate()
        .map(|(i, &c)| Row {
            config: c,
            label: c.label(),
            median_calls_per_sec: crate::median(&tput[i]),
            calls_per_sec: tput[i].clone(),
            median_ratio_over_without: crate::median(&ratios[i]),
            paired_ratios: ratios[i].clone(),
            median_added_ns_per_call: crate::median(&added[i]),
            count_over_truth: counts[i].clone(),
            exact: exact[i],
            mismatches: mismatches[i].clone(),
            program_ns_per_call: match c {
                Config::Without => None,
                Config::Faultline => fl_ns,
                Config::Bpftrace => peer_ns,
            },
            failure: failed[i].clone(),
        })
        .collect();
    let workload = format!(
        "nccl_storm ({} build of the stand-in libnccl.so.2): {} thread(s) × {{ncclGroupStart, {} × (ncclAllReduce + {} µs CPU), ncclGroupEnd}} on ncclCommInitAll communicators, {} s × {} rounds",
        match a.entry {
            Build::Push => "push-entry",
            Build::Plain => "plain",
        },
        a.threads,
        a.ndev,
        a.work_ns as f64 / 1e3,
        a.seconds,
        a.rounds
    );
    println!(
        "{workload}; uprobe hit {hit_ns:.0} ns on a {} entry",
        kind.name()
    );
    println!(
        "| configuration | median NCCL calls/s | median ratio / without | added per call | program ns/call | counted / truth (per round) |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        let c: Vec<String> = r
            .count_over_truth
            .iter()
            .map(|x| format!("{x:.3}"))
            .collect();
        println!(
            "| {} | {:.0} | {:.3} | {} | {} | {} |",
            r.label,
            r.median_calls_per_sec,
            r.median_ratio_over_without,
            if r.config == Config::Without {
                "—".into()
            } else {
                format!("{:.0} ns", r.median_added_ns_per_call)
            },
            r.program_ns_per_call
                .map_or_else(|| "—".into(), |x| format!("{x:.0}")),
            if c.is_empty() {
                "—".into()
            } else {
                format!(
                    "{}{}",
                    c.join(", "),
                    if r.exact == Some(true) {
                        " (exact)"
                    } else {
                        ""
                    }
                )
            }
        );
    }
    for r in &rows {
        if let Some(f) = &r.failure {
            println!("  {}: FAILED {f}", r.label);
        }
        for m in &r.mismatches {
            println!("  {}: {m}", r.label);
        }
    }
    let report = Report {
        benchmark: "nccl_probe_overhead",
        workload,
        build: a.entry,
        library: lib.display().to_string(),
        rounds: a.rounds,
        seconds: a.seconds,
        symbols,
        real_nccl,
        uprobe_hit_cost_ns: hit_ns,
        peer: if peer {
            crate::peer::version()
        } else {
            String::new()
        },
        rows,
    };
    // Faultline's counts must equal the stand-in's.
    if let Some(r) = report
        .rows
        .iter()
        .find(|r| r.config == Config::Faultline && r.failure.is_none() && r.exact != Some(true))
    {
        failures.add(
            "faultline counts",
            &anyhow::anyhow!("they differ from the stand-in's: {:?}", r.mismatches),
        );
    }
    crate::report::write(&out_dir.join(a.result_file()), &report, &failures)?;
    failures.into_result()
}

#[cfg(test)]
mod parse {
    #[test]
    fn the_storm_end_line_parses() {
        let t = super::parse_truth(
            "calls 146736 seconds 1.000 allreduce 97824 group_start 24456 group_end 24456 init 1 destroy 4",
        )
        .expect("parses");
        assert_eq!(t.calls, 146_736);
        assert_eq!(t.allreduce + t.group_start + t.group_end, t.calls);
        assert_eq!((t.init, t.destroy), (1, 4));
        assert!(super::parse_truth("calls 1 seconds x").is_none());
    }
}
