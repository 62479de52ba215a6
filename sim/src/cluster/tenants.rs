//! Tenants: a second team's job (`etl-batch`, team `data`) co-located with
//! the training job (team `research`) on one node, sharing one block device,
//! one HCA port and one GPU with it; and the usage rows the node's collector
//! reports for both (`Window.usage`).
//!
//! Physics (per window, `w` seconds):
//! * storage: each job's mean requests in flight is its request rate times
//!   the latency (Little's law); the tenant's demand is 0.2 in flight, the
//!   training job's 0.3. When the total demand `U` exceeds one request in
//!   flight, requests queue: latency ×`U` for everyone on the device, and the
//!   training ranks on the node, which spend `IO_SHARE` of a step waiting for
//!   input, slow by `1 + IO_SHARE·(U − 1)`; they read the same bytes per step,
//!   so their request rate falls by that slowdown.
//! * fabric: the port carries the training job's share of line rate and the
//!   tenant's (5 %); a total demand `D` above line rate stretches the rank on
//!   that HCA, `COMM_SHARE` of whose step is communication, by
//!   `1 + COMM_SHARE·(D − 1)`.
//! * GPU: the training rank keeps its GPU 90 % busy; a tenant taking `share`
//!   of a time-sliced GPU stretches that rank by `0.9 + share` when that
//!   exceeds 1.
use proto::v1::JobUsage;

use super::{
    ib::XMIT_DATA,
    storage::{LATENCY_SIGMA, REQUEST_BYTES},
    Cluster, Fault, Kind, Target, JOB,
};
use crate::rng::Rng;

pub const TENANT_JOB: &str = "etl-batch";
pub const TENANT_TEAM: &str = "data";
pub const JOB_TEAM: &str = "research";
const IO_SHARE: f64 = 0.3;
const COMM_SHARE: f64 = 0.5;
const TRAIN_IN_FLIGHT: f64 = 0.3;
const TENANT_IN_FLIGHT: f64 = 0.2;
const TENANT_LINK: f64 = 0.05;
const TRAIN_GPU_BUSY: f64 = 0.9;

#[derive(Debug)]
pub struct Tenants {
    pub node: usize,
    dev: usize,
    hca: usize,
    gpu: usize,
    rng: Rng,
    /// This window's usage rows for `node`.
    pub rows: Vec<JobUsage>,
}

fn is_tenant_kind(k: &Kind) -> bool {
    matches!(
        k,
        Kind::InterferenceStorage { .. }
            | Kind::InterferenceLink { .. }
            | Kind::InterferenceGpu { .. }
            | Kind::VictimMoreData { .. }
            | Kind::AggressorHarmless { .. }
    )
}

impl Tenants {
    /// The tenant placement of the first tenant fault (`None` without one).
    pub fn of(faults: &[Fault], seed: u64) -> Option<Self> {
        let f = faults.iter().find(|f| is_tenant_kind(&f.kind))?;
        let (node, dev, hca, gpu) = match f.target {
            Target::Device { node, dev } => (node, dev, 0, 0),
            Target::Port { node, hca } => (node, 0, hca, hca),
            Target::Gpu { node, gpu } => (node, 0, gpu, gpu),
            Target::Node(node) => (node, 0, 0, 0),
            _ => (0, 0, 0, 0),
        };
        Some(Self {
            node,
            dev,
            hca,
            gpu,
            rng: Rng::derive(seed, 0x7e4a),
            rows: Vec::new(),
        })
    }
}

fn row(job: &str, team: &str, kind: &str, res: String) -> JobUsage {
    JobUsage {
        job: job.into(),
        team: team.into(),
        resource_kind: kind.into(),
        resource: res,
        ..JobUsage::default()
    }
}

