//! Library discovery's cost with 2,000 processes on the host, half of them
//! in mount namespaces of their own (`faultline-bench discovery`): today's
//! rescan before `LibScan` (every process's `maps` read in full at every
//! rescan) beside the incremental `LibScan::scan` (its first scan, its
//! scans while the processes are young, its steady state), alternating in
//! one run, each in the calling thread's CPU time; the `ldconfig -p` both
//! run per rescan (a child's CPU); and the attach side with the real eBPF
//! object (`nccl_sync` and `cuda_sync` when nothing changed, when a job
//! brings new copies of both libraries, and once it exits). Shares of one
//! core are CPU per rescan over the rescan period (`nccl.rescan_s`, 30 s).
use std::path::Path;

use anyhow::Result;
use collector::{cuda_lib, nccl_lib, proc_libs::LibScan};
use serde::Serialize;

use crate::report::Failures;

mod attach;
mod cost;
mod fleet;
mod table;

use cost::{measured, Cost};
use fleet::{Fleet, Plan};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Processes started on the host.
    #[arg(long, default_value_t = 2000)]
    procs: usize,
    /// Of those, processes in a mount namespace of their own (a private
    /// tmpfs with their own copy of a library).
    #[arg(long, default_value_t = 1000)]
    namespaced: usize,
    /// Of those, processes mapping the NCCL and CUDA stand-ins (half in
    /// namespaces, each with its own copies).
    #[arg(long, default_value_t = 8)]
    with_nccl: usize,
    /// Ordinary shared libraries each process maps.
    #[arg(long, default_value_t = 8)]
    libs: usize,
    /// Rounds; each runs every scan once, order rotated per round (20: two
    /// refresh cycles of the steady scanner).
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Syncs measured per kind on the attach side.
    #[arg(long, default_value_t = 5)]
    attach_rounds: usize,
    /// The collector's rescan period (`nccl.rescan_s`), s.
    #[arg(long, default_value_t = 30.0)]
    period_s: f64,
}

/// What one round measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Config {
    /// Today: every maps file read in full at every rescan.
    Today,
    /// A new `LibScan`'s first scan.
    First,
    /// `LibScan` while the processes are young (re-read every scan).
    Young,
    /// `LibScan` once they are older than `young_s`.
    Steady,
    /// `ldconfig -p` (both run it per rescan).
    LdCache,
}

const CONFIGS: [Config; 5] = [
    Config::Today,
    Config::First,
    Config::Young,
    Config::Steady,
    Config::LdCache,
];

impl Config {
    pub fn label(self) -> &'static str {
        match self {
            Self::Today => "today: full maps read of every process (old rescan)",
            Self::First => "LibScan: first scan",
            Self::Young => "LibScan: processes young (< young_s), re-read each scan",
            Self::Steady => "LibScan: steady (older than young_s), refresh every N scans",
            Self::LdCache => "ld.so cache lookup (ldconfig -p child), both",
        }
    }
}

/// Median, mean and range of a measure over the rounds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Spread {
    pub median: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub values: Vec<f64>,
}

impl Spread {
    pub fn of(v: &[f64]) -> Self {
        Self {
            median: crate::median(v),
            mean: v.iter().sum::<f64>() / v.len().max(1) as f64,
            min: v.iter().copied().reduce(f64::min).unwrap_or(0.0),
            max: v.iter().copied().fold(0.0, f64::max),
            values: v.to_vec(),
        }
    }
}

pub fn ms(s: f64) -> f64 {
    s * 1e3
}

/// One scan's row.
#[derive(Debug, Serialize)]
pub struct Row {
    pub config: Config,
    pub label: &'static str,
    /// CPU per scan (the thread's; `ldconfig -p`: its own), ms.
    pub cpu_ms: Spread,
    pub wall_ms: Spread,
    /// `maps` files read per scan (LibScan's count; today: every process).
    pub maps_read_per_scan: f64,
    /// Median of each round's CPU / the same round's today.
    pub cpu_over_today: f64,
    /// Mean CPU per scan / the rescan period, % of one core.
    pub pct_of_core: f64,
}

/// The scanners kept across rounds.
struct Scanners {
    young: LibScan,
    steady: LibScan,
}

fn families() -> Vec<collector::proc_libs::Family> {
    vec![nccl_lib::FAMILY, cuda_lib::FAMILY]
}

