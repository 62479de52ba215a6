//! `faultline-sim bench-detect`: detection accuracy of the engine on
//! seeded simulated scenarios that vary what real fleets vary — window
//! length, link rate, utilisation, cluster size, storage classes — with fault
//! parameters drawn from physical ranges (target BER and ramp time of a
//! degrading link, flap shapes shorter and longer than a window, storage
//! slowdowns), noisy variants with sporadic single errors, and
//! confounder-only runs for every confounder at every window length.
//!
//! Windows go straight into `Engine::default()` (the same code as live
//! ingest, no network). Scoring is by incident identity: a fault is detected
//! when some incident on its entity carries the expected kind (or, where a
//! fault can be caught without being named, an accepted stand-in: a slow
//! rank's job's `job_slowdown`, a hang on another communicator); it is
//! *named correctly* when the incident is the expected one and names what
//! physically happened (a hang: exactly the ranks holding the others up; a
//! link, GPU or host: the NCCL communicators with a rank there); every other
//! incident id is a false alarm; incidents per fault are the distinct ids
//! carrying the expected kind on the entity. Jobs without OTLP (`no OTLP`
//! rows) send no step times: the engine infers them from the collectives.
//!
//! Ground truth is physical and independent of the detector: a fault's
//! *visible* window is where it first shows in the data (for a degrading
//! link, where the excess errors it injected since its onset are beyond what
//! a link at the reference BER would show over the same bits, by the
//! simulator's own Poisson tail; see [`super::cluster::Truth`]).
//!
//! [`grid`] draws the scenarios, [`run`] runs and scores each, [`score`]
//! tallies them and [`report`] prints the tables and writes the JSON.
use anyhow::Result;

use super::cluster::LinkRate;

mod grid;
mod report;
mod run;
mod score;
mod xid;

#[derive(Debug, Clone, clap::Args)]
pub struct DetectArgs {
    /// Window lengths in seconds.
    #[arg(long = "window", value_delimiter = ',', default_value = "1,10,30")]
    pub windows: Vec<f64>,
    /// Link rates (hdr, ndr, xdr).
    #[arg(
        long = "link-rate",
        value_enum,
        value_delimiter = ',',
        default_value = "hdr,ndr,xdr"
    )]
    pub link_rates: Vec<LinkRate>,
    /// Cluster sizes (nodes). Runs at 1-second windows use the sizes below
    /// 256 (their runs are 10-30x as many windows); sizes of 512 and more run
    /// once for each of ib-link-degrade, ib-link-flap, storage-stall,
    /// node-loss, single-errors, congestion and storage-fleet-slow, at the
    /// longest window length.
    #[arg(long, value_delimiter = ',', default_value = "8,64,256,1024")]
    pub sizes: Vec<usize>,
    /// Seeds per (fault kind, window length, link rate) cell and per
    /// (confounder, window length); each seed is one scenario with freshly
    /// drawn parameters, cycling through the sizes.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Tiny grid (8 nodes, one seed) for a smoke test.
    #[arg(long)]
    pub quick: bool,
    /// Worker threads (default: the available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Where to write the JSON result.
    #[arg(long, default_value = "bench/detect.json")]
    pub out: std::path::PathBuf,
    /// Only these fault kinds and confounders (default: all).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
}

impl Default for DetectArgs {
    fn default() -> Self {
        Self {
            windows: vec![1.0, 10.0, 30.0],
            link_rates: LinkRate::ALL.to_vec(),
            sizes: vec![8, 64, 256, 1024],
            seeds: 3,
            quick: false,
            jobs: None,
            out: "bench/detect.json".into(),
            kinds: Vec::new(),
        }
    }
}

const FAULTS: &[&str] = &[
    "ib-link-degrade",
    "ib-link-down",
    "ib-link-flap",
    "ib-switch-degrade",
    "gpu-thermal",
    "gpu-power",
    "xid",
    "ecc-dbe",
    "gpu-thermal-host",
    "gpu-nvlink",
    "storage-stall",
    "nfs-slow",
    "node-loss",
    "job-slow",
    "inference-slow",
    "interference-storage",
    "interference-link",
    "interference-gpu",
    "nccl-hang",
    "nccl-slow-rank",
    "nccl-hang-dead-peer",
    "nccl-hang-port-down",
    "nccl-hang-unknown",
];
/// Kernel-log XID and SXid faults (issue 48): their cells come after the
/// others', so every other cell draws as before.
const XID_FAULTS: &[&str] = &[
    "xid-crash-loop",
    "xid-bad-gpu",
    "nvswitch-sxid",
    "xid-burst",
];
/// Fault kinds also run with a job that sends no OTLP step times.
const NO_OTLP: &[&str] = &["ib-link-degrade", "nccl-slow-rank"];
const CONFOUNDERS: &[&str] = &[
    "job-end",
    "counter-reset",
    "collector-restart",
    "congestion",
    "single-errors",
    "storage-fleet-slow",
    "victim-more-data",
    "aggressor-harmless",
    "nccl-checkpoint",
    "nccl-eval",
    "nccl-job-exit",
    "xid-cancelled-jobs",
];

/// Kinds run at sizes of 512 nodes and more (one run each).
const BIG_KINDS: &[&str] = &[
    "ib-link-degrade",
    "ib-link-flap",
    "storage-stall",
    "node-loss",
    "single-errors",
    "congestion",
    "storage-fleet-slow",
];

pub fn run(a: &DetectArgs) -> Result<()> {
    anyhow::ensure!(!a.windows.is_empty(), "--window needs at least one length");
    anyhow::ensure!(
        a.windows
            .iter()
            .all(|w| w.is_finite() && (0.1..=60.0).contains(w)),
        "--window lengths must be within 0.1..=60 seconds"
    );
    anyhow::ensure!(
        !a.link_rates.is_empty(),
        "--link-rate needs at least one rate"
    );
    anyhow::ensure!(
        !a.sizes.is_empty() && a.sizes.iter().all(|&s| (2..=4096).contains(&s)),
        "--sizes must be within 2..=4096"
    );
    anyhow::ensure!(a.seeds >= 1, "--seeds must be at least 1");
    // The code measured is the code at the start, whatever happens to the
    // checkout during a long run.
    report::pin_provenance();
    let started = std::time::Instant::now();
    let scenarios = grid::grid(a);
    let jobs = a.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let outcomes = run::run_all(&scenarios, jobs, !a.quick)?;
    let report = report::Report {
        a,
        scenarios: &scenarios,
        outcomes: &outcomes,
        t: score::Tally::of(&outcomes),
        joining: score::Joining::of(&outcomes),
        interference: score::Interference::of(&outcomes),
        xid: xid::XidTally::of(&outcomes),
        jobs,
        elapsed: started.elapsed().as_secs_f64(),
    };
    report.print();
    let out = report.json();
    if let Some(dir) = a.out.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    std::fs::write(&a.out, serde_json::to_string_pretty(&out)?)?;
    println!("wrote {}", a.out.display());
    Ok(())
}
