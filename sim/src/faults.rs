//! Fault and confounder injection for the simulator: what can go wrong, on
//! which entity, with which physical parameters.
//!
//! Syntax (`--inject` and scenario files): `KIND[@ENTITY][:KEY=VALUE,...]`,
//! e.g. `ib-link-degrade@n017/mlx5_2/1:ber=1e-9,ramp=600` or
//! `storage-stall@n003/sda:factor=8,at=120`. Every kind takes `at=SECONDS`
//! (its onset; default: the run's `--onset`); the other keys are listed in
//! [`PARAMS`]. Unknown keys and out-of-range values are errors that name the
//! spec.
use std::collections::BTreeMap;

use anyhow::{bail, Result};

use super::{cluster::Cluster, rng::Rng};

/// A fault or confounder with its physical parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// Bit error rate ramping log-linearly from the port's base BER to `ber`
    /// over `ramp_s` seconds, then staying there.
    IbLinkDegrade {
        ber: f64,
        ramp_s: f64,
    },
    /// The port goes DOWN and stays down.
    IbLinkDown,
    /// The port goes down every `period_s` seconds for `down_s` seconds.
    IbLinkFlap {
        period_s: f64,
        down_s: f64,
    },
    GpuThermal,
    GpuPower,
    Xid,
    EccDbe,
    /// One block device `factor` times slower.
    StorageStall {
        factor: f64,
    },
    NodeLoss,
    /// The training job's every step `factor` times longer with no
    /// infrastructure cause (input pipeline, a code change): `job_slowdown`.
    JobSlow {
        factor: f64,
    },
    /// The model server's time to first token `factor` times longer with no
    /// infrastructure cause: `inference_latency`.
    InferenceSlow {
        factor: f64,
    },
    /// A rank (or every rank of a host) stops issuing collectives for good;
    /// the others of its communicator block one collective ahead:
    /// `collective_hang`.
    NcclHang,
    /// A rank's (or a host's ranks') compute `factor` times slower with no
    /// infrastructure cause: every collective waits for it, so the whole
    /// communicator's cadence stretches and the rank lags: `straggler` when
    /// the job reports its step times, else its `job_slowdown`.
    NcclSlowRank {
        factor: f64,
    },
    // Confounders: must raise nothing.
    /// The job ends; a next one starts `gap_s` seconds later.
    JobEnd {
        gap_s: f64,
    },
    /// All counters of a port read 0 once (driver reload, `perfquery -R`).
    CounterReset,
    /// The node's collector restarts: a new instance, sequence from 1, one
    /// window missing.
    CollectorRestart,
    /// Fabric congestion for `duration_s` seconds: `port_xmit_wait` and
    /// `port_xmit_discards` rise on `fraction` of the ports, no errors; step
    /// time up cluster-wide.
    Congestion {
        fraction: f64,
        duration_s: f64,
    },
    /// Events every `every_s` seconds on average, each giving `fraction` of
    /// all ports one symbol error.
    SingleErrors {
        fraction: f64,
        every_s: f64,
    },
    /// Every block device of the fleet `factor` times slower at once.
    StorageFleetSlow {
        factor: f64,
    },
    // Tenants: a second team's job (`etl-batch`, team `data`) shares the
    // target's node with the training job (team `research`).
    /// The tenant's I/O on the device grows `factor`-fold and saturates it;
    /// the training job's ranks there wait for their reads: `interference`.
    InterferenceStorage {
        factor: f64,
    },
    /// The tenant's traffic on the port grows to `demand` × line rate
    /// together with the training job's: `interference`.
    InterferenceLink {
        demand: f64,
    },
    /// The tenant starts kernels on the GPU (time-slicing) taking `share` of
    /// its time: `interference`.
    InterferenceGpu {
        share: f64,
    },
    /// Confounder: the training job reads `factor` times the data per step
    /// (everywhere); the tenant is steady.
    VictimMoreData {
        factor: f64,
    },
    /// Confounder: the tenant saturates the port (`demand` × line rate) but
    /// the training job is not communication-bound there and does not slow.
    AggressorHarmless {
        demand: f64,
    },
}

