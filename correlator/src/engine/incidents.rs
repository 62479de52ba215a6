//! From detector findings to incidents: one incident per (kind, entity)
//! episode with a stable id, streamed as opened / updated / resolved.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use proto::v1::CandidateUpdate;

mod causes;
mod config;
mod finding;
pub mod severity;
pub use config::IncidentConfig;
pub use finding::{evidence_port, Finding};
use severity::Severity;

/// Kinds that are one fault at different stages share one incident per
/// entity: a second down of a port turns its `ib_link_down` incident into
/// `ib_link_flapping` (same id, an `updated`). Returns the family and the
/// kind's rank within it (a higher rank replaces a lower one, never back).
fn family(kind: &'static str) -> (&'static str, u8) {
    (
        family_of(kind),
        u8::from(matches!(
            kind,
            "ib_link_flapping" | "interference" | "gpu_xid"
        )),
    )
}

/// The family of kinds one incident goes through (a link down, then
/// flapping; a device slowed by another tenant's load: the latency
/// incident becomes the interference that explains it, same id).
pub fn family_of(kind: &str) -> &str {
    match kind {
        "ib_link_down" | "ib_link_flapping" => "ib_link_state",
        "storage_latency" | "interference" => "storage_latency",
        // An application's XID, then the GPU judged (unrelated jobs
        // failing on it, a hardware code): one incident on the GPU.
        "app_xid" | "gpu_xid" => "gpu_xid",
        k => k,
    }
}

/// The workload signal to check for each infrastructure kind (the workload
/// kinds' own runbooks already walk every layer).
fn workload_hint(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "ib_link_degraded" | "ib_link_down" | "ib_link_flapping" => "workload: the affected jobs' step time and NCCL bus bandwidth (`NCCL_DEBUG=INFO`; nccl-tests `all_reduce_perf` across this link), retransmits in the jobs' logs",
        k if k.starts_with("gpu_") => "workload: step time of the rank on this GPU against its peers and the latency of models served from it; move the rank or replica off it",
        "storage_latency" => "workload: checkpoint save duration and data-loader wait of the jobs that write or read here",
        "nfs_latency" => "workload: checkpoint save duration, data-loader wait and I/O wait (`pidstat -d 1`) of the jobs on the affected hosts that read or write this export",
        "lustre_latency" => "workload: checkpoint save duration, data-loader wait and I/O wait (`pidstat -d 1`) of the jobs on the affected clients whose files stripe over this target (`lfs getstripe`)",
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
    /// The cluster it belongs to (the label of the window that opened it).
    cluster: String,
    /// The highest severity rated while open ([`severity`]).
    severity: Severity,
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
    pub cluster: String,
    pub severity: String,
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
    /// The cluster incidents opened now belong to (set per window by the
    /// engine).
    cluster: String,
    /// GPUs per job, for the severity table.
    sizes: severity::JobSizes,
}

