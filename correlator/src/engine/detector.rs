//! The one interface every detector implements: what it observes (a
//! [`Context`]: the window, its host's jobs, the open incidents, the step
//! sources and the symptoms of the stages before), when it judges (its
//! [`Stage`]) and which `[detect.*]` section it owns. The engine calls the
//! detectors of [`super::detectors`] stage by stage; their [`Output`]
//! becomes incidents in [`super::incidents`].
use std::collections::{BTreeMap, HashSet};

use proto::v1::{StepTime, Window};

use super::{
    incidents::Finding,
    workload::{placement::Claims, Symptom},
};

/// When a detector judges a window, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// First, on the window as sent: the collectives, whose cadence gives
    /// jobs without OTLP step times their inferred steps
    /// ([`Detector::publish`]). Its findings are applied after the
    /// infrastructure's.
    Collectives,
    /// Links, GPUs, devices, NFS/Lustre targets, hosts: root causes, on the
    /// window with the inferred steps.
    Infrastructure,
    /// Workload symptoms (stragglers, slowdowns, latency regressions): the
    /// engine joins each to a root cause or, after a grace, opens its own.
    Symptoms,
    /// Who caused the symptoms: a tenant on a shared resource.
    Attribution,
}

impl Stage {
    pub const ALL: [Stage; 4] = [
        Stage::Collectives,
        Stage::Infrastructure,
        Stage::Symptoms,
        Stage::Attribution,
    ];
}

/// What the collectives stage tells the later ones about step times.
#[derive(Debug, Default)]
pub struct StepSources {
    /// Step times inferred for this window (added to its steps).
    pub inferred_steps: Vec<StepTime>,
    /// Jobs of the window that sent OTLP step times (their own).
    pub otlp: HashSet<String>,
    /// Jobs of the window whose step times are their collectives' interval.
    pub inferred: HashSet<String>,
}

impl StepSources {
    /// Whether `job` sent OTLP step times.
    pub fn has_otlp(&self, job: &str) -> bool {
        self.otlp.contains(job)
    }

    /// Whether `job`'s step times are inferred from its collectives.
    pub fn infers_steps_of(&self, job: &str) -> bool {
        self.inferred.contains(job)
    }
}

/// Everything a detector may read while it judges one window.
pub struct Context<'a> {
    /// The window's host.
    pub host: &'a str,
    /// The window (from the infrastructure stage on, with inferred steps).
    pub window: &'a Window,
    /// Jobs active on the host (CUDA, verbs, steps, NCCL).
    pub jobs: &'a [String],
    /// Whether an incident (kind, entity) is open.
    pub open: &'a dyn Fn(&'static str, &str) -> bool,
    /// Which hosts may report which jobs' ranks.
    pub claims: &'a Claims,
    /// What the collectives stage found of the window's step times.
    pub steps: &'a StepSources,
    /// The symptoms of the symptom stage (empty before it).
    pub symptoms: &'a [Symptom],
}

/// What a detector says of one window.
#[derive(Debug, Default)]
pub struct Output {
    /// Evidence for incidents.
    pub findings: Vec<Finding>,
    /// Workload symptoms, joined to a cause by the engine.
    pub symptoms: Vec<Symptom>,
    /// Entities judged this window (their open incidents may go quiet).
    pub evaluated: Vec<String>,
}

/// A detector: per-entity state fed one window at a time.
pub trait Detector: std::fmt::Debug + Send {
    /// The `[detect.<section>]` whose thresholds it reads, `None` for none.
    fn section(&self) -> Option<&'static str>;

    /// When it judges.
    fn stage(&self) -> Stage;

    /// Takes one window of `cx.host`; adds to `out`.
    fn observe(&mut self, cx: &Context<'_>, out: &mut Output);

    /// Forgets the state of hosts gone idle.
    fn forget_hosts(&mut self, gone: &HashSet<String>);

    /// After [`Self::observe`] in the collectives stage: what the later
    /// stages should know of the window's step times.
    fn publish(&self, _w: &Window, _steps: &mut StepSources) {}

    /// Adds to every finding of the window what this detector knows of it
    /// (the communicators with a rank behind a link, GPU or host).
    fn annotate(&self, _findings: &mut [Finding]) {}

    /// Entities whose open incidents this window neither resolves nor
    /// counts quiet (no traffic to judge them by).
    fn held(&self) -> &[String] {
        &[]
    }

    /// What it dropped at its bounds, by what (`faultline_engine_dropped`).
    fn dropped(&self, _out: &mut BTreeMap<&'static str, u64>) {}
}

/// Counts `n` under `what` when any were dropped.
pub fn count_dropped(out: &mut BTreeMap<&'static str, u64>, what: &'static str, n: u64) {
    if n > 0 {
        out.insert(what, n);
    }
}
