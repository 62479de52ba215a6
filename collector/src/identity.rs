//! Who is who: the host's identity, and for each process the job, rank and
//! devices it belongs to — from its cgroup path (Slurm, Kubernetes, systemd)
//! and, where readable, its environment (`SLURM_*`, `RANK`, …). Cached per
//! pid with a bound, refreshed when the pid execs.
use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
};

/// Host identity; `boot_id` changes on every boot (a collector restart
/// within one boot keeps it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostIdentity {
    pub hostname: String,
    pub machine_id: String,
    pub boot_id: String,
}

impl HostIdentity {
    /// Reads `<proc>/sys/kernel/hostname`, `<etc>/machine-id` and
    /// `<proc>/sys/kernel/random/boot_id`; a missing file leaves its field empty.
    pub fn read(proc_root: &Path, etc_root: &Path) -> Self {
        let rd = |p: PathBuf| {
            fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Self {
            hostname: rd(proc_root.join("sys/kernel/hostname")),
            machine_id: rd(etc_root.join("machine-id")),
            boot_id: rd(proc_root.join("sys/kernel/random/boot_id")),
        }
    }
}

/// What a cgroup path says about the workload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Workload {
    /// A Slurm job (and step, when the path has one).
    Slurm { job: String, step: Option<String> },
    /// A Kubernetes pod (UID) and container id.
    Kubernetes {
        pod_uid: String,
        container: Option<String>,
    },
    /// A systemd unit (`foo.service`, `session-3.scope`).
    Systemd { unit: String },
    #[default]
    Unknown,
}

/// Classifies a cgroup v2 (or v1) path.
pub fn classify_cgroup(path: &str) -> Workload {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    // Slurm: .../job_<id>/step_<s>/... (cgroup v2 under slurmstepd.scope, or v1 /slurm/uid_N/job_N).
    if let Some(i) = parts.iter().position(|p| p.starts_with("job_")) {
        let job = parts[i].trim_start_matches("job_").to_string();
        if !job.is_empty() && job.bytes().all(|b| b.is_ascii_digit()) {
            let step = parts
                .get(i + 1)
                .and_then(|s| s.strip_prefix("step_"))
                .map(str::to_string);
            return Workload::Slurm { job, step };
        }
    }
    // Kubernetes: kubepods[.slice]/.../pod<uid>[.slice]/<container> or
    // kubepods-<qos>-pod<uid>.slice/cri-containerd-<id>.scope.
    if parts.iter().any(|p| p.starts_with("kubepods")) {
        let mut pod_uid = None;
        let mut container = None;
        for p in &parts {
            let p = p.trim_end_matches(".slice");
            if let Some(idx) = p.rfind("pod") {
                let uid = &p[idx + 3..];
                if uid.len() >= 32 && !uid.contains('-') || uid.len() >= 36 {
                    pod_uid = Some(uid.replace('_', "-"));
                    continue;
                }
            }
            if pod_uid.is_some() {
                let c = p.trim_end_matches(".scope");
                let c = c.rsplit('-').next().unwrap_or(c);
                if c.len() >= 12 {
                    container = Some(c.to_string());
                }
            }
        }
        if let Some(pod_uid) = pod_uid {
            return Workload::Kubernetes { pod_uid, container };
        }
    }
    if let Some(unit) = parts
        .iter()
        .rev()
        .find(|p| p.ends_with(".service") || p.ends_with(".scope"))
    {
        return Workload::Systemd {
            unit: (*unit).to_string(),
        };
    }
    Workload::Unknown
}

/// Environment variables faultline reads for attribution.
pub const ENV_KEYS: &[&str] = &[
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "NCCL_IB_HCA",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ACCOUNT",
    // Kubernetes: the pod's name (runtimes set HOSTNAME to it; POD_NAME and
    // POD_NAMESPACE where the pod spec passes them from the downward API).
    "HOSTNAME",
    "POD_NAME",
    "POD_NAMESPACE",
];

/// One process's identity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub cgroup: String,
    pub workload: Workload,
    /// The `ENV_KEYS` found in the environment.
    pub env: Vec<(String, String)>,
}

