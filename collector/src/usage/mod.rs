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

use crate::prom_text::Text;

use proto::metric::Family;

pub const USAGE_FOLDED_ROWS: Family = Family::counter(
    "faultline_usage_folded_rows_total",
    &[],
    "Usage rows counted under hpc_job=\"_overflow\" because [usage] max_jobs (job, team) pairs were already tracked",
);

const JOB: &[&str] = &["hpc_job", "team"];
pub const USAGE_GPU_ALLOCATED_SECONDS: Family = Family::counter(
    "faultline_usage_gpu_allocated_seconds_total",
    JOB,
    "GPU-seconds the job held a GPU (a process with a context on it)",
);
pub const USAGE_GPU_BUSY_SECONDS: Family = Family::counter(
    "faultline_usage_gpu_busy_seconds_total",
    JOB,
    "The job's share of its GPUs' busy time (NVML per-process utilisation, else the device's split by CUDA launches)",
);
pub const USAGE_GPU_ENERGY_JOULES: Family = Family::counter(
    "faultline_usage_gpu_energy_joules_total",
    JOB,
    "The job's share of its GPUs' energy (NVML total-energy counter split by the busy shares)",
);
pub const USAGE_GPU_MEMORY_PEAK_BYTES: Family = Family::gauge(
    "faultline_usage_gpu_memory_peak_bytes",
    JOB,
    "Largest GPU memory the job's processes held on one GPU",
);
pub const USAGE_CUDA_LAUNCHES: Family = Family::counter(
    "faultline_usage_cuda_launches_total",
    JOB,
    "Kernel launches of the job's processes",
);
pub const USAGE_CUDA_COPY_BYTES: Family = Family::counter(
    "faultline_usage_cuda_copy_bytes_total",
    JOB,
    "Bytes the job's processes copied with cuMemcpy*",
);
pub const USAGE_CUDA_SYNC_WAIT_SECONDS: Family = Family::counter(
    "faultline_usage_cuda_sync_wait_seconds_total",
    JOB,
    "Time the job's processes spent blocked in CUDA synchronisation",
);
pub const USAGE_STORAGE_REQUESTS: Family = Family::counter(
    "faultline_usage_storage_requests_total",
    JOB,
    "Block requests the job's cgroups submitted (completed)",
);
pub const USAGE_STORAGE_BYTES: Family = Family::counter(
    "faultline_usage_storage_bytes_total",
    JOB,
    "Bytes of the job's block requests",
);
pub const USAGE_STORAGE_DEVICE_SECONDS: Family = Family::counter(
    "faultline_usage_storage_device_seconds_total",
    JOB,
    "Summed service time of the job's block requests",
);
pub const USAGE_FABRIC_BYTES: Family = Family::counter(
    "faultline_usage_fabric_bytes_total",
    JOB,
    "Bytes the job posted through verbs, or its share of the ports' transmitted bytes where no verbs probe runs",
);

/// The families above, for `crate::agent::describe::all`.
pub const FAMILIES: &[&Family] = &[
    &USAGE_FOLDED_ROWS,
    &USAGE_GPU_ALLOCATED_SECONDS,
    &USAGE_GPU_BUSY_SECONDS,
    &USAGE_GPU_ENERGY_JOULES,
    &USAGE_GPU_MEMORY_PEAK_BYTES,
    &USAGE_CUDA_LAUNCHES,
    &USAGE_CUDA_COPY_BYTES,
    &USAGE_CUDA_SYNC_WAIT_SECONDS,
    &USAGE_STORAGE_REQUESTS,
    &USAGE_STORAGE_BYTES,
    &USAGE_STORAGE_DEVICE_SECONDS,
    &USAGE_FABRIC_BYTES,
];

pub mod section;
#[cfg(agent)]
mod source;
mod window;
pub use section::UsageSection;
#[cfg(agent)]
pub use source::{GpuReadings, UsageSource};

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

/// Cumulative usage of one (job, team) for the Prometheus counters: the
/// quantities of a [`pb::JobUsage`] (its labels unused), summed with
/// [`pb::JobUsage::add_quantities`] (the one sum, next to the wire type).
pub type Totals = pb::JobUsage;

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

    pub fn totals(&self) -> &BTreeMap<(String, String), Totals> {
        &self.totals
    }

    /// The cumulative counters per job and team.
    pub fn render_prometheus(&self) -> String {
        let mut t = Text::new();
        for ((job, team), v) in &self.totals {
            let l = [("hpc_job", job.as_str()), ("team", team.as_str())];
            for (f, val) in [
                (&USAGE_GPU_ALLOCATED_SECONDS, v.gpu_alloc_seconds),
                (&USAGE_GPU_BUSY_SECONDS, v.gpu_busy_seconds),
                (&USAGE_GPU_ENERGY_JOULES, v.energy_joules),
                (&USAGE_GPU_MEMORY_PEAK_BYTES, v.peak_mem_bytes as f64),
                (&USAGE_CUDA_LAUNCHES, v.launches as f64),
                (&USAGE_CUDA_COPY_BYTES, v.copy_bytes as f64),
                (&USAGE_CUDA_SYNC_WAIT_SECONDS, v.sync_wait_ns as f64 / 1e9),
                (&USAGE_STORAGE_REQUESTS, v.io_requests as f64),
                (&USAGE_STORAGE_BYTES, v.io_bytes as f64),
                (&USAGE_STORAGE_DEVICE_SECONDS, v.io_device_ns as f64 / 1e9),
                (&USAGE_FABRIC_BYTES, v.fabric_bytes as f64),
            ] {
                t.add(f, &l, val);
            }
        }
        t.add(&USAGE_FOLDED_ROWS, &[], self.folded);
        t.render()
    }
}

#[cfg(test)]
mod tests;
