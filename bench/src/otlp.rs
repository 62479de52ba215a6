//! OTLP ingest cost (issue #17). Two parts, one run:
//!
//! 1. Throughput: the collector's OTLP receiver (`collector::otlp::start`, the
//!    code the collector runs, on its own 2-worker runtime) is driven in
//!    process by K concurrent clients per transport (gRPC through
//!    opentelemetry-proto's client, HTTP/protobuf as keep-alive HTTP/1.1),
//!    sending realistic export requests: training ranks (a cumulative 8-bucket
//!    step-duration histogram and a throughput gauge) and model servers (GenAI
//!    TTFT, request duration and token usage histograms for 4 models), while a
//!    window take runs every second as in the collector. gRPC and HTTP rounds
//!    alternate. Points per CPU-second use this process's CPU time (/proc),
//!    and the receiver runtime's threads alone (`otlp-rx*`).
//! 2. Footprint: the real `faultline-collector` with 8 training ranks
//!    exporting once per second (4 gRPC, 4 HTTP) beside the same collector
//!    with `--no-otlp`, both running at the same time; CPU and RSS from /proc;
//!    `faultline_otlp_accepted_points_total` must account for every point sent,
//!    and every rank's step time must reach `/metrics` through the windows.
//!    Each part waits on signals (addresses printed, windows closed, counters
//!    reaching the points sent), and a part that fails is written as failed
//!    while the others still run.
//!
//! [`export`] builds the requests, [`client`] sends them, [`throughput`]
//! and [`footprint`] are the two parts.
use std::path::Path;

use anyhow::Result;
use serde_json::json;

use crate::report::Failures;

mod client;
mod export;
mod footprint;
mod throughput;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds each transport is driven per round.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Alternating gRPC / HTTP rounds.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Concurrent clients per transport.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// OTLP series: half from training ranks (2 each), half from model
    /// servers (16 each: 4 models × TTFT, request duration, input and
    /// output tokens).
    #[arg(long, default_value_t = 1024)]
    series: usize,
    /// Seconds of the footprint measurement (after the warm-up windows).
    #[arg(long, default_value_t = 30.0)]
    footprint_seconds: f64,
    /// Windows both collectors close before the footprint is measured.
    #[arg(long, default_value_t = 2)]
    warmup_windows: u64,
    /// Skip the footprint part (it needs the collector binary and root).
    #[arg(long)]
    no_footprint: bool,
}

/// Receiver runtime thread names (and the prefix their CPU is summed by).
const RX_THREADS: &str = "otlp-rx";

fn runtime(name: &str) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()?)
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let load = crate::procstat::load_average();
    println!(
        "load average at start: {load} on {} CPUs (a noisy machine: compare the ratios)",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let mut failures = Failures::default();
    let cl = runtime("otlp-cl")?;
    let tp = failures.value("throughput", throughput::throughput(a, &cl));
    let mut sizes = vec![256, a.series, 2048];
    sizes.sort_unstable();
    sizes.dedup();
    println!(
        "window take (Shared::take_window: swap, sort, attribute; no process lookups), median of 5"
    );
    println!("| series sent | window rows | median µs | max µs |");
    println!("|---|---|---|---|");
    let mut takes = Vec::new();
    for n in sizes {
        let r = throughput::take_cost(n).map(|(series, rows, med, max)| {
            println!("| {series} | {rows} | {med:.0} | {max:.0} |");
            json!({"series": series, "window_rows": rows, "median_us": med, "max_us": max})
        });
        takes.push(failures.value(&format!("window take of {n} series"), r));
    }
    if let Some(during) = tp.get("window_takes_during_run") {
        println!(
            "takes during the throughput run: {} takes, median {:.0} µs, max {:.0} µs, up to {} rows",
            during["count"],
            during["median_us"].as_f64().unwrap_or(0.0),
            during["max_us"].as_f64().unwrap_or(0.0),
            during["max_rows"]
        );
    }
    let fp = if a.no_footprint {
        serde_json::Value::Null
    } else {
        failures.value("footprint", footprint::footprint(a, &cl))
    };
    crate::report::write(
        &out_dir.join("otlp.json"),
        json!({
            "benchmark": "otlp_ingest", "load_average_at_start": load,
            "cpus": std::thread::available_parallelism().map_or(0, usize::from),
            "throughput": tp, "window_take": takes, "footprint": fp,
            "note": "clients run in the same process: points per process CPU-s include building and sending the requests; points per receiver CPU-s count only the receiver runtime's threads"
        }),
        &failures,
    )?;
    failures.into_result()
}
