//! The simulated cluster's physics and the windows its nodes produce.
//!
//! Window `k` (from 1) covers simulated seconds `[(k-1)·W, k·W)` with `W`
//! the window length; everything per window scales with `W`. Sampled state
//! (link state, GPU clocks) is the state at the window's end.
//!
//! InfiniBand ports: each port has a base bit error rate drawn log-uniform in
//! [1e-16, 1e-14]; symbol errors per window are Poisson(BER × signalling
//! rate × seconds up). Symbol errors corrupt packets (`port_rcv_errors` ~
//! Binomial(errors, utilisation × 0.5): one error corrupts at most one packet) and now and then force a link
//! recovery (`link_error_recovery` ~ Poisson(errors × 1e-4)). Counters have
//! their IBA PortCounters widths and saturate (they do not wrap); traffic
//! and `port_xmit_wait` are the 64-bit extended counters.
//!
//! Block devices: each node has devices of one or more classes (NVMe, SSD,
//! HDD) with a healthy median latency of their own; per window a device's
//! requests are Poisson(rate × W), its median jitters ±10 %, and request
//! latencies are lognormal (σ = 0.5) around it. The log2 histogram is a
//! multinomial draw over the buckets' lognormal probabilities, its sum the
//! buckets' counts times their conditional means, its maximum a draw of the
//! largest of the top bucket's requests.
use std::collections::{BTreeMap, VecDeque};

use collector::ib::PortSnapshot;
use proto::v1::{BlockStat, CudaProc, Event, GpuSample, Origin, StepTime, Window, WorkloadSample};
use serde::Serialize;

use super::{
    faults::{Fault, Kind, Target},
    rng::{norm_cdf, norm_quantile, Rng},
};
use correlator::engine::{config::DetectConfig, stats::scan_test};

pub mod nccl;
pub mod tenants;

pub const GPUS: usize = 8;
/// The simulated training job.
pub const JOB: &str = "llm-pretrain";
/// The simulated model server (on the last node's last GPU and HCA) and its model.
pub const SERVE_JOB: &str = "chat-serve";
pub const SERVE_MODEL: &str = "llama-3-70b";
/// Its healthy mean time to first token (s) and requests per second.
const SERVE_TTFT_S: f64 = 0.15;
const SERVE_RPS: f64 = 20.0;
pub const HCAS: usize = 8;
/// Nodes per leaf switch of the two-level fat tree.
pub const NODES_PER_LEAF: usize = 16;

/// InfiniBand link speed of every port (4X links).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkRate {
    /// 200 Gb/s
    Hdr,
    /// 400 Gb/s
    Ndr,
    /// 800 Gb/s
    Xdr,
}

impl LinkRate {
    pub const ALL: [LinkRate; 3] = [LinkRate::Hdr, LinkRate::Ndr, LinkRate::Xdr];

    pub fn bytes_per_sec(self) -> u64 {
        match self {
            LinkRate::Hdr => 25_000_000_000,
            LinkRate::Ndr => 50_000_000_000,
            LinkRate::Xdr => 100_000_000_000,
        }
    }

    pub fn bits_per_sec(self) -> f64 {
        self.bytes_per_sec() as f64 * 8.0
    }

    /// The `rate` file's text.
    pub fn text(self) -> &'static str {
        match self {
            LinkRate::Hdr => "200 Gb/sec (4X HDR)",
            LinkRate::Ndr => "400 Gb/sec (4X NDR)",
            LinkRate::Xdr => "800 Gb/sec (4X XDR)",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LinkRate::Hdr => "hdr",
            LinkRate::Ndr => "ndr",
            LinkRate::Xdr => "xdr",
        }
    }
}

/// Which block devices the nodes have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageMix {
    /// One NVMe drive per node (`nvme0n1`).
    Nvme,
    /// One SATA/SAS SSD per node (`sda`).
    Ssd,
    /// One hard disk per node (`sda`).
    Hdd,
    /// Each node some of: an NVMe drive, an SSD, a hard disk.
    Mixed,
}

impl StorageMix {
    pub const ALL: [StorageMix; 4] = [
        StorageMix::Nvme,
        StorageMix::Ssd,
        StorageMix::Hdd,
        StorageMix::Mixed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StorageMix::Nvme => "nvme",
            StorageMix::Ssd => "ssd",
            StorageMix::Hdd => "hdd",
            StorageMix::Mixed => "mixed",
        }
    }
}

