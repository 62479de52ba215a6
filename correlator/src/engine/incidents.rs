//! From detector findings to incidents: one incident per (kind, entity)
//! episode with a stable id, streamed as opened / updated / resolved.
use std::collections::{BTreeMap, HashMap};

use proto::v1::CandidateUpdate;

use super::config::IncidentConfig;

/// Evidence of one detector for one entity in one window.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub kind: &'static str,
    pub entity: String,
    pub confidence: f64,
    pub evidence: Vec<String>,
    pub jobs: Vec<String>,
    pub runbook: String,
    /// Facts that are news for an open incident even at the same
    /// confidence (e.g. `saturated:symbol_error`): a new one is an `updated`.
    pub marks: Vec<String>,
}

impl Finding {
    pub fn new(kind: &'static str, entity: &str, confidence: f64) -> Self {
        Self {
            kind,
            entity: entity.to_string(),
            confidence,
            evidence: Vec::new(),
            jobs: Vec::new(),
            runbook: String::new(),
            marks: Vec::new(),
        }
    }
    pub fn with_mark(mut self, m: String) -> Self {
        self.marks.push(m);
        self
    }
    pub fn with_evidence(mut self, e: String) -> Self {
        self.evidence.push(e);
        self
    }
    pub fn with_evidence_list(mut self, e: Vec<String>) -> Self {
        self.evidence.extend(e);
        self
    }
    pub fn with_jobs(mut self, j: &[String]) -> Self {
        self.jobs = j.to_vec();
        self
    }
    pub fn with_runbook(mut self, r: String) -> Self {
        self.runbook = r;
        self
    }
}

/// Kinds that are one fault at different stages share one incident per
/// entity: a second down of a port turns its `ib_link_down` incident into
/// `ib_link_flapping` (same id, an `updated`). Returns the family and the
/// kind's rank within it (a higher rank replaces a lower one, never back).
fn family(kind: &'static str) -> (&'static str, u8) {
    match kind {
        "ib_link_down" => ("ib_link_state", 0),
        "ib_link_flapping" => ("ib_link_state", 1),
        // A device slowed by another tenant's load: the latency incident
        // becomes the interference that explains it (same id).
        "storage_latency" => ("storage_latency", 0),
        "interference" => ("storage_latency", 1),
        k => (k, 0),
    }
}

/// The workload signal to check for each infrastructure kind (the workload
/// kinds' own runbooks already walk every layer).
fn workload_hint(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "ib_link_degraded" | "ib_link_down" | "ib_link_flapping" => "workload: the affected jobs' step time and NCCL bus bandwidth (`NCCL_DEBUG=INFO`; nccl-tests `all_reduce_perf` across this link), retransmits in the jobs' logs",
        k if k.starts_with("gpu_") => "workload: step time of the rank on this GPU against its peers and the latency of models served from it; move the rank or replica off it",
        "storage_latency" => "workload: checkpoint save duration and data-loader wait of the jobs that write or read here",
        "node_lost" => "workload: the jobs with ranks on this host have stalled or restarted: their scheduler state (`squeue -w`, `kubectl get pods -o wide`) and last step time",
        _ => return None,
    })
}

#[derive(Clone, Debug)]
struct Incident {
    id: String,
    kind: &'static str,
    entity: String,
    confidence: f64,
    evidence: Vec<String>,
    jobs: Vec<String>,
    runbook: String,
    marks: Vec<String>,
    /// Workload symptoms it explains: symptom entity → (impact line, ratio).
    symptoms: BTreeMap<String, (String, f64)>,
    /// The host's windows since the latest finding, and that finding's time.
    quiet: u32,
    last_seen_ms: i64,
    /// Restored from history after a restart: its quiet period starts at
    /// the host's first window since.
    restored: bool,
    /// The host whose share of the open-incident cap it uses ([`owner`]).
    owner: String,
}

/// The host an incident is charged to: the host whose window raised it,
/// except that a `node_lost` (raised by whichever host's window noticed the
/// silence) is the lost host's. So a host's own findings, however many,
/// only ever fill its own share, and a rack going dark does not fill the
/// share of the host that noticed.
fn owner(kind: &str, entity: &str, reporter: &str) -> String {
    if kind == "node_lost" {
        entity.to_string()
    } else {
        reporter.to_string()
    }
}