/// One scan's cost and the maps files it read.
type Sample = (Cost, f64);

/// The scanners' settings: `young_s` and `refresh_every`.
type Settings = (f64, u64);

/// One scan of `c`.
fn scan_once(c: Config, s: &mut Scanners) -> Sample {
    let proc_root = Path::new("/proc");
    match c {
        Config::Today => {
            let n = cost::pids(proc_root) as f64;
            let ((), cost) = measured(|| {
                std::hint::black_box(cost::old_rescan(proc_root));
            });
            (cost, n)
        }
        Config::First => {
            let mut fresh = LibScan::new(proc_root, families());
            let ((), cost) = measured(|| {
                std::hint::black_box(fresh.scan());
            });
            (cost, fresh.maps_read as f64)
        }
        Config::Young | Config::Steady => {
            let sc = if c == Config::Young {
                &mut s.young
            } else {
                &mut s.steady
            };
            let before = sc.maps_read;
            let ((), cost) = measured(|| {
                std::hint::black_box(sc.scan());
            });
            (cost, (sc.maps_read - before) as f64)
        }
        Config::LdCache => {
            let ((), cost) = measured(|| {
                std::hint::black_box(cuda_lib::find_in_ld_cache(nccl_lib::SONAME));
            });
            (cost, 0.0)
        }
    }
}

/// Every round's costs per config (in [`CONFIGS`] order), and the
/// scanners' settings.
fn rounds(a: &Args) -> (Vec<Vec<Sample>>, Settings) {
    let mut s = Scanners {
        young: LibScan::new("/proc", families()),
        steady: LibScan::new("/proc", families()),
    };
    // Old processes: never young (as after young_s on a real host).
    s.steady.young_s = 0.0;
    let settings = (s.young.young_s, s.steady.refresh_every);
    // Their first scans (the First row measures fresh ones).
    s.young.scan();
    s.steady.scan();
    let mut out = vec![Vec::new(); CONFIGS.len()];
    for r in 0..a.rounds {
        for k in 0..CONFIGS.len() {
            let i = (r + k) % CONFIGS.len();
            out[i].push(scan_once(CONFIGS[i], &mut s));
        }
    }
    (out, settings)
}

fn rows(per: &[Vec<Sample>], period_s: f64) -> Vec<Row> {
    let cpu = |i: usize| -> Vec<f64> { per[i].iter().map(|(c, _)| c.total_cpu_s()).collect() };
    let today = cpu(0);
    CONFIGS
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let v = cpu(i);
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            Row {
                config: *c,
                label: c.label(),
                cpu_ms: Spread::of(&v.iter().map(|x| ms(*x)).collect::<Vec<_>>()),
                wall_ms: Spread::of(&per[i].iter().map(|(c, _)| ms(c.wall_s)).collect::<Vec<_>>()),
                maps_read_per_scan: per[i].iter().map(|(_, n)| n).sum::<f64>()
                    / per[i].len().max(1) as f64,
                cpu_over_today: crate::paired(&v, &today),
                pct_of_core: 100.0 * mean / period_s,
            }
        })
        .collect()
}

/// Per rescan, all parts together.
#[derive(Debug, Default, Serialize)]
pub struct Summary {
    /// CPU per rescan, ms: today (old scan + ld.so cache).
    pub today_ms: f64,
    /// Steady: scan (mean over refresh cycles) + ld.so cache + unchanged
    /// `discover_with`, `nccl_sync`, `cuda_sync`.
    pub steady_ms: f64,
    /// Young: as steady with the young scan.
    pub young_ms: f64,
    pub today_pct_of_core: f64,
    pub steady_pct_of_core: f64,
    pub young_pct_of_core: f64,
    pub steady_over_today: f64,
    pub young_over_today: f64,
    /// Scan CPU per process on the host, µs (mean).
    pub today_us_per_process: f64,
    pub young_us_per_process: f64,
    pub steady_us_per_process: f64,
    pub target_steady_pct_of_core: f64,
    pub steady_met: bool,
}

