//! Workload labels on device series: which job, rank, Kubernetes pod and
//! Slurm job a GPU is working for, from the processes seen using it (CUDA
//! probes → `/proc/<pid>/maps` → `/dev/nvidia<minor>`) and from the
//! scheduler's job files ([`crate::jobmap`]). One label set per device, so
//! the cardinality is bounded by the devices, never by processes (no pid
//! label).
use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use crate::{
    identity::{IdentityCache, ProcessIdentity, Workload},
    jobmap::JobMap,
};

/// The labels a device series carries when its workload is known; empty
/// values are left out of the series.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct WorkloadLabels {
    /// dcgm-exporter's Kubernetes labels.
    pub container: String,
    pub namespace: String,
    pub pod: String,
    /// dcgm-exporter's HPC job label (the Slurm job id), as the `DCGM_FI_*`
    /// copies carry it.
    pub hpc_job: String,
    /// faultline's job (Slurm job, torchelastic run, or pod UID) and rank,
    /// as on the CUDA and verbs series (`hpc_job` on faultline's families).
    pub job: String,
    pub rank: String,
}

impl WorkloadLabels {
    /// From a process's identity.
    pub fn of(id: &ProcessIdentity) -> Self {
        let env = |k: &str| {
            id.env
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let mut l = Self {
            job: id.job().unwrap_or_default(),
            rank: id.rank().map(|r| r.to_string()).unwrap_or_default(),
            ..Self::default()
        };
        match &id.workload {
            Workload::Slurm { job, .. } => l.hpc_job = job.clone(),
            Workload::Kubernetes { pod_uid, container } => {
                l.namespace = env("POD_NAMESPACE");
                l.pod = [env("POD_NAME"), env("HOSTNAME")]
                    .into_iter()
                    .find(|v| !v.is_empty())
                    .unwrap_or_else(|| pod_uid.clone());
                l.container = container
                    .as_deref()
                    .map(|c| c.chars().take(12).collect())
                    .unwrap_or_default();
            }
            _ => {}
        }
        if l.hpc_job.is_empty() {
            l.hpc_job = env("SLURM_JOB_ID");
        }
        l
    }

    /// The non-empty labels of faultline's own families, in a fixed order.
    /// The workload's job is `hpc_job` (dcgm-exporter's name; `job` is
    /// Prometheus's scrape job): faultline's job, as on the CUDA, verbs and
    /// NCCL series, else the job files' Slurm job.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        let job = if self.job.is_empty() {
            &self.hpc_job
        } else {
            &self.job
        };
        [
            ("container", self.container.as_str()),
            ("namespace", self.namespace.as_str()),
            ("pod", self.pod.as_str()),
            ("hpc_job", job.as_str()),
            ("rank", self.rank.as_str()),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs().is_empty()
    }
}

/// How this node's GPUs are named: `/dev/nvidia<minor>` and UUID → NVML index.
#[derive(Clone, Debug, Default)]
pub struct GpuIndex {
    pub by_minor: BTreeMap<u32, u32>,
    pub by_uuid: BTreeMap<String, u32>,
}

