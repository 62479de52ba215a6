//! The CUDA family's wire rows: launches, calls, sync waits and copies per
//! process and device between two snapshots.
use std::collections::BTreeMap;

use collector_common::cuda::call;
use proto::v1 as pb;

use super::CudaSnapshot;
use crate::identity::IdentityCache;

/// Per (pid, device) CUDA activity between two snapshots.
pub fn rows(prev: &CudaSnapshot, cur: &CudaSnapshot, ids: &mut IdentityCache) -> Vec<pb::CudaProc> {
    let mut by: BTreeMap<(u32, i32), pb::CudaProc> = BTreeMap::new();
    for (k, v) in &cur.launches {
        let n = v
            .launches
            .saturating_sub(prev.launches.get(k).map_or(0, |p| p.launches));
        if n > 0 {
            by.entry((k.pid, k.device)).or_default().launches += n;
        }
    }
    for (k, v) in &cur.calls {
        let p = prev.calls.get(k);
        let calls = v.calls.saturating_sub(p.map_or(0, |p| p.calls));
        if calls == 0 {
            continue;
        }
        let e = by.entry((k.pid, k.device)).or_default();
        e.errors += v.errors.saturating_sub(p.map_or(0, |p| p.errors));
        match k.kind {
            call::STREAM_SYNC | call::CTX_SYNC | call::EVENT_SYNC => {
                e.sync_calls += calls;
                e.sync_wait_ns += v.dur_sum_ns.saturating_sub(p.map_or(0, |p| p.dur_sum_ns));
            }
            kind if call::is_copy(kind) => {
                e.copy_bytes += v.bytes.saturating_sub(p.map_or(0, |p| p.bytes));
            }
            _ => {}
        }
    }
    by.into_iter()
        .map(|((pid, device), mut c)| {
            c.pid = pid;
            c.device = device;
            if cur.launch_fraction < 1.0 && c.launches > 0 {
                c.launches_sampled_fraction = cur.launch_fraction;
            }
            if let Some(id) = ids.get(pid) {
                c.job = id.job().unwrap_or_default();
                c.rank = id.rank();
            }
            c
        })
        .collect()
}
