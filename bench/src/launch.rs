//! Launch-heavy stand-in: `launch_storm` (threads calling `cuLaunchKernel`
//! on the stand-in driver in a loop, each launch followed by a fixed amount
//! of CPU work, ≥ 100k launches/s in all) run side by side with no probes,
//! faultline exact (launch probes always attached), faultline in
//! bounded-overhead mode (the collector's controller and budget), and the
//! peer (bpftrace `count()` on the same function). Throughput is the
//! stand-in's own count over its own run time; bounded mode's estimated
//! launch count is compared with that truth.
use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context as _, Result};
use collector::{
    cuda_lib::Search,
    probes::{launch_control::LaunchController, ProbeOptions, Probes},
};
use serde::Serialize;

use crate::{peer::Bpftrace, report::Failures};

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

struct Storm {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    pid: u32,
}

fn spawn(a: &Args) -> Result<Storm> {
    let mut child = Command::new(tests::launch_storm())
        .arg(a.library())
        .args([
            a.threads.to_string(),
            a.seconds.to_string(),
            a.work_ns.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning launch_storm")?;
    let lines = tests::lines_of(&mut child);
    let pid = lines
        .recv_timeout(crate::wait::READY)
        .ok()
        .and_then(|l| l.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()))
        .context("launch_storm did not start")?;
    Ok(Storm { child, lines, pid })
}

/// Waits for the stand-in's end line: (launches, seconds).
fn finish(mut s: Storm) -> Result<(u64, f64)> {
    let status = s.child.wait()?;
    ensure!(status.success(), "launch_storm failed: {status}");
    for l in s.lines.iter() {
        if let Some(rest) = l.strip_prefix("launches ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if let (Some(n), Some(secs)) = (f.first(), f.get(2)) {
                return Ok((n.parse()?, secs.parse()?));
            }
        }
    }
    bail!("launch_storm printed no count")
}

/// CPU ns of every thread of `pid` (`/proc/PID/task/*/schedstat`).
fn task_cpu_ns(pid: u32) -> u64 {
    let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    d.filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
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
    approximate: bool,
    /// Its largest estimated relative error of the sampled counts.
    estimated_error_bound: f64,
    /// The per-hit cost it used at the end, ns.
    calibrated_hit_cost_ns: f64,
    /// What a trap cost the stand-in: its CPU per launch while the probes
    /// were attached less its CPU per launch while detached (from its true
    /// count), ns (`/proc/PID/task/*/schedstat`, read at each toggle).
    paid_hit_cost_ns: f64,
}