/// What the tenant faults active at the window's end ask for.
#[derive(Clone, Copy)]
struct Demands {
    /// The tenant's I/O demand factor on the shared device.
    io_factor: f64,
    /// The training job's data per step factor.
    data_factor: f64,
    /// The shared port's demand over line rate, when a fault sets it.
    link_demand: Option<f64>,
    /// The tenant saturates the port but the training job is not
    /// communication-bound there.
    harmless: bool,
    /// The tenant's share of the time-sliced GPU.
    gpu_share: f64,
}

impl Demands {
    fn of(faults: &[Fault], onset: f64, b: f64) -> Self {
        let on = |f: &Fault| f.onset.unwrap_or(onset) < b - 1e-9;
        let mut d = Self {
            io_factor: 1.0,
            data_factor: 1.0,
            link_demand: None,
            harmless: false,
            gpu_share: 0.0,
        };
        for f in faults.iter().filter(|f| on(f)) {
            match f.kind {
                Kind::InterferenceStorage { factor } => d.io_factor = factor,
                Kind::VictimMoreData { factor } => d.data_factor = factor,
                Kind::InterferenceLink { demand } => d.link_demand = Some(demand),
                Kind::AggressorHarmless { demand } => {
                    d.link_demand = Some(demand);
                    d.harmless = true;
                }
                Kind::InterferenceGpu { share } => d.gpu_share = share,
                _ => {}
            }
        }
        d
    }
}

fn jit(r: &mut Rng) -> f64 {
    0.95 + 0.1 * r.uniform()
}

impl Cluster {
    /// One window of the tenants: step slowdowns, device latency factor,
    /// the tenant's port traffic and the usage rows. `slow` is the node's
    /// per-device latency factor; a fault is on once its onset is before
    /// the window's end `b`.
    pub(super) fn tenants_advance(
        &mut self,
        faults: &[Fault],
        onset: f64,
        b: f64,
        slow: &mut [Vec<f64>],
    ) {
        let Some(mut t) = self.tenants.take() else {
            return;
        };
        let d = Demands::of(faults, onset, b);
        // The training job reads `data_factor` × the bytes per step on every
        // node: its I/O-bound share of the step grows.
        if d.data_factor > 1.0 && self.job_running {
            let s = 1.0 + IO_SHARE * (d.data_factor - 1.0);
            for node in &mut self.nodes {
                node.step.iter_mut().for_each(|x| *x *= s);
            }
        }
        let mut rows = self.tenant_storage(&mut t, d, slow);
        rows.extend(self.tenant_link(&mut t, d));
        rows.extend(self.tenant_gpu(&mut t, d));
        t.rows = rows;
        self.tenants = Some(t);
    }

    /// The tenant's device: queueing when the demand exceeds one request in
    /// flight; both jobs' storage usage rows.
    fn tenant_storage(
        &mut self,
        t: &mut Tenants,
        d: Demands,
        slow: &mut [Vec<f64>],
    ) -> Vec<JobUsage> {
        let (w, n, running) = (self.spec.window_s, t.node, self.job_running);
        let mut rows = Vec::new();
        let Some(dv) = self.nodes[n].devices.get(t.dev) else {
            return rows;
        };
        let dev = dv.name.clone();
        let base_lat = dv.median_ns * (LATENCY_SIGMA * LATENCY_SIGMA / 2.0).exp();
        let s_data = 1.0 + IO_SHARE * (d.data_factor - 1.0);
        let train_demand = if running {
            TRAIN_IN_FLIGHT * d.data_factor / s_data
        } else {
            0.0
        };
        let tenant_demand = TENANT_IN_FLIGHT * d.io_factor;
        let u = train_demand + tenant_demand;
        let m = u.max(1.0);
        let s = 1.0 + IO_SHARE * (m - 1.0);
        if m > 1.0 {
            slow[n][t.dev] *= m;
            if running {
                self.nodes[n].step.iter_mut().for_each(|x| *x *= s);
            }
        }
        for (job, team, demand, rate_div) in [
            (JOB, JOB_TEAM, train_demand, s),
            (TENANT_JOB, TENANT_TEAM, tenant_demand, 1.0),
        ] {
            if demand <= 0.0 {
                continue;
            }
            let in_flight = demand / rate_div * m * jit(&mut t.rng);
            let mut r = row(job, team, "storage", dev.clone());
            r.io_device_ns = (in_flight * w * 1e9) as u64;
            r.io_requests = (in_flight * w * 1e9 / (base_lat * m)).round() as u64;
            r.io_bytes = r.io_requests * REQUEST_BYTES;
            r.method = "exact".into();
            rows.push(r);
        }
        let util: f64 = rows.iter().map(|r| r.io_device_ns as f64).sum::<f64>() / (w * 1e9);
        rows.iter_mut().for_each(|r| r.resource_util = util);
        rows
    }

