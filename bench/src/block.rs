//! Block probe overhead: IOPS of 4 KiB O_DIRECT random reads on a loop
//! device backed by a tmpfs file, in rounds that measure, side by side: no
//! probes, empty programs on the same two tracepoints (what any program
//! there costs before it does anything), faultline on BTF raw tracepoints,
//! faultline on the classic tracepoints, and the peer (bpftrace running
//! biolatency's program). Target: faultline (BTF) / without ≥ 0.97, and
//! cheaper than the peer.
use std::{
    os::{fd::AsRawFd as _, unix::fs::OpenOptionsExt as _},
    path::Path,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{ensure, Context as _, Result};
use collector::probes::{BlockAttach, ProbeOptions, Probes};
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rounds; each measures every probed configuration once, in an order
    /// rotated from round to round, each between two measurements without
    /// probes.
    #[arg(long, default_value_t = 16)]
    rounds: u32,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 0.4)]
    seconds: f64,
    /// Seconds of the same reads, not measured, after each configuration is
    /// in place (every one, "without" too): the measurement starts after
    /// the previous configuration's teardown and this one's attach have
    /// settled (freed programs and maps, a peer process's exit).
    #[arg(long, default_value_t = 0.2)]
    warmup: f64,
    /// Reader threads. Four keep both CPUs of a small machine busy, so the
    /// IOPS ratio measures the probes' CPU cost; one reader measures mostly
    /// the wake-up latency of a VM's idle CPUs, which drifts by tens of
    /// percent between rounds.
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// Passes of the in-kernel cost measurement (alternating configurations;
    /// the median per program is reported).
    #[arg(long, default_value_t = 3)]
    cost_passes: u32,
    /// Leave the reader threads unpinned. By default reader t runs on CPU
    /// t mod CPUs, the same placement in every round and configuration:
    /// unpinned, the scheduler's placement of readers, loop worker and
    /// softirq thread swung a round's IOPS by ±15 % (a spread that swamps a
    /// cost of a few percent).
    #[arg(long)]
    no_pin: bool,
    /// Skip the bpftrace peer row.
    #[arg(long)]
    no_peer: bool,
    /// Skip the classic-tracepoint row (more rounds of the others in the
    /// same time).
    #[arg(long)]
    no_classic: bool,
}

/// The configurations measured side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Config {
    Without,
    /// Empty programs on faultline's two BTF tracepoints.
    Empty,
    /// faultline, BTF-enabled raw tracepoints keyed by the request pointer.
    FaultlineBtf,
    /// faultline forced onto the classic tracepoints (`[block] btf = false`).
    FaultlineClassic,
    /// bpftrace: biolatency's program (start time keyed by (dev, sector),
    /// hist() of the latency at done).
    Bpftrace,
}

impl Config {
    fn label(self) -> &'static str {
        match self {
            Self::Without => "without probes",
            Self::Empty => "empty programs (same 2 tracepoints)",
            Self::FaultlineBtf => "faultline (tp_btf, request pointer)",
            Self::FaultlineClassic => "faultline (classic tracepoints)",
            Self::Bpftrace => "bpftrace biolatency-style hist()",
        }
    }
}

/// The peer: what biolatency does on a kernel with block_io_start/done (and
/// without kprobes): start time keyed by (dev, sector), a log2 histogram of
/// the latency in µs at done.
const BPFTRACE_BIOLATENCY: &str =
    "tracepoint:block:block_io_start { @start[args->dev, args->sector] = nsecs; }
tracepoint:block:block_io_done /@start[args->dev, args->sector]/ {
  @usecs = hist((nsecs - @start[args->dev, args->sector]) / 1000);
  delete(@start[args->dev, args->sector]);
}";