/// Kind names with their parameter keys (besides `at`) and defaults.
pub const PARAMS: &[(&str, &[(&str, f64)])] = &[
    ("ib-link-degrade", &[("ber", 1e-10), ("ramp", 0.0)]),
    ("ib-link-down", &[]),
    ("ib-link-flap", &[("period", 6.0), ("down", 2.0)]),
    ("gpu-thermal", &[]),
    ("gpu-power", &[]),
    ("xid", &[]),
    ("ecc-dbe", &[]),
    ("storage-stall", &[("factor", 20.0)]),
    ("node-loss", &[]),
    ("job-slow", &[("factor", 1.3)]),
    ("inference-slow", &[("factor", 1.6)]),
    ("nccl-hang", &[]),
    ("nccl-slow-rank", &[("factor", 1.6)]),
    ("job-end", &[("gap", 120.0)]),
    ("counter-reset", &[]),
    ("collector-restart", &[]),
    ("congestion", &[("fraction", 0.3), ("duration", 300.0)]),
    ("single-errors", &[("fraction", 0.01), ("every", 20.0)]),
    ("storage-fleet-slow", &[("factor", 5.0)]),
    ("interference-storage", &[("factor", 8.0)]),
    ("interference-link", &[("demand", 1.3)]),
    ("interference-gpu", &[("share", 0.5)]),
    ("victim-more-data", &[("factor", 2.0)]),
    ("aggressor-harmless", &[("demand", 1.3)]),
];

impl Kind {
    /// The `--inject` name.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::IbLinkDegrade { .. } => "ib-link-degrade",
            Kind::IbLinkDown => "ib-link-down",
            Kind::IbLinkFlap { .. } => "ib-link-flap",
            Kind::GpuThermal => "gpu-thermal",
            Kind::GpuPower => "gpu-power",
            Kind::Xid => "xid",
            Kind::EccDbe => "ecc-dbe",
            Kind::StorageStall { .. } => "storage-stall",
            Kind::NodeLoss => "node-loss",
            Kind::JobSlow { .. } => "job-slow",
            Kind::InferenceSlow { .. } => "inference-slow",
            Kind::NcclHang => "nccl-hang",
            Kind::NcclSlowRank { .. } => "nccl-slow-rank",
            Kind::JobEnd { .. } => "job-end",
            Kind::CounterReset => "counter-reset",
            Kind::CollectorRestart => "collector-restart",
            Kind::Congestion { .. } => "congestion",
            Kind::SingleErrors { .. } => "single-errors",
            Kind::StorageFleetSlow { .. } => "storage-fleet-slow",
            Kind::InterferenceStorage { .. } => "interference-storage",
            Kind::InterferenceLink { .. } => "interference-link",
            Kind::InterferenceGpu { .. } => "interference-gpu",
            Kind::VictimMoreData { .. } => "victim-more-data",
            Kind::AggressorHarmless { .. } => "aggressor-harmless",
        }
    }

    /// The parameters as `key=value` pairs (empty for kinds without any).
    pub fn params(&self) -> Vec<(&'static str, f64)> {
        match *self {
            Kind::IbLinkDegrade { ber, ramp_s } => vec![("ber", ber), ("ramp", ramp_s)],
            Kind::IbLinkFlap { period_s, down_s } => vec![("period", period_s), ("down", down_s)],
            Kind::StorageStall { factor }
            | Kind::StorageFleetSlow { factor }
            | Kind::JobSlow { factor }
            | Kind::NcclSlowRank { factor }
            | Kind::InferenceSlow { factor } => {
                vec![("factor", factor)]
            }
            Kind::JobEnd { gap_s } => vec![("gap", gap_s)],
            Kind::Congestion {
                fraction,
                duration_s,
            } => vec![("fraction", fraction), ("duration", duration_s)],
            Kind::SingleErrors { fraction, every_s } => {
                vec![("fraction", fraction), ("every", every_s)]
            }
            Kind::InterferenceStorage { factor } | Kind::VictimMoreData { factor } => {
                vec![("factor", factor)]
            }
            Kind::InterferenceLink { demand } | Kind::AggressorHarmless { demand } => {
                vec![("demand", demand)]
            }
            Kind::InterferenceGpu { share } => vec![("share", share)],
            _ => Vec::new(),
        }
    }

    pub fn is_confounder(&self) -> bool {
        self.expected_kind().is_none()
    }

    /// The incident kind this fault should raise (`None` for confounders).
    pub fn expected_kind(&self) -> Option<&'static str> {
        Some(match self {
            Kind::IbLinkDegrade { .. } => "ib_link_degraded",
            Kind::IbLinkDown => "ib_link_down",
            Kind::IbLinkFlap { .. } => "ib_link_flapping",
            Kind::GpuThermal => "gpu_thermal_throttle",
            Kind::GpuPower => "gpu_power_throttle",
            Kind::Xid => "gpu_xid",
            Kind::EccDbe => "gpu_ecc",
            Kind::StorageStall { .. } => "storage_latency",
            Kind::NodeLoss => "node_lost",
            Kind::JobSlow { .. } => "job_slowdown",
            Kind::InferenceSlow { .. } => "inference_latency",
            Kind::NcclHang => "collective_hang",
            Kind::NcclSlowRank { .. } => "straggler",
            Kind::InterferenceStorage { .. }
            | Kind::InterferenceLink { .. }
            | Kind::InterferenceGpu { .. } => "interference",
            _ => return None,
        })
    }
}

