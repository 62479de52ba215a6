//! Joins a window's aggregates to jobs, ranks and placement: the OTLP
//! attributes first, then the collector's process identity of `process.pid`
//! (cgroup → Slurm/Kubernetes, environment `SLURM_JOB_ID`, `RANK`,
//! `CUDA_VISIBLE_DEVICES`, `NCCL_IB_HCA`), then `k8s.pod.uid`,
//! `k8s.pod.name`, `service.name`. Targets that land on the same job and
//! rank are merged.
use std::collections::BTreeMap;

use proto::v1::{StepTime, WorkloadSample};

use super::{
    aggregate::Agg,
    decode::{Source, Target},
    names::Signal,
};
use crate::identity::{ProcessIdentity, Workload};

/// Job, rank and placement of one source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    pub job: String,
    pub rank: Option<u32>,
    /// GPU ordinal, -1 when unknown.
    pub device: i32,
    pub hca: String,
}

fn env<'a>(id: &'a ProcessIdentity, key: &str) -> Option<&'a str> {
    id.env
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The process's GPU: `CUDA_VISIBLE_DEVICES` when it names one ordinal, or
/// the local rank's entry when it names several.
pub fn device_of(id: &ProcessIdentity) -> Option<i32> {
    let list: Vec<&str> = env(id, "CUDA_VISIBLE_DEVICES")?
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let pick = match list.as_slice() {
        [one] => *one,
        many => many.get(usize::try_from(id.local_rank()?).ok()?)?,
    };
    pick.parse().ok()
}

/// The process's HCA: `NCCL_IB_HCA` when it names one, or the local rank's
/// entry when it names several.
pub fn hca_of(id: &ProcessIdentity) -> Option<String> {
    let hcas = id.hcas();
    match hcas.as_slice() {
        [one] => Some(one.clone()),
        many => many.get(usize::try_from(id.local_rank()?).ok()?).cloned(),
    }
}

/// Whether the process the collector found under `process.pid` can be the
/// source: a pid from another pid namespace (a container) names some other
/// host process, so an identity that contradicts the source's pod or Slurm
/// job is not used.
pub fn consistent(src: &Source, id: &ProcessIdentity) -> bool {
    let pod_ok = src.pod_uid.as_ref().is_none_or(
        |uid| matches!(&id.workload, Workload::Kubernetes { pod_uid, .. } if pod_uid == uid),
    );
    let job_ok = src
        .slurm_job
        .as_ref()
        .is_none_or(|j| id.job().as_ref() == Some(j));
    pod_ok && job_ok
}

/// Where a source's samples land.
pub fn place(src: &Source, id: Option<&ProcessIdentity>) -> Placement {
    let id = id.filter(|id| consistent(src, id));
    let job = src
        .slurm_job
        .clone()
        .or_else(|| id.and_then(ProcessIdentity::job))
        .or_else(|| src.pod_uid.clone())
        .or_else(|| src.pod_name.clone())
        .or_else(|| src.service.clone())
        .unwrap_or_default();
    let rank = src
        .rank
        .and_then(|r| u32::try_from(r).ok())
        .or_else(|| id.and_then(ProcessIdentity::rank));
    Placement {
        job,
        rank,
        device: id.and_then(device_of).unwrap_or(-1),
        hca: id.and_then(hca_of).unwrap_or_default(),
    }
}

/// Turns a window's aggregates into `Window.steps` and `Window.workload`.
/// `identity` looks a pid up (the collector's identity cache); a step of a
/// source without a rank is rank 0 (a single-process job).
pub fn resolve(
    entries: Vec<(Target, Agg)>,
    mut identity: impl FnMut(u32) -> Option<ProcessIdentity>,
    bucket_cap: usize,
) -> (Vec<StepTime>, Vec<WorkloadSample>) {
    let mut steps: BTreeMap<(String, u32), (Placement, Agg)> = BTreeMap::new();
    type WKey = (String, i32, &'static str, String, String, u32);
    let mut work: BTreeMap<WKey, (Placement, Agg)> = BTreeMap::new();
    let mut ids: BTreeMap<u32, Option<ProcessIdentity>> = BTreeMap::new();
    for (t, agg) in entries {
        let id = t
            .source
            .pid
            .and_then(|p| ids.entry(p).or_insert_with(|| identity(p)).as_ref());
        let pl = place(&t.source, id);
        let slot = if t.signal == Signal::StepSeconds {
            steps
                .entry((pl.job.clone(), pl.rank.unwrap_or(0)))
                .or_insert_with(|| (pl.clone(), Agg::default()))
        } else {
            let rank = pl.rank.and_then(|r| i32::try_from(r).ok()).unwrap_or(-1);
            let key = (
                pl.job.clone(),
                rank,
                t.signal.as_str(),
                t.model,
                t.provider,
                t.source.pid.unwrap_or(0),
            );
            work.entry(key)
                .or_insert_with(|| (pl.clone(), Agg::default()))
        };
        if slot.0.device < 0 {
            slot.0.device = pl.device;
        }
        if slot.0.hca.is_empty() {
            slot.0.hca = pl.hca;
        }
        slot.1.merge(&agg, bucket_cap);
    }
    let steps = steps
        .into_iter()
        .filter(|(_, (_, a))| a.count > 0)
        .map(|((job, rank), (pl, a))| StepTime {
            job,
            rank,
            seconds: a.sum / a.count as f64,
            device: pl.device,
            hca: pl.hca,
            count: u32::try_from(a.count).unwrap_or(u32::MAX),
            max_seconds: a.max.unwrap_or(0.0),
        })
        .collect();
    let work = work
        .into_iter()
        .map(
            |((job, rank, signal, model, provider, pid), (pl, a))| WorkloadSample {
                job,
                rank,
                signal: signal.to_string(),
                model,
                provider,
                count: a.count,
                sum: a.sum,
                p50: a.quantile(0.5).unwrap_or(0.0),
                p99: a.quantile(0.99).unwrap_or(0.0),
                max: a.max.unwrap_or(0.0),
                device: pl.device,
                hca: pl.hca,
                pid,
            },
        )
        .collect();
    (steps, work)
}
