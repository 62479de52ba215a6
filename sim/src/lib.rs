//! `faultline-sim`: a simulated cluster streaming real windows,
//! through the collector's real streaming code (spool, gRPC client stream,
//! resume) and port-snapshot conversion, to a real correlator on loopback, with
//! a subscriber printing the candidates live.
//!
//! Model: N nodes with 8 GPUs and 8 HCA ports each on a two-level fat tree
//! (`leaf = node / 16`); one data-parallel job with a rank per GPU, rank r on
//! node r/8 using GPU r%8 and HCA `mlx5_{r%8}`. Each rank's step time is its
//! compute time scaled by what slows it (throttled GPU, degraded link, slow
//! storage, its dataset reads from the NFS target `filer01:/datasets` every
//! node mounts); the job's step time is the slowest rank's. The job's NCCL
//! communicators (a ring over every rank, a tree over the nodes' GPU 0)
//! issue their collectives on that cadence ([`cluster::nccl`]).
pub mod cluster;
pub mod detect;
pub mod faults;
mod live;
pub mod rng;

use std::path::PathBuf;

pub use cluster::{ClusterSpec, LinkRate, StorageMix};
pub use live::run;

#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Simulated nodes (8 GPUs and 8 HCA ports each).
    #[arg(long, default_value_t = 32)]
    pub nodes: usize,
    /// Fault to inject (repeatable): `KIND[@ENTITY][:KEY=VALUE,...]`.
    /// Faults and their keys (defaults): ib-link-degrade (ber=1e-10: target
    /// bit error rate; ramp=0: seconds of log-linear ramp from the port's
    /// base BER), ib-link-down, ib-link-flap (period=6, down=2: seconds
    /// between downs and of each down), ib-switch-degrade (ENTITY a leaf
    /// switch, `leaf02`; ber=1e-10, ports=4: that many of the ports behind
    /// it degrade at once), gpu-thermal, gpu-power, xid (code=79: the XID;
    /// NVIDIA's catalogue decides the action; from the training rank's
    /// process), ecc-dbe; kernel-log XIDs naming their process, job and
    /// user: xid-crash-loop (code=13, crashes=20, span=600: one job dies
    /// that often over that many seconds, restarted each time: the
    /// application's fault), xid-bad-gpu (code=13, jobs=3, gap=120:
    /// unrelated jobs die one after another on the GPU: the GPU's),
    /// xid-burst (code=95, lines=10000 within a second; folded=1: as the
    /// collector folds them, 0: a line an event), nvswitch-sxid (ENTITY a
    /// host; code=20034, switch=0: a fatal SXid on one of its 4 NVSwitches),
    /// gpu-thermal-host (ENTITY a host; gpus=4: its GPUs 0.. throttling at
    /// once, shared cooling), gpu-nvlink (rate=1: corrupted flits per
    /// second on one link; link=0),
    /// storage-stall (factor=20: slowdown of one device), nfs-slow (ENTITY
    /// the NFS target every node mounts, `filer01:/datasets` (the default),
    /// or a host, `n003`, for its mount alone; factor=10: RPC round-trip
    /// time multiplier, 1..=1000), node-loss; tenants
    /// (a second team's job `etl-batch` sharing the target's node):
    /// interference-storage (factor=8: its I/O demand on the device),
    /// interference-link (demand=1.3: the port's demand over line rate),
    /// interference-gpu (share=0.5: of the time-sliced GPU); NCCL (ENTITY a
    /// rank by its GPU, `n003/gpu5`, or a host, `n003`, for all its ranks):
    /// nccl-hang (the ranks stop issuing collectives), nccl-slow-rank
    /// (factor=1.6: the ranks' compute slows, the communicators' cadence
    /// stretches), nccl-hang-dead-peer (ENTITY a rank's GPU: every rank
    /// hangs in the collective in flight, that rank's process dies in it),
    /// nccl-hang-port-down (ENTITY a port: it goes down and every rank
    /// hangs), nccl-hang-unknown (every rank hangs, nothing to see below).
    /// Confounders, which must raise nothing: job-end (gap=120: seconds until
    /// the next job), xid-cancelled-jobs (jobs=200, span=600: jobs
    /// cancelled over that many seconds, XID 45 on each of their GPUs, half
    /// of them XID 43 first), nccl-checkpoint and nccl-eval (duration=120: no
    /// collectives; GPUs idle and the job writing, or kernels launching),
    /// nccl-job-exit (gap=120: the processes exit without destroying their
    /// communicators), counter-reset, collector-restart, congestion
    /// (fraction=0.3 of the ports, duration=300 s), single-errors
    /// (fraction=0.01 of the ports get one symbol error, every=20 s on
    /// average), storage-fleet-slow (factor=5), victim-more-data (factor=2:
    /// the training job's data per step), aggressor-harmless (demand=1.3:
    /// the tenant saturates a port, nobody slows). Every kind takes `at=SECONDS`
    /// (onset; default `--onset`). ENTITY like `n017/mlx5_2/1`, `n003/gpu5`,
    /// `n009/nvme0n1` or `n009`; chosen by the seed when omitted. Example:
    /// `ib-link-degrade@n017/mlx5_2/1:ber=1e-9,ramp=600`.
    #[arg(long, value_name = "KIND[@ENTITY][:KEY=VALUE,...]")]
    pub inject: Vec<String>,
    /// Scenario file: one fault per line, `KIND[@ENTITY][:KEY=VALUE,...]
    /// [at=SECONDS]`, `#` comments (added to `--inject`).
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Seed for entity choice and noise (runs are reproducible).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated seconds per wall-clock second.
    #[arg(long, default_value_t = 10.0)]
    pub speed: f64,
    /// Simulated seconds to run.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Simulated second at which the injected faults start.
    #[arg(long, default_value_t = 10.0)]
    pub onset: f64,
    /// Window length in seconds (every collector's).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub window: f64,
    /// InfiniBand link rate of every port: hdr (200 Gb/s), ndr (400 Gb/s),
    /// xdr (800 Gb/s).
    #[arg(long, value_enum, default_value_t = LinkRate::Ndr)]
    pub link_rate: LinkRate,
    /// Fraction of the link rate the job's traffic uses.
    #[arg(long, value_name = "FRAC", default_value_t = 0.7)]
    pub utilisation: f64,
    /// Block devices of the nodes: nvme, ssd, hdd, or mixed (each node some
    /// of them).
    #[arg(long, value_enum, default_value_t = StorageMix::Nvme)]
    pub storage: StorageMix,
    /// The training job sends no OTLP step times: the correlator sees its
    /// steps only through its NCCL collectives' cadence.
    #[arg(long)]
    pub no_otlp: bool,
    /// Print candidates as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Also write every window to FILE in the replay format.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Web UI and history (`--web`, `--history`, `--keep-serving`).
    #[command(flatten)]
    pub ui: correlator::web::UiArgs,
}

impl Default for SimArgs {
    fn default() -> Self {
        Self {
            nodes: 32,
            inject: Vec::new(),
            scenario: None,
            seed: 1,
            speed: 10.0,
            duration: 60.0,
            onset: 10.0,
            window: 1.0,
            link_rate: LinkRate::Ndr,
            utilisation: 0.7,
            storage: StorageMix::Nvme,
            no_otlp: false,
            json: false,
            record: None,
            ui: correlator::web::UiArgs::default(),
        }
    }
}

impl SimArgs {
    pub fn spec(&self) -> ClusterSpec {
        ClusterSpec {
            nodes: self.nodes,
            window_s: self.window,
            link_rate: self.link_rate,
            utilisation: self.utilisation,
            storage: self.storage,
            seed: self.seed,
            otlp_steps: !self.no_otlp,
        }
    }
}
