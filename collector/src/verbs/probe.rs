//! Reading the verbs probes' aggregates.
use std::collections::{BTreeMap, BTreeSet};

use aya::maps::{HashMap, MapData};
use collector_common::verbs::{
    AsyncKey, PostKey, PostStats, QpPortKey, QpStateKey, WcKey, WcStats,
};

use crate::probes::{ProbeError, Probes};
use proto::metric::Family as Declared;

/// Cumulative verbs aggregates.
#[derive(Clone, Debug, Default)]
pub struct VerbsSnapshot {
    pub completions: BTreeMap<WcKey, WcStats>,
    pub posts: BTreeMap<PostKey, PostStats>,
    pub qp_states: BTreeMap<QpStateKey, u64>,
    pub async_events: BTreeMap<AsyncKey, u64>,
}

fn read<K: aya::Pod + Ord, V: aya::Pod>(
    p: &Probes,
    name: &'static str,
) -> Result<BTreeMap<K, V>, ProbeError> {
    let m = p.ebpf().map(name).ok_or(ProbeError::MissingMap(name))?;
    let h = HashMap::<&MapData, K, V>::try_from(m)
        .map_err(|source| ProbeError::Map { name, source })?;
    let mut out = BTreeMap::new();
    for e in h.iter() {
        let (k, v) = e.map_err(|source| ProbeError::Map { name, source })?;
        out.insert(k, v);
    }
    Ok(out)
}

impl Probes {
    pub fn verbs_snapshot(&self) -> Result<VerbsSnapshot, ProbeError> {
        Ok(VerbsSnapshot {
            completions: read(self, "VERBS_WC")?,
            posts: read(self, "VERBS_POST")?,
            qp_states: read(self, "VERBS_QP_STATE")?,
            async_events: read(self, "VERBS_ASYNC")?,
        })
    }

    /// The HCA ports each process bound queue pairs to (`ibv_modify_qp`
    /// with `IBV_QP_PORT`), as `hca/port`: the ports its RDMA traffic uses.
    pub fn verbs_qp_ports(&self) -> Result<BTreeMap<u32, BTreeSet<String>>, ProbeError> {
        let m: BTreeMap<QpPortKey, u64> = read(self, "VERBS_QP_PORT")?;
        Ok(qp_ports(m.keys()))
    }
}

/// `hca/port` per pid (a key with no device name or port 0 is skipped: the
/// QP's context could not be read).
pub fn qp_ports<'a>(keys: impl Iterator<Item = &'a QpPortKey>) -> BTreeMap<u32, BTreeSet<String>> {
    let mut out: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for k in keys {
        let dev = String::from_utf8_lossy(k.dev_bytes());
        if dev.is_empty() || k.port == 0 {
            continue;
        }
        out.entry(k.pid)
            .or_default()
            .insert(format!("{dev}/{}", k.port));
    }
    out
}

impl Probes {
    /// Removes the verbs aggregates of processes that exited (the maps are
    /// not LRU). Returns the entries removed.
    pub fn verbs_prune(
        &mut self,
        dead: &std::collections::BTreeSet<u32>,
    ) -> Result<u64, ProbeError> {
        use crate::probes::prune_hash as p;
        Ok(p::<WcKey, WcStats>(self, "VERBS_WC", dead, |k| k.pid)?
            + p::<PostKey, PostStats>(self, "VERBS_POST", dead, |k| k.pid)?
            + p::<QpStateKey, u64>(self, "VERBS_QP_STATE", dead, |k| k.pid)?
            + p::<AsyncKey, u64>(self, "VERBS_ASYNC", dead, |k| k.pid)?
            + p::<QpPortKey, u64>(self, "VERBS_QP_PORT", dead, |k| k.pid)?)
    }
}

impl VerbsSnapshot {
    /// Completions of one process by (QP, status).
    pub fn completions_of(&self, pid: u32) -> BTreeMap<(u32, u32), WcStats> {
        self.completions
            .iter()
            .filter(|(k, _)| k.pid == pid)
            .map(|(k, v)| ((k.qp_num, k.status), *v))
            .collect()
    }

    /// Prometheus text for the verbs metrics, keyed by the process's job and
    /// rank (`who(pid)`; empty when unknown), never by pid or QP number: both
    /// grow without bound and stay on the wire and the console instead.
    pub fn render_prometheus(&self, who: impl FnMut(u32) -> (String, String)) -> String {
        render_series(&self.series(|_| true, who))
    }

