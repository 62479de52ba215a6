//! GPU faults beyond one GPU's throttle: a host's shared cooling failing
//! (`gpu-thermal-host`: its first `gpus` GPUs throttle at once) and NVLink
//! errors (`gpu-nvlink`).
//!
//! NVLink physics: every GPU has [`NVLINKS`] links (an H100 SXM's 18). A
//! healthy link corrupts a flit now and then: Poisson at
//! [`HEALTHY_PER_LINK_S`] per link-second (about one error per link every
//! 12 days, one per 8-GPU node every 2 hours), drawn per node and spread
//! over its links. A faulty link corrupts `rate` flits a second. Each
//! corrupted flit fails its CRC (`crc_flit`) and is replayed (`replay`);
//! a quarter of them carry data (`crc_data`); nothing here retrains a
//! link (`recovery` stays). These draws use their own random stream, so
//! every other stream of the cluster is as it was without them.
//!
//! Ground truth: a faulty link is visible once the errors the fault added
//! since its onset are significant against the detector's reference rate
//! over the link-seconds since then ([`super::Truth::link_errors`]), the
//! way a degrading InfiniBand port's are.
use super::{overlap, Cluster, Fault, Kind, Span, Target, GPUS};

/// NVLink links per GPU.
pub const NVLINKS: usize = 18;
/// A healthy link's corrupted flits per second.
pub const HEALTHY_PER_LINK_S: f64 = 1e-6;
/// Counter order on the wire: replay, recovery, crc_flit, crc_data.
const REPLAY: usize = 0;
const CRC_FLIT: usize = 2;
const CRC_DATA: usize = 3;

impl Cluster {
    /// The window's host cooling faults and NVLink errors.
    pub(super) fn gpu_faults_advance(&mut self, faults: &[Fault], s: Span) {
        self.nvlink_background(s.w);
        for (fi, f) in faults.iter().enumerate() {
            let o = s.on(f);
            match (&f.kind, &f.target) {
                (&Kind::GpuThermalHost { gpus }, &Target::Node(node)) if s.at_end(o) => {
                    for gpu in 0..gpus.min(GPUS) {
                        self.gpu_fault(&Kind::GpuThermal, s, o, node, gpu);
                    }
                }
                (&Kind::GpuNvlink { rate, link }, &Target::Gpu { node, gpu }) => {
                    let secs = overlap(s.a, s.b, o, f64::INFINITY);
                    if secs <= 0.0 {
                        continue;
                    }
                    let n = self.nvl_rng.poisson(rate * secs);
                    self.corrupt(node, gpu, link.min(NVLINKS - 1), n);
                    let (reference, significance) = (self.nvl_reference, self.nvl_significance);
                    self.truth[fi].link_errors(s.k, n, secs, reference, significance);
                }
                _ => {}
            }
        }
    }

    /// Healthy links' sporadic errors over a window of `w` seconds.
    fn nvlink_background(&mut self, w: f64) {
        let per_node = HEALTHY_PER_LINK_S * (GPUS * NVLINKS) as f64 * w;
        for node in 0..self.nodes.len() {
            for _ in 0..self.nvl_rng.poisson(per_node) {
                let gpu = self.nvl_rng.below(GPUS);
                let link = self.nvl_rng.below(NVLINKS);
                self.corrupt(node, gpu, link, 1);
            }
        }
    }

    /// `n` corrupted flits on one link: each fails its CRC and is replayed.
    fn corrupt(&mut self, node: usize, gpu: usize, link: usize, n: u64) {
        if n == 0 {
            return;
        }
        let c = &mut self.nodes[node].gpus[gpu].nvl[link];
        c[CRC_FLIT] += n;
        c[REPLAY] += n;
        c[CRC_DATA] += n / 4;
    }
}
