//! `faultline-sim`: a simulated cluster (the collectors' real streaming code,
//! a real correlator on loopback, a subscriber) with injected faults,
//! printing candidates live; `faultline-sim bench-detect` scores detection
//! accuracy over many seeded scenarios.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// faultline's cluster simulator.
#[derive(Debug, Parser)]
#[command(
    name = "faultline-sim",
    version,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    sim: sim::SimArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Detection accuracy over many seeded simulated scenarios: prints a table
    /// and writes JSON (precision, recall, latency, incidents per fault).
    BenchDetect(sim::detect::DetectArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The simulator's output is its presentation: its embedded collectors'
    // and subscriber's info lines would repeat it once per node.
    correlator::logging::init("warn");
    let result = match cli.command {
        Some(Command::BenchDetect(args)) => sim::detect::run(&args),
        None => tokio::runtime::Runtime::new()
            .map_err(|e| anyhow::anyhow!("cannot start the runtime: {e}"))
            .and_then(|rt| rt.block_on(sim::run(cli.sim)).map(drop)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultline-sim: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