#[derive(Serialize)]
struct Row {
    config: Config,
    label: &'static str,
    iops: Vec<f64>,
    median_iops: f64,
    /// Per-round IOPS / the mean of the measurements without probes just
    /// before and just after it.
    paired_ratios: Vec<f64>,
    median_ratio_over_without: f64,
    /// Quartiles of `paired_ratios`: the spread of the rounds.
    paired_ratio_p25: f64,
    paired_ratio_p75: f64,
    /// Median IOPS / median IOPS without probes (less sensitive than the
    /// paired ratio to a round in which only one of the pair ran slow).
    ratio_of_medians: f64,
    /// Added wall time per request: 1/IOPS − 1/IOPS_without (median
    /// IOPS), what the probes cost the reading thread.
    added_ns_per_request: f64,
    /// In-kernel program time per request (kernel run-time accounting,
    /// separate pass); empty for "without".
    program_cost: Vec<ProgramCost>,
    program_ns_per_request: f64,
    /// Why this configuration stopped being measured, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<String>,
}

#[derive(Serialize)]
struct Result_ {
    benchmark: &'static str,
    workload: String,
    rounds: u32,
    seconds_per_round: f64,
    warmup_seconds: f64,
    readers_pinned: bool,
    peer: String,
    rows: Vec<Row>,
    target_ratio_min: f64,
    requests_counted_by_probes: u64,
    /// faultline (BTF) program time per request / bpftrace's.
    faultline_over_bpftrace_program_ns: Option<f64>,
    /// faultline (BTF) added wall time per request / bpftrace's.
    faultline_over_bpftrace_added_ns: Option<f64>,
    /// Median over rounds of faultline (BTF) IOPS / the same round's
    /// IOPS with the empty programs: the cost of faultline's work alone.
    faultline_over_empty_paired: Option<f64>,
}

use crate::{
    peer::{Bpftrace, ProgramCost},
    report::Failures,
};

/// The per-run costs of the programs named `prefix…` that ran.
fn costs_of(stats: Vec<(String, u64, u64)>, prefix: &str) -> Vec<ProgramCost> {
    stats
        .into_iter()
        .filter(|(n, c, _)| n.starts_with(prefix) && *c > 0)
        .map(|(n, c, t)| ProgramCost {
            program: n,
            runs: c,
            ns_per_run: t as f64 / c as f64,
        })
        .collect()
}

/// Pins the calling thread to `cpu` (best effort: unpinned if refused).
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn reader_round(dev: &Path, threads: u32, secs: f64, pin: bool) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for t in 0..threads {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(dev)
            .with_context(|| format!("open {}", dev.display()))?;
        let stop = stop.clone();
        let ops = ops.clone();
        hs.push(std::thread::spawn(move || {
            if pin {
                pin_to_cpu(t as usize % cpus);
            }
            let buf = tests::AlignedBuf::new(4096, 0);
            let blocks: u64 = (64 << 20) / 4096;
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(t);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let off = ((x % blocks) * 4096) as libc::off_t;
                // SAFETY: valid fd and 4 KiB aligned buffer.
                let r = unsafe { libc::pread(f.as_raw_fd(), buf.as_ptr().cast(), 4096, off) };
                if r != 4096 {
                    break;
                }
                n += 1;
            }
            ops.fetch_add(n, Ordering::Relaxed);
        }));
    }
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        let _ = h.join();
    }
    Ok(ops.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64())
}

/// Probes of one configuration, attached for as long as the value lives.
enum Attached {
    None,
    Empty(collector::probes::EmptyBlock),
    Faultline(Box<Probes>),
    Peer(Bpftrace),
}

fn attach(c: Config) -> Result<Attached> {
    let opts = |btf| ProbeOptions {
        cuda: false,
        verbs: false,
        exec: false,
        block_btf: btf,
        ..ProbeOptions::default()
    };
    Ok(match c {
        Config::Without => Attached::None,
        Config::Empty => Attached::Empty(collector::probes::EmptyBlock::attach()?),
        Config::FaultlineBtf | Config::FaultlineClassic => {
            let btf = c == Config::FaultlineBtf;
            let p = Probes::load(&opts(btf))?;
            ensure!(
                p.block_active(),
                "block probes not attached: {:?}",
                p.status()
            );
            let want = if btf {
                BlockAttach::Btf
            } else {
                BlockAttach::Classic
            };
            ensure!(
                p.block_attach() == want,
                "block probes attached as {:?}, wanted {want:?}",
                p.block_attach()
            );
            Attached::Faultline(Box::new(p))
        }
        Config::Bpftrace => Attached::Peer(Bpftrace::start(BPFTRACE_BIOLATENCY)?),
    })
}