fn summary(rows: &[Row], at: Option<&attach::Attach>, pids: usize, period_s: f64) -> Summary {
    let mean = |c: Config| {
        rows.iter()
            .find(|r| r.config == c)
            .map_or(0.0, |r| r.cpu_ms.mean)
    };
    let sync = at.map_or(0.0, |a| {
        a.unchanged_discover.cpu_ms.mean
            + a.unchanged_nccl_sync.cpu_ms.mean
            + a.unchanged_cuda_sync.cpu_ms.mean
    });
    let ld = mean(Config::LdCache);
    let today = mean(Config::Today) + ld;
    let steady = mean(Config::Steady) + ld + sync;
    let young = mean(Config::Young) + ld + sync;
    let pct = |x: f64| 100.0 * x / 1e3 / period_s;
    let per = |c: Config| 1e3 * mean(c) / pids.max(1) as f64;
    Summary {
        today_ms: today,
        steady_ms: steady,
        young_ms: young,
        today_pct_of_core: pct(today),
        steady_pct_of_core: pct(steady),
        young_pct_of_core: pct(young),
        steady_over_today: steady / today.max(f64::MIN_POSITIVE),
        young_over_today: young / today.max(f64::MIN_POSITIVE),
        today_us_per_process: per(Config::Today),
        young_us_per_process: per(Config::Young),
        steady_us_per_process: per(Config::Steady),
        target_steady_pct_of_core: 1.0,
        steady_met: pct(steady) <= 1.0,
    }
}

/// The processes scanned.
#[derive(Debug, Serialize)]
pub struct FleetInfo {
    pub started: usize,
    pub namespaced: usize,
    pub with_nccl: usize,
    pub libraries: Vec<String>,
    pub mean_maps_lines: f64,
    /// Process directories in /proc during the rounds (the fleet and the
    /// host's own).
    pub pids_on_host: usize,
    pub start_s: f64,
    /// Killing and reaping them (and their mount namespaces going), s.
    pub cleanup_s: f64,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    cores: usize,
    load_average: String,
    fleet: FleetInfo,
    rounds: usize,
    period_s: f64,
    young_s: f64,
    refresh_every: u64,
    rows: Vec<Row>,
    attach: Option<attach::Attach>,
    summary: Summary,
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let mut failures = Failures::default();
    let namespaced = a.namespaced.min(a.procs);
    let plan = Plan {
        procs: a.procs,
        namespaced,
        with_nccl: a
            .with_nccl
            .min(2 * namespaced)
            .min(2 * (a.procs - namespaced)),
        libs: a.libs,
    };
    println!(
        "discovery: starting {} processes ({} in mount namespaces of their own, {} mapping the \
         NCCL and CUDA stand-ins)",
        plan.procs, plan.namespaced, plan.with_nccl
    );
    let mut fleet = Fleet::start(&plan)?;
    let pids_on_host = cost::pids(Path::new("/proc"));
    let info = FleetInfo {
        started: fleet.len(),
        namespaced: plan.namespaced,
        with_nccl: plan.with_nccl,
        libraries: fleet
            .libs()
            .iter()
            .map(|l| l.display().to_string())
            .collect(),
        mean_maps_lines: fleet.mean_maps_lines(),
        pids_on_host,
        start_s: fleet.start_s,
        cleanup_s: 0.0,
    };
    println!(
        "started in {:.1} s; {} processes on the host; {:.0} maps lines each",
        info.start_s, info.pids_on_host, info.mean_maps_lines
    );
    let t = std::time::Instant::now();
    let (per, (young_s, refresh_every)) = rounds(a);
    let rows = rows(&per, a.period_s);
    println!("scans measured in {:.1} s", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    let measured_attach = attach::measure(&mut fleet, a.attach_rounds, &mut failures);
    let at = failures.part("attach", measured_attach);
    println!("attach side measured in {:.1} s", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    drop(fleet);
    let mut info = info;
    info.cleanup_s = t.elapsed().as_secs_f64();
    println!("processes ended in {:.1} s", info.cleanup_s);
    let summary = summary(&rows, at.as_ref(), pids_on_host, a.period_s);
    let report = Report {
        benchmark: "discovery",
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average: crate::procstat::load_average(),
        fleet: info,
        rounds: a.rounds,
        period_s: a.period_s,
        young_s,
        refresh_every,
        rows,
        attach: at,
        summary,
    };
    table::print(
        &report.rows,
        report.attach.as_ref(),
        &report.summary,
        a.period_s,
    );
    crate::report::write(&out_dir.join("discovery.json"), &report, &failures)?;
    failures.into_result()
}
