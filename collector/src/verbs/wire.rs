//! The verbs family's wire rows: completions per process, QP and status.
use collector_common::verbs::wc_status_name;
use proto::v1 as pb;

use super::probe::VerbsSnapshot;
use crate::identity::IdentityCache;

/// Completions per process, QP and status between two snapshots.
pub fn rows(
    prev: &VerbsSnapshot,
    cur: &VerbsSnapshot,
    ids: &mut IdentityCache,
) -> Vec<pb::VerbsCompletions> {
    cur.completions
        .iter()
        .filter_map(|(k, v)| {
            let n = v
                .completions
                .saturating_sub(prev.completions.get(k).map_or(0, |p| p.completions));
            (n > 0).then(|| pb::VerbsCompletions {
                pid: k.pid,
                qp: k.qp_num,
                status: wc_status_name(k.status).to_string(),
                count: n,
                job: ids.get(k.pid).and_then(|i| i.job()).unwrap_or_default(),
            })
        })
        .collect()
}
