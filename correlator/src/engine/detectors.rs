//! The registry: every detector of the engine, in the order it judges
//! within its [`Stage`]. A new detector is a field, a line in
//! [`Detectors::new`] and a line in `registry!` here, and its
//! [`Detector`] impl in its own module (with its `[detect.<name>]` section
//! in `<name>/config.rs`).
use super::{
    config::DetectConfig,
    detector::{Detector, Stage},
    gpu, ib, interference, nccl, nccl_lag, nfs, node, storage, straggler, workload,
};

/// The detectors, each one by name for what is particular to it (fleet
/// summaries, baselines, topology).
#[derive(Debug, Default)]
pub struct Detectors {
    pub nccl: nccl::NcclDetector,
    pub ib: ib::IbDetector,
    pub gpu: gpu::GpuDetector,
    pub storage: storage::StorageDetector,
    pub nfs: nfs::NfsDetector,
    pub node: node::NodeDetector,
    pub straggler: straggler::StragglerDetector,
    pub nccl_lag: nccl_lag::LagDetector,
    pub workload: workload::WorkloadDetector,
    pub interference: interference::InterferenceDetector,
}

/// The list, in judging order (the order of findings and symptoms).
macro_rules! registry {
    ($d:ident, $($borrow:tt)+) => {
        [
            $($borrow)+ $d.nccl,
            $($borrow)+ $d.ib,
            $($borrow)+ $d.gpu,
            $($borrow)+ $d.storage,
            $($borrow)+ $d.nfs,
            $($borrow)+ $d.node,
            $($borrow)+ $d.straggler,
            $($borrow)+ $d.nccl_lag,
            $($borrow)+ $d.workload,
            $($borrow)+ $d.interference,
        ]
    };
}

/// How many detectors there are.
pub const COUNT: usize = 10;

impl Detectors {
    /// The detectors with these settings and fabric topology.
    pub fn new(cfg: &DetectConfig, topology: ib::Topology) -> Self {
        Self {
            nccl: nccl::NcclDetector::new(cfg.nccl.clone()),
            ib: ib::IbDetector::new(cfg.ib.clone(), topology),
            gpu: gpu::GpuDetector::new(cfg.gpu.clone()),
            storage: storage::StorageDetector::new(cfg.storage.clone()),
            nfs: nfs::NfsDetector::new(cfg.nfs.clone()),
            node: node::NodeDetector::default(),
            straggler: straggler::StragglerDetector::new(cfg.workload.min_persist_s),
            nccl_lag: nccl_lag::LagDetector::new(cfg.nccl.clone(), cfg.workload.min_persist_s),
            workload: workload::WorkloadDetector::new(cfg.workload.clone()),
            interference: interference::InterferenceDetector::new(cfg.interference.clone()),
        }
    }

    /// Every detector, in judging order.
    pub fn all(&self) -> [&dyn Detector; COUNT] {
        registry!(self, &)
    }

    /// Every detector, in judging order, to feed.
    pub fn all_mut(&mut self) -> [&mut dyn Detector; COUNT] {
        registry!(self, &mut)
    }

    /// The detectors of one stage, in judging order.
    pub fn at(&mut self, stage: Stage) -> impl Iterator<Item = &mut dyn Detector> {
        self.all_mut()
            .into_iter()
            .filter(move |d| d.stage() == stage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_is_a_detect_section_and_stages_run_in_order() {
        let cfg = DetectConfig::default();
        let toml = toml::to_string(&cfg).unwrap();
        let table: toml::Table = toml::from_str(&toml).unwrap();
        let d = Detectors::new(&cfg, ib::Topology::default());
        let mut last = Stage::Collectives;
        for det in d.all() {
            if let Some(s) = det.section() {
                assert!(table.contains_key(s), "{det:?} names [detect.{s}]");
            }
            assert!(
                det.stage() >= last,
                "{det:?} judges before an earlier stage"
            );
            last = det.stage();
        }
    }
}