/// What the simulated fleet looks like.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterSpec {
    pub nodes: usize,
    /// Window length in seconds.
    pub window_s: f64,
    pub link_rate: LinkRate,
    /// Fraction of the link rate the job's traffic uses (0..=1).
    pub utilisation: f64,
    pub storage: StorageMix,
    pub seed: u64,
    /// The training job reports its step time over OTLP (`Window.steps`);
    /// without, its step time is only what the correlator infers from its
    /// collectives' cadence.
    pub otlp_steps: bool,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            nodes: 32,
            window_s: 1.0,
            link_rate: LinkRate::Ndr,
            utilisation: 0.7,
            storage: StorageMix::Nvme,
            seed: 1,
            otlp_steps: true,
        }
    }
}

impl ClusterSpec {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.nodes >= 2 && self.nodes <= 4096,
            "nodes must be within 2..=4096, got {}",
            self.nodes
        );
        anyhow::ensure!(
            self.window_s.is_finite() && (0.1..=60.0).contains(&self.window_s),
            "the window length must be within 0.1..=60 seconds, got {}",
            self.window_s
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.utilisation),
            "utilisation must be a fraction within 0..=1, got {}",
            self.utilisation
        );
        Ok(())
    }
}

/// IBA counter names (sysfs `counters/`) and their widths in bits.
pub const COUNTERS: [(&str, u32); 13] = [
    ("symbol_error", 16),
    ("link_error_recovery", 8),
    ("link_downed", 8),
    ("port_rcv_errors", 16),
    ("local_link_integrity_errors", 4),
    ("excessive_buffer_overrun_errors", 4),
    ("port_xmit_discards", 16),
    ("port_rcv_remote_physical_errors", 16),
    ("port_xmit_data", 64),
    ("port_rcv_data", 64),
    ("port_xmit_packets", 64),
    ("port_rcv_packets", 64),
    ("port_xmit_wait", 64),
];
const SYM: usize = 0;
const LER: usize = 1;
const DOWNED: usize = 2;
const RCV_ERR: usize = 3;
const DISCARDS: usize = 6;
const XMIT_DATA: usize = 8;
const RCV_DATA: usize = 9;
const XMIT_PKTS: usize = 10;
const RCV_PKTS: usize = 11;
const XMIT_WAIT: usize = 12;

/// Largest value of counter `i` (where it saturates).
pub fn counter_max(i: usize) -> u64 {
    match COUNTERS[i].1 {
        64 => u64::MAX,
        b => (1u64 << b) - 1,
    }
}

/// `port_xmit_wait` ticks per second of waiting.
const WAIT_TICKS_PER_S: f64 = 250e6;
/// Lognormal σ of request latency around a device's median.
const LATENCY_SIGMA: f64 = 0.5;
/// Bytes per block request (checkpoint and data-loader I/O).
const REQUEST_BYTES: u64 = 1 << 20;
/// Time a corrupted packet costs its rank (NAK, go-back-N retransmit).
const CORRUPT_PACKET_COST_S: f64 = 20e-6;
/// Fraction of step time spent writing checkpoints on healthy storage.
const CHECKPOINT_SHARE: f64 = 0.02;

#[derive(Clone, Debug)]
struct Port {
    c: [u64; 13],
    state: u32,
    phys: u32,
    base_ber: f64,
}

impl Port {
    fn add(&mut self, i: usize, v: u64) {
        self.c[i] = self.c[i].saturating_add(v).min(counter_max(i));
    }
}

#[derive(Clone, Debug)]
struct Gpu {
    temp: u32,
    clock: u32,
    throttle: u64,
    power: f64,
    sbe: u64,
    dbe: u64,
}

#[derive(Clone, Debug)]
struct Device {
    name: String,
    class: &'static str,
    /// Healthy median request latency (ns).
    median_ns: f64,
    /// Requests per second while the job runs.
    rate: f64,
    /// This window's row.
    stat: Option<BlockStat>,
}

#[derive(Debug)]
struct Node {
    name: String,
    ports: Vec<Port>,
    gpus: Vec<Gpu>,
    devices: Vec<Device>,
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

/// Ground truth of one injected fault.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Truth {
    /// The window containing the onset.
    pub onset_window: u64,
    /// The first window at which the fault is physically visible: for a
    /// degrading link, where its excess errors are significant at the
    /// engine's default reference BER and significance (`None` until then);
    /// the onset window for discrete faults; the second down for a flapping
    /// link; onset + 3 windows for a lost node. `None` for confounders.
    pub visible_window: Option<u64>,
    /// Errors the fault added beyond the port's base BER (true count, not
    /// the saturated counter), so far.
    pub excess_errors: u64,
    /// Excess errors of the latest windows (degrading links).
    #[serde(skip)]
    recent: VecDeque<u64>,
    /// `nccl-hang`: the hang as it physically happened, once the other
    /// ranks wait: `<host>/nccl/<comm>` (the first host, by name, of the
    /// ranks holding the others up, and the communicator they wait in) …
    pub hang_entity: Option<String>,
    /// … and those ranks: (host, rank in the communicator).
    pub hang_holders: Vec<(String, i32)>,
}