/// Every incident kind, for restoring incidents stored by name.
pub const KINDS: &[&str] = &[
    "ib_link_degraded",
    "ib_link_down",
    "ib_link_flapping",
    "gpu_xid",
    "gpu_ecc",
    "gpu_thermal_throttle",
    "storage_latency",
    "node_lost",
    "straggler",
    "job_slowdown",
    "inference_latency",
    "interference",
    "collective_hang",
];

/// An open incident as history stored it.
#[derive(Clone, Debug, Default)]
pub struct Stored {
    pub id: String,
    pub kind: String,
    pub entity: String,
    pub confidence: f64,
    pub evidence: Vec<String>,
    pub jobs: Vec<String>,
    pub runbook: String,
    pub updated_ms: i64,
}

#[derive(Debug, Default)]
pub struct IncidentManager {
    cfg: IncidentConfig,
    /// Open incidents by (family, entity).
    open: BTreeMap<(&'static str, String), Incident>,
    /// The families open per entity (an index of `open` by entity), so a
    /// host window visits only its own incidents, not every open one.
    by_entity: BTreeMap<String, Vec<&'static str>>,
    seq: u64,
    /// At most this many open incidents (`limits.max_open_incidents`; 0 =
    /// unbounded); findings that would open more are dropped and counted.
    max_open: usize,
    /// At most this many open incidents per owner host
    /// (`limits.max_open_incidents_per_host`; 0 = unbounded).
    max_open_per_host: usize,
    /// Open incidents per owner host (hosts with none are not kept).
    per_host: HashMap<String, usize>,
    /// Findings dropped at the cap.
    pub dropped: u64,
    /// Findings dropped at their host's share of the cap.
    pub dropped_per_host: u64,
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl IncidentManager {
    fn insert_open(&mut self, key: (&'static str, String), i: Incident) {
        *self.per_host.entry(i.owner.clone()).or_insert(0) += 1;
        let fams = self.by_entity.entry(key.1.clone()).or_default();
        if !fams.contains(&key.0) {
            fams.push(key.0);
        }
        self.open.insert(key, i);
    }

    fn remove_open(&mut self, key: &(&'static str, String)) -> Option<Incident> {
        let i = self.open.remove(key)?;
        if let Some(n) = self.per_host.get_mut(&i.owner) {
            *n -= 1;
            if *n == 0 {
                self.per_host.remove(&i.owner);
            }
        }
        if let Some(fams) = self.by_entity.get_mut(&key.1) {
            fams.retain(|f| *f != key.0);
            if fams.is_empty() {
                self.by_entity.remove(&key.1);
            }
        }
        Some(i)
    }

    pub fn new(cfg: IncidentConfig) -> Self {
        Self {
            cfg,
            ..Self::default()
        }
    }

    /// With at most `max_open` open incidents, and at most `per_host` of
    /// them charged to any one host.
    pub fn with_cap(self, max_open: usize, per_host: usize) -> Self {
        Self {
            max_open,
            max_open_per_host: per_host,
            ..self
        }
    }

    /// Open incidents charged to `host`.
    pub fn open_of(&self, host: &str) -> usize {
        self.per_host.get(host).copied().unwrap_or(0)
    }

    /// Resolves, as stale, the open incidents on entities of hosts the
    /// engine forgot (silent past `limits.idle_forget_s`): a lost node that
    /// never returns, or a spoofed host, does not stay open forever.
    pub fn resolve_stale(
        &mut self,
        ts: i64,
        gone: &std::collections::HashSet<String>,
        idle_s: f64,
    ) -> Vec<CandidateUpdate> {
        let keys: Vec<(&'static str, String)> = self
            .open
            .keys()
            .filter(|(_, e)| gone.contains(super::host_of(e)))
            .cloned()
            .collect();
        let mut out = Vec::new();
        for k in keys {
            if let Some(mut i) = self.remove_open(&k) {
                i.evidence.push(format!(
                    "stale: no window from its host for {idle_s:.0} s (limits.idle_forget_s); forgotten"
                ));
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        out
    }

    fn update(ts: i64, state: &str, i: &Incident) -> CandidateUpdate {
        CandidateUpdate {
            ts_unix_ms: ts,
            incident_id: i.id.clone(),
            state: state.into(),
            kind: i.kind.into(),
            entity: i.entity.clone(),
            confidence: (i.confidence * 1000.0).round() / 1000.0,
            evidence: i
                .evidence
                .iter()
                .cloned()
                .chain(i.symptoms.values().map(|(l, _)| format!("explains {l}")))
                .collect(),
            affected_jobs: i.jobs.clone(),
            runbook: match workload_hint(i.kind) {
                Some(h) if !i.runbook.is_empty() => format!("{}; {h}", i.runbook),
                Some(h) => h.to_string(),
                None => i.runbook.clone(),
            },
        }
    }

    /// Applies one host window's findings. Incidents of the host's entities
    /// (and of `evaluated`, e.g. `<job>/<rank>` reported by it) without a
    /// finding resolve after a quiet period (`quiet_s` of event time and at
    /// least `quiet_windows` of the host's windows); a lost node that
    /// reports again is resolved at once.
    ///
    /// Entities in `held` do not resolve in this call (a symptom incident
    /// about to be superseded by its newly found cause).
    pub fn apply(
        &mut self,
        ts: i64,
        host: &str,
        evaluated: Vec<String>,
        findings: Vec<Finding>,
        held: &[String],
    ) -> Vec<CandidateUpdate> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut over_share = 0u64;
        for f in findings {
            let (fam, rank) = family(f.kind);
            let key = (fam, f.entity.clone());
            seen.insert(key.clone());
            let full = self.max_open > 0 && self.open.len() >= self.max_open;
            let owner = owner(f.kind, &f.entity, host);
            let share_full =
                self.max_open_per_host > 0 && self.open_of(&owner) >= self.max_open_per_host;
            match self.open.get_mut(&key) {
                Some(i) => {
                    i.quiet = 0;
                    i.restored = false;
                    i.last_seen_ms = i.last_seen_ms.max(ts);
                    let escalated = rank > family(i.kind).1;
                    if escalated {
                        i.kind = f.kind;
                        i.runbook = f.runbook.clone();
                    } else if f.kind != i.kind {
                        // A lower stage of the same fault (a flapping link
                        // that is down right now) only keeps it open.
                        continue;
                    }
                    let changed = (f.confidence - i.confidence).abs() >= self.cfg.update_delta;
                    for j in &f.jobs {
                        if !i.jobs.contains(j) {
                            i.jobs.push(j.clone());
                        }
                    }
                    // A new reporter of the same fault (the other end of a
                    // link) is new evidence even at the same confidence.
                    let reporters: Vec<String> = i
                        .evidence
                        .iter()
                        .filter(|e| e.starts_with("reported by "))
                        .cloned()
                        .collect();
                    let new_reporter = f
                        .evidence
                        .iter()
                        .any(|e| e.starts_with("reported by ") && !reporters.contains(e));
                    let mut news = false;
                    for m in &f.marks {
                        if !i.marks.contains(m) {
                            i.marks.push(m.clone());
                            news = true;
                        }
                    }
                    if changed || new_reporter || escalated || news {
                        i.confidence = if escalated {
                            f.confidence
                        } else {
                            i.confidence.max(f.confidence)
                        };
                        let mut ev = f.evidence;
                        for r in reporters {
                            if !ev.contains(&r) {
                                ev.push(r);
                            }
                        }
                        i.evidence = ev;
                        out.push(Self::update(ts, "updated", i));
                    }
                }
                None if full => {
                    self.dropped += 1;
                    metrics::counter!("faultline_engine_dropped_total", "what" => "incidents")
                        .increment(1);
                }
                None if share_full => {
                    over_share += 1;
                    self.dropped_per_host += 1;
                    metrics::counter!("faultline_engine_dropped_total", "what" => "host_incidents")
                        .increment(1);
                }
                None => {
                    self.seq += 1;
                    let id = format!(
                        "{:016x}",
                        fnv(&format!("{}|{}|{}|{}", f.kind, f.entity, ts, self.seq))
                    );
                    let i = Incident {
                        id,
                        kind: f.kind,
                        entity: f.entity.clone(),
                        confidence: f.confidence,
                        evidence: f.evidence,
                        jobs: f.jobs,
                        runbook: f.runbook,
                        marks: f.marks,
                        symptoms: BTreeMap::new(),
                        quiet: 0,
                        last_seen_ms: ts,
                        restored: false,
                        owner,
                    };
                    out.push(Self::update(ts, "opened", &i));
                    self.insert_open(key, i);
                }
            }
        }
        if over_share > 0 {
            tracing::warn!(
                host,
                findings = over_share,
                cap = self.max_open_per_host,
                "host over its share of the open incidents (detect.limits.max_open_incidents_per_host): new incidents dropped"
            );
        }
        let prefix = format!("{host}/");
        let mut resolved = Vec::new();
        if !seen.contains(&("node_lost", host.to_string())) {
            if let Some(i) = self.remove_open(&("node_lost", host.to_string())) {
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        let quiet_ms = (self.cfg.quiet_s * 1000.0) as i64;
        // The incidents this window owns: entities under `host/` (one
        // range of the index) and the evaluated ones, in `open`'s order.
        let mut owned: Vec<(&'static str, String)> = Vec::new();
        let under = self
            .by_entity
            .range::<str, _>((
                std::ops::Bound::Included(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(e, _)| e.starts_with(&prefix));
        for (e, fams) in under {
            owned.extend(fams.iter().map(|f| (*f, e.clone())));
        }
        for e in &evaluated {
            if let Some(fams) = self.by_entity.get(e) {
                owned.extend(fams.iter().map(|f| (*f, e.clone())));
            }
        }
        owned.sort_unstable();
        owned.dedup();
        for key in owned {
            let Some(i) = self.open.get_mut(&key) else {
                continue;
            };
            if seen.contains(&key) || key.0 == "node_lost" || held.contains(&i.entity) {
                continue;
            }
            if i.restored {
                i.restored = false;
                i.last_seen_ms = ts;
                continue;
            }
            i.quiet += 1;
            if i.quiet >= self.cfg.quiet_windows && ts - i.last_seen_ms >= quiet_ms {
                resolved.push(key);
            }
        }
        for key in resolved {
            if let Some(i) = self.remove_open(&key) {
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        out
    }

    /// Reopens an incident that was open when the correlator stopped (same
    /// id): it continues while the fault persists and resolves after the
    /// quiet period counted from its host's first window. Returns false for
    /// an unknown kind or an entity that already has an open incident.
    pub fn restore(&mut self, s: Stored) -> bool {
        let Some(kind) = KINDS.iter().copied().find(|k| *k == s.kind) else {
            return false;
        };
        let key = (family(kind).0, s.entity.clone());
        if self.open.contains_key(&key) {
            return false;
        }
        // The stored lines are as streamed: symptoms ("explains …") come
        // back when they are seen again; the workload hint is re-added.
        let runbook = match workload_hint(kind) {
            Some(h) => s
                .runbook
                .strip_suffix(h)
                .map_or(s.runbook.as_str(), |r| r.trim_end_matches("; "))
                .to_string(),
            None => s.runbook,
        };
        let evidence = s
            .evidence
            .into_iter()
            .filter(|e| !e.starts_with("explains "))
            .collect();
        // Who raised it is not stored: charged to the host it names.
        let owner = owner(kind, &s.entity, super::host_of(&s.entity));
        self.insert_open(
            key,
            Incident {
                id: s.id,
                kind,
                entity: s.entity,
                confidence: s.confidence,
                evidence,
                jobs: s.jobs,
                runbook,
                marks: Vec::new(),
                symptoms: BTreeMap::new(),
                quiet: 0,
                last_seen_ms: s.updated_ms,
                restored: true,
                owner,
            },
        );
        true
    }

    /// The open incident (its key) that `explains` accepts (kind, entity,
    /// evidence), the most confident first.
    pub fn find_cause(
        &self,
        explains: impl Fn(&str, &str, &[String]) -> bool,
    ) -> Option<(&'static str, String)> {
        self.open
            .iter()
            .filter(|(_, i)| explains(i.kind, &i.entity, &i.evidence))
            .max_by(|a, b| a.1.confidence.total_cmp(&b.1.confidence))
            .map(|(k, _)| k.clone())
    }

    /// Attaches a workload symptom (`tag` its entity, `line` its measured
    /// impact) and its job to an open incident: an `updated` when the
    /// symptom is new there or its impact moved by `update_delta`.
    pub fn attach(
        &mut self,
        key: &(&'static str, String),
        ts: i64,
        tag: &str,
        line: String,
        job: &str,
        ratio: f64,
    ) -> Option<CandidateUpdate> {
        let delta = self.cfg.update_delta;
        let i = self.open.get_mut(key)?;
        let news = match i.symptoms.get(tag) {
            Some((_, r)) => (ratio - r).abs() >= delta,
            None => true,
        };
        if !job.is_empty() && !i.jobs.iter().any(|j| j == job) {
            i.jobs.push(job.to_string());
        }
        if !news {
            if let Some(s) = i.symptoms.get_mut(tag) {
                s.0 = line;
            }
            return None;
        }
        i.symptoms.insert(tag.to_string(), (line, ratio));
        i.confidence = (i.confidence + 0.05).min(0.99);
        Some(Self::update(ts, "updated", i))
    }

    /// An open incident's kind and evidence.
    pub fn evidence_of(&self, key: &(&'static str, String)) -> Option<(&'static str, &[String])> {
        self.open.get(key).map(|i| (i.kind, i.evidence.as_slice()))
    }

    /// Whether an incident of `kind` on `entity` is open.
    pub fn is_open(&self, kind: &'static str, entity: &str) -> bool {
        self.open
            .contains_key(&(family(kind).0, entity.to_string()))
    }

    /// Resolves an open symptom incident (`kind` on `entity`) because a
    /// root cause now explains it: one fault, one incident.
    pub fn supersede(
        &mut self,
        kind: &'static str,
        entity: &str,
        ts: i64,
        by: &(&'static str, String),
    ) -> Option<CandidateUpdate> {
        let cause = self
            .open
            .get(by)
            .map(|c| (c.id.clone(), c.kind, c.entity.clone()))?;
        let mut i = self.remove_open(&(family(kind).0, entity.to_string()))?;
        i.evidence.push(format!(
            "explained by incident {} ({} on {}): followed there",
            cause.0, cause.1, cause.2
        ));
        Some(Self::update(ts, "resolved", &i))
    }

    pub fn open(&self) -> Vec<CandidateUpdate> {
        let mut v: Vec<CandidateUpdate> = self
            .open
            .values()
            .map(|i| Self::update(0, "open", i))
            .collect();
        v.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mgr() -> IncidentManager {
        IncidentManager::new(IncidentConfig {
            quiet_s: 2.0,
            quiet_windows: 2,
            update_delta: 0.05,
        })
    }

    fn states(ups: &[CandidateUpdate]) -> Vec<(String, String)> {
        ups.iter()
            .map(|u| (u.state.clone(), u.entity.clone()))
            .collect()
    }

    #[test]
    fn a_window_resolves_only_its_own_hosts_and_evaluated_incidents() {
        let mut m = mgr();
        let f = |e: &str| Finding::new("gpu_thermal_throttle", e, 0.8);
        // "a" opens a GPU incident and one on an entity it evaluates; "ab"
        // (a host whose name starts with "a") opens its own.
        let ups = m.apply(1000, "a", vec![], vec![f("a/gpu0"), f("job/0")], &[]);
        assert_eq!(ups.len(), 2);
        m.apply(1000, "ab", vec![], vec![f("ab/gpu0")], &[]);
        // Many quiet windows from "ab" resolve only "ab/gpu0".
        let mut got = Vec::new();
        for t in 2..10 {
            got.extend(states(&m.apply(t * 1000, "ab", vec![], vec![], &[])));
        }
        assert_eq!(got, vec![("resolved".into(), "ab/gpu0".into())]);
        // Quiet windows from "a" (which evaluates job/0) resolve both of
        // its incidents once 2 windows and 2 s have passed, in key order.
        let mut got = Vec::new();
        for t in 2..5 {
            got.extend(states(&m.apply(
                t * 1000,
                "a",
                vec!["job/0".to_string()],
                vec![],
                &[],
            )));
        }
        assert_eq!(
            got,
            vec![
                ("resolved".into(), "a/gpu0".into()),
                ("resolved".into(), "job/0".into())
            ]
        );
        assert!(m.open().is_empty());
        assert!(m.by_entity.is_empty());
    }

    #[test]
    fn each_host_fills_only_its_share_and_node_lost_is_the_lost_hosts() {
        let mut m = mgr().with_cap(100, 2);
        let f = |k, e: &str| Finding::new(k, e, 0.8);
        // "a" raises 3 of its own: the third is over its share of 2.
        let ups = m.apply(
            1000,
            "a",
            vec![],
            vec![
                f("gpu_xid", "a/gpu0"),
                f("gpu_xid", "a/gpu1"),
                f("gpu_xid", "a/gpu2"),
            ],
            &[],
        );
        assert_eq!(ups.len(), 2);
        assert_eq!((m.open_of("a"), m.dropped_per_host), (2, 1));
        // Its window notices 3 lost hosts: each is charged to the lost host.
        let lost = ["b", "c", "d"].map(|h| f("node_lost", h));
        assert_eq!(m.apply(2000, "a", vec![], lost.to_vec(), &[]).len(), 3);
        assert_eq!((m.open_of("a"), m.open_of("b")), (2, 1));
        // "b" reports again: its node_lost resolves and its share is free.
        m.apply(3000, "b", vec![], vec![], &[]);
        assert_eq!(m.open_of("b"), 0);
        assert!(!m.per_host.contains_key("b"));
    }
}