    /// The exported series of the processes `keep` selects, summed by job,
    /// rank and label.
    pub fn series(
        &self,
        keep: impl Fn(u32) -> bool,
        mut who: impl FnMut(u32) -> (String, String),
    ) -> VerbsSeries {
        use collector_common::verbs::{qp_state_name, wc_status_name};

        let mut ids: BTreeMap<u32, (String, String)> = BTreeMap::new();
        let mut id = |pid: u32| ids.entry(pid).or_insert_with(|| who(pid)).clone();
        let mut sums = VerbsSeries::new();
        let mut add = |fam: Family, pid: u32, v: &'static str, n: u64| {
            if keep(pid) {
                let (job, rank) = id(pid);
                *sums.entry((fam, job, rank, v)).or_default() += n;
            }
        };
        for (k, v) in &self.completions {
            add(
                Family::Completions,
                k.pid,
                wc_status_name(k.status),
                v.completions,
            );
        }
        for (k, v) in &self.posts {
            let dir = if k.dir == 0 { "send" } else { "recv" };
            add(Family::PostedWrs, k.pid, dir, v.wrs);
            add(Family::PostedBytes, k.pid, dir, v.bytes);
        }
        for (k, v) in &self.qp_states {
            add(Family::QpTransitions, k.pid, qp_state_name(k.state), *v);
        }
        for (k, v) in &self.async_events {
            add(
                Family::AsyncEvents,
                k.pid,
                crate::rdma::event_name(k.event_type),
                *v,
            );
        }
        sums
    }
}

/// A verbs metric family (its declaration: [`Family::declared`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    Completions,
    PostedWrs,
    PostedBytes,
    QpTransitions,
    AsyncEvents,
}

pub const VERBS_COMPLETIONS: Declared = Declared::counter(
    "faultline_verbs_completions_total",
    &["hpc_job", "rank", "status"],
    "Work completions polled, per job, rank and status",
);
pub const VERBS_POSTED_WORK_REQUESTS: Declared = Declared::counter(
    "faultline_verbs_posted_work_requests_total",
    &["hpc_job", "rank", "dir"],
    "Work requests posted, per job, rank and direction",
);
pub const VERBS_POSTED_BYTES: Declared = Declared::counter(
    "faultline_verbs_posted_bytes_total",
    &["hpc_job", "rank", "dir"],
    "Scatter/gather bytes of posted work requests",
);
pub const VERBS_QP_TRANSITIONS: Declared = Declared::counter(
    "faultline_verbs_qp_transitions_total",
    &["hpc_job", "rank", "state"],
    "ibv_modify_qp state transitions, per job, rank and target state",
);
pub const VERBS_ASYNC_EVENTS: Declared = Declared::counter(
    "faultline_verbs_async_events_total",
    &["hpc_job", "rank", "event"],
    "ibv_get_async_event results seen in processes, per job, rank and event",
);

/// The verbs families, for `crate::agent::describe::all`.
pub const FAMILIES: &[&Declared] = &[
    &VERBS_COMPLETIONS,
    &VERBS_POSTED_WORK_REQUESTS,
    &VERBS_POSTED_BYTES,
    &VERBS_QP_TRANSITIONS,
    &VERBS_ASYNC_EVENTS,
];

impl Family {
    /// The declared family and the name of its one extra label.
    fn declared(self) -> (&'static Declared, &'static str) {
        match self {
            Family::Completions => (&VERBS_COMPLETIONS, "status"),
            Family::PostedWrs => (&VERBS_POSTED_WORK_REQUESTS, "dir"),
            Family::PostedBytes => (&VERBS_POSTED_BYTES, "dir"),
            Family::QpTransitions => (&VERBS_QP_TRANSITIONS, "state"),
            Family::AsyncEvents => (&VERBS_ASYNC_EVENTS, "event"),
        }
    }
}

/// (family, job, rank, label value) → count.
pub type VerbsSeries = BTreeMap<(Family, String, String, &'static str), u64>;

/// Adds `other`'s counts to `into`'s.
pub fn absorb(into: &mut VerbsSeries, other: &VerbsSeries) {
    for (k, n) in other {
        *into.entry(k.clone()).or_default() += n;
    }
}

/// Prometheus text of summed verbs series.
pub fn render_series(sums: &VerbsSeries) -> String {
    use crate::prom_text::Text;
    let mut t = Text::new();
    for ((fam, job, rank, v), n) in sums {
        let (f, l) = fam.declared();
        t.add(f, &[("hpc_job", job), ("rank", rank), (l, v)], n);
    }
    t.render()
}