impl ProcessIdentity {
    fn env(&self, k: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    /// Job id: Slurm's (environment or cgroup), else torchelastic's run id, else the pod UID.
    pub fn job(&self) -> Option<String> {
        if let Some(j) = self.env("SLURM_JOB_ID") {
            return Some(j.to_string());
        }
        match &self.workload {
            Workload::Slurm { job, .. } => return Some(job.clone()),
            Workload::Kubernetes { pod_uid, .. } if self.env("TORCHELASTIC_RUN_ID").is_none() => {
                return Some(pod_uid.clone());
            }
            _ => {}
        }
        self.env("TORCHELASTIC_RUN_ID").map(str::to_string)
    }

    /// Team for usage: the Slurm account (`SLURM_JOB_ACCOUNT`), else the
    /// Kubernetes namespace (`POD_NAMESPACE`, set from the downward API).
    /// The `[usage] teams` mapping overrides both (see `usage`).
    pub fn team(&self) -> Option<String> {
        self.env("SLURM_JOB_ACCOUNT")
            .or_else(|| self.env("POD_NAMESPACE"))
            .filter(|t| !t.is_empty())
            .map(str::to_string)
    }

    /// Global rank: `RANK`, else `SLURM_PROCID`.
    pub fn rank(&self) -> Option<u32> {
        self.env("RANK")
            .or_else(|| self.env("SLURM_PROCID"))
            .and_then(|v| v.parse().ok())
    }

    pub fn local_rank(&self) -> Option<u32> {
        self.env("LOCAL_RANK")
            .or_else(|| self.env("SLURM_LOCALID"))
            .and_then(|v| v.parse().ok())
    }

    /// HCAs the process's NCCL may use (`NCCL_IB_HCA`, e.g. `mlx5_0:1,mlx5_1`).
    pub fn hcas(&self) -> Vec<String> {
        self.env("NCCL_IB_HCA")
            .map(|v| {
                v.trim_start_matches(['^', '='])
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.split(':').next().unwrap_or(s).to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl ProcessIdentity {
    /// `job=… rank=…` (what is known), or the cgroup path.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(j) = self.job() {
            parts.push(format!("job={j}"));
        }
        if let Some(r) = self.rank() {
            parts.push(format!("rank={r}"));
        }
        match &self.workload {
            Workload::Kubernetes { pod_uid, .. } => parts.push(format!("pod={pod_uid}")),
            Workload::Systemd { unit } => parts.push(format!("unit={unit}")),
            _ => {}
        }
        if parts.is_empty() {
            parts.push(format!("cgroup={}", self.cgroup));
        }
        parts.join(" ")
    }
}

/// Parses `/proc/<pid>/environ` (NUL-separated), keeping only `ENV_KEYS`.
pub fn parse_environ(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let s = std::str::from_utf8(kv).ok()?;
            let (k, v) = s.split_once('=')?;
            ENV_KEYS
                .contains(&k)
                .then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Bounded per-pid cache over a `/proc` root.
#[derive(Debug)]
pub struct IdentityCache {
    proc_root: PathBuf,
    cache: HashMap<u32, ProcessIdentity>,
    capacity: usize,
    pub evictions: u64,
}

impl IdentityCache {
    pub fn new(proc_root: impl Into<PathBuf>, capacity: usize) -> Self {
        Self {
            proc_root: proc_root.into(),
            cache: HashMap::new(),
            capacity: capacity.max(1),
            evictions: 0,
        }
    }

    /// The identity of `pid` (read on first use). `None` when the process is gone.
    pub fn get(&mut self, pid: u32) -> Option<&ProcessIdentity> {
        if !self.cache.contains_key(&pid) {
            let id = self.read(pid)?;
            if self.cache.len() >= self.capacity {
                // Evict an arbitrary entry: processes that are still alive are re-read on demand.
                if let Some(&k) = self.cache.keys().next() {
                    self.cache.remove(&k);
                    self.evictions += 1;
                }
            }
            self.cache.insert(pid, id);
        }
        self.cache.get(&pid)
    }

    /// `(job, rank)` of `pid` for metric labels: empty strings when unknown.
    pub fn job_rank(&mut self, pid: u32) -> (String, String) {
        match self.get(pid) {
            Some(i) => (
                i.job().unwrap_or_default(),
                i.rank().map(|r| r.to_string()).unwrap_or_default(),
            ),
            None => (String::new(), String::new()),
        }
    }

    /// The processes of `pids` that exited: no longer under the proc root,
    /// or dead and not yet reaped by their parent (a zombie: its counts are
    /// final, its threads gone); their cached identity stays until
    /// [`IdentityCache::forget`].
    /// Each distinct pid is looked at once (callers pass one per map key).
    pub fn gone(&self, pids: impl IntoIterator<Item = u32>) -> std::collections::BTreeSet<u32> {
        let mut pids: std::collections::BTreeSet<u32> = pids.into_iter().collect();
        pids.retain(|pid| exited(&self.proc_root.join(pid.to_string())));
        pids
    }

    pub fn forget(&mut self, pids: &std::collections::BTreeSet<u32>) {
        for pid in pids {
            self.cache.remove(pid);
        }
    }

    /// Forget `pid` (it exec'd or exited): the next lookup re-reads it.
    pub fn invalidate(&mut self, pid: u32) {
        self.cache.remove(&pid);
    }

    pub fn len(&self) -> usize {
        self.cache.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    fn read(&self, pid: u32) -> Option<ProcessIdentity> {
        let dir = self.proc_root.join(pid.to_string());
        let cg = fs::read_to_string(dir.join("cgroup")).ok()?;
        let cgroup = cg
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .or_else(|| cg.lines().find_map(|l| l.splitn(3, ':').nth(2)))
            .unwrap_or("")
            .trim()
            .to_string();
        let env = fs::read(dir.join("environ"))
            .map(|b| parse_environ(&b))
            .unwrap_or_default();
        Some(ProcessIdentity {
            pid,
            workload: classify_cgroup(&cgroup),
            cgroup,
            env,
        })
    }
}

/// Whether the process at `dir` (`/proc/PID`) exited: gone, or a zombie
/// (state `Z`) or dead (`X`) in its `stat`.
fn exited(dir: &Path) -> bool {
    match fs::read_to_string(dir.join("stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|st| st == "Z" || st == "X"),
        Err(_) => !dir.exists(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_is_gone_a_live_process_is_not() {
        let d = std::env::temp_dir().join(format!("faultline-gone-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        for (pid, state) in [(10, "S"), (11, "Z"), (12, "R")] {
            let p = d.join(pid.to_string());
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("stat"), format!("{pid} (a b) {state} 1 1 1\n")).unwrap();
        }
        let ids = IdentityCache::new(&d, 8);
        let gone = ids.gone([10, 11, 12, 13]);
        assert_eq!(gone.into_iter().collect::<Vec<_>>(), vec![11, 13]);
        fs::remove_dir_all(&d).unwrap();
    }
}
