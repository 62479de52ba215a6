//! Building the wire `Window` from one window of every source.
use std::collections::BTreeMap;

use collector_common::cuda::call;
#[cfg(feature = "probes")]
use collector_common::verbs::wc_status_name;
use proto::v1 as pb;

#[cfg(feature = "nvml")]
use crate::nvml;
#[cfg(feature = "probes")]
use crate::probes::verbs::VerbsSnapshot;
use crate::{cuda::CudaSnapshot, identity::IdentityCache, storage::BlockWindow};

#[cfg(feature = "nvml")]
pub fn gpus(info: &[nvml::GpuInfo], samples: &[nvml::GpuSample]) -> Vec<pb::GpuSample> {
    samples
        .iter()
        .map(|s| {
            let g = info.iter().find(|g| g.index == s.index);
            pb::GpuSample {
                index: s.index,
                uuid: g.map(|g| g.uuid.clone()).unwrap_or_default(),
                pci_bus_id: g.map(|g| g.pci_bus_id.clone()).unwrap_or_default(),
                lost: s.lost,
                power_w: s.power_w,
                power_limit_w: s.power_limit_w,
                temp_c: s.temp_c,
                sm_clock_mhz: s.sm_clock_mhz,
                sm_clock_max_mhz: s.sm_clock_max_mhz,
                throttle_reasons: s.throttle,
                ecc_sbe_volatile: s.ecc_sbe_volatile,
                ecc_dbe_volatile: s.ecc_dbe_volatile,
                util_gpu_pct: s.util_gpu_pct,
                nvlink: s
                    .nvlink
                    .iter()
                    .map(|l| pb::NvLinkCounters {
                        link: l.link,
                        replay: l.replay,
                        recovery: l.recovery,
                        crc_flit: l.crc_flit,
                        crc_data: l.crc_data,
                    })
                    .collect(),
                remapped_rows_corr: s.remapped_rows_corr,
                remapped_rows_unc: s.remapped_rows_unc,
                remap_pending: s.remap_pending,
                remap_failure: s.remap_failure.map(|f| f != 0),
            }
        })
        .collect()
}

pub fn block(w: &BlockWindow) -> Vec<pb::BlockStat> {
    w.rows
        .iter()
        .map(|r| pb::BlockStat {
            device: r.device.clone(),
            op: r.op.to_string(),
            job: cgroup_job(&r.cgroup),
            requests: r.requests,
            bytes: r.bytes,
            latency_sum_ns: r.latency_sum_ns,
            latency_max_ns: r.latency_max_ns,
            hist: trim_trailing_zeros(&r.hist).to_vec(),
            device_class: r.device_class.to_string(),
        })
        .collect()
}

/// The job a cgroup path belongs to, as CUDA and verbs rows name it (the
/// Slurm job id, the Kubernetes pod UID), empty when the path says none.
pub fn cgroup_job(path: &str) -> String {
    match crate::identity::classify_cgroup(path) {
        crate::identity::Workload::Slurm { job, .. } => job,
        crate::identity::Workload::Kubernetes { pod_uid, .. } => pod_uid,
        _ => String::new(),
    }
}

/// The histogram up to its last non-empty bucket (empty when all are zero).
fn trim_trailing_zeros(hist: &[u64]) -> &[u64] {
    let len = hist.iter().rposition(|&c| c > 0).map_or(0, |b| b + 1);
    &hist[..len]
}

/// Per (pid, device) CUDA activity between two snapshots.
pub fn cuda(prev: &CudaSnapshot, cur: &CudaSnapshot, ids: &mut IdentityCache) -> Vec<pb::CudaProc> {
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

#[cfg(feature = "probes")]
pub fn verbs(
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

pub use vocab::time::unix_ms;

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use collector_common::block::{lat_bucket, op, BlockKey, BlockStats};

    use super::*;
    use crate::storage::{make_dev, BlockSnapshot, Names};

    #[test]
    fn block_rows_carry_the_timed_requests_histogram_trimmed() {
        let key = BlockKey {
            dev: make_dev(7, 3),
            op: op::WRITE,
            cgroup_id: 0,
        };
        // 10 requests, of which 6 were timed (issued before the probes
        // attached, the other 4 have no latency).
        let mut s = BlockStats::ZERO;
        s.requests = 10;
        s.bytes = 10 * 4096;
        for l in [300, 900, 1_000, 1_500, 70_000, 2_000_000] {
            s.timed += 1;
            s.latency_sum_ns += l;
            s.latency_max_ns = s.latency_max_ns.max(l);
            s.hist[lat_bucket(l)] += 1;
        }
        let t0 = Instant::now();
        let prev = BlockSnapshot::empty(t0);
        let mut cur = BlockSnapshot::empty(t0 + Duration::from_secs(1));
        cur.stats.insert(key, s);
        let mut names = Names::new("/nonexistent", "/nonexistent");
        let w = BlockWindow::between(&prev, &cur, &mut names);
        let rows = block(&w);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.requests, w.rows[0].timed), (10, 6));
        assert_eq!(r.hist.iter().sum::<u64>(), 6);
        // 2 ms is in bucket 20 = [2^20, 2^21) ns: 21 buckets, the last non-empty.
        assert_eq!(r.hist.len(), lat_bucket(2_000_000) + 1);
        assert_eq!(r.hist.len(), 21);
        assert_eq!(r.hist[lat_bucket(1_000)], 2);
        assert_eq!(r.hist[..], w.rows[0].hist[..21]);
        assert_eq!(r.device_class, "");
        assert!(trim_trailing_zeros(&[0; 4]).is_empty());
        // The exact sum of the 6 timed latencies (it was rebuilt from the
        // float mean times all 10 requests: 3,456,166).
        assert_eq!(r.latency_sum_ns, 2_073_700);
        assert_eq!(r.latency_max_ns, 2_000_000);
        // `job` is a job id as in CUDA rows, not a cgroup path.
        assert_eq!(r.job, "");
        assert_eq!(
            cgroup_job("/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0"),
            "1234"
        );
        assert_eq!(
            cgroup_job("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0c2ae6a4_5a8e_4d4c_9c11_6f8f1a2b3c4d.slice/cri-containerd-0123456789abcdef.scope"),
            "0c2ae6a4-5a8e-4d4c-9c11-6f8f1a2b3c4d"
        );
        assert_eq!(cgroup_job("/system.slice/sshd.service"), "");
    }
}