/// One measurement of `config`: attach, the unmeasured warm-up, the
/// measured reads (IOPS), teardown. Requests faultline counted on the device
/// are added to `counted`.
fn measure(config: Config, dev_path: &Path, a: &Args, dev: u32, counted: &mut u64) -> Result<f64> {
    let att = attach(config)?;
    let before = match &att {
        Attached::Faultline(p) => p.block_snapshot()?.device_op_total(dev, 0).requests,
        _ => 0,
    };
    if a.warmup > 0.0 {
        reader_round(dev_path, a.threads, a.warmup, !a.no_pin)?;
    }
    let x = reader_round(dev_path, a.threads, a.seconds, !a.no_pin)?;
    if let Attached::Faultline(p) = &att {
        *counted += p.block_snapshot()?.device_op_total(dev, 0).requests - before;
    }
    if let Attached::Peer(b) = att {
        b.stop()?;
    }
    Ok(x)
}

/// The timed rounds' results, per configuration (in `configs` order).
struct Rounds {
    iops: Vec<Vec<f64>>,
    ratios: Vec<Vec<f64>>,
    /// Requests faultline's probes counted over every measurement.
    counted: u64,
    /// A probed configuration that fails is reported as failed and left out
    /// of the later rounds; the others go on.
    failed: Vec<Option<String>>,
}

/// The timed rounds: each probed configuration measured between two
/// measurements without probes and compared with their mean, so a drift of
/// the machine within the round cancels to first order; the order of the
/// probed ones rotates each round.
fn rounds(
    a: &Args,
    configs: &[Config],
    dev_path: &Path,
    dev: u32,
    failures: &mut Failures,
) -> Result<Rounds> {
    let n = configs.len();
    let mut r = Rounds {
        iops: vec![Vec::new(); n],
        ratios: vec![Vec::new(); n],
        counted: 0,
        failed: vec![None; n],
    };
    for round in 0..a.rounds as usize {
        let mut without = measure(Config::Without, dev_path, a, dev, &mut r.counted)?;
        r.iops[0].push(without);
        r.ratios[0].push(1.0);
        for k in 0..n - 1 {
            let i = 1 + (round + k) % (n - 1);
            if r.failed[i].is_some() {
                continue;
            }
            let x = match measure(configs[i], dev_path, a, dev, &mut r.counted) {
                Ok(x) => x,
                Err(e) => {
                    let what = format!("{} round {round}", configs[i].label());
                    r.failed[i] = Some(failures.add(&what, &e));
                    continue;
                }
            };
            let after = measure(Config::Without, dev_path, a, dev, &mut r.counted)?;
            r.iops[0].push(after);
            r.iops[i].push(x);
            let base = (without + after) / 2.0;
            if base > 0.0 {
                r.ratios[i].push(x / base);
            }
            without = after;
        }
    }
    Ok(r)
}

/// In-kernel cost per program run, from the kernel's own accounting, in a
/// separate pass (the accounting itself adds two clock reads per run): per
/// configuration, per pass, per program.
fn cost_passes(
    a: &Args,
    configs: &[Config],
    dev_path: &Path,
    failed: &mut [Option<String>],
    failures: &mut Failures,
) -> Result<Vec<Vec<Vec<ProgramCost>>>> {
    let n = configs.len();
    let mut passes: Vec<Vec<Vec<ProgramCost>>> = vec![Vec::new(); n];
    let _stats = collector::probes::enable_run_stats().context("BPF_ENABLE_STATS")?;
    for pass in 0..a.cost_passes.max(1) as usize {
        for k in 0..n - 1 {
            let i = 1 + (pass + k) % (n - 1);
            if failed[i].is_some() {
                continue;
            }
            let cost = attach(configs[i]).and_then(|att| {
                reader_round(dev_path, a.threads, a.seconds.max(1.0), !a.no_pin)?;
                Ok(match att {
                    Attached::Faultline(p) => costs_of(p.program_run_stats(), "block_"),
                    Attached::Empty(e) => costs_of(e.program_run_stats(), "bench_empty_"),
                    Attached::Peer(b) => {
                        let c = b.run_stats();
                        b.stop()?;
                        c
                    }
                    Attached::None => Vec::new(),
                })
            });
            match cost {
                Ok(c) => passes[i].push(c),
                Err(e) => {
                    let what = format!("{} cost pass {pass}", configs[i].label());
                    failed[i] = Some(failures.add(&what, &e));
                }
            }
        }
    }
    Ok(passes)
}