impl GpuIndex {
    /// The NVML indices behind a process's CUDA device ordinals: through
    /// its `CUDA_VISIBLE_DEVICES` (indices or UUIDs) when set, else the
    /// ordinal is the index.
    fn of_ordinals(&self, id: &ProcessIdentity, ordinals: &BTreeSet<i32>) -> BTreeSet<u32> {
        let visible: Option<Vec<&str>> = id
            .env
            .iter()
            .find(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
            .map(|(_, v)| v.split(',').map(str::trim).collect());
        ordinals
            .iter()
            .filter_map(|&o| {
                let o = usize::try_from(o).ok()?;
                match &visible {
                    None => u32::try_from(o).ok(),
                    Some(list) => {
                        let e = list.get(o)?;
                        e.parse().ok().or_else(|| self.by_uuid.get(*e).copied())
                    }
                }
            })
            .filter(|i| self.by_minor.values().any(|v| v == i))
            .collect()
    }
}

/// The workload of each GPU (by NVML index) and how many distinct workloads
/// were seen on it. `procs` are the processes the CUDA probes saw with the
/// CUDA device ordinals they used; a process's GPUs are the
/// `/dev/nvidia<minor>` files in its maps, else its ordinals through
/// `CUDA_VISIBLE_DEVICES`. A GPU shared by several workloads gets the first
/// in label order (deterministic) and its count says it is shared. A GPU the
/// job files assign to a Slurm job carries that job's id as `hpc_job` even
/// when no process of it was seen.
pub fn gpu_workloads(
    index: &GpuIndex,
    procs: &BTreeMap<u32, BTreeSet<i32>>,
    ids: &mut IdentityCache,
    proc_root: &Path,
    jobs: &JobMap,
) -> BTreeMap<u32, (WorkloadLabels, usize)> {
    let mut seen: BTreeMap<u32, BTreeSet<WorkloadLabels>> = BTreeMap::new();
    for (&pid, ordinals) in procs.iter().take(4096) {
        let minors = gpus_of_pid(proc_root, pid);
        let Some(id) = ids.get(pid) else { continue };
        let gpus: BTreeSet<u32> = if minors.is_empty() {
            index.of_ordinals(id, ordinals)
        } else {
            minors
                .iter()
                .filter_map(|m| index.by_minor.get(m).copied())
                .collect()
        };
        let l = WorkloadLabels::of(id);
        if l.is_empty() {
            continue;
        }
        for i in gpus {
            seen.entry(i).or_default().insert(l.clone());
        }
    }
    let mut out = BTreeMap::new();
    for (&i, set) in &seen {
        if let Some(first) = set.iter().next() {
            out.insert(i, (first.clone(), set.len()));
        }
    }
    for &i in index.by_minor.values() {
        let Some(j) = jobs.job_of_gpu(i) else {
            continue;
        };
        let e = out.entry(i).or_insert_with(|| {
            (
                WorkloadLabels {
                    job: j.job.clone(),
                    ..WorkloadLabels::default()
                },
                1,
            )
        });
        if e.0.hpc_job.is_empty() {
            e.0.hpc_job = j.job.clone();
        }
    }
    out
}

/// GPU minor numbers a process has open, from `/dev/nvidia<N>` in its maps.
pub fn gpus_of_pid(proc_root: &Path, pid: u32) -> BTreeSet<u32> {
    let Ok(maps) = std::fs::read_to_string(proc_root.join(pid.to_string()).join("maps")) else {
        return BTreeSet::new();
    };
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter_map(|p| p.strip_prefix("/dev/nvidia"))
        .filter_map(|n| n.parse::<u32>().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(workload: Workload, env: &[(&str, &str)]) -> ProcessIdentity {
        ProcessIdentity {
            pid: 1,
            cgroup: String::new(),
            workload,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
        }
    }

    #[test]
    fn kubernetes_and_slurm_labels() {
        let k = WorkloadLabels::of(&id(
            Workload::Kubernetes {
                pod_uid: "0b7e3c1e-5f4a-4c7d-9d1e-2a3b4c5d6e7f".into(),
                container: Some("4f6c0a1b2c3d4e5f60718293a4b5c6d7".into()),
            },
            &[
                ("HOSTNAME", "trainer-0"),
                ("POD_NAMESPACE", "ml"),
                ("RANK", "3"),
            ],
        ));
        assert_eq!(
            k.pairs(),
            [
                ("container", "4f6c0a1b2c3d"),
                ("namespace", "ml"),
                ("pod", "trainer-0"),
                ("hpc_job", "0b7e3c1e-5f4a-4c7d-9d1e-2a3b4c5d6e7f"),
                ("rank", "3"),
            ]
        );
        let s = WorkloadLabels::of(&id(
            Workload::Slurm {
                job: "4711".into(),
                step: Some("0".into()),
            },
            &[("SLURM_PROCID", "5")],
        ));
        assert_eq!(s.pairs(), [("hpc_job", "4711"), ("rank", "5")]);
        assert!(WorkloadLabels::of(&id(Workload::Unknown, &[])).is_empty());
    }

    #[test]
    fn gpus_get_their_processes_workload_and_job_files_fill_the_rest() {
        let d = std::env::temp_dir().join(format!("faultline-workload-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        for (pid, cg, env, dev) in [
            (
                10u32,
                "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",
                "SLURM_PROCID=0\0",
                "/dev/nvidia0",
            ),
            (11, "0::/user.slice\n", "", "/dev/nvidia1"),
            (
                12,
                "0::/system.slice/slurmstepd.scope/job_78/step_0/user/task_0\n",
                "SLURM_PROCID=1\0",
                "/dev/nvidia0",
            ),
        ] {
            let p = d.join(pid.to_string());
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("cgroup"), cg).unwrap();
            std::fs::write(p.join("environ"), env).unwrap();
            std::fs::write(
                p.join("maps"),
                format!("7f00-7f10 rw-s 00000000 00:05 1 {dev}\n"),
            )
            .unwrap();
        }
        // A process without /dev/nvidia* in its maps (a container with other
        // device names): its CUDA ordinal 1 through CUDA_VISIBLE_DEVICES=2,1.
        let p = d.join("13");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("cgroup"),
            "0::/system.slice/slurmstepd.scope/job_91/step_0/user/task_0\n",
        )
        .unwrap();
        std::fs::write(
            p.join("environ"),
            "CUDA_VISIBLE_DEVICES=GPU-c,GPU-b\0SLURM_PROCID=4\0",
        )
        .unwrap();
        std::fs::write(p.join("maps"), "").unwrap();
        let mut ids = IdentityCache::new(&d, 64);
        let index = GpuIndex {
            by_minor: BTreeMap::from([(0, 0), (1, 1), (2, 2)]),
            by_uuid: BTreeMap::from([("GPU-b".into(), 1), ("GPU-c".into(), 2)]),
        };
        let one = |o: i32| BTreeSet::from([o]);
        let procs = BTreeMap::from([
            (10, one(0)),
            (11, one(0)),
            (12, one(0)),
            (13, one(1)),
            (999, one(0)),
        ]);
        let jobs = JobMap {
            jobs: vec![crate::jobmap::JobFile {
                job: "90".into(),
                user: "carol".into(),
                gpus: vec![2],
                hcas: vec![],
            }],
            ..JobMap::default()
        };
        let w = gpu_workloads(&index, &procs, &mut ids, &d, &jobs);
        let (g0, n0) = &w[&0];
        assert_eq!((g0.job.as_str(), g0.rank.as_str(), *n0), ("77", "0", 2));
        let (g1, n1) = &w[&1];
        assert_eq!(
            (g1.job.as_str(), g1.rank.as_str(), *n1),
            ("91", "4", 1),
            "pid 11 has no workload; pid 13's ordinal 1 is GPU-b"
        );
        assert_eq!(w[&2].0.pairs(), [("hpc_job", "90")]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
