//! The simulated cluster's state and the windows its nodes produce.
use std::collections::BTreeMap;

use collector::ib::PortSnapshot;
use proto::v1::{BlockStat, CudaProc, Event, GpuSample, Origin, StepTime, Window};

use super::faults::{Fault, Kind, Target};

const GPUS: usize = 8;
const HCAS: usize = 8;
/// 4-byte words per port per window of normal all-reduce traffic (~4 GB).
const WORDS: u64 = 1_000_000_000;

#[derive(Clone, Debug)]
struct Port {
    counters: BTreeMap<String, u64>,
    state: u32,
}

#[derive(Clone, Debug)]
struct Gpu {
    temp: u32,
    clock: u32,
    throttle: u64,
    power: f64,
    sbe: u64,
    dbe: u64,
}

#[derive(Debug)]
struct Node {
    name: String,
    ports: Vec<Port>,
    gpus: Vec<Gpu>,
    disk_ms: f64,
    instance: String,
    seq: u64,
    up: bool,
    events: Vec<Event>,
    step: Vec<f64>,
}

pub struct Cluster {
    nodes: Vec<Node>,
    rng: u64,
    t_ms: i64,
    job_running: bool,
    /// The job's step time per window: the slowest rank's (data parallel).
    pub job_steps: Vec<f64>,
}

/// Nodes per leaf switch of the two-level fat tree.
pub const NODES_PER_LEAF: usize = 16;

