//! Fault and confounder injection for the simulator.
use anyhow::{bail, Result};

use super::cluster::Cluster;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    IbLinkDegrade,
    IbLinkDown,
    IbLinkFlap,
    GpuThermal,
    GpuPower,
    Xid,
    EccDbe,
    StorageStall,
    NodeLoss,
    JobEnd,
    CounterReset,
    CollectorRestart,
    Congestion,
    SingleErrors,
}

/// What a fault targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Port { node: usize, hca: usize },
    Gpu { node: usize, gpu: usize },
    Node(usize),
    Cluster,
}

#[derive(Clone, Debug)]
pub struct Fault {
    pub kind: Kind,
    pub target: Target,
    pub name: String,
    /// Simulated second at which this fault starts (`None`: the run's `--onset`).
    pub onset: Option<f64>,
}

impl Fault {
    pub fn describe(&self) -> String {
        self.name.clone()
    }

    /// The incident kind and entity this fault should raise (`None` for confounders).
    pub fn expected(&self, c: &Cluster) -> Option<(&'static str, String)> {
        let k = match self.kind {
            Kind::IbLinkDegrade => "ib_link_degraded",
            Kind::IbLinkDown => "ib_link_down",
            Kind::IbLinkFlap => "ib_link_flapping",
            Kind::GpuThermal => "gpu_thermal_throttle",
            Kind::GpuPower => "gpu_power_throttle",
            Kind::Xid => "gpu_xid",
            Kind::EccDbe => "gpu_ecc",
            Kind::StorageStall => "storage_latency",
            Kind::NodeLoss => "node_lost",
            _ => return None,
        };
        let entity = match (&self.kind, &self.target) {
            (Kind::StorageStall, Target::Node(n)) => format!("{}/nvme0n1", c.node_name(*n)),
            _ => target_name(c, &self.target),
        };
        Some((k, entity))
    }
}

pub fn target_name(c: &Cluster, t: &Target) -> String {
    match t {
        Target::Port { node, hca } => format!("{}/mlx5_{hca}/1", c.node_name(*node)),
        Target::Gpu { node, gpu } => format!("{}/gpu{gpu}", c.node_name(*node)),
        Target::Node(n) => c.node_name(*n),
        Target::Cluster => "cluster".into(),
    }
}

fn parse_target(c: &Cluster, s: &str) -> Result<Target> {
    let parts: Vec<&str> = s.split('/').collect();
    let node = c.node_index(parts[0]).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown node {:?} (nodes are n000..n{:03})",
            parts[0],
            c.nodes() - 1
        )
    })?;
    match parts.as_slice() {
        [_] => Ok(Target::Node(node)),
        [_, g] if g.starts_with("gpu") => {
            let gpu: usize = g[3..]
                .parse()
                .map_err(|_| anyhow::anyhow!("bad GPU in {s:?}"))?;
            anyhow::ensure!(gpu < 8, "GPU index {gpu} out of range 0..8");
            Ok(Target::Gpu { node, gpu })
        }
        [_, h, "1"] if h.starts_with("mlx5_") => {
            let hca: usize = h[5..]
                .parse()
                .map_err(|_| anyhow::anyhow!("bad HCA in {s:?}"))?;
            anyhow::ensure!(hca < 8, "HCA index {hca} out of range 0..8");
            Ok(Target::Port { node, hca })
        }
        _ => bail!("bad entity {s:?}: use n017/mlx5_2/1, n017/gpu5 or n017"),
    }
}

/// Parses `KIND[@ENTITY]` specs; missing entities are drawn from the seed.
pub fn parse_all(specs: &[String], c: &Cluster, seed: u64) -> Result<Vec<Fault>> {
    let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = |m: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % m as u64) as usize
    };
    let mut out = Vec::new();
    for spec in specs {
        let (k, ent) = match spec.split_once('@') {
            Some((k, e)) => (k, Some(e)),
            None => (spec.as_str(), None),
        };
        let kind = match k {
            "ib-link-degrade" => Kind::IbLinkDegrade,
            "ib-link-down" => Kind::IbLinkDown,
            "ib-link-flap" => Kind::IbLinkFlap,
            "gpu-thermal" => Kind::GpuThermal,
            "gpu-power" => Kind::GpuPower,
            "xid" => Kind::Xid,
            "ecc-dbe" => Kind::EccDbe,
            "storage-stall" => Kind::StorageStall,
            "node-loss" => Kind::NodeLoss,
            "job-end" => Kind::JobEnd,
            "counter-reset" => Kind::CounterReset,
            "collector-restart" => Kind::CollectorRestart,
            "congestion" => Kind::Congestion,
            "single-errors" => Kind::SingleErrors,
            other => bail!("unknown fault kind {other:?} in --inject {spec:?}"),
        };
        let default = match kind {
            Kind::IbLinkDegrade | Kind::IbLinkDown | Kind::IbLinkFlap | Kind::CounterReset => {
                Target::Port {
                    node: next(c.nodes()),
                    hca: next(8),
                }
            }
            Kind::GpuThermal | Kind::GpuPower | Kind::Xid | Kind::EccDbe => Target::Gpu {
                node: next(c.nodes()),
                gpu: next(8),
            },
            Kind::StorageStall | Kind::NodeLoss | Kind::CollectorRestart => {
                Target::Node(next(c.nodes()))
            }
            Kind::JobEnd | Kind::Congestion | Kind::SingleErrors => Target::Cluster,
        };
        let target = match ent {
            Some(e) => parse_target(c, e)?,
            None => default,
        };
        let name = format!("{k}@{}", target_name(c, &target));
        out.push(Fault {
            kind,
            target,
            name,
            onset: None,
        });
    }
    Ok(out)
}

/// Reads a scenario file: one fault per line, `KIND[@ENTITY] [at=SECONDS]`,
/// `#` comments. Errors name the line.
pub fn parse_scenario(text: &str, c: &Cluster, seed: u64) -> Result<Vec<Fault>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let spec = parts.next().unwrap_or_default().to_string();
        let mut onset = None;
        for p in parts {
            match p.strip_prefix("at=").map(str::parse::<f64>) {
                Some(Ok(v)) if v >= 0.0 => onset = Some(v),
                _ => bail!("scenario line {}: expected `at=SECONDS`, got {p:?}", i + 1),
            }
        }
        let mut f = parse_all(&[spec], c, seed.wrapping_add(i as u64))
            .map_err(|e| anyhow::anyhow!("scenario line {}: {e}", i + 1))?;
        for x in &mut f {
            x.onset = onset;
        }
        out.extend(f);
    }
    Ok(out)
}
