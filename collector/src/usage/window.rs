//! [`Accountant::window`]: one window's usage rows, resource by resource
//! (GPUs, CUDA calls, storage, verbs, ports), then the cumulative totals.
use std::collections::BTreeMap;

use proto::v1 as pb;

use super::{method, Accountant, GpuReading, Inputs, Who, OVERFLOW_JOB};

/// (job, team, resource kind, resource): one row.
type Key = (String, String, &'static str, String);

/// (job, team).
type JobTeam = (String, String);

/// One window's rows, and the processes resolved so far.
struct Rows<F> {
    rows: BTreeMap<Key, pb::JobUsage>,
    resolved: BTreeMap<u32, Who>,
    who: F,
}

impl<F: FnMut(u32) -> Who> Rows<F> {
    /// Who `pid` is (asked once per window).
    fn lookup(&mut self, pid: u32) -> Who {
        let who = &mut self.who;
        self.resolved.entry(pid).or_insert_with(|| who(pid)).clone()
    }

    fn row(&mut self, job: &str, team: &str, kind: &'static str, res: &str) -> &mut pb::JobUsage {
        self.rows
            .entry((job.to_string(), team.to_string(), kind, res.to_string()))
            .or_insert_with(|| pb::JobUsage {
                job: job.to_string(),
                team: team.to_string(),
                resource_kind: kind.to_string(),
                resource: res.to_string(),
                ..pb::JobUsage::default()
            })
    }
}

impl Accountant {
    /// One window: the usage rows (sorted by job, team, kind, resource).
    /// `who` resolves a pid.
    pub fn window(&mut self, inp: &Inputs<'_>, who: impl FnMut(u32) -> Who) -> Vec<pb::JobUsage> {
        let w = inp.seconds.max(0.0);
        let mut out = Rows {
            rows: BTreeMap::new(),
            resolved: BTreeMap::new(),
            who,
        };
        // GPUs: per device, the jobs with a process on it (NVML's list and
        // the CUDA rows), the device's busy time and energy split by share.
        let mut host_gpu_share: BTreeMap<JobTeam, f64> = BTreeMap::new();
        for g in inp.gpus.iter().filter(|g| !g.lost) {
            self.gpu(g, inp, w, &mut out, &mut host_gpu_share);
        }
        self.cuda(inp, &mut out);
        let in_flight = self.storage(inp, &mut out);
        self.verbs(inp, &mut out);
        self.ports(inp, w, &host_gpu_share, &mut out);
        for ((_, _, kind, res), r) in out.rows.iter_mut() {
            if *kind == "storage" {
                r.resource_util = in_flight.get(res).copied().unwrap_or(0.0) / w.max(1e-9);
            }
        }
        let rows: Vec<pb::JobUsage> = out.rows.into_values().collect();
        self.accumulate(&rows);
        rows
    }

    /// One GPU: its busy time and energy split among the jobs on it.
    fn gpu<F: FnMut(u32) -> Who>(
        &mut self,
        g: &GpuReading,
        inp: &Inputs<'_>,
        w: f64,
        out: &mut Rows<F>,
        host_gpu_share: &mut BTreeMap<JobTeam, f64>,
    ) {
        let res = g.index.to_string();
        // (job, team) → (sm pct sum, launches, mem bytes)
        let mut jobs: BTreeMap<JobTeam, (f64, u64, u64)> = BTreeMap::new();
        let mut per_proc = false;
        for p in &g.procs {
            let id = out.lookup(p.pid);
            let team = self.team(&id.job, &id.team);
            let e = jobs.entry((id.job, team)).or_default();
            if let Some(sm) = p.sm_pct {
                per_proc = true;
                e.0 += f64::from(sm);
            }
            e.2 += p.mem_bytes.unwrap_or(0);
        }
        for c in inp.cuda.iter().filter(|c| c.device == g.index as i32) {
            let id = out.lookup(c.pid);
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
        if jobs.is_empty() {
            if busy > 0.0 || energy_j > 0.0 {
                let r = out.row("", "", "gpu", &res);
                r.gpu_busy_seconds += busy;
                r.energy_joules += energy_j;
                r.resource_util = busy / w.max(1e-9);
            }
            return;
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
        for ((job, team), v) in &jobs {
            let s = share(v);
            let r = out.row(job, team, "gpu", &res);
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

    /// CUDA calls per job and device (also on GPUs NVML does not list).
    fn cuda<F: FnMut(u32) -> Who>(&mut self, inp: &Inputs<'_>, out: &mut Rows<F>) {
        for c in inp.cuda {
            let id = out.lookup(c.pid);
            let job = if c.job.is_empty() {
                id.job
            } else {
                c.job.clone()
            };
            let team = self.team(&job, &id.team);
            let r = out.row(&job, &team, "gpu", &c.device.to_string());
            r.launches += c.launches;
            r.copy_bytes += c.copy_bytes;
            r.sync_wait_ns += c.sync_wait_ns;
            if r.method.is_empty() {
                r.method = method::EXACT.into();
            }
        }
    }

    /// Storage: block rows are per submitter cgroup already. Returns each
    /// device's summed service time, seconds.
    fn storage<F: FnMut(u32) -> Who>(
        &mut self,
        inp: &Inputs<'_>,
        out: &mut Rows<F>,
    ) -> BTreeMap<String, f64> {
        let mut in_flight: BTreeMap<String, f64> = BTreeMap::new();
        for b in inp.block {
            let team = self.team(&b.job, "");
            let r = out.row(&b.job, &team, "storage", &b.device);
            r.io_requests += b.requests;
            r.io_bytes += b.bytes;
            r.io_device_ns += b.latency_sum_ns;
            r.method = method::EXACT.into();
            *in_flight.entry(b.device.clone()).or_default() += b.latency_sum_ns as f64 / 1e9;
        }
        in_flight
    }

    /// Fabric: bytes posted through verbs, per process's HCA.
    fn verbs<F: FnMut(u32) -> Who>(&mut self, inp: &Inputs<'_>, out: &mut Rows<F>) {
        for &(pid, bytes) in inp.verbs_posted {
            let id = out.lookup(pid);
            let team = self.team(&id.job, &id.team);
            let res = id.hca.clone().unwrap_or_else(|| "verbs".into());
            let r = out.row(&id.job, &team, "fabric", &res);
            r.fabric_bytes += bytes;
            r.method = method::VERBS.into();
        }
    }

    /// Port bytes where no verbs probe counts them: split by the jobs' GPU
    /// share on this host, unattributed when no job holds a GPU.
    fn ports<F: FnMut(u32) -> Who>(
        &mut self,
        inp: &Inputs<'_>,
        w: f64,
        host_gpu_share: &BTreeMap<JobTeam, f64>,
        out: &mut Rows<F>,
    ) {
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
                    let r = out.row("", "", "fabric", &res);
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
                let r = out.row(job, team, "fabric", &res);
                r.fabric_bytes += part;
                r.method = method::PORT_SHARE.into();
                r.resource_util = util;
            }
        }
    }

    /// Adds the window's rows to the totals; past `max_jobs` (job, team)
    /// pairs, to `_overflow`.
    fn accumulate(&mut self, rows: &[pb::JobUsage]) {
        for u in rows {
            let key = (u.job.clone(), u.team.clone());
            let key = if self.totals.contains_key(&key) || self.totals.len() < self.max_jobs {
                key
            } else {
                self.folded += 1;
                (OVERFLOW_JOB.to_string(), String::new())
            };
            self.totals.entry(key).or_default().add_quantities(u);
        }
    }
}
