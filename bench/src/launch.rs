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
mod storm;

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
    rows: Vec<Row>,
    target_bounded_ratio_min: f64,
    target_count_error_max: f64,
    /// Bounded mode's count is within `target_count_error_max` of the truth
    /// in every round, or the controller marked it approximate (`None`
    /// without bounded rounds).
    bounded_counts_within_target_or_approximate: Option<bool>,
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
    /// The controller marked the sampled counts approximate (in any window).
    pub approximate: bool,
    /// Its largest estimated relative error of the sampled counts.
    pub estimated_error_bound: f64,
    /// The per-hit cost it used at the end, ns.
    pub calibrated_hit_cost_ns: f64,
    /// What a trap cost the stand-in: its CPU per launch while the probes
    /// were attached less its CPU per launch while detached (from its true
    /// count), ns (`/proc/PID/task/*/schedstat`, read at each toggle).
    pub paid_hit_cost_ns: f64,
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

/// The table and bounded mode's rounds; whether bounded mode's counts were
/// within 5 % of the truth or marked approximate in every round.
fn print_rows(a: &Args, rows: &[Row], hit_ns: f64, kind: &str) -> Option<bool> {
    println!(
        "launch-heavy stand-in ({} build): {} threads × (cuLaunchKernel + {} µs CPU), {} s × {} rounds; uprobe hit {:.0} ns on a {} entry",
        a.entry.name(),
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
            .map(|(k, x)| {
                let approx = r.bounded_rounds.get(k).is_some_and(|b| b.approximate);
                format!("{x:.3}{}", if approx { " (approximate)" } else { "" })
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
    let held = rows
        .iter()
        .find(|r| r.config == Config::FaultlineBounded && !r.bounded_rounds.is_empty())
        .map(|r| {
            r.count_over_truth
                .iter()
                .zip(&r.bounded_rounds)
                .all(|(c, b)| (c - 1.0).abs() <= 0.05 || b.approximate)
        });
    if let Some(b) = rows.iter().find(|r| r.config == Config::FaultlineBounded) {
        for (k, r) in b.bounded_rounds.iter().enumerate() {
            println!(
                "bounded round {k}: {} (estimated error bound {:.1} %), trap cost paid {:.0} ns, used {:.0} ns",
                if r.approximate { "approximate" } else { "not marked approximate" },
                r.estimated_error_bound * 100.0,
                r.paid_hit_cost_ns,
                r.calibrated_hit_cost_ns
            );
        }
        println!(
            "bounded mode: attached fraction per window {:?}",
            b.fractions
                .iter()
                .map(|f| (f * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>()
        );
    }
    held
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    ensure!(
        a.rounds > 0 && a.seconds > 0.0 && a.threads > 0,
        "rounds, seconds and threads must be positive"
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
    let series = rounds(a, &configs, &mut failures);
    let rows = rows(&configs, &series);
    let held = print_rows(a, &rows, hit_ns, kind.name());
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
        rows,
        target_bounded_ratio_min: 0.98,
        target_count_error_max: 0.05,
        bounded_counts_within_target_or_approximate: held,
    };
    crate::report::write(&out_dir.join(a.result_file()), &report, &failures)?;
    failures.into_result()
}
