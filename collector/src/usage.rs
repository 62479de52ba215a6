//! Usage per job and team: what each job used of each shared resource on
//! this host in a window (GPU time, energy and memory, CUDA launches and
//! copies, block requests and bytes, fabric bytes), for chargeback and for
//! the correlator's interference detector.
//!
//! Built from the rows the other sources put on the wire this window (block
//! rows carry their submitter cgroup's job, CUDA rows their process's job)
//! plus what the wire does not carry: NVML's per-process view of each GPU
//! and its total-energy counter, and the bytes each process posted through
//! verbs. Every quantity is either measured per job (`exact`: block
//! requests by cgroup, CUDA calls and verbs posts by process) or a device
//! total split by a stated share (`method`); whatever cannot be attributed
//! goes to a row with an empty job, never dropped, so per-job rows add up to
//! the device's totals.
use std::collections::BTreeMap;

use proto::v1 as pb;

use crate::prom_text::{Kind, Text};

/// One GPU's reading this window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuReading {
    pub index: u32,
    pub lost: bool,
    /// Device utilisation (percent of time a kernel ran).
    pub util_pct: Option<u32>,
    /// NVML's total-energy counter (mJ since driver load).
    pub energy_mj: Option<u64>,
    /// Compute processes on the GPU (NVML), with their SM utilisation when
    /// the driver reports per-process utilisation.
    pub procs: Vec<GpuProc>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuProc {
    pub pid: u32,
    pub sm_pct: Option<u32>,
    pub mem_bytes: Option<u64>,
}

/// Who a process is for usage: its job and team (empty when unknown) and
/// the HCA its NCCL uses, when one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Who {
    pub job: String,
    pub team: String,
    pub hca: Option<String>,
}

/// The window's inputs.
#[derive(Debug, Default)]
pub struct Inputs<'a> {
    /// Window length in seconds.
    pub seconds: f64,
    pub block: &'a [pb::BlockStat],
    pub cuda: &'a [pb::CudaProc],
    pub gpus: &'a [GpuReading],
    /// Bytes each process posted through verbs in the window (send and
    /// receive work requests' scatter/gather bytes).
    pub verbs_posted: &'a [(u32, u64)],
    /// The verbs data-path probes are attached: fabric bytes come from them,
    /// not from the port counters.
    pub verbs_active: bool,
    pub ib_ports: &'a [pb::IbPort],
}

/// How shared quantities were split (`JobUsage.method`).
pub mod method {
    pub const NVML_PROCESS: &str = "nvml_process";
    pub const DEVICE_SHARE: &str = "device_share";
    pub const VERBS: &str = "verbs";
    pub const PORT_SHARE: &str = "port_share";
    pub const EXACT: &str = "exact";
}

/// Cumulative usage of one (job, team) for the Prometheus counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub gpu_alloc_seconds: f64,
    pub gpu_busy_seconds: f64,
    pub energy_joules: f64,
    pub peak_mem_bytes: u64,
    pub launches: u64,
    pub copy_bytes: u64,
    pub sync_wait_ns: u64,
    pub io_requests: u64,
    pub io_bytes: u64,
    pub io_device_ns: u64,
    pub fabric_bytes: u64,
}

impl Totals {
    fn add(&mut self, u: &pb::JobUsage) {
        self.gpu_alloc_seconds += u.gpu_alloc_seconds;
        self.gpu_busy_seconds += u.gpu_busy_seconds;
        self.energy_joules += u.energy_joules;
        self.peak_mem_bytes = self.peak_mem_bytes.max(u.peak_mem_bytes);
        self.launches += u.launches;
        self.copy_bytes += u.copy_bytes;
        self.sync_wait_ns += u.sync_wait_ns;
        self.io_requests += u.io_requests;
        self.io_bytes += u.io_bytes;
        self.io_device_ns += u.io_device_ns;
        self.fabric_bytes += u.fabric_bytes;
    }
}

/// The job label of the (job, team) pairs beyond `max_jobs`.
pub const OVERFLOW_JOB: &str = "_overflow";