impl Cluster {
    pub fn new(n: usize, seed: u64) -> Self {
        let base = [
            "port_xmit_data",
            "port_rcv_data",
            "port_xmit_packets",
            "port_rcv_packets",
            "symbol_error",
            "link_error_recovery",
            "link_downed",
            "port_rcv_errors",
            "port_xmit_discards",
            "port_xmit_wait",
        ];
        let nodes = (0..n)
            .map(|i| Node {
                name: format!("n{i:03}"),
                ports: (0..HCAS)
                    .map(|_| Port {
                        counters: base.iter().map(|c| (c.to_string(), 0)).collect(),
                        state: 4,
                    })
                    .collect(),
                gpus: (0..GPUS)
                    .map(|_| Gpu {
                        temp: 55,
                        clock: 1980,
                        throttle: 0,
                        power: 550.0,
                        sbe: 0,
                        dbe: 0,
                    })
                    .collect(),
                disk_ms: 0.8,
                instance: format!("n{i:03}-sim-1"),
                seq: 0,
                up: true,
                events: Vec::new(),
                step: vec![1.0; GPUS],
            })
            .collect();
        Self {
            nodes,
            rng: seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1,
            t_ms: 1_800_000_000_000,
            job_running: true,
            job_steps: Vec::new(),
        }
    }

    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn node_name(&self, n: usize) -> String {
        self.nodes
            .get(n)
            .map_or_else(|| format!("n{n:03}"), |x| x.name.clone())
    }

    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    fn noise(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % 10_000) as f64 / 10_000.0
    }

    /// Advances one window to simulated second `t`, applying active faults.
    pub fn advance(&mut self, t: f64, faults: &[Fault], onset: f64) {
        self.t_ms += 1000;
        self.job_running = !faults.iter().any(|f| {
            let o = f.onset.unwrap_or(onset);
            f.kind == Kind::JobEnd && t >= o && ((t - o) as u64) < 15
        });
        for i in 0..self.nodes.len() {
            let traffic = if self.job_running {
                WORDS
            } else {
                WORDS / 1000
            };
            for p in 0..HCAS {
                let j = self.noise();
                let port = &mut self.nodes[i].ports[p];
                let w = (traffic as f64 * (0.95 + 0.1 * j)) as u64;
                *port.counters.entry("port_xmit_data".into()).or_default() += w;
                *port.counters.entry("port_rcv_data".into()).or_default() += w;
                *port.counters.entry("port_xmit_packets".into()).or_default() += w / 1024;
                *port.counters.entry("port_rcv_packets".into()).or_default() += w / 1024;
            }
            let node = &mut self.nodes[i];
            node.step = (0..GPUS).map(|_| 1.0).collect();
            node.up = true;
        }
        for n in 0..self.nodes.len() {
            for g in 0..GPUS {
                let j = self.noise();
                self.nodes[n].step[g] = 1.0 + 0.03 * (j - 0.5);
            }
        }
        for f in faults {
            let o = f.onset.unwrap_or(onset);
            if t < o {
                continue;
            }
            let since = (t - o) as u64;
            match (&f.kind, &f.target) {
                (Kind::IbLinkDegrade, Target::Port { node, hca }) => {
                    // Bit-error rate ramping over minutes.
                    let errs = 4 + since * 2;
                    let p = &mut self.nodes[*node].ports[*hca];
                    *p.counters.entry("symbol_error".into()).or_default() += errs;
                    *p.counters.entry("link_error_recovery".into()).or_default() += since / 10;
                    self.nodes[*node].step[*hca] *= 1.0 + 0.002 * errs as f64;
                }
                (Kind::IbLinkDown, Target::Port { node, hca }) => {
                    let p = &mut self.nodes[*node].ports[*hca];
                    if since == 0 {
                        *p.counters.entry("link_downed".into()).or_default() += 1;
                    }
                    p.state = 1;
                }
                (Kind::IbLinkFlap, Target::Port { node, hca }) => {
                    let p = &mut self.nodes[*node].ports[*hca];
                    p.state = if since.is_multiple_of(2) { 1 } else { 4 };
                    if since.is_multiple_of(2) {
                        *p.counters.entry("link_downed".into()).or_default() += 1;
                    }
                }
                (Kind::GpuThermal, Target::Gpu { node, gpu }) => {
                    let g = &mut self.nodes[*node].gpus[*gpu];
                    g.temp = 91;
                    g.clock = 1200;
                    g.throttle = 0x40;
                    self.nodes[*node].step[*gpu] *= 1.5;
                }
                (Kind::GpuPower, Target::Gpu { node, gpu }) => {
                    let g = &mut self.nodes[*node].gpus[*gpu];
                    g.clock = 1400;
                    g.throttle = 0x4;
                    g.power = 699.0;
                    self.nodes[*node].step[*gpu] *= 1.35;
                }
                (Kind::Xid, Target::Gpu { node, gpu }) if since == 0 => {
                    let name = self.nodes[*node].name.clone();
                    self.nodes[*node].events.push(Event {
                        unix_ms: self.t_ms,
                        kind: "gpu_xid".into(),
                        entity: format!("{name}/gpu{gpu}"),
                        detail: format!("GPU-{name}-{gpu}"),
                        code: 79,
                    });
                }
                (Kind::EccDbe, Target::Gpu { node, gpu }) if since == 0 => {
                    self.nodes[*node].gpus[*gpu].dbe += 1
                }
                (Kind::StorageStall, Target::Node(n)) => {
                    self.nodes[*n].disk_ms = 60.0;
                    // Checkpoint windows: the node's ranks wait for their writes.
                    if since.is_multiple_of(5) {
                        for s in &mut self.nodes[*n].step {
                            *s *= 1.3;
                        }
                    }
                }
                (Kind::NodeLoss, Target::Node(n)) => self.nodes[*n].up = false,
                (Kind::CounterReset, Target::Port { node, hca }) if since == 0 => {
                    for v in self.nodes[*node].ports[*hca].counters.values_mut() {
                        *v = 0;
                    }
                }
                (Kind::CollectorRestart, Target::Node(n)) if since == 0 => {
                    let node = &mut self.nodes[*n];
                    node.instance = format!("{}-sim-2", node.name);
                    node.seq = 0;
                }
                (Kind::Congestion, _) => {
                    for node in &mut self.nodes {
                        for p in &mut node.ports {
                            *p.counters.entry("port_xmit_wait".into()).or_default() += 5_000_000;
                        }
                        for s in &mut node.step {
                            *s *= 1.2;
                        }
                    }
                }
                (Kind::SingleErrors, _) => {
                    let n = (since as usize * 7) % self.nodes.len();
                    let p = (since as usize * 3) % HCAS;
                    *self.nodes[n].ports[p]
                        .counters
                        .entry("symbol_error".into())
                        .or_default() += 1;
                }
                _ => {}
            }
        }
    }

    /// Closes the window: the job's step time is its slowest rank's.
    pub fn finish_step(&mut self) {
        if self.job_running {
            let worst = self
                .nodes
                .iter()
                .filter(|n| n.up)
                .flat_map(|n| n.step.iter().copied())
                .fold(0.0, f64::max);
            self.job_steps.push(worst);
        }
    }

    /// Leaf switch of a node in the two-level fat tree.
    pub fn leaf_of(&self, n: usize) -> usize {
        n / NODES_PER_LEAF
    }

    /// Node `n`'s window `k`, or `None` while the node is down.
    pub fn window(&mut self, n: usize, _k: u64) -> Option<Window> {
        let t = self.t_ms;
        let running = self.job_running;
        let node = &mut self.nodes[n];
        if !node.up {
            return None;
        }
        node.seq += 1;
        let snaps: Vec<PortSnapshot> = node
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| PortSnapshot {
                device: format!("mlx5_{i}"),
                port: 1,
                taken: std::time::Instant::now(),
                state: Some(p.state),
                phys_state: Some(if p.state == 4 { 5 } else { 3 }),
                rate_bytes_per_sec: Some(50_000_000_000),
                rate_text: Some("400 Gb/sec (4X NDR)".into()),
                link_layer: Some("InfiniBand".into()),
                lid: Some(n as u32 * 8 + i as u32 + 1),
                counters: p.counters.clone(),
                hw_counters: BTreeMap::new(),
                read_errors: Vec::new(),
            })
            .collect();
        let lat = (node.disk_ms * 1e6) as u64;
        let steps = if running {
            (0..GPUS)
                .map(|g| StepTime {
                    job: "llm-pretrain".into(),
                    rank: (n * GPUS + g) as u32,
                    seconds: node.step[g],
                    device: g as i32,
                    hca: format!("mlx5_{g}"),
                })
                .collect()
        } else {
            Vec::new()
        };
        Some(Window {
            origin: Some(Origin {
                hostname: node.name.clone(),
                machine_id: format!("sim-{n}"),
                boot_id: "sim-boot".into(),
                instance: node.instance.clone(),
            }),
            seq: node.seq,
            start_unix_ms: t - 1000,
            end_unix_ms: t,
            ib_ports: collector::window::ib_ports(&snaps),
            gpus: node
                .gpus
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
                    util_gpu_pct: Some(if running { 97 } else { 0 }),
                })
                .collect(),
            block: vec![BlockStat {
                device: "nvme0n1".into(),
                op: "write".into(),
                job: "llm-pretrain".into(),
                requests: 400,
                bytes: 400 << 20,
                latency_sum_ns: 400 * lat,
                latency_max_ns: 3 * lat,
                hist: Vec::new(),
                device_class: String::new(),
            }],
            cuda: if running {
                (0..GPUS)
                    .map(|g| CudaProc {
                        pid: 10_000 + g as u32,
                        device: g as i32,
                        job: "llm-pretrain".into(),
                        rank: Some((n * GPUS + g) as u32),
                        launches: 2400,
                        sync_calls: 10,
                        sync_wait_ns: 200_000_000,
                        copy_bytes: 1 << 20,
                        errors: 0,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            events: std::mem::take(&mut node.events),
            steps,
            ..Window::default()
        })
    }
}
