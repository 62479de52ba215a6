//! The simulated cluster's physics and the windows its nodes produce.
//!
//! Window `k` (from 1) covers simulated seconds `[(k-1)·W, k·W)` with `W`
//! the window length; everything per window scales with `W`. Sampled state
//! (link state, GPU clocks) is the state at the window's end.
//!
//! InfiniBand ports ([`ib`]): each port has a base bit error rate drawn
//! log-uniform in [1e-16, 1e-14]; symbol errors per window are Poisson(BER ×
//! signalling rate × seconds up). Symbol errors corrupt packets
//! (`port_rcv_errors` ~ Binomial(errors, utilisation × 0.5): one error
//! corrupts at most one packet) and now and then force a link recovery
//! (`link_error_recovery` ~ Poisson(errors × 1e-4)). Counters have their
//! IBA widths from `vocab::ib` and saturate (they do not wrap); traffic is
//! in the 64-bit PortCountersExtended counters.
//!
//! Block devices ([`storage`]): devices of one or more classes with
//! lognormal request latencies and log2 histograms. NFS ([`nfs`]): every
//! node mounts the shared dataset target `filer01:/datasets`, its counters
//! read through the collector's own mountstats tracker. Faults act through
//! [`apply`]; ground truth is [`truth`]; the windows are built in [`wire`].
use proto::v1::Event;

use super::rng::Rng;
use correlator::engine::config::DetectConfig;
use fault::{Fault, Kind, Target};

mod apply;
pub mod fault;
mod gpu;
mod ib;
pub mod nccl;
pub mod nfs;
mod spec;
mod storage;
pub mod tenants;
pub mod topology;
mod truth;
mod wire;
pub mod xid;

pub use ib::{counter_max, excess_ber_integral, COUNTERS};
pub use spec::{ClusterSpec, LinkRate, StorageMix};
pub use storage::latency_hist;
pub use truth::{poisson_tail, Truth};

pub const GPUS: usize = 8;
/// The simulated training job.
pub const JOB: &str = "llm-pretrain";
/// The simulated model server (on the last node's last GPU and HCA) and its model.
pub const SERVE_JOB: &str = "chat-serve";
pub const SERVE_MODEL: &str = "llama-3-70b";
pub const HCAS: usize = 8;
/// Nodes per leaf switch of the two-level fat tree.
pub const NODES_PER_LEAF: usize = 16;

#[derive(Clone, Debug)]
struct Gpu {
    temp: u32,
    clock: u32,
    throttle: u64,
    power: f64,
    sbe: u64,
    dbe: u64,
    /// Cumulative NVLink counters per link: replay, recovery, crc_flit,
    /// crc_data ([`gpu`]).
    nvl: [[u64; 4]; gpu::NVLINKS],
}

#[derive(Debug)]
struct Node {
    name: String,
    ports: Vec<ib::Port>,
    gpus: Vec<Gpu>,
    devices: Vec<storage::Device>,
    /// Its mount of the shared NFS target ([`nfs`]).
    nfs: nfs::NfsMount,
    instance: String,
    restarts: u32,
    seq: u64,
    up: bool,
    /// The collector is restarting: this window is never sent.
    skip: bool,
    events: Vec<Event>,
    step: [f64; GPUS],
    /// The share of `step` the fabric adds (≥ 1: link errors, congestion,
    /// a saturated port): the rest is compute, which sets when the rank
    /// issues its collectives.
    comm: [f64; GPUS],
    /// What this node's collector knows of the NCCL communicators.
    nccl: nccl::NodeState,
    /// The collector restarted in this window.
    restarted: bool,
}

pub struct Cluster {
    spec: ClusterSpec,
    nodes: Vec<Node>,
    rng: Rng,
    k: u64,
    window_ms: i64,
    t0_ms: i64,
    job_running: bool,
    /// The pause (`nccl-checkpoint`, `nccl-eval`) at the window's end.
    pause: Option<Kind>,
    /// The job's step time per window: the slowest rank's (data parallel).
    pub job_steps: Vec<f64>,
    truth: Vec<Truth>,
    reference_ber: f64,
    /// `workload.min_persist_s`: when a workload symptom becomes visible.
    persist_s: f64,
    significance: f64,
    // Per-port scratch (node * HCAS + hca), reused every window.
    up_frac: Vec<f64>,
    downs: Vec<u64>,
    extra_sym: Vec<u64>,
    congested: Vec<f64>,
    /// The model server's latency factor this window, and its own random
    /// stream (the cluster's streams stay as they were without it).
    serve_factor: f64,
    serve_rng: Rng,
    /// NVLink errors' own random stream, and the detector's reference
    /// rate and significance they are judged visible against ([`gpu`]).
    nvl_rng: Rng,
    nvl_reference: f64,
    nvl_significance: f64,
    /// NFS draws' own random stream ([`nfs`]).
    nfs_rng: Rng,
    /// A second team's job sharing one node (tenant faults only).
    tenants: Option<tenants::Tenants>,
    /// The training job's NCCL communicators.
    nccl: nccl::Collectives,
    /// Per rank (`node·8 + gpu`) scratch: step time, compute time, node up,
    /// stall time.
    rank_own: Vec<f64>,
    rank_compute: Vec<f64>,
    rank_up: Vec<bool>,
    rank_stall: Vec<f64>,
}

