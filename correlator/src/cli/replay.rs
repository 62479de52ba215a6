//! `replay`: windows from a file through the detectors with every input
//! `serve` judges with (docs/replay.md, "Judged as live"): the `[detect]`
//! thresholds and `[detect.limits]` of `--config`, the fabric `--topology`
//! and the cluster label (`--cluster` or the file's `cluster`, which also
//! seeds the incident ids).
use std::path::PathBuf;

use anyhow::Result;

use correlator::config::FileConfig;

// `replay`'s arguments (no doc comment: the command's is its help).
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Windows as JSON lines (docs/replay.md): a `--record` file of the
    /// collector or of `serve`.
    file: PathBuf,
    /// Count and skip invalid lines instead of stopping at the first.
    #[arg(long)]
    skip_invalid: bool,
    /// Config file, as for `serve`: detection thresholds (`[detect.*]`,
    /// ingest's `[detect.limits]` less its wall-clock checks) and the
    /// `cluster` label; the other tables are checked and unused.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Fabric topology, as for `serve --topology`: without it a switch or
    /// spine fault replays as separate port incidents.
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// The cluster label of windows that name none, as for `serve
    /// --cluster` (overrides the file's `cluster`); incident ids depend on
    /// it, so replay with the live one to get the live ids.
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
}

/// Runs the replay to stdout; the counts on stderr.
pub fn run(a: ReplayArgs) -> Result<()> {
    let file = match &a.config {
        Some(p) => correlator::config::load_file(p)?,
        None => FileConfig::default(),
    };
    let cfg = &file.detect;
    let mut engine =
        correlator::engine::Engine::new(cfg, super::serve::topology(a.topology.as_deref())?);
    engine.set_cluster(&super::serve::cluster(
        a.cluster.as_ref().or(file.cluster.as_ref()),
    )?);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let stats = correlator::replay::replay_with(
        &a.file,
        &mut engine,
        &cfg.limits,
        a.skip_invalid,
        &mut out,
    )?;
    eprintln!(
        "replayed {} windows: {} updates, {} duplicates, {} invalid lines skipped",
        stats.windows, stats.updates, stats.duplicates, stats.skipped_invalid
    );
    Ok(())
}
