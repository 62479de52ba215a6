//! The registry: every detector of the engine, in the order it judges
//! within its [`Stage`], and how each reads the one [`Context`]. A new
//! detector is a field, a line in [`Detectors::new`], a line in
//! `registry!` and its [`Detector`] impl, all here (its code in
//! `engine/<name>.rs`, its `[detect.<name>]` section in
//! `engine/<name>/config.rs`).
use std::collections::{BTreeMap, HashSet};

use proto::v1::Window;

use super::{
    config::DetectConfig,
    detector::{count_dropped, Context, Detector, Output, Stage, StepSources},
    gpu, ib,
    incidents::Finding,
    interference, nccl, nccl_lag, nfs, node, storage, straggler, workload,
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

// Each detector on the one interface: its section, its stage and how
// it reads the context.
impl Detector for nccl::NcclDetector {
    fn section(&self) -> Option<&'static str> {
        Some("nccl")
    }
    fn stage(&self) -> Stage {
        Stage::Collectives
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        let (findings, evaluated) = self.observe_with(cx.host, cx.window, cx.open);
        out.findings.extend(findings);
        out.evaluated.extend(evaluated);
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        nccl::NcclDetector::forget_hosts(self, gone);
    }
    fn publish(&self, w: &Window, steps: &mut StepSources) {
        steps.inferred_steps.extend(self.inferred_steps(w));
        let jobs = w
            .steps
            .iter()
            .map(|s| &s.job)
            .chain(w.nccl.iter().map(|r| &r.job));
        for job in jobs {
            if self.has_otlp(job) {
                steps.otlp.insert(job.clone());
            } else if self.infers_steps_of(job) {
                steps.inferred.insert(job.clone());
            }
        }
    }
    fn annotate(&self, findings: &mut [Finding]) {
        nccl::NcclDetector::annotate(self, findings);
    }
    fn dropped(&self, out: &mut BTreeMap<&'static str, u64>) {
        count_dropped(out, "nccl_ranks", self.dropped);
        count_dropped(out, "nccl_below", self.dropped_below);
    }
}

impl Detector for ib::IbDetector {
    fn section(&self) -> Option<&'static str> {
        Some("ib")
    }
    fn stage(&self) -> Stage {
        Stage::Infrastructure
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        out.findings
            .extend(ib::IbDetector::observe(self, cx.host, cx.window, cx.jobs));
        out.evaluated.extend(self.evaluated(cx.host));
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        ib::IbDetector::forget_hosts(self, gone);
    }
}

impl Detector for gpu::GpuDetector {
    fn section(&self) -> Option<&'static str> {
        Some("gpu")
    }
    fn stage(&self) -> Stage {
        Stage::Infrastructure
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        out.findings
            .extend(gpu::GpuDetector::observe(self, cx.host, cx.window, cx.jobs));
        out.evaluated.extend(self.evaluated(cx.host));
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        gpu::GpuDetector::forget_hosts(self, gone);
    }
}

impl Detector for storage::StorageDetector {
    fn section(&self) -> Option<&'static str> {
        Some("storage")
    }
    fn stage(&self) -> Stage {
        Stage::Infrastructure
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        out.findings.extend(storage::StorageDetector::observe(
            self, cx.host, cx.window, cx.jobs,
        ));
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        storage::StorageDetector::forget_hosts(self, gone);
    }
    fn held(&self) -> &[String] {
        storage::StorageDetector::held(self)
    }
}

impl Detector for nfs::NfsDetector {
    fn section(&self) -> Option<&'static str> {
        Some("nfs")
    }
    fn stage(&self) -> Stage {
        Stage::Infrastructure
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        let (findings, evaluated) = nfs::NfsDetector::observe(self, cx.host, cx.window, cx.jobs);
        out.findings.extend(findings);
        out.evaluated.extend(evaluated);
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        nfs::NfsDetector::forget_hosts(self, gone);
    }
    fn held(&self) -> &[String] {
        nfs::NfsDetector::held(self)
    }
    fn dropped(&self, out: &mut BTreeMap<&'static str, u64>) {
        count_dropped(out, "nfs", self.dropped);
    }
}

impl Detector for node::NodeDetector {
    /// Its bounds are constants (`LOST_AFTER_WINDOWS`), no section.
    fn section(&self) -> Option<&'static str> {
        None
    }
    fn stage(&self) -> Stage {
        Stage::Infrastructure
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        out.findings
            .extend(node::NodeDetector::observe(self, cx.host, cx.window));
    }
    /// Nothing: [`node::NodeDetector::forget_idle`] chose the hosts and forgot them.
    fn forget_hosts(&mut self, _gone: &HashSet<String>) {}
}

impl Detector for straggler::StragglerDetector {
    /// `workload.min_persist_s`.
    fn section(&self) -> Option<&'static str> {
        Some("workload")
    }
    fn stage(&self) -> Stage {
        Stage::Symptoms
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        let (slow, evaluated) =
            straggler::StragglerDetector::observe(self, cx.host, cx.window, cx.claims);
        out.symptoms
            .extend(slow.iter().map(straggler::Slow::symptom));
        out.evaluated.extend(evaluated);
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        straggler::StragglerDetector::forget_hosts(self, gone);
    }
}

impl Detector for nccl_lag::LagDetector {
    /// `nccl.straggler_lag_*` (and `workload.min_persist_s`).
    fn section(&self) -> Option<&'static str> {
        Some("nccl")
    }
    fn stage(&self) -> Stage {
        Stage::Symptoms
    }
    /// Without OTLP steps every rank's cadence is the slowest's: the slow
    /// rank is the one late to issue, from its issue lag.
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        let slow =
            nccl_lag::LagDetector::observe(self, cx.host, cx.window, |j| cx.steps.has_otlp(j));
        out.symptoms
            .extend(slow.iter().map(straggler::Slow::symptom));
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        nccl_lag::LagDetector::forget_hosts(self, gone);
    }
    fn dropped(&self, out: &mut BTreeMap<&'static str, u64>) {
        count_dropped(out, "nccl_lag_runs", self.dropped);
    }
}

impl Detector for workload::WorkloadDetector {
    fn section(&self) -> Option<&'static str> {
        Some("workload")
    }
    fn stage(&self) -> Stage {
        Stage::Symptoms
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        let w = cx.window;
        out.symptoms
            .extend(self.observe_with(cx.host, w, |j| cx.steps.infers_steps_of(j)));
        out.evaluated.extend(
            w.workload
                .iter()
                .map(|s| workload::model_entity(&s.job, &s.model)),
        );
    }
    /// Nothing: its series are per job and model, bounded on their own.
    fn forget_hosts(&mut self, _gone: &HashSet<String>) {}
}

impl Detector for interference::InterferenceDetector {
    fn section(&self) -> Option<&'static str> {
        Some("interference")
    }
    fn stage(&self) -> Stage {
        Stage::Attribution
    }
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output) {
        out.findings
            .extend(interference::InterferenceDetector::observe(
                self,
                cx.host,
                cx.window,
                cx.symptoms,
            ));
    }
    fn forget_hosts(&mut self, gone: &HashSet<String>) {
        interference::InterferenceDetector::forget_hosts(self, gone);
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
