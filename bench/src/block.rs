//! Block probe overhead: IOPS of 4 KiB O_DIRECT random reads on a loop
//! device backed by a tmpfs file, in alternating rounds without and with the
//! probes attached. Target: with/without ≥ 0.97.
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
use collector::probes::{ProbeOptions, Probes};
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Rounds per configuration (alternating without/with).
    #[arg(long, default_value_t = 25)]
    rounds: u32,
    /// Seconds per round.
    #[arg(long, default_value_t = 0.4)]
    seconds: f64,
    /// Reader threads.
    #[arg(long, default_value_t = 1)]
    threads: u32,
}

#[derive(Serialize)]
struct Result_ {
    benchmark: &'static str,
    workload: String,
    rounds: u32,
    seconds_per_round: f64,
    iops_without: Vec<f64>,
    iops_with: Vec<f64>,
    median_without: f64,
    median_with: f64,
    /// Median of the per-round ratios (with / without), ABBA-ordered pairs.
    ratio_with_over_without: f64,
    paired_ratios: Vec<f64>,
    target_ratio_min: f64,
    requests_counted_by_probes: u64,
    program_cost: Vec<ProgramCost>,
}

#[derive(Serialize)]
struct ProgramCost {
    program: String,
    runs: u64,
    ns_per_run: f64,
}

fn reader_round(dev: &Path, threads: u32, secs: f64) -> Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for t in 0..threads {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(dev)
            .with_context(|| format!("open {}", dev.display()))?;
        let stop = stop.clone();
        let ops = ops.clone();
        hs.push(std::thread::spawn(move || {
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
    let dev = collector::storage::make_dev(ma, mi);
    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut counted = 0u64;
    let opts = ProbeOptions {
        cuda: false,
        verbs: false,
        ..ProbeOptions::default()
    };
    // ABBA order: even rounds measure without first, odd rounds with first,
    // so slow drifts of the machine cancel out in the paired ratios.
    let mut ratios = Vec::new();
    for round in 0..a.rounds {
        let mut w = 0.0;
        let mut p = 0.0;
        for half in 0..2 {
            if (round + half) % 2 == 0 {
                w = reader_round(&lo.path, a.threads, a.seconds)?;
            } else {
                let probes = Probes::load(&opts)?;
                ensure!(
                    probes.block_active(),
                    "block probes not attached: {:?}",
                    probes.status()
                );
                let before = probes.block_snapshot()?.device_op_total(dev, 0).requests;
                p = reader_round(&lo.path, a.threads, a.seconds)?;
                counted += probes.block_snapshot()?.device_op_total(dev, 0).requests - before;
            }
        }
        without.push(w);
        with.push(p);
        if w > 0.0 {
            ratios.push(p / w);
        }
    }
    // In-kernel cost per program run, from the kernel's own accounting, in a
    // separate pass (the accounting itself adds two clock reads per run).
    let probe_ns = {
        let _stats = collector::probes::enable_run_stats().context("BPF_ENABLE_STATS")?;
        let probes = Probes::load(&opts)?;
        reader_round(&lo.path, a.threads, a.seconds.max(1.0))?;
        probes
            .program_run_stats()
            .into_iter()
            .filter(|(n, c, _)| n.starts_with("block_") && *c > 0)
            .map(|(n, c, t)| ProgramCost {
                program: n,
                runs: c,
                ns_per_run: t as f64 / c as f64,
            })
            .collect::<Vec<_>>()
    };
    let mw = crate::median(&without);
    let mp = crate::median(&with);
    let ratio = crate::median(&ratios);
    println!(
        "block probe overhead: 4 KiB O_DIRECT random reads, {} threads, loop on tmpfs",
        a.threads
    );
    println!("| configuration | median IOPS | rounds |");
    println!("|---|---|---|");
    println!("| without probes | {mw:.0} | {} |", fmt_list(&without));
    println!("| with probes | {mp:.0} | {} |", fmt_list(&with));
    println!("| median of paired ratios with/without | {ratio:.3} | target ≥ 0.97 |");
    let res = Result_ {
        benchmark: "block_probe_overhead",
        workload: format!(
            "4KiB O_DIRECT random pread, {} threads, loop device on tmpfs",
            a.threads
        ),
        rounds: a.rounds,
        seconds_per_round: a.seconds,
        iops_without: without,
        iops_with: with,
        median_without: mw,
        median_with: mp,
        ratio_with_over_without: ratio,
        paired_ratios: ratios.clone(),
        target_ratio_min: 0.97,
        requests_counted_by_probes: counted,
        program_cost: probe_ns,
    };
    let per_request_ns: f64 = res.program_cost.iter().map(|c| c.ns_per_run).sum();
    println!(
        "in-kernel probe time per request: {per_request_ns:.0} ns = {:.1}% of the median \
         request time without probes ({:.1} µs)",
        100.0 * per_request_ns * mw / 1e9,
        1e6 / mw.max(1.0)
    );
    println!("| program | runs | ns per run (kernel accounting) |");
    println!("|---|---|---|");
    for c in &res.program_cost {
        println!("| {} | {} | {:.0} |", c.program, c.runs, c.ns_per_run);
    }
    let path = out_dir.join("block.json");
    std::fs::write(&path, serde_json::to_string_pretty(&res)?)?;
    println!("wrote {}", path.display());
    Ok(())
}

fn fmt_list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}