    /// The shared port: both jobs' traffic, the training rank stretched
    /// when the demand exceeds line rate; both jobs' fabric usage rows.
    fn tenant_link(&mut self, t: &mut Tenants, d: Demands) -> Vec<JobUsage> {
        let (w, n, running) = (self.spec.window_s, t.node, self.job_running);
        let rate = self.spec.link_rate.bytes_per_sec() as f64;
        let train_u = if running {
            self.spec.utilisation.max(0.2)
        } else {
            0.0
        };
        let tenant_u = match d.link_demand {
            Some(x) => (x - train_u).max(2.0 * TENANT_LINK),
            None => TENANT_LINK,
        };
        let demand = train_u + tenant_u;
        let s_link = if d.harmless || demand <= 1.0 {
            1.0
        } else {
            1.0 + COMM_SHARE * (demand - 1.0)
        };
        if s_link > 1.0 && running {
            self.nodes[n].step[t.hca] *= s_link;
            self.nodes[n].comm[t.hca] *= s_link;
        }
        let cap = demand.max(1.0);
        let (train_b, tenant_b) = (
            rate * w * train_u / cap * jit(&mut t.rng),
            rate * w * tenant_u / cap * jit(&mut t.rng),
        );
        self.nodes[n].ports[t.hca].add(XMIT_DATA, (tenant_b / 4.0) as u64);
        let port = format!("mlx5_{}/1", t.hca);
        let util = (train_b + tenant_b) / (rate * w);
        let mut rows = Vec::new();
        for (job, team, bytes) in [
            (JOB, JOB_TEAM, train_b),
            (TENANT_JOB, TENANT_TEAM, tenant_b),
        ] {
            if bytes > 0.0 {
                let mut r = row(job, team, "fabric", port.clone());
                r.fabric_bytes = bytes as u64;
                r.method = "verbs".into();
                r.resource_util = util;
                rows.push(r);
            }
        }
        rows
    }

    /// The shared GPU (time-sliced): the training rank stretched when both
    /// together want more than all of it; both jobs' GPU usage rows.
    fn tenant_gpu(&mut self, t: &mut Tenants, d: Demands) -> Vec<JobUsage> {
        let (w, n, running) = (self.spec.window_s, t.node, self.job_running);
        let v = if running { TRAIN_GPU_BUSY } else { 0.0 };
        let demand = v + d.gpu_share;
        let s_gpu = demand.max(1.0);
        if s_gpu > 1.0 && running {
            self.nodes[n].step[t.gpu] *= s_gpu;
        }
        let util = demand.min(1.0);
        let launches = 2400.0 * w;
        let mut rows = Vec::new();
        for (job, team, busy, l) in [
            (JOB, JOB_TEAM, v, launches / s_gpu),
            (TENANT_JOB, TENANT_TEAM, d.gpu_share, 0.0),
        ] {
            if busy > 0.0 {
                let mut r = row(job, team, "gpu", t.gpu.to_string());
                r.gpu_alloc_seconds = w;
                r.gpu_busy_seconds = w * util * busy / demand * jit(&mut t.rng);
                r.launches = l as u64;
                r.method = "nvml_process".into();
                r.resource_util = util;
                rows.push(r);
            }
        }
        rows
    }
}
