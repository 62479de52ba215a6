//! The detection engine: windows in, candidate updates out. Pure and
//! synchronous, so the live service and `replay` run the same code.
//!
//! Per-entity state is bounded (a few recent values per port); peers are
//! compared with robust statistics (median and MAD of the latest error rate
//! of every port of the fabric); an incident manager turns detector evidence
//! into one incident per (kind, entity) episode.
pub mod baseline;
pub mod clip;
pub mod config;
pub mod detector;
pub mod detectors;
pub mod fleet;
pub mod gpu;
pub mod handover;
pub mod ib;
pub mod incidents;
pub mod interference;
pub mod nccl;
pub mod nccl_lag;
pub mod nfs;
pub mod node;
pub mod slot_cache;
pub mod stats;
pub mod storage;
pub mod straggler;
pub mod workload;

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap, HashSet},
};

use proto::v1::{CandidateUpdate, Window};

pub use config::DetectConfig;
use detector::{Context, Output, Stage, StepSources};
pub use detectors::Detectors;
pub use incidents::{Finding, IncidentManager};
use workload::Symptom;

/// The engine: the detectors ([`detectors`]), then the incident manager.
/// `engine.ib` is `engine.detectors.ib` (the engine derefs to them).
#[derive(Debug, Default)]
pub struct Engine {
    pub detectors: Detectors,
    /// Which hosts may report which jobs' ranks ([`workload::placement`]).
    pub claims: workload::placement::Claims,
    pub incidents: IncidentManager,
    /// Seconds a workload symptom waits for a cause (`workload.explain_grace_s`).
    explain_grace_ms: i64,
    limits: config::LimitsConfig,
    /// Window content dropped at the per-window caps, by what.
    dropped: BTreeMap<&'static str, u64>,
    /// Entities (IB ports, GPUs, block devices) known per host, bounded by
    /// `limits.max_entities_per_host`.
    known: HashMap<String, HashSet<String>>,
    /// Latest window end seen, and when hosts were last swept for idleness.
    clock_ms: i64,
    swept_ms: i64,
    /// The cluster label of hosts whose windows name none (the
    /// correlator's `cluster`).
    cluster: String,
    /// Baselines taken over from a shard's previous holder, given to each
    /// host's entities after its first window here.
    pending: HashMap<String, handover::HostBaselines>,
}

impl Engine {
    /// An engine with these settings and fabric topology (link names and
    /// the switch behind each port; empty when unknown).
    pub fn new(cfg: &DetectConfig, topology: ib::Topology) -> Self {
        Self {
            detectors: Detectors::new(cfg, topology),
            incidents: IncidentManager::new(cfg.incidents.clone()).with_cap(
                cfg.limits.max_open_incidents,
                cfg.limits.max_open_incidents_per_host,
            ),
            explain_grace_ms: (cfg.workload.explain_grace_s * 1000.0) as i64,
            limits: cfg.limits.clone(),
            ..Self::default()
        }
    }

    /// Hosts tracked.
    pub fn hosts(&self) -> usize {
        self.node.hosts()
    }

