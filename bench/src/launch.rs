//! Launch-heavy stand-in: `launch_storm` (threads calling `cuLaunchKernel`
//! on the stand-in driver in a loop, each launch followed by a fixed amount
//! of CPU work, ≥ 100k launches/s in all) run side by side with no probes,
//! faultline exact (launch probes always attached), faultline in
//! bounded-overhead mode (the collector's controller and budget), and the
//! peer (bpftrace `count()` on the same function). Throughput is the
//! stand-in's own count over its own run time; bounded mode's estimated
//! launch count is compared with that truth.
//!
//! [`storm`] runs the stand-in, [`bounded`] is bounded mode's measurement.
use std::path::Path;

use anyhow::{ensure, Result};
use collector::{
    cuda_lib::Search,
    probes::{ProbeOptions, Probes},
};
use serde::Serialize;

use crate::{paired, peer::Bpftrace, report::Failures};

mod bounded;
mod load;
mod storm;

use load::Load;

use storm::{finish, spawn};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rounds; each runs every configuration once, order rotated per round.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Seconds the stand-in runs per measurement (several duty periods).
    #[arg(long, default_value_t = 24.0)]
    seconds: f64,
    /// Launching threads.
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// CPU work after each launch, ns (the driver's own launch cost).
    #[arg(long, default_value_t = 10_000)]
    work_ns: u64,
    /// Bounded mode's budget (share of the process's CPU).
    #[arg(long, default_value_t = 0.01)]
    budget: f64,
    /// Bounded mode's duty period, ms (the collector's default).
    #[arg(long, default_value_t = 4000)]
    period_ms: u64,
    /// The stand-in's build: `plain` (functions start `test %rdi,%rdi; je`,
    /// as compiled: faultline probes the emulated `je`, bpftrace the
    /// symbol, single-stepped), `stepped` (entries `mov %rdi,%rax`:
    /// single-stepped for both, the worst case) or `cet` (`endbr64; push
    /// %rbp`: faultline probes the emulated push, bpftrace the symbol).
    #[arg(long, value_enum, default_value_t = Build::Plain)]
    entry: Build,
    /// Skip the bpftrace peer row.
    #[arg(long)]
    no_peer: bool,
    /// Background load, one full set of rounds each (comma-separated):
    /// `none`, `build` (a parallel C build in a loop, 2 jobs).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "none,build")]
    load: Vec<Load>,
}

/// The stand-in's builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Build {
    Plain,
    Stepped,
    Cet,
}

impl Build {
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Stepped => "stepped",
            Self::Cet => "cet",
        }
    }
}

impl Args {
    /// The result file of this build.
    pub fn result_file(&self) -> &'static str {
        match self.entry {
            Build::Plain => "launch.json",
            Build::Stepped => "launch_stepped.json",
            Build::Cet => "launch_cet.json",
        }
    }

    fn library(&self) -> std::path::PathBuf {
        match self.entry {
            Build::Cet => tests::fake_libcuda_cet(),
            Build::Plain => tests::fake_libcuda(),
            Build::Stepped => tests::fake_libcuda_stepped(),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Config {
    Without,
    FaultlineExact,
    FaultlineBounded,
    Bpftrace,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Self::Without => "without probes",
            Self::FaultlineExact => "faultline exact",
            Self::FaultlineBounded => "faultline bounded (budget)",
            Self::Bpftrace => "bpftrace count()",
        }
    }
}

#[derive(Serialize)]
struct Row {
    config: Config,
    label: &'static str,
    launches_per_sec: Vec<f64>,
    median_launches_per_sec: f64,
    /// Per-round throughput / the same round's without.
    paired_ratios: Vec<f64>,
    median_ratio_over_without: f64,
    /// What the tool counted / the stand-in's truth, per round (empty for "without").
    count_over_truth: Vec<f64>,
    /// Bounded mode: the attached share the controller settled on, per window.
    fractions: Vec<f64>,
    /// Bounded mode, per round: whether the controller marked the counts
    /// approximate, its error bound, and the trap cost used against paid.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    bounded_rounds: Vec<BoundedRound>,
    /// Why this configuration stopped being measured, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    workload: String,
    rounds: u32,
    budget: f64,
    uprobe_hit_cost_ns: f64,
    /// The kind of instruction faultline's launch probe sits on.
    probed_entry: &'static str,
    peer: String,
    /// One full set of rounds per background load.
    runs: Vec<LoadRun>,
    target_bounded_ratio_min: f64,
    /// Every bounded round's count / truth is within the bound the
    /// controller stated for it (`None` without bounded rounds).
    bounded_counts_within_stated_bound: Option<bool>,
}