/// What a fault targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Port {
        node: usize,
        hca: usize,
    },
    Gpu {
        node: usize,
        gpu: usize,
    },
    /// A block device: index into the node's devices.
    Device {
        node: usize,
        dev: usize,
    },
    Node(usize),
    Cluster,
    /// The simulated training job.
    Job,
    /// The simulated model server's model.
    Model,
}

#[derive(Clone, Debug)]
pub struct Fault {
    pub kind: Kind,
    pub target: Target,
    /// `kind@entity` as the user would write it.
    pub name: String,
    /// Simulated second at which this fault starts (`None`: the run's `--onset`).
    pub onset: Option<f64>,
}

/// Shortest decimal form of a parameter (`1e-10`, `600`, `0.5`).
pub fn fmt_value(v: f64) -> String {
    if v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e6) {
        format!("{v:e}")
    } else {
        let s = format!("{v:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

impl Fault {
    /// The full spec: `kind@entity[:key=value,...]`.
    pub fn describe(&self) -> String {
        let p = self.kind.params();
        let mut s = self.name.clone();
        if !p.is_empty() || self.onset.is_some() {
            let mut kv: Vec<String> = p
                .iter()
                .map(|(k, v)| format!("{k}={}", fmt_value(*v)))
                .collect();
            if let Some(o) = self.onset {
                kv.push(format!("at={}", fmt_value(o)));
            }
            s.push(':');
            s.push_str(&kv.join(","));
        }
        s
    }

    /// The incident kind and entity this fault should raise (`None` for
    /// confounders). A hang's is known for sure only once the others wait
    /// ([`super::cluster::Truth::hang_entity`]); before, the ring on the
    /// target's host. A slow host's straggler is its first rank.
    pub fn expected(&self, c: &Cluster) -> Option<(&'static str, String)> {
        let k = self.kind.expected_kind()?;
        let rank = |t: &Target| match *t {
            Target::Gpu { node, gpu } => Some((node, node * super::cluster::GPUS + gpu)),
            Target::Node(n) => Some((n, n * super::cluster::GPUS)),
            _ => None,
        };
        let e = match (&self.kind, rank(&self.target)) {
            (Kind::NcclHang, Some((node, _))) => format!(
                "{}/nccl/{}",
                c.node_name(node),
                c.comm_id(super::cluster::nccl::RING)
            ),
            (Kind::NcclSlowRank { .. }, Some((_, r))) => {
                format!("{}/{r}", super::cluster::JOB)
            }
            _ => target_name(c, &self.target),
        };
        Some((k, e))
    }
}

pub fn target_name(c: &Cluster, t: &Target) -> String {
    match t {
        Target::Port { node, hca } => format!("{}/mlx5_{hca}/1", c.node_name(*node)),
        Target::Gpu { node, gpu } => vocab::entity::gpu(&c.node_name(*node), *gpu),
        Target::Device { node, dev } => format!(
            "{}/{}",
            c.node_name(*node),
            c.device_name(*node, *dev).unwrap_or("?")
        ),
        Target::Node(n) => c.node_name(*n),
        Target::Cluster => "cluster".into(),
        Target::Job => super::cluster::JOB.into(),
        Target::Model => format!(
            "{}/{}",
            super::cluster::SERVE_JOB,
            super::cluster::SERVE_MODEL
        ),
    }
}

/// What kind of entity a fault kind takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wants {
    Port,
    Gpu,
    Device,
    Node,
    Cluster,
    Job,
    Model,
    /// A training rank by its GPU, or every rank of a host.
    Rank,
}

fn wants(kind: &Kind) -> Wants {
    match kind {
        Kind::IbLinkDegrade { .. }
        | Kind::IbLinkDown
        | Kind::IbLinkFlap { .. }
        | Kind::CounterReset => Wants::Port,
        Kind::GpuThermal | Kind::GpuPower | Kind::Xid | Kind::EccDbe => Wants::Gpu,
        Kind::StorageStall { .. }
        | Kind::InterferenceStorage { .. }
        | Kind::VictimMoreData { .. } => Wants::Device,
        Kind::InterferenceLink { .. } | Kind::AggressorHarmless { .. } => Wants::Port,
        Kind::InterferenceGpu { .. } => Wants::Gpu,
        Kind::NodeLoss | Kind::CollectorRestart => Wants::Node,
        Kind::JobEnd { .. }
        | Kind::Congestion { .. }
        | Kind::SingleErrors { .. }
        | Kind::StorageFleetSlow { .. } => Wants::Cluster,
        Kind::JobSlow { .. } => Wants::Job,
        Kind::InferenceSlow { .. } => Wants::Model,
        Kind::NcclHang | Kind::NcclSlowRank { .. } => Wants::Rank,
    }
}

fn parse_target(c: &Cluster, s: &str, want: Wants, rng: &mut Rng) -> Result<Target> {
    let parts: Vec<&str> = s.split('/').collect();
    let node = c.node_index(parts[0]).ok_or_else(|| {
        anyhow::anyhow!(
            "unknown node {:?} (nodes are n000..n{:03})",
            parts[0],
            c.nodes() - 1
        )
    })?;
    let t = match parts.as_slice() {
        [_] if want == Wants::Device => {
            // A node: one of its devices.
            Target::Device {
                node,
                dev: rng.below(c.devices(node).len()),
            }
        }
        [_] => Target::Node(node),
        [_, g] if g.starts_with("gpu") && g[3..].parse::<usize>().is_ok() => {
            let gpu: usize = g[3..].parse()?;
            anyhow::ensure!(gpu < 8, "GPU index {gpu} out of range 0..8");
            Target::Gpu { node, gpu }
        }
        [_, h, "1"] if h.starts_with("mlx5_") => {
            let hca: usize = h[5..]
                .parse()
                .map_err(|_| anyhow::anyhow!("bad HCA in {s:?}"))?;
            anyhow::ensure!(hca < 8, "HCA index {hca} out of range 0..8");
            Target::Port { node, hca }
        }
        [_, d] if want == Wants::Device => match c.device_index(node, d) {
            Some(dev) => Target::Device { node, dev },
            None => bail!(
                "{} has no device {d:?} (it has {})",
                parts[0],
                c.devices(node)
                    .iter()
                    .map(|d| d.0.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        _ => bail!("bad entity {s:?}: use n017/mlx5_2/1, n017/gpu5, n017/nvme0n1 or n017"),
    };
    let ok = want == Wants::Cluster
        || matches!(
            (&t, want),
            (Target::Port { .. }, Wants::Port)
                | (Target::Gpu { .. }, Wants::Gpu)
                | (Target::Device { .. }, Wants::Device)
                | (Target::Node(_), Wants::Node)
                | (Target::Gpu { .. } | Target::Node(_), Wants::Rank)
        );
    if !ok {
        bail!(
            "entity {s:?} does not fit this kind: it takes {}",
            match want {
                Wants::Port => "a port like n017/mlx5_2/1",
                Wants::Gpu => "a GPU like n017/gpu5",
                Wants::Device => "a block device like n017/nvme0n1 (or a node)",
                Wants::Node => "a node like n017",
                Wants::Rank =>
                    "a rank by its GPU like n017/gpu5, or a host like n017 (all its ranks)",
                Wants::Cluster | Wants::Job | Wants::Model => "no entity",
            }
        );
    }
    Ok(t)
}

fn parse_value(key: &str, v: &str) -> Result<f64> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("{key}={v:?} is not a number"))?;
    anyhow::ensure!(x.is_finite(), "{key}={v} is not finite");
    Ok(x)
}

/// Parses one `KIND[@ENTITY][:KEY=VALUE,...]`; `rng` draws missing entities.
pub fn parse_one(spec: &str, c: &Cluster, rng: &mut Rng) -> Result<Fault> {
    let (head, params) = match spec.split_once(':') {
        Some((h, p)) => (h, p),
        None => (spec, ""),
    };
    let (k, ent) = match head.split_once('@') {
        Some((k, e)) => (k, Some(e)),
        None => (head, None),
    };
    let Some((kname, keys)) = PARAMS.iter().find(|(n, _)| *n == k) else {
        bail!(
            "unknown fault kind {k:?} (kinds: {})",
            PARAMS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
        );
    };
    let mut given: BTreeMap<&str, f64> = BTreeMap::new();
    for kv in params.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, v)) = kv.split_once('=') else {
            bail!("expected KEY=VALUE, got {kv:?}");
        };
        let key = key.trim();
        if key != "at" && !keys.iter().any(|(n, _)| *n == key) {
            let mut known: Vec<&str> = keys.iter().map(|(n, _)| *n).collect();
            known.push("at");
            bail!(
                "unknown parameter {key:?} for {kname} (known: {})",
                known.join(", ")
            );
        }
        if given.insert(key, parse_value(key, v)?).is_some() {
            bail!("parameter {key:?} given twice");
        }
    }
    let get = |key: &str| -> f64 {
        given.get(key).copied().unwrap_or_else(|| {
            keys.iter()
                .find(|(n, _)| *n == key)
                .map_or(f64::NAN, |(_, d)| *d)
        })
    };
    let check = |key: &str, ok: bool, why: &str| -> Result<()> {
        if ok {
            Ok(())
        } else {
            bail!("{key}={} {why}", fmt_value(get(key)))
        }
    };
    let kind = match *kname {
        "ib-link-degrade" => {
            let (ber, ramp) = (get("ber"), get("ramp"));
            check(
                "ber",
                ber > 0.0 && ber < 1e-3,
                "must be a bit error rate in (0, 1e-3)",
            )?;
            check("ramp", ramp >= 0.0, "must be ≥ 0 seconds")?;
            Kind::IbLinkDegrade { ber, ramp_s: ramp }
        }
        "ib-link-down" => Kind::IbLinkDown,
        "ib-link-flap" => {
            let (period, down) = (get("period"), get("down"));
            check("down", down > 0.0, "must be > 0 seconds")?;
            check(
                "period",
                period > down,
                "must be longer than down= (the link must come back up between downs)",
            )?;
            Kind::IbLinkFlap {
                period_s: period,
                down_s: down,
            }
        }
        "gpu-thermal" => Kind::GpuThermal,
        "gpu-power" => Kind::GpuPower,
        "xid" => Kind::Xid,
        "ecc-dbe" => Kind::EccDbe,
        "storage-stall" => {
            let f = get("factor");
            check("factor", f >= 1.0, "must be ≥ 1 (a slowdown)")?;
            Kind::StorageStall { factor: f }
        }
        "node-loss" => Kind::NodeLoss,
        "inference-slow" => {
            let f = get("factor");
            check("factor", f >= 1.0, "must be ≥ 1 (a slowdown)")?;
            Kind::InferenceSlow { factor: f }
        }
        "nccl-hang" => Kind::NcclHang,
        "nccl-slow-rank" => {
            let f = get("factor");
            check("factor", f >= 1.0, "must be ≥ 1 (a slowdown)")?;
            Kind::NcclSlowRank { factor: f }
        }
        "job-slow" => {
            let f = get("factor");
            check("factor", f >= 1.0, "must be ≥ 1 (a slowdown)")?;
            Kind::JobSlow { factor: f }
        }
        "job-end" => {
            let g = get("gap");
            check("gap", g >= 0.0, "must be ≥ 0 seconds")?;
            Kind::JobEnd { gap_s: g }
        }
        "counter-reset" => Kind::CounterReset,
        "collector-restart" => Kind::CollectorRestart,
        "congestion" => {
            let (f, d) = (get("fraction"), get("duration"));
            check("fraction", f > 0.0 && f <= 1.0, "must be in (0, 1]")?;
            check("duration", d > 0.0, "must be > 0 seconds")?;
            Kind::Congestion {
                fraction: f,
                duration_s: d,
            }
        }
        "single-errors" => {
            let (f, e) = (get("fraction"), get("every"));
            check("fraction", f > 0.0 && f <= 1.0, "must be in (0, 1]")?;
            check("every", e > 0.0, "must be > 0 seconds")?;
            Kind::SingleErrors {
                fraction: f,
                every_s: e,
            }
        }
        "storage-fleet-slow" => {
            let f = get("factor");
            check("factor", f >= 1.0, "must be ≥ 1 (a slowdown)")?;
            Kind::StorageFleetSlow { factor: f }
        }
        "interference-storage" | "victim-more-data" => {
            let f = get("factor");
            check("factor", f >= 1.0, "must be ≥ 1 (more I/O)")?;
            if *kname == "victim-more-data" {
                Kind::VictimMoreData { factor: f }
            } else {
                Kind::InterferenceStorage { factor: f }
            }
        }
        "interference-link" | "aggressor-harmless" => {
            let d = get("demand");
            check(
                "demand",
                d > 0.0 && d <= 4.0,
                "must be a multiple of line rate in (0, 4]",
            )?;
            if *kname == "aggressor-harmless" {
                Kind::AggressorHarmless { demand: d }
            } else {
                Kind::InterferenceLink { demand: d }
            }
        }
        "interference-gpu" => {
            let sh = get("share");
            check(
                "share",
                sh > 0.0 && sh < 1.0,
                "must be a fraction of GPU time in (0, 1)",
            )?;
            Kind::InterferenceGpu { share: sh }
        }
        other => bail!("fault kind {other:?} has no parser"),
    };
    let onset = match given.get("at") {
        Some(&v) if v >= 0.0 => Some(v),
        Some(&v) => bail!("at={v} must be ≥ 0 seconds"),
        None => None,
    };
    let want = wants(&kind);
    let target = match ent {
        Some(e) if want == Wants::Cluster => {
            bail!("{kname} affects the whole cluster and takes no entity (got {e:?})")
        }
        Some(e) if want == Wants::Job || want == Wants::Model => {
            bail!("{kname} affects the training job and takes no entity (got {e:?})")
        }
        Some(e) => parse_target(c, e, want, rng)?,
        None => match want {
            Wants::Port => Target::Port {
                node: rng.below(c.nodes()),
                hca: rng.below(8),
            },
            Wants::Gpu | Wants::Rank => Target::Gpu {
                node: rng.below(c.nodes()),
                gpu: rng.below(8),
            },
            Wants::Device => {
                let node = rng.below(c.nodes());
                Target::Device {
                    node,
                    dev: rng.below(c.devices(node).len()),
                }
            }
            Wants::Node => Target::Node(rng.below(c.nodes())),
            Wants::Cluster => Target::Cluster,
            Wants::Job => Target::Job,
            Wants::Model => Target::Model,
        },
    };
    let name = if matches!(target, Target::Cluster | Target::Job | Target::Model) {
        kname.to_string()
    } else {
        format!("{kname}@{}", target_name(c, &target))
    };
    Ok(Fault {
        kind,
        target,
        name,
        onset,
    })
}

