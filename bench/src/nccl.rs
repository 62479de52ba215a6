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
//!
//! [`storm`] runs the stand-in, [`measure`] one configuration.
use std::path::{Path, PathBuf};

use anyhow::{ensure, Result};
use serde::Serialize;

use crate::{paired, report::Failures};

mod measure;
mod storm;

use measure::{measure, placed, program_costs, Placed};

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

/// Every round's results, per configuration (in `configs` order).
struct Series {
    paired: paired::Rounds,
    counts: Vec<Vec<f64>>,
    exact: Vec<Option<bool>>,
    mismatches: Vec<Vec<String>>,
}

/// The timed rounds ([`paired`]): every configuration once per round, order
/// rotated; throughput paired with the same round's "without".
fn rounds(a: &Args, configs: &[Config], symbols: &[Placed], failures: &mut Failures) -> Series {
    let n = configs.len();
    let mut counts = vec![Vec::new(); n];
    let mut exact = vec![None; n];
    let mut mismatches = vec![Vec::new(); n];
    let paired = paired::run(a.rounds, configs, Config::label, failures, |i, round| {
        let m = measure(configs[i], a, symbols)?;
        ensure!(
            m.truth.seconds > 0.0 && m.truth.calls > 0,
            "nccl_storm made no calls"
        );
        if let Some(c) = m.count_over_truth {
            counts[i].push(c);
        }
        if let Some(e) = m.exact {
            exact[i] = Some(exact[i].unwrap_or(true) && e);
        }
        mismatches[i].extend(m.mismatch.map(|w| format!("round {round}: {w}")));
        Ok(m.truth.calls as f64 / m.truth.seconds)
    });
    Series {
        paired,
        counts,
        exact,
        mismatches,
    }
}

/// One row per configuration; `fl_ns` and `peer_ns` from the program-cost pass.
fn rows(
    a: &Args,
    configs: &[Config],
    s: &Series,
    fl_ns: Option<f64>,
    peer_ns: Option<f64>,
) -> Vec<Row> {
    let p = &s.paired;
    // Time the probes add per call, per thread, in each round.
    let added = |i: usize| -> Vec<f64> {
        p.pairs[i]
            .iter()
            .map(|&(x, base)| f64::from(a.threads) * 1e9 * (1.0 / x - 1.0 / base))
            .collect()
    };
    configs
        .iter()
        .enumerate()
        .map(|(i, &c)| Row {
            config: c,
            label: c.label(),
            median_calls_per_sec: crate::median(&p.tput[i]),
            calls_per_sec: p.tput[i].clone(),
            median_ratio_over_without: crate::median(&p.ratios[i]),
            paired_ratios: p.ratios[i].clone(),
            median_added_ns_per_call: crate::median(&added(i)),
            count_over_truth: s.counts[i].clone(),
            exact: s.exact[i],
            mismatches: s.mismatches[i].clone(),
            program_ns_per_call: match c {
                Config::Without => None,
                Config::Faultline => fl_ns,
                Config::Bpftrace => peer_ns,
            },
            failure: p.failed[i].clone(),
        })
        .collect()
}

/// What the stand-in ran.
fn workload(a: &Args) -> String {
    format!(
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
    )
}

