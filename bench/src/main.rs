//! `faultline-bench`: benchmarks that print a table and write a JSON result.
//! Every figure is a ratio measured side by side in one run (alternating
//! rounds), because absolute numbers on shared machines are noise.
mod block;
mod collector_proc;
mod discovery;
mod fleet;
mod footprint;
mod history;
mod ingest;
mod ingest_tls;
mod launch;
mod nccl;
mod otlp;
mod paired;
mod peer;
mod procstat;
mod report;
mod ring;
mod shards;
mod uprobe;
mod wait;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "faultline-bench")]
struct Cli {
    /// Directory for the JSON results.
    #[arg(long, default_value = "bench")]
    out_dir: PathBuf,
    #[command(subcommand)]
    which: Which,
}

#[derive(Debug, Subcommand)]
enum Which {
    /// Block probes' cost: 4 KiB direct random-read IOPS on a loop device
    /// with and without the probes attached.
    Block(block::Args),
    /// Uprobe cost per cuLaunchKernel call: none / empty uprobe / faultline /
    /// bpftrace count().
    Uprobe(uprobe::Args),
    /// Launch-heavy stand-in: throughput without probes, with faultline
    /// exact, in bounded-overhead mode, and with bpftrace count(); bounded
    /// mode's launch count against the stand-in's truth.
    Launch(launch::Args),
    /// NCCL probes' cost on a collective-heavy stand-in: NCCL calls/s
    /// without probes, with faultline's NCCL probes and with bpftrace
    /// count() on the same symbols; faultline's counts against the truth.
    Nccl(nccl::Args),
    /// CPU and RSS of the collector on a simulated 8-GPU, 8-HCA host.
    Footprint(footprint::Args),
    /// Correlator ingest throughput and scaling over gRPC on loopback.
    Ingest(ingest::Args),
    /// Correlator ingest with mTLS against plaintext, alternating in one run.
    IngestTls(ingest_tls::Args),
    /// Ring-buffer drain rate from a synthetic eBPF producer.
    Ring(ring::Args),
    /// OTLP receiver: points/s per core over gRPC and HTTP, window take cost,
    /// and the collector's footprint with 8 ranks exporting at 1 Hz.
    Otlp(otlp::Args),
    /// History: web API latency with 10,000 incidents, database write cost
    /// per window at 1024 nodes against queueing it off the hot loop.
    History(history::Args),
    /// Correlator ingest through NATS JetStream with 1, 2 and 4 shards,
    /// beside direct gRPC in the same run.
    Shards(shards::Args),
    /// Library discovery and attach with 2,000 processes (half in mount
    /// namespaces of their own): today's full rescan beside `LibScan`'s
    /// first, young and steady scans, and the attach cost on the real
    /// eBPF object; % of a core at the 30 s rescan period.
    Discovery(discovery::Args),
    /// A 100k-GPU fleet (12,500 nodes) end to end: the simulator through
    /// the collectors' senders, NATS JetStream, 1/2/4/8 shards by fabric
    /// locality and the fleet view, with four faults injected.
    Fleet(fleet::Args),
}

impl Which {
    /// The benchmark's name and the file its result goes to.
    fn result(&self, out_dir: &Path) -> (&'static str, PathBuf) {
        let (name, file) = match self {
            Self::Block(_) => ("block", "block.json"),
            Self::Uprobe(_) => ("uprobe", "uprobe.json"),
            Self::Launch(a) => ("launch", a.result_file()),
            Self::Nccl(a) => ("nccl", a.result_file()),
            Self::Footprint(_) => ("footprint", "footprint.json"),
            Self::Ingest(a) => return ("ingest", a.result_path(out_dir)),
            Self::IngestTls(_) => ("ingest-tls", "ingest_tls.json"),
            Self::Ring(_) => ("ring", "ring.json"),
            Self::Otlp(_) => ("otlp", "otlp.json"),
            Self::History(_) => ("history", "history.json"),
            Self::Shards(_) => ("shards", "shards.json"),
            Self::Discovery(_) => ("discovery", "discovery.json"),
            Self::Fleet(a) => return ("fleet", out_dir.join(a.result_file())),
        };
        (name, out_dir.join(file))
    }
}

/// Runs the benchmark. One that fails still leaves its result file: the
/// partial result it wrote (parts or rows marked failed), else a failed
/// stub with the reason, never the previous run's numbers.
fn main() -> Result<()> {
    let cli = Cli::parse();
    // The library code's warnings (RUST_LOG overrides the level).
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    std::fs::create_dir_all(&cli.out_dir)?;
    let (name, path) = cli.which.result(&cli.out_dir);
    let r = match cli.which {
        Which::Block(a) => block::run(&a, &cli.out_dir),
        Which::Uprobe(a) => uprobe::run(&a, &cli.out_dir),
        Which::Launch(a) => launch::run(&a, &cli.out_dir),
        Which::Nccl(a) => nccl::run(&a, &cli.out_dir),
        Which::Footprint(a) => footprint::run(&a, &cli.out_dir),
        Which::Ingest(a) => ingest::run(&a, &cli.out_dir),
        Which::IngestTls(a) => ingest_tls::run(&a, &cli.out_dir),
        Which::Ring(a) => ring::run(&a, &cli.out_dir),
        Which::Otlp(a) => otlp::run(&a, &cli.out_dir),
        Which::History(a) => history::run(&a, &cli.out_dir),
        Which::Shards(a) => shards::run(&a, &cli.out_dir),
        Which::Discovery(a) => discovery::run(&a, &cli.out_dir),
        Which::Fleet(a) => fleet::run(&a, &cli.out_dir),
    };
    if let Err(e) = &r {
        if !report::written(&path) {
            let stub = report::failed_result(name, e);
            std::fs::write(&path, serde_json::to_string_pretty(&stub)? + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {} (failed)", path.display());
        }
        println!("| {name} | FAILED | {e:#} |");
    }
    r
}

/// Median of the per-round ratios `x[i] / base[i]` (rounds with a zero
/// base left out); 0 when there are none.
pub fn paired(x: &[f64], base: &[f64]) -> f64 {
    let r: Vec<f64> = x
        .iter()
        .zip(base)
        .filter(|(_, b)| **b > 0.0)
        .map(|(x, b)| x / b)
        .collect();
    median(&r)
}

/// The `q` quantile of `v` (0 ≤ q ≤ 1), interpolated between the two
/// nearest values (0 for an empty slice).
pub fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let Some(last) = s.len().checked_sub(1) else {
        return 0.0;
    };
    let pos = q.clamp(0.0, 1.0) * last as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

/// Median of `v` (0 for an empty slice).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn quantiles_interpolate_between_neighbours() {
        let v = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(super::quantile(&v, 0.5), 3.0);
        assert_eq!(super::quantile(&v, 0.25), 2.0);
        assert_eq!(super::quantile(&v, 0.1), 1.4);
        assert_eq!(super::quantile(&v, 1.0), 5.0);
        assert_eq!(super::quantile(&[], 0.5), 0.0);
        assert_eq!(
            super::quantile(&[1.0, 2.0], 0.5),
            super::median(&[1.0, 2.0])
        );
    }
}