/// The rounds under one background load.
#[derive(Serialize)]
struct LoadRun {
    load: Load,
    load_description: &'static str,
    /// Compiles the build load finished while the rounds ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    load_compiles: Option<u64>,
    /// The machine's load average over the last minute at the end.
    loadavg_1m_at_end: Option<f64>,
    rows: Vec<Row>,
    /// Per bounded round: count / truth against the stated bound.
    bounded_checks: Vec<BoundedCheck>,
    bounded_counts_within_stated_bound: Option<bool>,
}

/// One bounded round's count against its stated bound.
#[derive(Clone, Debug, Serialize)]
struct BoundedCheck {
    round: usize,
    count_over_truth: f64,
    stated_bound: f64,
    approximate: bool,
    within: bool,
    calibrated_hit_cost_ns: f64,
    paid_hit_cost_ns: f64,
}

fn launches_of(p: &Probes, pid: u32) -> Result<u64> {
    Ok(p.cuda_snapshot()?
        .launches
        .iter()
        .filter(|(k, _)| k.pid == pid)
        .map(|(_, v)| v.launches)
        .sum())
}

/// What bounded mode's controller said about one round's counts, and the
/// trap cost the stand-in really paid.
#[derive(Clone, Debug, Default, Serialize)]
struct BoundedRound {
    /// The controller marked the sampled counts approximate (in any
    /// sampled window).
    pub approximate: bool,
    /// Its largest estimated relative error of the sampled counts, over
    /// the sampled windows: the bound the round is held to.
    pub estimated_error_bound: f64,
    /// Windows sampled before any rate change was measured (the bound then
    /// says unmeasured, and the counts approximate).
    pub unmeasured_windows: u32,
    /// What that bound was made of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terms: Option<Terms>,
    /// The per-hit cost it used at the end, ns.
    pub calibrated_hit_cost_ns: f64,
    /// What a trap cost the stand-in: its CPU per launch while the probes
    /// were attached less its CPU per launch while detached (from its true
    /// count), ns (`/proc/PID/task/*/schedstat`, read at each toggle).
    pub paid_hit_cost_ns: f64,
}

/// The bound's terms ([`collector::cuda::launch_control::BoundTerms`]).
#[derive(Clone, Debug, Serialize)]
struct Terms {
    trap_share: f64,
    cost_uncertainty: f64,
    rate_variation: f64,
    rate_changes_measured: usize,
}

impl From<collector::cuda::launch_control::BoundTerms> for Terms {
    fn from(t: collector::cuda::launch_control::BoundTerms) -> Self {
        Self {
            trap_share: t.share,
            cost_uncertainty: t.cost_uncertainty,
            rate_variation: t.rate_variation,
            rate_changes_measured: t.changes,
        }
    }
}

/// One measurement.
#[derive(Default)]
struct Measured {
    pub launches_per_sec: f64,
    /// What the tool counted / the truth.
    pub count_over_truth: Option<f64>,
    /// Bounded mode: the controller's attached fraction per window.
    pub fractions: Vec<f64>,
    pub bounded: Option<BoundedRound>,
}

fn measure(c: Config, a: &Args) -> Result<Measured> {
    let opts = ProbeOptions {
        exec: false,
        block: false,
        verbs: false,
        cuda: true,
        cuda_search: Search {
            configured: Some(a.library()),
            ld_cache: false,
            proc_root: None,
            usual: vec![],
        },
        ..ProbeOptions::default()
    };
    Ok(match c {
        Config::Without => {
            let (n, secs) = finish(spawn(a)?)?;
            Measured {
                launches_per_sec: n as f64 / secs,
                ..Measured::default()
            }
        }
        Config::FaultlineExact => {
            let p = Probes::load(&opts)?;
            let s = spawn(a)?;
            let pid = s.pid;
            let (n, secs) = finish(s)?;
            let counted = launches_of(&p, pid)?;
            Measured {
                launches_per_sec: n as f64 / secs,
                count_over_truth: Some(counted as f64 / n as f64),
                ..Measured::default()
            }
        }
        Config::FaultlineBounded => bounded::measure(a, &opts)?,
        Config::Bpftrace => {
            let prog = format!(
                "uprobe:{}:cuLaunchKernel {{ @ = count(); }}",
                a.library().display()
            );
            let b = Bpftrace::start(&prog)?;
            let (n, secs) = finish(spawn(a)?)?;
            let out = b.stop()?;
            let counted = crate::peer::count_printed(&out);
            Measured {
                launches_per_sec: n as f64 / secs,
                count_over_truth: Some(counted as f64 / n as f64),
                ..Measured::default()
            }
        }
    })
}