    /// Dropped at the caps, by what: `foreign` (events naming another
    /// host's entity), `jobs`, `ranks`, `entities`, `events`, `cuda`,
    /// `verbs`, `workload`, `usage`, `nccl_perf` (per-window caps),
    /// `incidents` (`limits.max_open_incidents`), `host_incidents`
    /// (`limits.max_open_incidents_per_host`), `nccl_ranks` (communicators
    /// and ranks past `detect.nccl.max_communicators`/`max_ranks`),
    /// `nccl_below` (a host's GPUs, ports, processes or jobs past the 64
    /// the hang rule keeps of each) and
    /// `nccl_lag_runs` (lagging ranks past the lag detector's bound);
    /// `unplaced`, `claimed`, `claims` (step rows and samples refused by
    /// [`workload::placement`]).
    pub fn dropped(&self) -> BTreeMap<&'static str, u64> {
        let mut d = self.dropped.clone();
        if self.incidents.dropped > 0 {
            d.insert("incidents", self.incidents.dropped);
        }
        if self.incidents.dropped_per_host > 0 {
            d.insert("host_incidents", self.incidents.dropped_per_host);
        }
        for det in self.detectors.all() {
            det.dropped(&mut d);
        }
        d
    }

    fn drop_count(&mut self, what: &'static str, n: usize) {
        if n > 0 {
            *self.dropped.entry(what).or_insert(0) += n as u64;
            metrics::counter!("faultline_engine_dropped_total", "what" => what).increment(n as u64);
        }
    }

    /// The window with only its own host's entities and within the
    /// per-window caps (`limits.max_*_per_window`, [`clip`]): borrowed when
    /// it already is, else a trimmed copy with every dropped item counted.
    fn clip<'a>(&mut self, w: &'a Window) -> Cow<'a, Window> {
        let (c, d) = clip::clip(&self.limits, w);
        if matches!(c, Cow::Borrowed(_)) {
            return c;
        }
        for (what, n) in d.counts() {
            self.drop_count(what, n);
        }
        let host = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
        if d.foreign > 0 {
            tracing::warn!(
                host,
                events = d.foreign,
                "window names entities of other hosts: those events are dropped (a host reports only its own)"
            );
        }
        tracing::warn!(
            host,
            dropped = ?d,
            "window over the per-window caps (detect.limits): the excess is dropped"
        );
        c
    }

    /// The window without rows that would make its host know more than
    /// `limits.max_entities_per_host` distinct entities (each dropped row
    /// counted as `entities`): a host cannot grow the engine's per-entity
    /// state without bound by renaming its ports, GPUs or devices.
    fn admit<'a>(&mut self, w: Cow<'a, Window>) -> Cow<'a, Window> {
        let cap = self.limits.max_entities_per_host;
        let host = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
        let known = self.known.entry(host.to_string()).or_default();
        let mut admit = |key: String| {
            if known.contains(&key) {
                return true;
            }
            if known.len() < cap {
                known.insert(key);
                return true;
            }
            false
        };
        let ports: Vec<bool> = w
            .ib_ports
            .iter()
            .map(|p| admit(format!("ib:{}/{}/{}", p.switch, p.hca, p.port)))
            .collect();
        let gpus: Vec<bool> = w
            .gpus
            .iter()
            .map(|g| admit(format!("gpu:{}", g.index)))
            .collect();
        let block: Vec<bool> = w
            .block
            .iter()
            .map(|b| admit(format!("blk:{}", b.device)))
            .collect();
        let refused = [&ports, &gpus, &block]
            .iter()
            .map(|v| v.iter().filter(|ok| !**ok).count())
            .sum::<usize>();
        if refused == 0 {
            return w;
        }
        let mut c = w.into_owned();
        fn keep<T>(rows: &mut Vec<T>, admitted: &[bool]) {
            let mut it = admitted.iter();
            rows.retain(|_| it.next().copied().unwrap_or(true));
        }
        keep(&mut c.ib_ports, &ports);
        keep(&mut c.gpus, &gpus);
        keep(&mut c.block, &block);
        self.drop_count("entities", refused);
        tracing::warn!(
            host = c.origin.as_ref().map_or("", |o| o.hostname.as_str()),
            refused,
            cap,
            "host over detect.limits.max_entities_per_host: rows of new entities dropped"
        );
        Cow::Owned(c)
    }

    /// Forgets hosts whose latest window ended `limits.idle_forget_s` before
    /// the newest window seen (a sweep every 10 s of event time) and
    /// resolves their incidents as stale.
    fn forget_idle(&mut self) -> Vec<CandidateUpdate> {
        let idle_s = self.limits.idle_forget_s;
        if idle_s <= 0.0 || self.clock_ms - self.swept_ms < 10_000 {
            return Vec::new();
        }
        self.swept_ms = self.clock_ms;
        let gone: HashSet<String> = self
            .detectors
            .node
            .forget_idle(self.clock_ms, (idle_s * 1000.0) as i64)
            .into_iter()
            .collect();
        if gone.is_empty() {
            return Vec::new();
        }
        self.known.retain(|h, _| !gone.contains(h));
        for det in self.detectors.all_mut() {
            det.forget_hosts(&gone);
        }
        self.claims.forget_hosts(&gone);
        self.incidents.forget_hosts(&gone);
        metrics::counter!("faultline_engine_forgotten_hosts_total").increment(gone.len() as u64);
        tracing::info!(
            hosts = gone.len(),
            "forgot hosts idle past detect.limits.idle_forget_s"
        );
        self.incidents.resolve_stale(self.clock_ms, &gone, idle_s)
    }

    /// Labels incidents raised from windows that name no cluster (the
    /// correlator's `cluster`; a collector's own `cluster` wins).
    pub fn set_cluster(&mut self, cluster: &str) {
        self.cluster = cluster.to_string();
    }

    /// Sets the other shards' merged summaries (sharded correlators).
    pub fn set_remote(&mut self, remote: Option<std::sync::Arc<fleet::Remote>>) {
        self.ib.set_remote(remote.clone());
        self.storage.set_remote(remote.clone());
        self.straggler.set_remote(remote);
    }

    /// This engine's summary for the other shards: `windows` taken so far.
    pub fn summary(&self, shard: &str, windows: u64) -> fleet::Summary {
        fleet::Summary {
            shard: shard.to_string(),
            end_ms: self.clock_ms,
            windows,
            ib: self.ib.summary(),
            storage: self.storage.summary(self.clock_ms),
            jobs: self.straggler.summary(),
            sent_ms: 0,
        }
    }

    /// The detectors' learnt own-history baselines, per host.
    pub fn baselines(&self) -> Vec<handover::HostBaselines> {
        fn of<'a>(
            by: &'a mut BTreeMap<String, handover::HostBaselines>,
            h: &str,
        ) -> &'a mut handover::HostBaselines {
            by.entry(h.to_string())
                .or_insert_with(|| handover::HostBaselines {
                    host: h.to_string(),
                    ..Default::default()
                })
        }
        let mut by = BTreeMap::new();
        for (h, e, b) in self.ib.own_baselines() {
            of(&mut by, h)
                .own
                .push((e.to_string(), "retry".into(), b.clone()));
        }
        for (e, sig, b) in self.storage.own_baselines() {
            of(&mut by, host_of(e))
                .own
                .push((e.to_string(), sig.into(), b.clone()));
        }
        for (h, t, op, b) in self.nfs.own_baselines() {
            of(&mut by, h)
                .nfs
                .push((t.clone(), op.to_string(), b.clone()));
        }
        by.into_values().collect()
    }

    /// Takes over a previous holder's baselines: each host's are given to
    /// its entities after its first window here (one entry per host).
    pub fn restore_baselines(&mut self, v: Vec<handover::HostBaselines>) {
        for b in v {
            self.pending.insert(b.host.clone(), b);
        }
    }

    /// Gives `host`'s taken-over baselines to its entities; how many.
    fn hand_over(&mut self, host: &str) -> usize {
        let Some(b) = self.pending.remove(host) else {
            return 0;
        };
        let mut n = 0;
        for (e, sig, own) in &b.own {
            let ok = if sig == "retry" {
                self.ib.restore_baseline(e, own)
            } else {
                self.storage.restore_baseline(e, sig, own)
            };
            n += usize::from(ok);
        }
        for (t, op, own) in &b.nfs {
            n += usize::from(self.nfs.restore_baseline(host, t, op, own));
        }
        metrics::counter!("faultline_engine_baselines_restored_total").increment(n as u64);
        n
    }

    /// Labels the incidents `w` opens: its collector's cluster, else the
    /// correlator's (a mismatch counted).
    fn label(&mut self, w: &Window) {
        let label = w.origin.as_ref().map_or("", |o| o.cluster.as_str());
        if !label.is_empty() && !self.cluster.is_empty() && label != self.cluster {
            metrics::counter!("faultline_engine_cluster_mismatch_total").increment(1);
        }
        self.incidents.set_cluster(if label.is_empty() {
            &self.cluster
        } else {
            label
        });
    }

    /// Processes one accepted window; returns the candidate updates it causes.
    pub fn ingest(&mut self, w: &Window) -> Vec<CandidateUpdate> {
        let w = self.clip(w);
        let w = self.admit(w);
        let (w, refused) = self.claims.admit(w);
        for (what, n) in refused {
            self.drop_count(what, n);
        }
        self.clock_ms = self.clock_ms.max(w.end_unix_ms);
        // Job sizes first: the severity of this window's incidents uses them.
        self.incidents.observe_jobs(&w);
        let mut out = self.judge(&w);
        if !self.pending.is_empty() {
            let host = w
                .origin
                .as_ref()
                .map_or_else(String::new, |o| o.hostname.clone());
            self.hand_over(&host);
        }
        out.extend(self.forget_idle());
        out
    }

    /// Runs the detectors on one window, stage by stage ([`Stage`]): the
    /// findings (infrastructure, then collectives, then attribution), the
    /// symptoms and the entities evaluated, and the window with the step
    /// times the collectives stage inferred.
    fn detect<'w>(&mut self, host: &str, w: &'w Window) -> (Output, Vec<Symptom>, Cow<'w, Window>) {
        let Self {
            detectors,
            incidents,
            claims,
            ..
        } = self;
        let open = |k: &'static str, e: &str| incidents.is_open(k, e);
        let mut steps = StepSources::default();
        let mut first = Output::default();
        let cx = Context {
            host,
            window: w,
            jobs: &[],
            open: &open,
            claims,
            steps: &steps,
            symptoms: &[],
        };
        for d in detectors.at(Stage::Collectives) {
            d.observe(&cx, &mut first);
        }
        for d in detectors.all() {
            if d.stage() == Stage::Collectives {
                d.publish(w, &mut steps);
            }
        }
        let w = if steps.inferred_steps.is_empty() {
            Cow::Borrowed(w)
        } else {
            let mut c = w.clone();
            c.steps.extend(std::mem::take(&mut steps.inferred_steps));
            Cow::Owned(c)
        };
        let jobs = jobs_of(&w);
        let mut cx = Context {
            host,
            window: &w,
            jobs: &jobs,
            open: &open,
            claims,
            steps: &steps,
            symptoms: &[],
        };
        let mut out = Output::default();
        for d in detectors.at(Stage::Infrastructure) {
            d.observe(&cx, &mut out);
        }
        out.findings.append(&mut first.findings);
        for d in detectors.at(Stage::Symptoms) {
            d.observe(&cx, &mut out);
        }
        let symptoms = std::mem::take(&mut out.symptoms);
        cx.symptoms = &symptoms;
        for d in detectors.at(Stage::Attribution) {
            d.observe(&cx, &mut out);
        }
        out.evaluated.extend(jobs);
        out.evaluated.append(&mut first.evaluated);
        (out, symptoms, w)
    }

    /// One window: hub -> detectors -> findings -> incidents.
    fn judge(&mut self, w: &Window) -> Vec<CandidateUpdate> {
        let host = w
            .origin
            .as_ref()
            .map_or_else(String::new, |o| o.hostname.clone());
        self.label(w);
        let (out, symptoms, w) = self.detect(&host, w);
        let w: &Window = &w;
        let Output {
            mut findings,
            evaluated,
            ..
        } = out;
        // The grace a symptom waits for a cause covers the infrastructure
        // detectors' own persistence (two windows) and the slot in which the
        // symptom is judged (the next window of the series): three windows.
        let len_ms = (w.end_unix_ms - w.start_unix_ms).max(0);
        // A symptom on a GPU, link, device or host that a root cause sits on
        // joins that incident; otherwise, after the grace, it is its own.
        let mut joined = Vec::new();
        for s in symptoms {
            let in_window = findings
                .iter()
                .any(|f| s.explained_by(f.kind.as_str(), &f.entity, &f.evidence));
            let open = self
                .incidents
                .find_cause(|k, e, ev| s.explained_by(k, e, ev))
                .is_some();
            if in_window || open {
                joined.push(s);
            } else if s.kind == vocab::kind::IncidentKind::Straggler
                || w.end_unix_ms - s.since_ms >= self.explain_grace_ms.max(3 * len_ms)
                || self.incidents.is_open(s.kind.as_str(), &s.entity)
            {
                findings.push(s.finding());
            }
        }
        // Links, GPUs and hosts name the communicators whose ranks cross them.
        for d in self.detectors.all() {
            d.annotate(&mut findings);
        }
        let held = self.held(&joined);
        // Findings that stand for other entities' incidents (a switch for
        // its ports) take those incidents over once applied.
        let absorbing: Vec<(&'static str, String, Vec<String>)> = findings
            .iter_mut()
            .filter(|f| !f.absorbs.is_empty())
            .map(|f| {
                (
                    f.kind.as_str(),
                    f.entity.clone(),
                    std::mem::take(&mut f.absorbs),
                )
            })
            .collect();
        let mut out = self
            .incidents
            .apply(w.end_unix_ms, &host, evaluated, findings, &held);
        for (kind, entity, members) in absorbing {
            out.extend(
                self.incidents
                    .absorb(kind, &entity, &members, w.end_unix_ms),
            );
        }
        for s in joined {
            let Some(key) = self
                .incidents
                .find_cause(|k, e, ev| s.explained_by(k, e, ev))
            else {
                continue;
            };
            let line = self
                .incidents
                .evidence_of(&key)
                .map(|(kind, ev)| format!("{}; {}", s.line, s.via(kind, &key.1, ev)))
                .unwrap_or_else(|| s.line.clone());
            out.extend(self.incidents.attach(
                &key,
                w.end_unix_ms,
                &s.entity,
                line,
                &s.job,
                s.ratio,
            ));
            out.extend(
                self.incidents
                    .supersede(s.kind.as_str(), &s.entity, w.end_unix_ms, &key),
            );
        }
        out
    }

    /// The entities whose incidents this window neither resolves nor
    /// counts quiet: symptoms joined to a cause, and what the detectors
    /// hold open unobserved (no traffic to judge them by).
    fn held(&self, joined: &[Symptom]) -> Vec<String> {
        let mut held: Vec<String> = joined.iter().map(|s| s.entity.clone()).collect();
        for d in self.detectors.all() {
            held.extend(d.held().iter().cloned());
        }
        held
    }

    /// Open incidents, highest confidence first.
    pub fn open(&self) -> Vec<CandidateUpdate> {
        self.incidents.open()
    }
}

/// Jobs active on the window's host (from CUDA, verbs and step attribution).
fn jobs_of(w: &Window) -> Vec<String> {
    let mut j: Vec<String> = w
        .cuda
        .iter()
        .map(|c| c.job.clone())
        .chain(w.verbs.iter().map(|v| v.job.clone()))
        .chain(w.steps.iter().map(|s| s.job.clone()))
        .chain(w.nccl.iter().map(|s| s.job.clone()))
        .filter(|j| !j.is_empty())
        .collect();
    j.sort();
    j.dedup();
    j
}

/// The host an entity belongs to (`host/…`, or the host itself).
pub use vocab::entity::host_of;

/// Median of a slice ([`stats::median`]).
pub use stats::median;

impl std::ops::Deref for Engine {
    type Target = Detectors;
    fn deref(&self) -> &Detectors {
        &self.detectors
    }
}

impl std::ops::DerefMut for Engine {
    fn deref_mut(&mut self) -> &mut Detectors {
        &mut self.detectors
    }
}
