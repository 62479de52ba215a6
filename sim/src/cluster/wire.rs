//! A node's window as its collector would send it: port snapshots through
//! the collector's own conversion, GPU samples, block rows, CUDA processes,
//! OTLP step times, the model server's TTFT, usage, NCCL and NFS rows.
use std::collections::BTreeMap;

use collector::ib::PortSnapshot;
use proto::v1::{CudaProc, GpuSample, NvLinkCounters, Origin, StepTime, Window, WorkloadSample};

use super::{
    ib::COUNTERS, nccl::Phase, Cluster, Kind, LinkRate, Node, GPUS, HCAS, JOB, SERVE_JOB,
    SERVE_MODEL,
};

/// A checkpoint writes this many times the job's usual bytes per request.
const CHECKPOINT_BYTES_FACTOR: u64 = 64;

/// The model server's healthy mean time to first token (s) and requests
/// per second.
const SERVE_TTFT_S: f64 = 0.15;
const SERVE_RPS: f64 = 20.0;

/// HCA `i`'s device name.
fn hca(i: usize) -> String {
    format!("mlx5_{i}")
}

/// Node `n`'s ports as the collector's sysfs reader would have read them.
fn port_snapshots(node: &Node, n: usize, rate: LinkRate) -> Vec<PortSnapshot> {
    node.ports
        .iter()
        .enumerate()
        .map(|(i, p)| PortSnapshot {
            device: hca(i),
            port: 1,
            taken: std::time::Instant::now(),
            state: Some(p.state),
            phys_state: Some(p.phys),
            rate_bytes_per_sec: Some(rate.bytes_per_sec()),
            rate_text: Some(rate.text().into()),
            link_layer: Some("InfiniBand".into()),
            lid: Some(n as u32 * 8 + i as u32 + 1),
            counters: COUNTERS
                .iter()
                .zip(p.c)
                .map(|(name, v)| ((*name).to_string(), v))
                .collect::<BTreeMap<_, _>>(),
            hw_counters: BTreeMap::new(),
            counters_ext: BTreeMap::new(),
            unavailable: Vec::new(),
            hca: collector::ib::sysfs::HcaInfo::default(),
            read_errors: Vec::new(),
        })
        .collect()
}

/// The training ranks' OTLP step times on node `n` (window of `w_s` seconds).
fn step_rows(node: &Node, n: usize, w_s: f64) -> Vec<StepTime> {
    (0..GPUS)
        .map(|g| StepTime {
            job: JOB.into(),
            count: (w_s / node.step[g]).round().max(1.0) as u32,
            rank: (n * GPUS + g) as u32,
            seconds: node.step[g],
            device: g as i32,
            hca: hca(g),
            ..StepTime::default()
        })
        .collect()
}

/// NVML utilisation of a training GPU (%) by what its rank does.
fn util(running: bool, pause: Option<&Kind>, phase: Phase) -> u32 {
    match (running, pause, phase) {
        (false, _, _) | (_, _, Phase::Gone | Phase::Stalled) => 0,
        // NCCL's kernels poll for their peers' data.
        (_, _, Phase::Spin) => 100,
        (_, Some(Kind::NcclCheckpoint { .. }), _) => 0,
        (_, Some(Kind::NcclEval { .. }), _) => 90,
        _ => 97,
    }
}

fn gpu_rows(node: &Node, utils: &[u32]) -> Vec<GpuSample> {
    node.gpus
        .iter()
        .enumerate()
        .map(|(i, g)| GpuSample {
            index: i as u32,
            uuid: format!("GPU-{}-{i}", node.name),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
            lost: false,
            power_w: Some(g.power),
            power_limit_w: Some(700.0),
            temp_c: Some(g.temp),
            sm_clock_mhz: Some(g.clock),
            sm_clock_max_mhz: Some(1980),
            throttle_reasons: Some(g.throttle),
            ecc_sbe_volatile: Some(g.sbe),
            ecc_dbe_volatile: Some(g.dbe),
            util_gpu_pct: Some(utils.get(i).copied().unwrap_or(0)),
            nvlink: g
                .nvl
                .iter()
                .enumerate()
                .map(|(l, c)| NvLinkCounters {
                    link: l as u32,
                    replay: Some(c[0]),
                    recovery: Some(c[1]),
                    crc_flit: Some(c[2]),
                    crc_data: Some(c[3]),
                })
                .collect(),
            ..GpuSample::default()
        })
        .collect()
}