/// Every round's results, per configuration (in `configs` order).
struct Series {
    paired: paired::Rounds,
    counts: Vec<Vec<f64>>,
    fracs: Vec<Vec<f64>>,
    bounded: Vec<Vec<BoundedRound>>,
}

/// The rounds ([`paired`]): every configuration once per round, order
/// rotated; throughput paired with the same round's "without".
fn rounds(a: &Args, configs: &[Config], failures: &mut Failures) -> Series {
    let n = configs.len();
    let mut counts = vec![Vec::new(); n];
    let mut fracs = vec![Vec::new(); n];
    let mut bounded = vec![Vec::new(); n];
    let paired = paired::run(a.rounds, configs, Config::label, failures, |i, _| {
        let m = measure(configs[i], a)?;
        if let Some(c) = m.count_over_truth {
            counts[i].push(c);
        }
        fracs[i].extend(m.fractions);
        bounded[i].extend(m.bounded);
        Ok(m.launches_per_sec)
    });
    Series {
        paired,
        counts,
        fracs,
        bounded,
    }
}

fn rows(configs: &[Config], s: &Series) -> Vec<Row> {
    let p = &s.paired;
    configs
        .iter()
        .enumerate()
        .map(|(i, &c)| Row {
            config: c,
            label: c.label(),
            median_launches_per_sec: crate::median(&p.tput[i]),
            launches_per_sec: p.tput[i].clone(),
            median_ratio_over_without: crate::median(&p.ratios[i]),
            paired_ratios: p.ratios[i].clone(),
            count_over_truth: s.counts[i].clone(),
            fractions: s.fracs[i].clone(),
            bounded_rounds: s.bounded[i].clone(),
            failure: p.failed[i].clone(),
        })
        .collect()
}

