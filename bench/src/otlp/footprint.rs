//! Footprint: the real `faultline-collector` with 8 training ranks
//! exporting once per second (4 gRPC, 4 HTTP) beside the same collector
//! with `--no-otlp`, both at once; CPU and RSS from /proc; every point sent
//! accounted for in `faultline_otlp_accepted_points_total`, every rank's
//! step time on `/metrics` through the windows.
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use serde_json::json;

use super::{
    client::rank_at_1hz,
    export::{now_ns, Exporter},
    Args,
};
use crate::collector_proc::Collector;

fn collector_cmd(bin: &Path, with_otlp: bool) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "--quiet",
        "--no-cuda",
        "--no-verbs",
        "--no-nvml",
        "--no-block",
        "--metrics-addr",
        "127.0.0.1:0",
        "--window",
        "1",
    ]);
    if with_otlp {
        cmd.args([
            "--otlp-grpc-addr",
            "127.0.0.1:0",
            "--otlp-http-addr",
            "127.0.0.1:0",
        ]);
    } else {
        cmd.arg("--no-otlp");
    }
    cmd
}

/// The footprint's ranks: job 4242, ranks 0–7.
const FP_JOB: u32 = 4242;
const FP_RANKS: u32 = 8;

/// Step-time series of the footprint's job on the collector's `/metrics`.
fn step_series(text: &str) -> usize {
    let job = format!("hpc_job=\"{FP_JOB}\"");
    text.lines()
        .filter(|l| l.starts_with("faultline_job_step_seconds{") && l.contains(&job))
        .count()
}

fn accepted_points(c: &Collector) -> Result<f64> {
    Ok(crate::collector_proc::samples(&c.scrape()?, "faultline_otlp_accepted_points_total").sum())
}

pub(super) fn footprint(a: &Args, cl: &tokio::runtime::Runtime) -> Result<serde_json::Value> {
    let bin = crate::collector_proc::binary()?;
    let mut with = Collector::start(collector_cmd(&bin, true), true)?;
    let mut without = Collector::start(collector_cmd(&bin, false), false)?;
    let (grpc, http) = (
        with.grpc.context("gRPC address")?,
        with.http.context("HTTP address")?,
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let start = now_ns();
    let clients: Vec<_> = (0..FP_RANKS)
        .map(|r| {
            let ex = Exporter::rank(FP_JOB, r, "fp", start);
            let (is_grpc, addr) = if r < 4 { (true, grpc) } else { (false, http) };
            cl.spawn(rank_at_1hz(ex, is_grpc, addr, stop_rx.clone()))
        })
        .collect();
    // Steady state: every rank's first export accepted, and both collectors
    // past their start-up windows.
    let first = f64::from(FP_RANKS) * 2.0;
    crate::wait::until(
        "every rank's first export to be accepted",
        crate::wait::READY,
        || {
            let n = accepted_points(&with)?;
            Ok((n < first).then(|| format!("{n} of {first} points accepted")))
        },
    )?;
    with.wait_windows(a.warmup_windows.max(1))?;
    without.wait_windows(a.warmup_windows.max(1))?;
    let c0 = (with.cpu_seconds()?, without.cpu_seconds()?);
    let w0 = with.windows();
    let t0 = Instant::now();
    let mut peak = (0u64, 0u64);
    while t0.elapsed().as_secs_f64() < a.footprint_seconds {
        std::thread::sleep(Duration::from_millis(500));
        peak.0 = peak
            .0
            .max(crate::procstat::rss_bytes(with.pid).unwrap_or(0));
        peak.1 = peak
            .1
            .max(crate::procstat::rss_bytes(without.pid).unwrap_or(0));
    }
    let c1 = (with.cpu_seconds()?, without.cpu_seconds()?);
    let wall = t0.elapsed().as_secs_f64();
    let windows = with.windows() - w0;
    let last = (
        crate::procstat::rss_bytes(with.pid).unwrap_or(0),
        crate::procstat::rss_bytes(without.pid).unwrap_or(0),
    );
    let _ = stop_tx.send(true);
    let mut sent = 0;
    for c in clients {
        sent += cl.block_on(c)??;
    }
    // Every acknowledged point is counted (a counter reaching a value, not
    // a guess at how long that takes).
    let mut accepted = 0.0;
    crate::wait::until(
        "faultline_otlp_accepted_points_total to reach the points sent",
        crate::wait::READY,
        || {
            accepted = accepted_points(&with)?;
            if accepted > sent as f64 {
                bail!("the collector accepted {accepted} points, the clients sent {sent}");
            }
            Ok((sent == 0 || accepted < sent as f64)
                .then(|| format!("{accepted} of {sent} accepted")))
        },
    )?;
    // The windows carried the ranks' step times: each rank's latest step
    // time is on `/metrics` once a window took it.
    let mut steps = 0;
    crate::wait::until(
        "the windows to carry every rank's step times (faultline_job_step_seconds)",
        crate::wait::READY,
        || {
            steps = step_series(&with.scrape()?);
            Ok((steps < FP_RANKS as usize).then(|| format!("{steps} of {FP_RANKS} ranks")))
        },
    )?;
    let pct = |d: f64| 100.0 * d / wall;
    let (cpu_with, cpu_without) = (pct(c1.0 - c0.0), pct(c1.1 - c0.1));
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    println!(
        "footprint: faultline-collector --no-cuda --no-verbs --no-nvml --no-block --window 1, with {FP_RANKS} training ranks exporting at 1 Hz (4 gRPC, 4 HTTP; 2 points per export), beside the same collector with --no-otlp, both running at once, {wall:.0} s ({windows} windows)"
    );
    println!("| collector | CPU (% of one core) | peak RSS MiB | final RSS MiB |");
    println!("|---|---|---|---|");
    println!(
        "| OTLP, 8 ranks at 1 Hz | {cpu_with:.2} | {:.1} | {:.1} |",
        mib(peak.0),
        mib(last.0)
    );
    println!(
        "| --no-otlp | {cpu_without:.2} | {:.1} | {:.1} |",
        mib(peak.1),
        mib(last.1)
    );
    println!(
        "| difference | {:+.2} | {:+.1} | {:+.1} |",
        cpu_with - cpu_without,
        mib(peak.0) - mib(peak.1),
        mib(last.0) - mib(last.1)
    );
    println!(
        "accepted points (faultline_otlp_accepted_points_total): {accepted} of {sent} sent; ranks with step times on /metrics (faultline_job_step_seconds): {steps} of {FP_RANKS}"
    );
    Ok(
        json!({"ranks": FP_RANKS, "grpc_ranks": 4, "http_ranks": 4, "export_interval_seconds": 1, "seconds": wall,
        "windows": windows, "points_sent": sent, "points_accepted": accepted, "ranks_with_step_times": steps,
        "with_otlp": {"cpu_percent_of_one_core": cpu_with, "peak_rss_bytes": peak.0, "final_rss_bytes": last.0},
        "no_otlp": {"cpu_percent_of_one_core": cpu_without, "peak_rss_bytes": peak.1, "final_rss_bytes": last.1},
        "difference": {"cpu_percent_of_one_core": cpu_with - cpu_without,
            "peak_rss_bytes": peak.0 as i64 - peak.1 as i64, "final_rss_bytes": last.0 as i64 - last.1 as i64}}),
    )
}