/// The table, then each configuration's failure and mismatches.
fn print_rows(rows: &[Row]) {
    println!(
        "| configuration | median NCCL calls/s | median ratio / without | added per call | program ns/call | counted / truth (per round) |"
    );
    println!("|---|---|---|---|---|---|");
    for r in rows {
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
    for r in rows {
        if let Some(f) = &r.failure {
            println!("  {}: FAILED {f}", r.label);
        }
        for m in &r.mismatches {
            println!("  {}: {m}", r.label);
        }
    }
}

/// Why faultline's row is worse than bpftrace's in this run (its program
/// time per call higher, or its median throughput ratio lower), if it is.
fn costlier_than_peer(rows: &[Row]) -> Option<String> {
    let row = |c| rows.iter().find(|r| r.config == c && r.failure.is_none());
    let (fl, bt) = (row(Config::Faultline)?, row(Config::Bpftrace)?);
    let mut why = Vec::new();
    if let (Some(f), Some(b)) = (fl.program_ns_per_call, bt.program_ns_per_call) {
        if f > b {
            why.push(format!(
                "program time {f:.0} ns per call, bpftrace {b:.0} ns"
            ));
        }
    }
    let (f, b) = (fl.median_ratio_over_without, bt.median_ratio_over_without);
    if f < b {
        why.push(format!("calls/s ratio {f:.3}, bpftrace {b:.3}"));
    }
    (!why.is_empty()).then(|| why.join("; "))
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
    let hit_ns = collector::cuda::measure_uprobe_hit_ns(kind, 500)?;
    let real_nccl = tests::nvidia_wheel_file("nccl/lib/libnccl.so.2")
        .map(|p| placed(&p))
        .transpose()?
        .unwrap_or_default();
    let mut configs = vec![Config::Without, Config::Faultline];
    let peer = crate::peer::wanted(false);
    if peer {
        configs.push(Config::Bpftrace);
    }
    let mut failures = Failures::default();
    let series = rounds(a, &configs, &symbols, &mut failures);
    let peer_ok = configs
        .iter()
        .position(|&c| c == Config::Bpftrace)
        .is_some_and(|i| series.paired.failed[i].is_none());
    let (fl_ns, peer_ns) = failures
        .part("program cost pass", program_costs(a, &symbols, peer_ok))
        .map_or((None, None), |(f, p)| (Some(f), p));
    let rows = rows(a, &configs, &series, fl_ns, peer_ns);
    let workload = workload(a);
    println!(
        "{workload}; uprobe hit {hit_ns:.0} ns on a {} entry",
        kind.name()
    );
    print_rows(&rows);
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
        peer: crate::peer::version_if(peer),
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
    // …at or below bpftrace count()'s cost on the same symbols.
    if let Some(why) = costlier_than_peer(&report.rows) {
        failures.add("faultline against bpftrace", &anyhow::anyhow!(why));
    }
    crate::report::write(&out_dir.join(a.result_file()), &report, &failures)?;
    failures.into_result()
}

#[cfg(test)]
mod against_peer {
    use super::{costlier_than_peer, Config, Row};

    fn row(config: Config, ratio: f64, ns: Option<f64>) -> Row {
        Row {
            config,
            label: config.label(),
            calls_per_sec: vec![],
            median_calls_per_sec: 0.0,
            paired_ratios: vec![],
            median_ratio_over_without: ratio,
            median_added_ns_per_call: 0.0,
            count_over_truth: vec![],
            exact: None,
            mismatches: vec![],
            program_ns_per_call: ns,
            failure: None,
        }
    }

    #[test]
    fn faultline_fails_where_it_costs_more_than_bpftrace() {
        let rows = |f: Row, b: Row| vec![row(Config::Without, 1.0, None), f, b];
        // At or below on both: passes.
        let ok = rows(
            row(Config::Faultline, 0.95, Some(50.0)),
            row(Config::Bpftrace, 0.95, Some(50.0)),
        );
        assert_eq!(costlier_than_peer(&ok), None);
        let slow = rows(
            row(Config::Faultline, 0.96, Some(61.0)),
            row(Config::Bpftrace, 0.95, Some(52.0)),
        );
        let why = costlier_than_peer(&slow).expect("program time above");
        assert!(why.contains("61 ns"), "{why}");
        let fewer = rows(
            row(Config::Faultline, 0.90, Some(40.0)),
            row(Config::Bpftrace, 0.93, Some(52.0)),
        );
        let why = costlier_than_peer(&fewer).expect("ratio below");
        assert!(why.contains("0.900"), "{why}");
        // No peer in the run: nothing to compare.
        assert_eq!(
            costlier_than_peer(&[row(Config::Faultline, 0.5, Some(99.0))]),
            None
        );
    }
}