/// Parses `KIND[@ENTITY][:KEY=VALUE,...]` specs; missing entities are drawn
/// from the seed.
pub fn parse_all(specs: &[String], c: &Cluster, seed: u64) -> Result<Vec<Fault>> {
    let mut rng = Rng::derive(seed, 0xfa17);
    specs
        .iter()
        .map(|s| parse_one(s, c, &mut rng).map_err(|e| anyhow::anyhow!("--inject {s:?}: {e:#}")))
        .collect()
}

/// Reads a scenario file: one fault per line, `KIND[@ENTITY][:KEY=VALUE,...]
/// [at=SECONDS]` (the trailing `at=` word is the same as the `at` key), `#`
/// comments. Errors name the line.
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
                _ => bail!(
                    "scenario line {}: expected `at=SECONDS`, got {p:?} (parameters go after the kind: KIND[@ENTITY]:KEY=VALUE,...)",
                    i + 1
                ),
            }
        }
        let mut rng = Rng::derive(seed, 0x5ce0_0000 + i as u64);
        let mut f = parse_one(&spec, c, &mut rng)
            .map_err(|e| anyhow::anyhow!("scenario line {}: {spec:?}: {e:#}", i + 1))?;
        if onset.is_some() {
            if f.onset.is_some() {
                bail!(
                    "scenario line {}: onset given twice (`:at=` and `at=`)",
                    i + 1
                );
            }
            f.onset = onset;
        }
        out.push(f);
    }
    Ok(out)
}