/// Rates an incident by the severity table: the higher of what it was and
/// what it is now (severity never falls while open).
fn rate(cfg: &severity::SeverityConfig, sizes: &severity::JobSizes, i: &mut Incident) {
    let facts = severity::Facts {
        kind: i.kind,
        marks: &i.marks,
        gpus: i.jobs.iter().map(|j| sizes.gpus(j)).max().unwrap_or(0),
        jobs: i.jobs.len(),
        slowed: !i.symptoms.is_empty(),
    };
    i.severity = i.severity.max(severity::judge(cfg, &facts).0);
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Merges a finding (of family stage `rank`) into the open incident of
/// its family and entity; whether that is news worth an `updated`: a
/// higher stage (escalated), a confidence change of `update_delta`, a new
/// reporter (the other end of a link) or switch member, or a new mark.
fn merge(i: &mut Incident, f: Finding, rank: u8, ts: i64, update_delta: f64) -> bool {
    i.quiet = 0;
    i.restored = false;
    i.last_seen_ms = i.last_seen_ms.max(ts);
    let escalated = rank > family(i.kind).1;
    if escalated {
        i.kind = f.kind.as_str();
        i.runbook = f.runbook.clone();
    } else if f.kind.as_str() != i.kind {
        // A lower stage of the same fault (a flapping link that is down
        // right now) only keeps it open.
        return false;
    }
    let changed = (f.confidence - i.confidence).abs() >= update_delta;
    for j in &f.jobs {
        if !i.jobs.contains(j) {
            i.jobs.push(j.clone());
        }
    }
    // A new reporter of the same fault (the other end of a link) or a new
    // member (a switch's next port) is new evidence even at the same
    // confidence.
    let new_reporter = {
        let known: Vec<&str> = i.evidence.iter().filter_map(|e| evidence_port(e)).collect();
        f.evidence
            .iter()
            .filter_map(|e| evidence_port(e))
            .any(|r| !known.contains(&r))
    };
    // A link end that reported once stays named.
    let reporters: Vec<String> = i
        .evidence
        .iter()
        .filter(|e| e.starts_with("reported by "))
        .cloned()
        .collect();
    let mut news = false;
    for m in &f.marks {
        if !i.marks.contains(m) {
            i.marks.push(m.clone());
            news = true;
        }
    }
    if !(changed || new_reporter || escalated || news) {
        return false;
    }
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
    true
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
            .filter(|(_, e)| gone.contains(vocab::entity::host_of(e)))
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
            cluster: i.cluster.clone(),
            severity: i.severity.as_str().to_string(),
        }
    }

    /// Learns the sizes of the window's jobs (GPUs each holds).
    pub fn observe_jobs(&mut self, w: &proto::v1::Window) {
        let host = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
        self.sizes.observe(host, w);
    }

    /// Forgets the GPUs of hosts the engine forgot.
    pub fn forget_hosts(&mut self, gone: &std::collections::HashSet<String>) {
        self.sizes.forget_hosts(gone);
    }

    /// Labels the incidents opened from now on with `cluster`.
    pub fn set_cluster(&mut self, cluster: &str) {
        if self.cluster != cluster {
            self.cluster = cluster.to_string();
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
        let mut seen = BTreeSet::new();
        let mut over_share = 0u64;
        for f in findings {
            let (fam, rank) = family(f.kind.as_str());
            let key = (fam, f.entity.clone());
            seen.insert(key.clone());
            let full = self.max_open > 0 && self.open.len() >= self.max_open;
            let owner = owner(f.kind.as_str(), &f.entity, host);
            let share_full =
                self.max_open_per_host > 0 && self.open_of(&owner) >= self.max_open_per_host;
            match self.open.get_mut(&key) {
                Some(i) => {
                    let was = i.severity;
                    let news = merge(i, f, rank, ts, self.cfg.update_delta);
                    rate(&self.cfg.severity, &self.sizes, i);
                    if news || i.severity > was {
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
                None => out.push(self.open_new(ts, key, f, owner)),
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
        if !seen.contains(&("node_lost", host.to_string())) {
            if let Some(i) = self.remove_open(&("node_lost", host.to_string())) {
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        for key in self.quiet(ts, host, &evaluated, &seen, held) {
            if let Some(i) = self.remove_open(&key) {
                out.push(Self::update(ts, "resolved", &i));
            }
        }
        out
    }

    /// Opens an incident for a finding of a new (family, entity).
    fn open_new(
        &mut self,
        ts: i64,
        key: (&'static str, String),
        f: Finding,
        owner: String,
    ) -> CandidateUpdate {
        self.seq += 1;
        // The cluster keeps one entity name's incidents in two clusters
        // apart in a fleet view (shards number their incidents alike).
        let mut seed = format!("{}|{}|{}|{}", f.kind, f.entity, ts, self.seq);
        if !self.cluster.is_empty() {
            seed.push('|');
            seed.push_str(&self.cluster);
        }
        let id = format!("{:016x}", fnv(&seed));
        let mut i = Incident {
            id,
            kind: f.kind.as_str(),
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
            cluster: self.cluster.clone(),
            severity: Severity::Info,
        };
        rate(&self.cfg.severity, &self.sizes, &mut i);
        let u = Self::update(ts, "opened", &i);
        self.insert_open(key, i);
        u
    }

    /// The open incidents this host window owns (entities under `host/` and
    /// the `evaluated` ones) that had no finding in it (`seen`) and have now
    /// been quiet long enough to resolve. Counts their quiet windows.
    fn quiet(
        &mut self,
        ts: i64,
        host: &str,
        evaluated: &[String],
        seen: &BTreeSet<(&'static str, String)>,
        held: &[String],
    ) -> Vec<(&'static str, String)> {
        let prefix = vocab::entity::host_prefix(host);
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
        for e in evaluated {
            if let Some(fams) = self.by_entity.get(e) {
                owned.extend(fams.iter().map(|f| (*f, e.clone())));
            }
        }
        owned.sort_unstable();
        owned.dedup();
        let mut resolved = Vec::new();
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
        resolved
    }

    /// Reopens an incident that was open when the correlator stopped (same
    /// id): it continues while the fault persists and resolves after the
    /// quiet period counted from its host's first window. Returns false for
    /// an unknown kind or an entity that already has an open incident.
    pub fn restore(&mut self, s: Stored) -> bool {
        let Some(kind) = vocab::kind::IncidentKind::parse(&s.kind).map(|k| k.as_str()) else {
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
        let owner = owner(kind, &s.entity, vocab::entity::host_of(&s.entity));
        let mut i = Incident {
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
            cluster: s.cluster,
            severity: Severity::parse(&s.severity).unwrap_or_default(),
        };
        rate(&self.cfg.severity, &self.sizes, &mut i);
        self.insert_open(key, i);
        true
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
mod severity_tests;
#[cfg(test)]
mod tests;