/// Per program: the median ns per run over the passes, runs summed.
fn median_costs(passes: &[Vec<Vec<ProgramCost>>]) -> Vec<Vec<ProgramCost>> {
    passes
        .iter()
        .map(|ps| {
            let mut names: Vec<String> = ps.iter().flatten().map(|c| c.program.clone()).collect();
            names.sort();
            names.dedup();
            names
                .into_iter()
                .map(|name| {
                    let of: Vec<&ProgramCost> =
                        ps.iter().flatten().filter(|c| c.program == name).collect();
                    let ns: Vec<f64> = of.iter().map(|c| c.ns_per_run).collect();
                    ProgramCost {
                        runs: of.iter().map(|c| c.runs).sum(),
                        ns_per_run: crate::median(&ns),
                        program: name,
                    }
                })
                .collect()
        })
        .collect()
}

fn rows(configs: &[Config], r: &Rounds, mut costs: Vec<Vec<ProgramCost>>) -> Vec<Row> {
    let mw = crate::median(&r.iops[0]);
    configs
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let m = crate::median(&r.iops[i]);
            // Runs per request: programs that fire once per request (all of
            // ours and the peer's on this read-only workload).
            let per_req: f64 = costs[i].iter().map(|p| p.ns_per_run).sum();
            Row {
                config: c,
                label: c.label(),
                iops: r.iops[i].clone(),
                median_iops: m,
                paired_ratios: r.ratios[i].clone(),
                median_ratio_over_without: crate::median(&r.ratios[i]),
                paired_ratio_p25: crate::quantile(&r.ratios[i], 0.25),
                paired_ratio_p75: crate::quantile(&r.ratios[i], 0.75),
                ratio_of_medians: if mw > 0.0 { m / mw } else { 0.0 },
                added_ns_per_request: if m > 0.0 && mw > 0.0 {
                    1e9 / m - 1e9 / mw
                } else {
                    0.0
                },
                program_cost: std::mem::take(&mut costs[i]),
                program_ns_per_request: per_req,
                failure: r.failed[i].clone(),
            }
        })
        .collect()
}

/// Faultline (tp_btf) over the peer (in-kernel and added wall ns per
/// request) and over empty programs (median paired IOPS ratio).
struct Comparisons {
    over_prog: Option<f64>,
    over_added: Option<f64>,
    over_empty: Option<f64>,
}

fn comparisons(configs: &[Config], rows: &[Row], iops: &[Vec<f64>]) -> Comparisons {
    let find = |c: Config| rows.iter().find(|r| r.config == c);
    let (ours, theirs) = (find(Config::FaultlineBtf), find(Config::Bpftrace));
    let over_prog = match (ours, theirs) {
        (Some(o), Some(t)) if t.program_ns_per_request > 0.0 => {
            Some(o.program_ns_per_request / t.program_ns_per_request)
        }
        _ => None,
    };
    let over_empty = {
        let (b, e) = (
            configs.iter().position(|&c| c == Config::FaultlineBtf),
            configs.iter().position(|&c| c == Config::Empty),
        );
        match (b, e) {
            (Some(b), Some(e)) => iops[e]
                .iter()
                .any(|&x| x > 0.0)
                .then(|| crate::paired(&iops[b], &iops[e])),
            _ => None,
        }
    };
    let over_added = match (ours, theirs) {
        (Some(o), Some(t)) if t.added_ns_per_request > 0.0 => {
            Some(o.added_ns_per_request / t.added_ns_per_request)
        }
        _ => None,
    };
    Comparisons {
        over_prog,
        over_added,
        over_empty,
    }
}