/// The window being advanced: `[a, b)` in simulated seconds, `w` long, its
/// index `k`, and the faults' default onset.
#[derive(Clone, Copy, Debug)]
struct Span {
    k: u64,
    a: f64,
    b: f64,
    w: f64,
    onset: f64,
}

impl Span {
    /// A fault's onset (its own `at=`, else the run's).
    fn on(&self, f: &Fault) -> f64 {
        f.onset.unwrap_or(self.onset)
    }

    /// Whether onset `o` has happened at the sampled instant, just before
    /// the window's end.
    fn at_end(&self, o: f64) -> bool {
        o < self.b - 1e-9
    }

    /// Whether onset `o` falls in this window.
    fn in_window(&self, o: f64) -> bool {
        o >= self.a - 1e-9 && o < self.b - 1e-9
    }
}

/// Overlap of [a, b) with [s, e).
fn overlap(a: f64, b: f64, s: f64, e: f64) -> f64 {
    (b.min(e) - a.max(s)).max(0.0)
}

impl Cluster {
    pub fn new(spec: ClusterSpec) -> Self {
        let mut setup = Rng::derive(spec.seed, 0xc105);
        let mut nfs_rng = Rng::derive(spec.seed, 0x4ef5);
        let nodes: Vec<Node> = (0..spec.nodes)
            .map(|i| Node {
                name: format!("n{i:03}"),
                ports: (0..HCAS)
                    .map(|_| ib::Port {
                        c: [0; 13],
                        state: 4,
                        phys: 5,
                        base_ber: setup.log_uniform(1e-16, 1e-14),
                    })
                    .collect(),
                gpus: (0..GPUS)
                    .map(|_| Gpu {
                        temp: 55,
                        clock: 1980,
                        throttle: 0,
                        power: 550.0,
                        sbe: 0,
                        dbe: 0,
                        nvl: [[0; 4]; gpu::NVLINKS],
                    })
                    .collect(),
                devices: storage::devices_for(spec.storage, &mut setup),
                nfs: nfs::NfsMount::new(&mut nfs_rng),
                instance: format!("n{i:03}-sim-1"),
                restarts: 0,
                seq: 0,
                up: true,
                skip: false,
                events: Vec::new(),
                step: [1.0; GPUS],
                comm: [1.0; GPUS],
                nccl: nccl::NodeState::default(),
                restarted: false,
            })
            .collect();
        let ib = DetectConfig::default().ib;
        let ports = spec.nodes * HCAS;
        Self {
            window_ms: (spec.window_s * 1000.0).round() as i64,
            rng: Rng::new(spec.seed),
            nodes,
            k: 0,
            t0_ms: 1_800_000_000_000,
            job_running: true,
            pause: None,
            job_steps: Vec::new(),
            truth: Vec::new(),
            reference_ber: ib.reference_ber,
            persist_s: DetectConfig::default().workload.min_persist_s,
            significance: ib.significance,
            up_frac: vec![1.0; ports],
            downs: vec![0; ports],
            extra_sym: vec![0; ports],
            congested: vec![0.0; ports],
            serve_factor: 1.0,
            serve_rng: Rng::derive(spec.seed, 0x5e7e),
            nvl_rng: Rng::derive(spec.seed, 0x4e71),
            nvl_reference: DetectConfig::default().gpu.nvlink_reference_per_s,
            nvl_significance: DetectConfig::default().gpu.nvlink_significance,
            nfs_rng,
            tenants: None,
            nccl: nccl::Collectives::new(spec.nodes, spec.seed),
            rank_own: vec![1.0; spec.nodes * GPUS],
            rank_compute: vec![1.0; spec.nodes * GPUS],
            rank_up: vec![true; spec.nodes * GPUS],
            rank_stall: vec![f64::INFINITY; spec.nodes * GPUS],
            spec,
        }
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    pub fn window_s(&self) -> f64 {
        self.spec.window_s
    }

    /// The latest window's index (0 before the first `advance`).
    pub fn window_index(&self) -> u64 {
        self.k
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn node_name(&self, n: usize) -> String {
        self.nodes
            .get(n)
            .map_or_else(|| format!("n{n:03}"), |x| x.name.clone())
    }

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// A node's block devices: (name, class).
    pub fn devices(&self, n: usize) -> Vec<(String, &'static str)> {
        self.nodes.get(n).map_or_else(Vec::new, |x| {
            x.devices
                .iter()
                .map(|d| (d.name.clone(), d.class))
                .collect()
        })
    }

    pub fn device_name(&self, n: usize, dev: usize) -> Option<&str> {
        self.nodes
            .get(n)
            .and_then(|x| x.devices.get(dev))
            .map(|d| d.name.as_str())
    }

    pub fn device_index(&self, n: usize, name: &str) -> Option<usize> {
        self.nodes
            .get(n)
            .and_then(|x| x.devices.iter().position(|d| d.name == name))
    }

    /// Ground truth of the faults passed to `advance`, in their order.
    pub fn truth(&self) -> &[Truth] {
        &self.truth
    }

    /// The window containing simulated second `t`.
    pub fn window_of(&self, t: f64) -> u64 {
        (t / self.spec.window_s + 1e-9).floor() as u64 + 1
    }

    /// Advances one window (the next `k`), applying the active faults; the
    /// faults' onsets default to `onset` seconds.
    pub fn advance(&mut self, faults: &[Fault], onset: f64) {
        if self.truth.len() != faults.len() {
            self.init_truth(faults, onset);
        }
        self.k += 1;
        let k = self.k;
        let w = self.spec.window_s;
        let s = Span {
            k,
            a: (k - 1) as f64 * w,
            b: k as f64 * w,
            w,
            onset,
        };
        // The job: ended (for a gap) or running.
        let run_frac = self.job_advance(faults, s);
        // No collective traffic while every step waits (a hang) or none
        // starts (a checkpoint or an evaluation pass).
        let net_frac = if self.nccl.stuck_by(s.a) {
            0.0
        } else {
            run_frac * (1.0 - self.pause_advance(faults, s))
        };
        let util = self.spec.utilisation * net_frac + 0.001 * (1.0 - net_frac);
        let io_scale = run_frac + 0.02 * (1.0 - run_frac);
        self.reset_window();
        // Link state, resets and congestion first: they shape the traffic.
        let cong_level = self.links_advance(faults, s);
        self.degrade_advance(faults, s);
        self.single_errors_advance(faults, s);
        self.ports_advance(w, util, run_frac);
        let mut slow = self.nodes_advance(faults, s);
        self.gpu_faults_advance(faults, s);
        self.xid_advance(faults, s);
        self.nfs_advance(faults, s, io_scale);
        self.tenants_advance(faults, onset, s.b, &mut slow);
        self.congestion_advance(cong_level);
        self.collectives_advance(faults, onset, s.a, s.b);
        self.devices_advance(w, slow, io_scale);
        self.gpus_idle();
    }

    /// The NCCL timeline of window `[a, b)`: each rank's times from this
    /// window's physics, stalls from `nccl-hang`, the job's ends from
    /// `job-end`; a hang that began sets its faults' truth.
    fn collectives_advance(&mut self, faults: &[Fault], onset: f64, a: f64, b: f64) {
        for (ni, node) in self.nodes.iter().enumerate() {
            for g in 0..GPUS {
                let i = ni * GPUS + g;
                self.rank_own[i] = node.step[g];
                self.rank_compute[i] = node.step[g] / node.comm[g].max(1.0);
                self.rank_up[i] = node.up;
                self.rank_stall[i] = f64::INFINITY;
            }
        }
        let mut stops = Vec::new();
        let mut pauses = Vec::new();
        let (mut freeze_s, mut culprit, mut dead) = (f64::INFINITY, None, false);
        for f in faults {
            let o = f.onset.unwrap_or(onset);
            match (&f.kind, &f.target) {
                (Kind::NcclHang, t) => {
                    for i in ranks_of(t) {
                        self.rank_stall[i] = self.rank_stall[i].min(o);
                    }
                }
                (&Kind::JobEnd { gap_s }, _) => stops.push((o, o + gap_s, false)),
                (&Kind::NcclJobExit { gap_s }, _) => stops.push((o, o + gap_s, true)),
                (&Kind::NcclCheckpoint { duration_s } | &Kind::NcclEval { duration_s }, _) => {
                    pauses.push((o, o + duration_s))
                }
                (Kind::NcclHangDeadPeer, &Target::Gpu { node, gpu }) if o < freeze_s => {
                    (freeze_s, culprit, dead) = (o, Some(node * GPUS + gpu), true);
                }
                (Kind::NcclHangPortDown, &Target::Port { node, hca }) if o < freeze_s => {
                    (freeze_s, culprit, dead) = (o, Some(node * GPUS + hca), false);
                }
                (Kind::NcclHangUnknown, _) if o < freeze_s => {
                    (freeze_s, culprit, dead) = (o, None, false);
                }
                _ => {}
            }
        }
        let times = nccl::RankTimes {
            own: &self.rank_own,
            compute: &self.rank_compute,
            up: &self.rank_up,
            stall: &self.rank_stall,
            freeze_s,
            culprit,
            dead,
        };
        self.nccl.advance(a, b, &times, &stops, &pauses);
        for h in self.nccl.take_hangs() {
            let holders: Vec<(String, i32)> = h
                .holders
                .iter()
                .map(|&(n, r)| (self.node_name(n), r))
                .collect();
            let visible = self.window_of(h.since_s);
            for (f, tr) in faults.iter().zip(self.truth.iter_mut()) {
                if tr.hang_entity.is_some() {
                    continue;
                }
                // Every rank waits: the job's widest communicator, on the
                // culprit's host (else the first host), whichever
                // communicator the collective in flight was on.
                let every = matches!(
                    f.kind,
                    Kind::NcclHangDeadPeer | Kind::NcclHangPortDown | Kind::NcclHangUnknown
                );
                let mine = ranks_of(&f.target).iter().any(|i| h.global.contains(i));
                let first = holders.iter().map(|x| x.0.clone()).min();
                let entity = if every {
                    let host = first.unwrap_or_else(|| self.nodes[0].name.clone());
                    let ring = self.nccl.id(nccl::RING).to_string();
                    vocab::entity::nccl_comm(&host, &ring)
                } else if f.kind == Kind::NcclHang && mine {
                    let Some(host) = first else { continue };
                    vocab::entity::nccl_comm(&host, &h.id)
                } else {
                    continue;
                };
                tr.hang_entity = Some(entity);
                tr.hang_holders = holders.clone();
                tr.visible_window = Some(visible.max(tr.onset_window));
            }
        }
        for (n, node) in self.nodes.iter_mut().enumerate() {
            if node.restarted {
                self.nccl.restart(n, b, &mut node.nccl);
            }
        }
    }

    /// The training job's current NCCL communicator ([`nccl::RING`] or
    /// [`nccl::TREE`]).
    pub fn comm_id(&self, comm: usize) -> String {
        self.nccl.id(comm).to_string()
    }

    /// The job's communicators with a rank on a port, GPU or host: the ring
    /// everywhere, the tree on GPU 0 and `mlx5_0`.
    pub fn comms_crossing(&self, t: &Target) -> Vec<String> {
        let zero = match *t {
            Target::Port { hca, .. } => hca == 0,
            Target::Gpu { gpu, .. } => gpu == 0,
            Target::Node(_) => true,
            _ => return Vec::new(),
        };
        let mut v = vec![self.comm_id(nccl::RING)];
        if zero {
            v.push(self.comm_id(nccl::TREE));
        }
        v
    }

    /// Closes the window: the job's step time is its slowest rank's (none
    /// while a hang keeps every step from completing).
    pub fn finish_step(&mut self) {
        let a = self.k.saturating_sub(1) as f64 * self.spec.window_s;
        if self.job_running && !self.nccl.stuck_by(a) {
            let worst = self
                .nodes
                .iter()
                .filter(|n| n.up)
                .flat_map(|n| n.step.iter().copied())
                .fold(0.0, f64::max);
            self.job_steps.push(worst);
        }
    }

    /// Leaf switch of a node in the two-level fat tree.
    pub fn leaf_of(&self, n: usize) -> usize {
        n / NODES_PER_LEAF
    }
}

/// The training ranks (`node·8 + gpu`) a fault's target names: a GPU's
/// rank, or every rank of a host.
fn ranks_of(t: &Target) -> Vec<usize> {
    match *t {
        Target::Gpu { node, gpu } => vec![node * GPUS + gpu],
        Target::Node(n) => (n * GPUS..(n + 1) * GPUS).collect(),
        _ => Vec::new(),
    }
}