/// The table and bounded mode's rounds; each bounded round's count against
/// the bound the controller stated for it.
fn print_rows(a: &Args, load: Load, rows: &[Row], hit_ns: f64, kind: &str) -> Vec<BoundedCheck> {
    println!(
        "launch-heavy stand-in ({} build, load: {}): {} threads × (cuLaunchKernel + {} µs CPU), {} s × {} rounds; uprobe hit {:.0} ns on a {} entry",
        a.entry.name(),
        load.name(),
        a.threads,
        a.work_ns as f64 / 1e3,
        a.seconds,
        a.rounds,
        hit_ns,
        kind
    );
    println!("| configuration | median launches/s | median ratio / without | counted / truth (per round) |");
    println!("|---|---|---|---|");
    for r in rows {
        let c: Vec<String> = r
            .count_over_truth
            .iter()
            .enumerate()
            .map(|(k, x)| match r.bounded_rounds.get(k) {
                Some(b) => format!(
                    "{x:.3} (±{:.1} %{})",
                    b.estimated_error_bound * 100.0,
                    if b.approximate { ", approximate" } else { "" }
                ),
                None => format!("{x:.3}"),
            })
            .collect();
        println!(
            "| {} | {:.0} | {:.3} | {} |",
            r.label,
            r.median_launches_per_sec,
            r.median_ratio_over_without,
            if c.is_empty() {
                "—".into()
            } else {
                c.join(", ")
            }
        );
        if let Some(f) = &r.failure {
            println!("| {} | FAILED | {f} | |", r.label);
        }
    }
    let mut checks = Vec::new();
    if let Some(b) = rows.iter().find(|r| r.config == Config::FaultlineBounded) {
        for (k, (c, r)) in b.count_over_truth.iter().zip(&b.bounded_rounds).enumerate() {
            // Exact counts (never sampled) are held to 0 within rounding.
            let within = (c - 1.0).abs() <= r.estimated_error_bound + 1e-6;
            println!(
                "bounded round {k}: count / truth {c:.3}, stated bound ±{:.1} %{} → {}; {} window(s) sampled before a rate change was measured; terms {:?}; trap cost paid {:.0} ns, used {:.0} ns",
                r.estimated_error_bound * 100.0,
                if r.approximate { " (approximate)" } else { "" },
                if within { "within" } else { "OUTSIDE" },
                r.unmeasured_windows,
                r.terms,
                r.paid_hit_cost_ns,
                r.calibrated_hit_cost_ns
            );
            checks.push(BoundedCheck {
                round: k,
                count_over_truth: *c,
                stated_bound: r.estimated_error_bound,
                approximate: r.approximate,
                within,
                calibrated_hit_cost_ns: r.calibrated_hit_cost_ns,
                paid_hit_cost_ns: r.paid_hit_cost_ns,
            });
        }
        println!(
            "bounded mode: attached fraction per window {:?}",
            b.fractions
                .iter()
                .map(|f| (f * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>()
        );
    }
    checks
}

/// The 1-minute load average.
fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Every round under `load`; a bounded round outside its stated bound is
/// a failure.
fn run_load(
    a: &Args,
    load: Load,
    configs: &[Config],
    hit_ns: f64,
    kind: &str,
    failures: &mut Failures,
) -> Result<LoadRun> {
    let running = load::start(load)?;
    let series = rounds(a, configs, failures);
    let compiles = running.stop()?;
    let rows = rows(configs, &series);
    let checks = print_rows(a, load, &rows, hit_ns, kind);
    for c in checks.iter().filter(|c| !c.within) {
        failures.add(
            &format!("bounded round {} (load {})", c.round, load.name()),
            &anyhow::anyhow!(
                "count / truth {:.4} outside the stated bound ±{:.2} %",
                c.count_over_truth,
                c.stated_bound * 100.0
            ),
        );
    }
    let held = (!checks.is_empty()).then(|| checks.iter().all(|c| c.within));
    Ok(LoadRun {
        load,
        load_description: load.describe(),
        load_compiles: (load != Load::None).then_some(compiles),
        loadavg_1m_at_end: loadavg(),
        rows,
        bounded_checks: checks,
        bounded_counts_within_stated_bound: held,
    })
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    ensure!(
        a.rounds > 0 && a.seconds > 0.0 && a.threads > 0 && !a.load.is_empty(),
        "rounds, seconds, threads and loads must be positive"
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _g = rt.enter();
    // The hit cost on an entry of the kind faultline probes in this build.
    let kind = collector::probes::entry::placement_of(&a.library(), "cuLaunchKernel").kind;
    let hit_ns = collector::cuda::measure_uprobe_hit_ns(kind, 500)?;
    let mut configs = vec![
        Config::Without,
        Config::FaultlineExact,
        Config::FaultlineBounded,
    ];
    let peer = crate::peer::wanted(a.no_peer);
    if peer {
        configs.push(Config::Bpftrace);
    }
    let mut failures = Failures::default();
    let mut runs = Vec::new();
    for &load in &a.load {
        let r = run_load(a, load, &configs, hit_ns, kind.name(), &mut failures);
        if let Some(r) = failures.part(&format!("load {}", load.name()), r) {
            runs.push(r);
        }
    }
    let held: Vec<bool> = runs
        .iter()
        .filter_map(|r| r.bounded_counts_within_stated_bound)
        .collect();
    let report = Report {
        benchmark: "cuda_launch_bounded_overhead",
        workload: format!(
            "launch_storm ({} stand-in): {} threads, cuLaunchKernel + {} ns CPU per launch, {} s",
            a.entry.name(),
            a.threads,
            a.work_ns,
            a.seconds
        ),
        rounds: a.rounds,
        budget: a.budget,
        uprobe_hit_cost_ns: hit_ns,
        probed_entry: kind.name(),
        peer: crate::peer::version_if(peer),
        runs,
        target_bounded_ratio_min: 0.98,
        bounded_counts_within_stated_bound: (!held.is_empty()).then(|| held.iter().all(|h| *h)),
    };
    crate::report::write(&out_dir.join(a.result_file()), &report, &failures)?;
    failures.into_result()
}
