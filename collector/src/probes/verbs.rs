//! Reading the verbs probes' aggregates.
use std::collections::BTreeMap;

use aya::maps::{HashMap, MapData};
use collector_common::verbs::{AsyncKey, PostKey, PostStats, QpStateKey, WcKey, WcStats};

use super::{ProbeError, Probes};

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

    /// Prometheus text for the verbs metrics.
    pub fn render_prometheus(&self) -> String {
        use collector_common::verbs::{qp_state_name, wc_status_name};
        use std::fmt::Write as _;
        let mut s = String::from(
            "# HELP faultline_verbs_completions_total Work completions polled, per process, QP and status.\n\
             # TYPE faultline_verbs_completions_total counter\n",
        );
        for (k, v) in &self.completions {
            let _ = writeln!(
                s,
                "faultline_verbs_completions_total{{pid=\"{}\",qp=\"{}\",status=\"{}\"}} {}",
                k.pid,
                k.qp_num,
                wc_status_name(k.status),
                v.completions
            );
        }
        s.push_str("# HELP faultline_verbs_posted_work_requests_total Work requests posted, per process, QP and direction.\n# TYPE faultline_verbs_posted_work_requests_total counter\n");
        for (k, v) in &self.posts {
            let dir = if k.dir == 0 { "send" } else { "recv" };
            let _ = writeln!(s, "faultline_verbs_posted_work_requests_total{{pid=\"{}\",qp=\"{}\",dir=\"{dir}\"}} {}", k.pid, k.qp_num, v.wrs);
        }
        s.push_str("# HELP faultline_verbs_posted_bytes_total Scatter/gather bytes of posted work requests.\n# TYPE faultline_verbs_posted_bytes_total counter\n");
        for (k, v) in &self.posts {
            let dir = if k.dir == 0 { "send" } else { "recv" };
            let _ = writeln!(
                s,
                "faultline_verbs_posted_bytes_total{{pid=\"{}\",qp=\"{}\",dir=\"{dir}\"}} {}",
                k.pid, k.qp_num, v.bytes
            );
        }
        s.push_str("# HELP faultline_verbs_qp_transitions_total ibv_modify_qp state transitions, per process, QP and target state.\n# TYPE faultline_verbs_qp_transitions_total counter\n");
        for (k, v) in &self.qp_states {
            let _ = writeln!(
                s,
                "faultline_verbs_qp_transitions_total{{pid=\"{}\",qp=\"{}\",state=\"{}\"}} {v}",
                k.pid,
                k.qp_num,
                qp_state_name(k.state)
            );
        }
        s.push_str("# HELP faultline_verbs_async_events_total ibv_get_async_event results seen in processes.\n# TYPE faultline_verbs_async_events_total counter\n");
        for (k, v) in &self.async_events {
            let _ = writeln!(
                s,
                "faultline_verbs_async_events_total{{pid=\"{}\",event=\"{}\"}} {v}",
                k.pid,
                crate::rdma::event_name(k.event_type)
            );
        }
        s
    }
}