/// One measurement.
#[derive(Default)]
struct Measured {
    launches_per_sec: f64,
    /// What the tool counted / the truth.
    count_over_truth: Option<f64>,
    /// Bounded mode: the controller's attached fraction per window.
    fractions: Vec<f64>,
    bounded: Option<BoundedRound>,
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
        Config::FaultlineBounded => {
            // Run counts of the launch program: every trap, counted or gated.
            let _stats = collector::probes::enable_run_stats().context("BPF_ENABLE_STATS")?;
            let mut p = Probes::load(&opts)?;
            // As the collector runs it: the hit cost measured at start and
            // again while the stand-in is bounded.
            let kind = p.launch_entry_kind().context("no launch probes attached")?;
            let mut ctl = LaunchController::calibrating(
                a.budget,
                Duration::from_millis(a.period_ms),
                Path::new("/proc"),
                kind,
            )?;
            let first = p.cuda_snapshot()?;
            let me = std::process::id();
            let (cpu0, t0) = (
                crate::procstat::cpu_seconds(me).unwrap_or(0.0),
                Instant::now(),
            );
            let mut s = spawn(a)?;
            let pid = s.pid;
            let before: u64 = first
                .launches
                .iter()
                .filter(|(k, _)| k.pid == pid)
                .map(|(_, v)| v.launches)
                .sum();
            // The agent's loop: a window each second, toggles on schedule.
            let mut fractions = Vec::new();
            let mut round = BoundedRound::default();
            // The stand-in's CPU: all of it, and while the probes were attached.
            let (cpu_start, mut cpu_att, mut cpu_mark) = (task_cpu_ns(pid), 0u64, 0u64);
            let mut cpu_end = cpu_start;
            let mut next_window = Instant::now() + Duration::from_secs(1);
            let estimate = loop {
                // Exited but not reaped: the last snapshot still reads its
                // final CPU time (the scaling's basis).
                let exited = collector::probes::bench::child_exited_unreaped(pid);
                if !exited {
                    cpu_end = task_cpu_ns(pid);
                }
                let now = Instant::now();
                if exited || now >= next_window {
                    let snap = p.cuda_snapshot()?;
                    fractions.push(ctl.fraction());
                    round.approximate |= ctl.approximate();
                    round.estimated_error_bound =
                        round.estimated_error_bound.max(ctl.error_bound());
                    next_window = now + Duration::from_secs(1);
                    if exited {
                        break snap
                            .launches
                            .iter()
                            .filter(|(k, _)| k.pid == pid)
                            .map(|(_, v)| v.launches)
                            .sum::<u64>()
                            - before;
                    }
                    continue;
                }
                let t = ctl.next_event(p.launch_probes_attached());
                if t <= now {
                    let was = p.launch_probes_attached();
                    ctl.on_event(&mut p)?;
                    if was != p.launch_probes_attached() {
                        let c = task_cpu_ns(pid);
                        if was {
                            cpu_att += c.saturating_sub(cpu_mark);
                        }
                        cpu_mark = c;
                    }
                } else {
                    std::thread::sleep(t.min(next_window) - now);
                }
            };
            let runs: u64 = p
                .program_run_stats()
                .iter()
                .filter(|(n, _, _)| n == "cuda_launch")
                .map(|(_, c, _)| *c)
                .sum();
            let agent_cpu = (crate::procstat::cpu_seconds(me).unwrap_or(0.0) - cpu0)
                / t0.elapsed().as_secs_f64();
            let raw = p.raw_launch_totals()?.get(&pid).copied().unwrap_or(0);
            println!(
                "  bounded: the agent's loop (snapshots, checks, attach/detach) used {:.2} % of a CPU",
                100.0 * agent_cpu
            );
            println!(
                "  bounded: {runs} traps, {raw} counted ({} gated); hit cost at the end {:.0} ns",
                runs.saturating_sub(raw),
                ctl.hit_cost_s() * 1e9
            );
            // Collect the exit line (the child has exited).
            let status = s.child.wait()?;
            ensure!(status.success(), "launch_storm failed: {status}");
            let (n, secs) = s
                .lines
                .iter()
                .find_map(|l| {
                    let rest = l.strip_prefix("launches ")?.to_string();
                    let f: Vec<&str> = rest.split_whitespace().collect();
                    Some((
                        f.first()?.parse::<u64>().ok()?,
                        f.get(2)?.parse::<f64>().ok()?,
                    ))
                })
                .context("launch_storm printed no count")?;
            // Every trap (counted or gated) fell in an attached phase; the
            // other launches ran detached.
            let cpu_all = cpu_end.saturating_sub(cpu_start) as f64 * 1e-9;
            let cpu_on = cpu_att as f64 * 1e-9;
            round.calibrated_hit_cost_ns = ctl.hit_cost_s() * 1e9;
            round.paid_hit_cost_ns = if runs > 0 && n > runs {
                1e9 * (cpu_on / runs as f64 - (cpu_all - cpu_on) / (n - runs) as f64)
            } else {
                0.0
            };
            println!(
                "  bounded: count / truth {:.3}{}, estimated error bound {:.1} %; a trap cost the stand-in {:.0} ns, the controller used {:.0} ns",
                estimate as f64 / n as f64,
                if round.approximate { " (approximate)" } else { "" },
                round.estimated_error_bound * 100.0,
                round.paid_hit_cost_ns,
                round.calibrated_hit_cost_ns
            );
            Measured {
                launches_per_sec: n as f64 / secs,
                count_over_truth: Some(estimate as f64 / n as f64),
                fractions,
                bounded: Some(round),
            }
        }
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
    let hit_ns = collector::probes::measure_uprobe_hit_ns(kind, 500)?;
    let mut configs = vec![
        Config::Without,
        Config::FaultlineExact,
        Config::FaultlineBounded,
    ];
    let peer = !a.no_peer && crate::peer::available();
    if peer {
        configs.push(Config::Bpftrace);
    } else if !a.no_peer {
        println!("bpftrace not found: no peer row (scripts/setup.sh installs it)");
    }
    let n = configs.len();
    let mut tput: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut counts: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut fracs: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut bounded: Vec<Vec<BoundedRound>> = vec![Vec::new(); n];
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
            match measure(configs[i], a) {
                Ok(m) => {
                    this[i] = Some(m.launches_per_sec);
                    if let Some(c) = m.count_over_truth {
                        counts[i].push(c);
                    }
                    fracs[i].extend(m.fractions);
                    bounded[i].extend(m.bounded);
                }
                Err(e) => {
                    let what = format!("{} round {round}", configs[i].label());
                    failed[i] = Some(failures.add(&what, &e));
                }
            }
        }
        for i in 0..n {
            let Some(t) = this[i] else { continue };
            tput[i].push(t);
            if let Some(base) = this[0] {
                ratios[i].push(t / base.max(1e-9));
            }
        }
    }
    let rows: Vec<Row> = configs
        .iter()
        .enumerate()
        .map(|(i, &c)| Row {
            config: c,
            label: c.label(),
            median_launches_per_sec: crate::median(&tput[i]),
            launches_per_sec: tput[i].clone(),
            median_ratio_over_without: crate::median(&ratios[i]),
            paired_ratios: ratios[i].clone(),
            count_over_truth: counts[i].clone(),
            fractions: fracs[i].clone(),
            bounded_rounds: bounded[i].clone(),
            failure: failed[i].clone(),
        })
        .collect();
    println!(
        "launch-heavy stand-in ({} build): {} threads × (cuLaunchKernel + {} µs CPU), {} s × {} rounds; uprobe hit {:.0} ns on a {} entry",
        a.entry.name(),
        a.threads,
        a.work_ns as f64 / 1e3,
        a.seconds,
        a.rounds,
        hit_ns,
        kind.name()
    );
    println!("| configuration | median launches/s | median ratio / without | counted / truth (per round) |");
    println!("|---|---|---|---|");
    for r in &rows {
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
        peer: if peer {
            crate::peer::version()
        } else {
            String::new()
        },
        rows,
        target_bounded_ratio_min: 0.98,
        target_count_error_max: 0.05,
        bounded_counts_within_target_or_approximate: held,
    };
    crate::report::write(&out_dir.join(a.result_file()), &report, &failures)?;
    failures.into_result()
}