fn print(a: &Args, rows: &[Row], cmp: &Comparisons) {
    let (over_prog, over_added, over_empty) = (cmp.over_prog, cmp.over_added, cmp.over_empty);
    println!(
        "block probe overhead: 4 KiB O_DIRECT random reads, {} threads, loop on tmpfs, {} rounds × {} s",
        a.threads, a.rounds, a.seconds
    );
    println!("| configuration | median IOPS | median paired ratio / without (quartiles) | ratio of medians | added wall ns per request | in-kernel program ns per request |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.0} | {:.3} ({:.3}–{:.3}) | {:.3} | {:.0} | {:.0} |",
            r.label,
            r.median_iops,
            r.median_ratio_over_without,
            r.paired_ratio_p25,
            r.paired_ratio_p75,
            r.ratio_of_medians,
            r.added_ns_per_request,
            r.program_ns_per_request
        );
        if let Some(f) = &r.failure {
            println!("| {} | FAILED | {f} | | | |", r.label);
        }
    }
    for r in rows.iter().filter(|r| !r.program_cost.is_empty()) {
        let parts: Vec<String> = r
            .program_cost
            .iter()
            .map(|c| format!("{} {:.0} ns × {}", c.program, c.ns_per_run, c.runs))
            .collect();
        println!("  {}: {}", r.label, parts.join(", "));
    }
    if let Some(x) = over_prog {
        println!("faultline (tp_btf) / bpftrace, in-kernel ns per request: {x:.2}");
    }
    if let Some(x) = over_added {
        println!("faultline (tp_btf) / bpftrace, added wall ns per request: {x:.2}");
    }
    if let Some(x) = over_empty {
        println!("faultline (tp_btf) / empty programs, median paired IOPS ratio: {x:.3}");
    }
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    ensure!(
        a.rounds > 0 && a.seconds > 0.0 && a.threads > 0,
        "rounds, seconds and threads must be positive"
    );
    // tmpfs backing keeps the device fast, so probe cost is not hidden by disk latency.
    let lo = tests::LoopDevice::new_in(Path::new("/dev/shm"), 64 << 20)
        .context("creating a loop device (needs root and /dev/loop-control)")?;
    // Fill once so reads hit allocated pages.
    tests::direct_io_workload(&lo.path, 16, 4 << 20 >> 2, 0, 4096, 0, 0)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let _guard = rt.enter();
    let (ma, mi) = lo.major_minor()?;
    let dev = collector::block::make_dev(ma, mi);
    let mut configs = vec![Config::Without, Config::Empty, Config::FaultlineBtf];
    if !a.no_classic {
        configs.push(Config::FaultlineClassic);
    }
    let peer = crate::peer::wanted(a.no_peer);
    if peer {
        configs.push(Config::Bpftrace);
    }
    let mut failures = Failures::default();
    let mut r = rounds(a, &configs, &lo.path, dev, &mut failures)?;
    let passes = cost_passes(a, &configs, &lo.path, &mut r.failed, &mut failures)?;
    let rows = rows(&configs, &r, median_costs(&passes));
    let cmp = comparisons(&configs, &rows, &r.iops);
    print(a, &rows, &cmp);
    let (over_prog, over_added, over_empty) = (cmp.over_prog, cmp.over_added, cmp.over_empty);
    let counted = r.counted;
    let res = Result_ {
        benchmark: "block_probe_overhead",
        workload: format!(
            "4KiB O_DIRECT random pread, {} threads, loop device on tmpfs",
            a.threads
        ),
        rounds: a.rounds,
        seconds_per_round: a.seconds,
        warmup_seconds: a.warmup,
        readers_pinned: !a.no_pin,
        peer: crate::peer::version_if(peer),
        rows,
        target_ratio_min: 0.97,
        requests_counted_by_probes: counted,
        faultline_over_bpftrace_program_ns: over_prog,
        faultline_over_bpftrace_added_ns: over_added,
        faultline_over_empty_paired: over_empty,
    };
    crate::report::write(&out_dir.join("block.json"), &res, &failures)?;
    failures.into_result()
}
