//! The block family's wire rows: one `BlockStat` per device, op and
//! cgroup of a [`BlockWindow`].
use proto::v1 as pb;

use super::BlockWindow;

/// The window's rows as the wire carries them.
pub fn rows(w: &BlockWindow) -> Vec<pb::BlockStat> {
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use collector_common::block::{lat_bucket, op, BlockKey, BlockStats};

    use super::*;
    use crate::block::{make_dev, BlockSnapshot, Names};

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
        let rows = rows(&w);
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