pub struct Cluster {
    spec: ClusterSpec,
    nodes: Vec<Node>,
    rng: Rng,
    k: u64,
    window_ms: i64,
    t0_ms: i64,
    job_running: bool,
    /// The job's step time per window: the slowest rank's (data parallel).
    pub job_steps: Vec<f64>,
    truth: Vec<Truth>,
    reference_ber: f64,
    horizon_s: f64,
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

/// ∫ (ber(t) − base) dt over [a, b) for a BER ramping log-linearly from
/// `base` at `onset` to `target` at `onset + ramp`, constant after.
pub fn excess_ber_integral(base: f64, target: f64, ramp: f64, onset: f64, a: f64, b: f64) -> f64 {
    let a = a.max(onset);
    if b <= a || target <= base {
        return 0.0;
    }
    if ramp <= 0.0 {
        return (target - base) * (b - a);
    }
    let end = onset + ramp;
    let g = (target / base).ln() / ramp;
    let mut s = 0.0;
    let (ra, rb) = (a, b.min(end));
    if rb > ra {
        s += base / g * ((g * (rb - onset)).exp() - (g * (ra - onset)).exp()) - base * (rb - ra);
    }
    let (fa, fb) = (a.max(end), b);
    if fb > fa {
        s += (target - base) * (fb - fa);
    }
    s.max(0.0)
}

/// Overlap of [a, b) with [s, e).
fn overlap(a: f64, b: f64, s: f64, e: f64) -> f64 {
    (b.min(e) - a.max(s)).max(0.0)
}

/// A device's window: (log2 histogram, latency sum, max) of `n` lognormal
/// request latencies with median `median_ns` and σ `sigma`.
pub fn latency_hist(rng: &mut Rng, n: u64, median_ns: f64, sigma: f64) -> (Vec<u64>, u64, u64) {
    if n == 0 {
        return (Vec::new(), 0, 0);
    }
    let ln2 = std::f64::consts::LN_2;
    let mu = median_ns.max(1.0).ln();
    let lo = ((mu - 7.0 * sigma) / ln2).floor().max(0.0) as usize;
    let hi = (((mu + 7.0 * sigma) / ln2).ceil() as usize).clamp(lo, 62);
    // Standardised log edges of bucket i: [2^i, 2^(i+1)), open at both ends.
    let z = |i: usize| (i as f64 * ln2 - mu) / sigma;
    let edge = |i: usize, first: bool| -> f64 {
        if first {
            f64::NEG_INFINITY
        } else if i > hi {
            f64::INFINITY
        } else {
            z(i)
        }
    };
    let cdf = |x: f64| {
        if x == f64::NEG_INFINITY {
            0.0
        } else if x == f64::INFINITY {
            1.0
        } else {
            norm_cdf(x)
        }
    };
    let scale = (mu + sigma * sigma / 2.0).exp();
    let mut hist = vec![0u64; hi + 1];
    let mut rem = n;
    let mut mass = 1.0;
    let mut sum = 0.0;
    let mut top = None;
    for (i, slot) in hist.iter_mut().enumerate().skip(lo) {
        let (zl, zh) = (edge(i, i == lo), edge(i + 1, false));
        let (cl, ch) = (cdf(zl), cdf(zh));
        let p = (ch - cl).max(0.0);
        let cnt = if i == hi {
            rem
        } else if mass > 0.0 {
            rng.binomial(rem, (p / mass).clamp(0.0, 1.0))
        } else {
            0
        };
        rem -= cnt;
        mass -= p;
        *slot = cnt;
        if cnt > 0 {
            let (b_lo, b_hi) = ((i as f64).exp2(), ((i + 1) as f64).exp2());
            let partial = scale * (cdf(zh - sigma) - cdf(zl - sigma));
            let mean = if p > 1e-300 {
                (partial / p).clamp(b_lo, b_hi)
            } else {
                (i as f64 + 0.5).exp2()
            };
            sum += cnt as f64 * mean;
            top = Some((i, cnt, cl, ch));
        }
    }
    let max = match top {
        Some((i, c, cl, ch)) => {
            // The largest of c draws within the bucket.
            let u = rng.uniform().powf(1.0 / c as f64);
            let x = (mu + sigma * norm_quantile(cl + u * (ch - cl))).exp();
            x.clamp((i as f64).exp2(), ((i + 1) as f64).exp2() - 1.0) as u64
        }
        None => 0,
    };
    if let Some(last) = hist.iter().rposition(|&c| c > 0) {
        hist.truncate(last + 1);
    }
    (hist, sum.round() as u64, max)
}

fn devices_for(mix: StorageMix, rng: &mut Rng) -> Vec<Device> {
    let classes: Vec<&'static str> = match mix {
        StorageMix::Nvme => vec!["nvme"],
        StorageMix::Ssd => vec!["ssd"],
        StorageMix::Hdd => vec!["hdd"],
        StorageMix::Mixed => loop {
            let mut c = Vec::new();
            if rng.bernoulli(0.75) {
                c.push("nvme");
            }
            if rng.bernoulli(0.5) {
                c.push("ssd");
            }
            if rng.bernoulli(0.5) {
                c.push("hdd");
            }
            if !c.is_empty() {
                break c;
            }
        },
    };
    let mut sd = 0u8;
    let mut nvme = 0;
    classes
        .into_iter()
        .map(|class| {
            let (name, lo, hi) = match class {
                "nvme" => {
                    nvme += 1;
                    (format!("nvme{}n1", nvme - 1), 0.08, 0.2)
                }
                _ => {
                    sd += 1;
                    let name = format!("sd{}", (b'a' + sd - 1) as char);
                    if class == "ssd" {
                        (name, 0.2, 0.5)
                    } else {
                        (name, 4.0, 9.0)
                    }
                }
            };
            Device {
                name,
                class,
                median_ns: rng.log_uniform(lo, hi) * 1e6,
                rate: rng.range(30.0, 80.0),
                stat: None,
            }
        })
        .collect()
}