/// The training job's CUDA processes on node `n` (`launches` per window
/// each while it computes; none from a rank waiting or stalled, no row
/// once its process is gone).
fn cuda_rows(n: usize, launches: u64, phases: &[Phase], checkpoint: bool) -> Vec<CudaProc> {
    (0..GPUS)
        .filter(|&g| phases.get(g) != Some(&Phase::Gone))
        .map(|g| CudaProc {
            pid: 10_000 + g as u32,
            device: g as i32,
            job: JOB.into(),
            rank: Some((n * GPUS + g) as u32),
            launches: if phases.get(g) == Some(&Phase::Run) && !checkpoint {
                launches
            } else {
                0
            },
            sync_calls: 10,
            sync_wait_ns: 200_000_000,
            copy_bytes: 1 << 20,
            errors: 0,
            launches_sampled_fraction: 0.0,
        })
        .collect()
}

impl Cluster {
    /// The model server's window (last node, GPU 7 / `mlx5_7`): the
    /// window's requests, each TTFT log-normal (σ 0.5) around the healthy
    /// mean times the fault's factor.
    fn serve_rows(&mut self, w_s: f64) -> Vec<WorkloadSample> {
        let reqs = self.serve_rng.poisson(SERVE_RPS * w_s).max(1);
        let noise = (0.5 * self.serve_rng.normal() / (reqs as f64).sqrt()).exp();
        vec![WorkloadSample {
            job: SERVE_JOB.into(),
            rank: -1,
            signal: "ttft_seconds".into(),
            model: SERVE_MODEL.into(),
            provider: "vllm".into(),
            count: reqs,
            sum: reqs as f64 * SERVE_TTFT_S * self.serve_factor * noise,
            device: (GPUS - 1) as i32,
            hca: hca(HCAS - 1),
            pid: 20_000,
            ..WorkloadSample::default()
        }]
    }

    /// Node `n`'s latest window, or `None` while the node is down (or its
    /// collector restarting).
    pub fn window(&mut self, n: usize) -> Option<Window> {
        let t = self.t0_ms + self.k as i64 * self.window_ms;
        let wms = self.window_ms;
        let w_s = wms as f64 / 1000.0;
        let running = self.job_running;
        let b_s = self.k as f64 * self.spec.window_s;
        // No step completes while a hang holds the job or a pause lasts.
        let otlp = self.spec.otlp_steps
            && !self.nccl.stuck_by(b_s - self.spec.window_s)
            && self.pause.is_none();
        let phases: Vec<Phase> = (0..GPUS).map(|g| self.nccl.phase(n * GPUS + g)).collect();
        let utils: Vec<u32> = phases
            .iter()
            .map(|p| util(running, self.pause.as_ref(), *p))
            .collect();
        let checkpoint = matches!(self.pause, Some(Kind::NcclCheckpoint { .. }));
        let node = &mut self.nodes[n];
        if !node.up || node.skip {
            return None;
        }
        node.seq += 1;
        let snaps = port_snapshots(node, n, self.spec.link_rate);
        let steps = if running && otlp {
            step_rows(node, n, w_s)
        } else {
            Vec::new()
        };
        let workload = if n + 1 == self.nodes.len() {
            self.serve_rows(w_s)
        } else {
            Vec::new()
        };
        let node = &mut self.nodes[n];
        let nccl = self.nccl.rows(n, b_s, self.t0_ms, &mut node.nccl);
        Some(Window {
            origin: Some(Origin {
                hostname: node.name.clone(),
                machine_id: format!("sim-{n}"),
                boot_id: "sim-boot".into(),
                instance: node.instance.clone(),
                cluster: String::new(),
            }),
            seq: node.seq,
            start_unix_ms: t - wms,
            end_unix_ms: t,
            ib_ports: collector::ib::wire::ports(&snaps),
            gpus: gpu_rows(node, &utils),
            block: node
                .devices
                .iter()
                .filter_map(|d| d.stat.clone())
                .map(|mut b| {
                    // The checkpoint's shards stream out in big requests.
                    if checkpoint && b.job == JOB {
                        b.bytes = b.bytes.saturating_mul(CHECKPOINT_BYTES_FACTOR);
                    }
                    b
                })
                .collect(),
            cuda: if running {
                cuda_rows(
                    n,
                    (2400.0 * wms as f64 / 1000.0) as u64,
                    &phases,
                    checkpoint,
                )
            } else {
                Vec::new()
            },
            events: std::mem::take(&mut node.events),
            steps,
            workload,
            usage: match &self.tenants {
                Some(t) if t.node == n => t.rows.clone(),
                _ => Vec::new(),
            },
            nccl,
            nfs: node.nfs.rows.clone(),
            ..Window::default()
        })
    }
}