/// Turns each window's inputs into usage rows and keeps the cumulative
/// counters per (job, team), at most `max_jobs` of them.
#[derive(Debug)]
pub struct Accountant {
    /// The configured job → team mapping (`[usage] teams`): it wins.
    teams: BTreeMap<String, String>,
    /// Teams learned from processes' environments, per job (bounded like the totals).
    learned: BTreeMap<String, String>,
    prev_energy: BTreeMap<u32, u64>,
    prev_port: BTreeMap<(String, u32), u64>,
    totals: BTreeMap<(String, String), Totals>,
    max_jobs: usize,
    /// Windows' usage folded into `_overflow` because the table was full.
    pub folded: u64,
}

type Key = (String, String, &'static str, String);

impl Accountant {
    pub fn new(teams: BTreeMap<String, String>, max_jobs: usize) -> Self {
        Self {
            teams,
            learned: BTreeMap::new(),
            prev_energy: BTreeMap::new(),
            prev_port: BTreeMap::new(),
            totals: BTreeMap::new(),
            max_jobs: max_jobs.max(1),
            folded: 0,
        }
    }

    /// The team of `job`: the configured mapping, else what its processes
    /// said (`proc_team`), else what an earlier process of the job said.
    fn team(&mut self, job: &str, proc_team: &str) -> String {
        if let Some(t) = self.teams.get(job) {
            return t.clone();
        }
        if job.is_empty() {
            return String::new();
        }
        if !proc_team.is_empty() {
            if self.learned.len() < self.max_jobs || self.learned.contains_key(job) {
                self.learned.insert(job.to_string(), proc_team.to_string());
            }
            return proc_team.to_string();
        }
        self.learned.get(job).cloned().unwrap_or_default()
    }

    /// One window: the usage rows (sorted by job, team, kind, resource).
    /// `who` resolves a pid.
    pub fn window(
        &mut self,
        inp: &Inputs<'_>,
        mut who: impl FnMut(u32) -> Who,
    ) -> Vec<pb::JobUsage> {
        let w = inp.seconds.max(0.0);
        let mut rows: BTreeMap<Key, pb::JobUsage> = BTreeMap::new();
        let mut resolved: BTreeMap<u32, Who> = BTreeMap::new();
        let mut lookup =
            |pid: u32| -> Who { resolved.entry(pid).or_insert_with(|| who(pid)).clone() };

        // GPUs: per device, the jobs with a process on it (NVML's list and
        // the CUDA rows), the device's busy time and energy split by share.
        let mut host_gpu_share: BTreeMap<(String, String), f64> = BTreeMap::new();
        for g in inp.gpus.iter().filter(|g| !g.lost) {
            let res = g.index.to_string();
            // (job, team) → (sm pct sum, launches, mem bytes)
            let mut jobs: BTreeMap<(String, String), (f64, u64, u64)> = BTreeMap::new();
            let mut per_proc = false;
            for p in &g.procs {
                let id = lookup(p.pid);
                let team = self.team(&id.job, &id.team);
                let e = jobs.entry((id.job, team)).or_default();
                if let Some(sm) = p.sm_pct {
                    per_proc = true;
                    e.0 += f64::from(sm);
                }
                e.2 += p.mem_bytes.unwrap_or(0);
            }
            for c in inp.cuda.iter().filter(|c| c.device == g.index as i32) {
                let id = lookup(c.pid);
                let job = if c.job.is_empty() {
                    id.job
                } else {
                    c.job.clone()
                };
                let team = self.team(&job, &id.team);
                jobs.entry((job, team)).or_default().1 += c.launches;
            }
            let busy = g.util_pct.map_or(0.0, |u| f64::from(u.min(100)) / 100.0) * w;
            let energy_j = match (g.energy_mj, self.prev_energy.get(&g.index)) {
                (Some(cur), Some(&prev)) if cur >= prev => (cur - prev) as f64 / 1000.0,
                _ => 0.0,
            };
            if let Some(e) = g.energy_mj {
                self.prev_energy.insert(g.index, e);
            }
            let sm_sum: f64 = jobs.values().map(|v| v.0).sum();
            let launch_sum: u64 = jobs.values().map(|v| v.1).sum();
            let n = jobs.len() as f64;
            let by_sm = per_proc && sm_sum > 0.0;
            let how = if by_sm {
                method::NVML_PROCESS
            } else {
                method::DEVICE_SHARE
            };
            let share = |v: &(f64, u64, u64)| -> f64 {
                if by_sm {
                    v.0 / sm_sum
                } else if launch_sum > 0 {
                    v.1 as f64 / launch_sum as f64
                } else {
                    1.0 / n
                }
            };
            if jobs.is_empty() {
                if busy > 0.0 || energy_j > 0.0 {
                    let r = row(&mut rows, "", "", "gpu", &res);
                    r.gpu_busy_seconds += busy;
                    r.energy_joules += energy_j;
                    r.resource_util = busy / w.max(1e-9);
                }
                continue;
            }
            for ((job, team), v) in &jobs {
                let s = share(v);
                let r = row(&mut rows, job, team, "gpu", &res);
                r.gpu_alloc_seconds += w;
                r.gpu_busy_seconds += busy * s;
                r.energy_joules += energy_j * s;
                r.peak_mem_bytes = r.peak_mem_bytes.max(v.2);
                r.method = how.to_string();
                r.resource_util = busy / w.max(1e-9);
                *host_gpu_share
                    .entry((job.clone(), team.clone()))
                    .or_default() += 1.0;
            }
        }
        // CUDA calls per job and device (also on GPUs NVML does not list).
        for c in inp.cuda {
            let id = lookup(c.pid);
            let job = if c.job.is_empty() {
                id.job
            } else {
                c.job.clone()
            };
            let team = self.team(&job, &id.team);
            let r = row(&mut rows, &job, &team, "gpu", &c.device.to_string());
            r.launches += c.launches;
            r.copy_bytes += c.copy_bytes;
            r.sync_wait_ns += c.sync_wait_ns;
            if r.method.is_empty() {
                r.method = method::EXACT.into();
            }
        }
        // Storage: block rows are per submitter cgroup already.
        let mut in_flight: BTreeMap<String, f64> = BTreeMap::new();
        for b in inp.block {
            let team = self.team(&b.job, "");
            let r = row(&mut rows, &b.job, &team, "storage", &b.device);
            r.io_requests += b.requests;
            r.io_bytes += b.bytes;
            r.io_device_ns += b.latency_sum_ns;
            r.method = method::EXACT.into();
            *in_flight.entry(b.device.clone()).or_default() += b.latency_sum_ns as f64 / 1e9;
        }
        // Fabric: bytes posted through verbs, per process's HCA.
        for &(pid, bytes) in inp.verbs_posted {
            let id = lookup(pid);
            let team = self.team(&id.job, &id.team);
            let res = id.hca.clone().unwrap_or_else(|| "verbs".into());
            let r = row(&mut rows, &id.job, &team, "fabric", &res);
            r.fabric_bytes += bytes;
            r.method = method::VERBS.into();
        }
        // Port bytes where no verbs probe counts them: split by the jobs'
        // GPU share on this host, unattributed when no job holds a GPU.
        let gpu_total: f64 = host_gpu_share.values().sum();
        for p in inp.ib_ports {
            let Some(&words) = p.counters.get("port_xmit_data") else {
                continue;
            };
            let key = (p.hca.clone(), p.port);
            let prev = self.prev_port.insert(key, words);
            let Some(prev) = prev.filter(|&v| v <= words) else {
                continue;
            };
            let bytes = (words - prev).saturating_mul(4);
            let res = format!("{}/{}", p.hca, p.port);
            let util = if p.rate_bytes_per_sec > 0 && w > 0.0 {
                bytes as f64 / (p.rate_bytes_per_sec as f64 * w)
            } else {
                0.0
            };
            if inp.verbs_active {
                continue;
            }
            if gpu_total <= 0.0 {
                if bytes > 0 {
                    let r = row(&mut rows, "", "", "fabric", &res);
                    r.fabric_bytes += bytes;
                    r.method = method::PORT_SHARE.into();
                    r.resource_util = util;
                }
                continue;
            }
            // Integer split; the remainder goes to the last job so the rows
            // add up to the port's bytes exactly.
            let mut left = bytes;
            let n = host_gpu_share.len();
            for (i, ((job, team), s)) in host_gpu_share.iter().enumerate() {
                let part = if i + 1 == n {
                    left
                } else {
                    ((bytes as f64 * s / gpu_total).floor() as u64).min(left)
                };
                left -= part;
                let r = row(&mut rows, job, team, "fabric", &res);
                r.fabric_bytes += part;
                r.method = method::PORT_SHARE.into();
                r.resource_util = util;
            }
        }
        for ((_, _, kind, res), r) in rows.iter_mut() {
            if *kind == "storage" {
                r.resource_util = in_flight.get(res).copied().unwrap_or(0.0) / w.max(1e-9);
            }
        }
        let out: Vec<pb::JobUsage> = rows.into_values().collect();
        for u in &out {
            let key = (u.job.clone(), u.team.clone());
            let key = if self.totals.contains_key(&key) || self.totals.len() < self.max_jobs {
                key
            } else {
                self.folded += 1;
                (OVERFLOW_JOB.to_string(), String::new())
            };
            self.totals.entry(key).or_default().add(u);
        }
        out
    }

    pub fn totals(&self) -> &BTreeMap<(String, String), Totals> {
        &self.totals
    }

    /// The cumulative counters per job and team.
    pub fn render_prometheus(&self) -> String {
        let mut t = Text::new();
        for ((job, team), v) in &self.totals {
            let l = [("job", job.as_str()), ("team", team.as_str())];
            for (name, help, kind, val) in [
                ("faultline_usage_gpu_allocated_seconds_total", "GPU-seconds the job held a GPU (a process with a context on it)", Kind::Counter, v.gpu_alloc_seconds),
                ("faultline_usage_gpu_busy_seconds_total", "The job's share of its GPUs' busy time (NVML per-process utilisation, else the device's split by CUDA launches)", Kind::Counter, v.gpu_busy_seconds),
                ("faultline_usage_gpu_energy_joules_total", "The job's share of its GPUs' energy (NVML total-energy counter split by the busy shares)", Kind::Counter, v.energy_joules),
                ("faultline_usage_gpu_memory_peak_bytes", "Largest GPU memory the job's processes held on one GPU", Kind::Gauge, v.peak_mem_bytes as f64),
                ("faultline_usage_cuda_launches_total", "Kernel launches of the job's processes", Kind::Counter, v.launches as f64),
                ("faultline_usage_cuda_copy_bytes_total", "Bytes the job's processes copied with cuMemcpy*", Kind::Counter, v.copy_bytes as f64),
                ("faultline_usage_cuda_sync_wait_seconds_total", "Time the job's processes spent blocked in CUDA synchronisation", Kind::Counter, v.sync_wait_ns as f64 / 1e9),
                ("faultline_usage_storage_requests_total", "Block requests the job's cgroups submitted (completed)", Kind::Counter, v.io_requests as f64),
                ("faultline_usage_storage_bytes_total", "Bytes of the job's block requests", Kind::Counter, v.io_bytes as f64),
                ("faultline_usage_storage_device_seconds_total", "Summed service time of the job's block requests", Kind::Counter, v.io_device_ns as f64 / 1e9),
                ("faultline_usage_fabric_bytes_total", "Bytes the job posted through verbs, or its share of the ports' transmitted bytes where no verbs probe runs", Kind::Counter, v.fabric_bytes as f64),
            ] {
                t.sample(name, help, kind, &l, val);
            }
        }
        t.sample(
            "faultline_usage_folded_rows_total",
            "Usage rows counted under job=\"_overflow\" because [usage] max_jobs (job, team) pairs were already tracked",
            Kind::Counter,
            &[],
            self.folded,
        );
        t.render()
    }
}

fn row<'a>(
    rows: &'a mut BTreeMap<Key, pb::JobUsage>,
    job: &str,
    team: &str,
    kind: &'static str,
    res: &str,
) -> &'a mut pb::JobUsage {
    rows.entry((job.to_string(), team.to_string(), kind, res.to_string()))
        .or_insert_with(|| pb::JobUsage {
            job: job.to_string(),
            team: team.to_string(),
            resource_kind: kind.to_string(),
            resource: res.to_string(),
            ..pb::JobUsage::default()
        })
}

#[cfg(test)]
mod tests;