impl Cluster {
    pub fn new(spec: ClusterSpec) -> Self {
        let mut setup = Rng::derive(spec.seed, 0xc105);
        let nodes: Vec<Node> = (0..spec.nodes)
            .map(|i| Node {
                name: format!("n{i:03}"),
                ports: (0..HCAS)
                    .map(|_| Port {
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
                    })
                    .collect(),
                devices: devices_for(spec.storage, &mut setup),
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
            job_steps: Vec::new(),
            truth: Vec::new(),
            reference_ber: ib.reference_ber,
            horizon_s: ib.horizon_s,
            persist_s: DetectConfig::default().workload.min_persist_s,
            significance: ib.significance,
            up_frac: vec![1.0; ports],
            downs: vec![0; ports],
            extra_sym: vec![0; ports],
            congested: vec![0.0; ports],
            serve_factor: 1.0,
            serve_rng: Rng::derive(spec.seed, 0x5e7e),
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

    fn init_truth(&mut self, faults: &[Fault], onset: f64) {
        self.tenants = tenants::Tenants::of(faults, self.spec.seed);
        let h = (self.horizon_s / self.spec.window_s).ceil().max(1.0) as usize;
        self.truth = faults
            .iter()
            .map(|f| {
                let o = f.onset.unwrap_or(onset);
                let ow = self.window_of(o);
                let visible = match f.kind {
                    // Once the other ranks wait (the timeline says when).
                    Kind::IbLinkDegrade { .. } | Kind::NcclHang => None,
                    Kind::IbLinkFlap { period_s, .. } => Some(self.window_of(o + period_s)),
                    Kind::NodeLoss => {
                        Some(ow + correlator::engine::node::LOST_AFTER_WINDOWS as u64)
                    }
                    // A workload symptom is one once it has lasted
                    // `min_persist_s` (its definition, like a flap's second down).
                    Kind::JobSlow { .. }
                    | Kind::NcclSlowRank { .. }
                    | Kind::InferenceSlow { .. }
                    | Kind::InterferenceStorage { .. }
                    | Kind::InterferenceLink { .. }
                    | Kind::InterferenceGpu { .. } => {
                        Some(self.window_of(o + self.persist_s).saturating_sub(1).max(ow))
                    }
                    ref k if k.is_confounder() => None,
                    _ => Some(ow),
                };
                Truth {
                    onset_window: ow,
                    visible_window: visible,
                    excess_errors: 0,
                    recent: VecDeque::with_capacity(h + 1),
                    hang_entity: None,
                    hang_holders: Vec::new(),
                }
            })
            .collect();
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
        let (a, b) = ((k - 1) as f64 * w, k as f64 * w);
        let on = |f: &Fault| f.onset.unwrap_or(onset);
        // The sampled instant: just before the window's end.
        let at_end = |o: f64| o < b - 1e-9;
        let in_window = |o: f64| o >= a - 1e-9 && o < b - 1e-9;
        let bits = self.spec.link_rate.bits_per_sec();
        let rate_bytes = self.spec.link_rate.bytes_per_sec() as f64;

        // The job: ended (for a gap) or running.
        let mut run_frac = 1.0;
        self.job_running = true;
        for f in faults {
            if let Kind::JobEnd { gap_s } = f.kind {
                let o = on(f);
                run_frac -= overlap(a, b, o, o + gap_s) / w;
                if at_end(o) && b <= o + gap_s + 1e-9 {
                    self.job_running = false;
                }
            }
        }
        let run_frac = run_frac.clamp(0.0, 1.0);
        let util = self.spec.utilisation * run_frac + 0.001 * (1.0 - run_frac);
        let io_scale = run_frac + 0.02 * (1.0 - run_frac);

        for node in &mut self.nodes {
            node.up = true;
            node.skip = false;
            node.restarted = false;
            node.comm = [1.0; GPUS];
            for s in &mut node.step {
                *s = 1.0 + 0.03 * (self.rng.uniform() - 0.5);
            }
        }
        self.serve_factor = 1.0;
        let serve_node = self.nodes.len().saturating_sub(1);
        self.up_frac.iter_mut().for_each(|x| *x = 1.0);
        self.downs.iter_mut().for_each(|x| *x = 0);
        self.extra_sym.iter_mut().for_each(|x| *x = 0);
        self.congested.iter_mut().for_each(|x| *x = 0.0);
        let mut cong_level = 0.0f64;

        // Link state, resets and congestion first: they shape the traffic.
        for (fi, f) in faults.iter().enumerate() {
            let o = on(f);
            match (&f.kind, &f.target) {
                (Kind::IbLinkDown, Target::Port { node, hca }) if at_end(o) => {
                    let pi = node * HCAS + hca;
                    if in_window(o) {
                        self.downs[pi] += 1;
                    }
                    self.up_frac[pi] = ((o - a) / w).clamp(0.0, 1.0);
                    let p = &mut self.nodes[*node].ports[*hca];
                    p.state = 1;
                    p.phys = 2;
                }
                (&Kind::IbLinkFlap { period_s, down_s }, Target::Port { node, hca })
                    if at_end(o) =>
                {
                    let pi = node * HCAS + hca;
                    let n_lo = ((a - down_s - o) / period_s).ceil().max(0.0) as u64;
                    let n_hi = ((b - o) / period_s).ceil().max(0.0) as u64;
                    let mut down_time = 0.0;
                    for n in n_lo..n_hi {
                        let s = o + n as f64 * period_s;
                        if in_window(s) {
                            self.downs[pi] += 1;
                        }
                        down_time += overlap(a, b, s, s + down_s);
                    }
                    self.up_frac[pi] = (1.0 - down_time / w).clamp(0.0, 1.0);
                    let t = b - 1e-9 - o;
                    let down = t >= 0.0 && t % period_s < down_s;
                    let p = &mut self.nodes[*node].ports[*hca];
                    (p.state, p.phys) = if down { (1, 2) } else { (4, 5) };
                }
                (Kind::CounterReset, Target::Port { node, hca }) if in_window(o) => {
                    self.nodes[*node].ports[*hca].c = [0; 13];
                }
                (
                    &Kind::Congestion {
                        fraction,
                        duration_s,
                    },
                    _,
                ) => {
                    let share = overlap(a, b, o, o + duration_s) / w;
                    if share > 0.0 {
                        cong_level = cong_level.max(share);
                        // The congested ports: a fixed set per fault.
                        for (pi, c) in self.congested.iter_mut().enumerate() {
                            let mut h = Rng::derive(fi as u64 + 1, pi as u64);
                            if h.uniform() < fraction {
                                *c = c.max(share);
                            }
                        }
                    }
                }
                _ => {}
            }
        }

        // Degrading links: the fault's excess errors, and their truth.
        let h = (self.horizon_s / w).ceil().max(1.0) as usize;
        for (fi, f) in faults.iter().enumerate() {
            let o = on(f);
            if let (&Kind::IbLinkDegrade { ber, ramp_s }, Target::Port { node, hca }) =
                (&f.kind, &f.target)
            {
                let pi = node * HCAS + hca;
                let base = self.nodes[*node].ports[*hca].base_ber;
                let lambda =
                    bits * self.up_frac[pi] * excess_ber_integral(base, ber, ramp_s, o, a, b);
                let excess = self.rng.poisson(lambda);
                self.extra_sym[pi] += excess;
                let tr = &mut self.truth[fi];
                tr.excess_errors += excess;
                tr.recent.push_back(excess);
                while tr.recent.len() > h {
                    tr.recent.pop_front();
                }
                if tr.visible_window.is_none() && k >= tr.onset_window {
                    let k_h: u64 = tr.recent.iter().sum();
                    let exp_w = self.reference_ber * bits * w;
                    let (_, sig) =
                        scan_test(excess, exp_w, k_h, exp_w * h as f64, self.significance);
                    if sig {
                        tr.visible_window = Some(k);
                    }
                }
            }
        }
        // Sporadic single errors on many ports at once.
        for f in faults {
            if let Kind::SingleErrors { fraction, every_s } = f.kind {
                let o = on(f);
                let share = overlap(a, b, o, f64::INFINITY) / w;
                let events = self.rng.poisson(share * w / every_s);
                for _ in 0..events {
                    let hit = self.rng.binomial(self.extra_sym.len() as u64, fraction);
                    for _ in 0..hit {
                        let pi = self.rng.below(self.extra_sym.len());
                        self.extra_sym[pi] += 1;
                    }
                }
            }
        }

        // Every port: base errors, derived errors, traffic.
        for (ni, node) in self.nodes.iter_mut().enumerate() {
            for (hi, p) in node.ports.iter_mut().enumerate() {
                let pi = ni * HCAS + hi;
                let up = self.up_frac[pi];
                let sym = self.rng.poisson(p.base_ber * bits * w * up) + self.extra_sym[pi];
                let cong = self.congested[pi];
                let port_util = util * (1.0 - 0.3 * cong);
                // Each symbol error lands in at most one packet.
                let rcv_err = self.rng.binomial(sym, (port_util * 0.5).min(1.0));
                let ler = self.rng.poisson(sym as f64 * 1e-4);
                p.add(SYM, sym);
                p.add(RCV_ERR, rcv_err);
                p.add(LER, ler);
                p.add(DOWNED, self.downs[pi]);
                let jitter = 0.95 + 0.1 * self.rng.uniform();
                let bytes = rate_bytes * w * up * port_util * jitter;
                let words = (bytes / 4.0) as u64;
                let packets = (bytes / 4096.0) as u64;
                p.add(XMIT_DATA, words);
                p.add(RCV_DATA, words);
                p.add(XMIT_PKTS, packets);
                p.add(RCV_PKTS, packets);
                // Some waiting is normal under load; congestion adds a lot.
                let wait_share = 0.01 * port_util + cong * self.rng.range(0.2, 0.6);
                p.add(XMIT_WAIT, (wait_share * w * up * WAIT_TICKS_PER_S) as u64);
                if cong > 0.0 {
                    let d = self.rng.poisson(cong * w * 2.0);
                    p.add(DISCARDS, d);
                }
                if rcv_err > 0 && run_frac > 0.0 {
                    let slow = (rcv_err as f64 / w * CORRUPT_PACKET_COST_S).min(1.0);
                    node.step[hi] *= 1.0 + slow;
                    node.comm[hi] *= 1.0 + slow;
                }
            }
        }

        // GPUs, nodes, collectors, storage slowdowns.
        let mut slow: Vec<Vec<f64>> = self
            .nodes
            .iter()
            .map(|n| vec![1.0; n.devices.len()])
            .collect();
        let t_onset_ms = |o: f64| self.t0_ms + (o * 1000.0).round() as i64;
        for f in faults {
            let o = on(f);
            if !at_end(o) {
                continue;
            }
            match (&f.kind, &f.target) {
                (Kind::GpuThermal, Target::Gpu { node, gpu }) => {
                    let g = &mut self.nodes[*node].gpus[*gpu];
                    g.temp = 91;
                    g.clock = 1200;
                    g.throttle = 0x40;
                    self.nodes[*node].step[*gpu] *= 1.5;
                    if *node == serve_node && *gpu == GPUS - 1 {
                        self.serve_factor *= 1.5;
                    }
                }
                (Kind::GpuPower, Target::Gpu { node, gpu }) => {
                    let g = &mut self.nodes[*node].gpus[*gpu];
                    g.clock = 1400;
                    g.throttle = 0x4;
                    g.power = 699.0;
                    self.nodes[*node].step[*gpu] *= 1.35;
                    if *node == serve_node && *gpu == GPUS - 1 {
                        self.serve_factor *= 1.35;
                    }
                }
                (Kind::Xid, Target::Gpu { node, gpu }) if in_window(o) => {
                    let name = self.nodes[*node].name.clone();
                    self.nodes[*node].events.push(Event {
                        unix_ms: t_onset_ms(o),
                        kind: vocab::EventKind::GpuXid.to_string(),
                        entity: format!("{name}/gpu{gpu}"),
                        detail: format!("GPU-{name}-{gpu}"),
                        code: 79,
                    });
                }
                (Kind::EccDbe, Target::Gpu { node, gpu }) if in_window(o) => {
                    self.nodes[*node].gpus[*gpu].dbe += 1;
                }
                (&Kind::StorageStall { factor }, Target::Device { node, dev }) => {
                    slow[*node][*dev] *= factor;
                    // The node's ranks wait longer for their checkpoints.
                    for s in &mut self.nodes[*node].step {
                        *s *= (1.0 + CHECKPOINT_SHARE * (factor - 1.0)).min(2.0);
                    }
                }
                (&Kind::StorageFleetSlow { factor }, _) => {
                    for (n, node) in slow.iter_mut().zip(&mut self.nodes) {
                        n.iter_mut().for_each(|x| *x *= factor);
                        for s in &mut node.step {
                            *s *= (1.0 + CHECKPOINT_SHARE * (factor - 1.0)).min(2.0);
                        }
                    }
                }
                (Kind::NodeLoss, Target::Node(n)) => self.nodes[*n].up = false,
                (&Kind::InferenceSlow { factor }, _) => self.serve_factor *= factor,
                (&Kind::JobSlow { factor }, _) => {
                    for node in &mut self.nodes {
                        node.step.iter_mut().for_each(|s| *s *= factor);
                    }
                }
                // The rank's process computes slower (CPU contention, a
                // data loader, a slow GPU without a throttle reason).
                (&Kind::NcclSlowRank { factor }, &Target::Gpu { node, gpu }) => {
                    self.nodes[node].step[gpu] *= factor;
                }
                (&Kind::NcclSlowRank { factor }, &Target::Node(n)) => {
                    self.nodes[n].step.iter_mut().for_each(|s| *s *= factor);
                }
                (Kind::CollectorRestart, Target::Node(n)) if in_window(o) => {
                    let node = &mut self.nodes[*n];
                    node.restarts += 1;
                    node.instance = format!("{}-sim-{}", node.name, node.restarts + 1);
                    node.seq = 0;
                    node.skip = true;
                    node.restarted = true;
                }
                _ => {}
            }
        }
        self.tenants_advance(faults, onset, b, &mut slow);
        if cong_level > 0.0 {
            for node in &mut self.nodes {
                for s in &mut node.step {
                    *s *= 1.0 + 0.2 * cong_level;
                }
                for c in &mut node.comm {
                    *c *= 1.0 + 0.2 * cong_level;
                }
            }
        }
        self.collectives_advance(faults, onset, a, b);
        // Block devices.
        let job = if self.job_running { JOB } else { "" };
        for (node, slow) in self.nodes.iter_mut().zip(slow) {
            for (d, f) in node.devices.iter_mut().zip(slow) {
                let n = self.rng.poisson(d.rate * w * io_scale);
                let median = d.median_ns * self.rng.range(0.9, 1.1) * f;
                let (hist, sum, max) = latency_hist(&mut self.rng, n, median, LATENCY_SIGMA);
                d.stat = Some(BlockStat {
                    device: d.name.clone(),
                    op: "write".into(),
                    job: job.into(),
                    requests: n,
                    bytes: n * REQUEST_BYTES,
                    latency_sum_ns: sum,
                    latency_max_ns: max,
                    hist,
                    device_class: d.class.into(),
                });
            }
        }
        // GPUs of an idle cluster cool down and draw idle power.
        for node in &mut self.nodes {
            for g in &mut node.gpus {
                if g.throttle == 0 {
                    (g.power, g.temp) = if self.job_running {
                        (550.0, 55)
                    } else {
                        (90.0, 38)
                    };
                }
            }
        }
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
        for f in faults {
            let o = f.onset.unwrap_or(onset);
            match f.kind {
                Kind::NcclHang => {
                    for i in ranks_of(&f.target) {
                        self.rank_stall[i] = self.rank_stall[i].min(o);
                    }
                }
                Kind::JobEnd { gap_s } => stops.push((o, o + gap_s)),
                _ => {}
            }
        }
        let times = nccl::RankTimes {
            own: &self.rank_own,
            compute: &self.rank_compute,
            up: &self.rank_up,
            stall: &self.rank_stall,
        };
        self.nccl.advance(a, b, &times, &stops);
        for h in self.nccl.take_hangs() {
            let holders: Vec<(String, i32)> = h
                .holders
                .iter()
                .map(|&(n, r)| (self.node_name(n), r))
                .collect();
            let Some(first) = holders.iter().map(|x| x.0.as_str()).min() else {
                continue;
            };
            let entity = format!("{first}/nccl/{}", h.id);
            let visible = self.window_of(h.since_s);
            for (f, tr) in faults.iter().zip(self.truth.iter_mut()) {
                let mine = ranks_of(&f.target).iter().any(|i| h.global.contains(i));
                if f.kind == Kind::NcclHang && mine && tr.hang_entity.is_none() {
                    tr.hang_entity = Some(entity.clone());
                    tr.hang_holders = holders.clone();
                    tr.visible_window = Some(visible.max(tr.onset_window));
                }
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

    /// Node `n`'s latest window, or `None` while the node is down (or its
    /// collector restarting).
    pub fn window(&mut self, n: usize) -> Option<Window> {
        let t = self.t0_ms + self.k as i64 * self.window_ms;
        let wms = self.window_ms;
        let w_s = wms as f64 / 1000.0;
        let running = self.job_running;
        let rate = self.spec.link_rate;
        let b_s = self.k as f64 * self.spec.window_s;
        // No step completes while a hang holds the job.
        let otlp = self.spec.otlp_steps && !self.nccl.stuck_by(b_s - self.spec.window_s);
        let node = &mut self.nodes[n];
        if !node.up || node.skip {
            return None;
        }
        node.seq += 1;
        let snaps: Vec<PortSnapshot> = node
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortSnapshot {
                device: format!("mlx5_{i}"),
                port: 1,
                taken: std::time::Instant::now(),
                state: Some(p.state),
                phys_state: Some(p.phys),
                rate_bytes_per_sec: Some(rate.bytes_per_sec()),
                rate_text: Some(rate.text().into()),
                link_layer: Some("InfiniBand".into()),
                lid: Some(n as u32 * 8 + i as u32 + 1),
                counters: COUNTERS
                    .iter()
                    .zip(p.c)
                    .map(|((name, _), v)| ((*name).to_string(), v))
                    .collect::<BTreeMap<_, _>>(),
                hw_counters: BTreeMap::new(),
                counters_ext: BTreeMap::new(),
                unavailable: Vec::new(),
                hca: collector::ib::sysfs::HcaInfo::default(),
                read_errors: Vec::new(),
            })
            .collect();
        let steps = if running && otlp {
            (0..GPUS)
                .map(|g| StepTime {
                    job: JOB.into(),
                    count: (w_s / node.step[g]).round().max(1.0) as u32,
                    rank: (n * GPUS + g) as u32,
                    seconds: node.step[g],
                    device: g as i32,
                    hca: format!("mlx5_{g}"),
                    ..StepTime::default()
                })
                .collect()
        } else {
            Vec::new()
        };
        let launches = (2400.0 * wms as f64 / 1000.0) as u64;
        // The model server: requests of the window, each TTFT log-normal
        // (σ 0.5) around the healthy mean times the fault's factor.
        let workload = if n + 1 == self.nodes.len() {
            let reqs = self.serve_rng.poisson(SERVE_RPS * w_s).max(1);
            let noise = (0.5 * self.serve_rng.normal() / (reqs as f64).sqrt()).exp();
            vec![WorkloadSample {
                job: SERVE_JOB.into(),
                rank: -1,
                signal: "ttft_seconds".into(),
                model: SERVE_MODEL.into(),
                provider: "vllm".into(),
                count: reqs,
                sum: reqs as f64 * SERVE_TTFT_S * self.serve_factor * noise,
                device: (GPUS - 1) as i32,
                hca: format!("mlx5_{}", HCAS - 1),
                pid: 20_000,
                ..WorkloadSample::default()
            }]
        } else {
            Vec::new()
        };
        let node = &mut self.nodes[n];
        let nccl = self.nccl.rows(n, b_s, self.t0_ms, &mut node.nccl);
        Some(Window {
            origin: Some(Origin {
                hostname: node.name.clone(),
                machine_id: format!("sim-{n}"),
                boot_id: "sim-boot".into(),
                instance: node.instance.clone(),
            }),
            seq: node.seq,
            start_unix_ms: t - wms,
            end_unix_ms: t,
            ib_ports: collector::window::ib_ports(&snaps),
            gpus: node
                .gpus
                .iter()
                .enumerate()
                .map(|(i, g)| GpuSample {
                    index: i as u32,
                    uuid: format!("GPU-{}-{i}", node.name),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
                    lost: false,
                    power_w: Some(g.power),
                    power_limit_w: Some(700.0),
                    temp_c: Some(g.temp),
                    sm_clock_mhz: Some(g.clock),
                    sm_clock_max_mhz: Some(1980),
                    throttle_reasons: Some(g.throttle),
                    ecc_sbe_volatile: Some(g.sbe),
                    ecc_dbe_volatile: Some(g.dbe),
                    util_gpu_pct: Some(if running { 97 } else { 0 }),
                })
                .collect(),
            block: node.devices.iter().filter_map(|d| d.stat.clone()).collect(),
            cuda: if running {
                (0..GPUS)
                    .map(|g| CudaProc {
                        pid: 10_000 + g as u32,
                        device: g as i32,
                        job: JOB.into(),
                        rank: Some((n * GPUS + g) as u32),
                        launches,
                        sync_calls: 10,
                        sync_wait_ns: 200_000_000,
                        copy_bytes: 1 << 20,
                        errors: 0,
                        launches_sampled_fraction: 0.0,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            events: std::mem::take(&mut node.events),
            steps,
            workload,
            usage: match &self.tenants {
                Some(t) if t.node == n => t.rows.clone(),
                _ => Vec::new(),
            },
            nccl,
            ..Window::default()
        })
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
