//! Parsing `KIND[@ENTITY][:KEY=VALUE,...]` specs and scenario files:
//! known keys only, values in their physical ranges, entities that fit the
//! kind (drawn from the seed when omitted); errors name the spec.
use std::collections::BTreeMap;

use anyhow::{bail, Result};

use super::{fmt_value, target_name, Fault, Kind, Target, PARAMS};
use crate::{cluster::Cluster, rng::Rng};

mod xid;
use xid::xid_kind_of;

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
    /// A leaf switch.
    Switch,
    /// The shared NFS target, or a host's mount of it.
    Nfs,
}

fn wants(kind: &Kind) -> Wants {
    match kind {
        Kind::IbLinkDegrade { .. }
        | Kind::IbLinkDown
        | Kind::IbLinkFlap { .. }
        | Kind::CounterReset => Wants::Port,
        Kind::IbSwitchDegrade { .. } => Wants::Switch,
        Kind::NfsSlow { .. } => Wants::Nfs,
        Kind::GpuThermal | Kind::GpuPower | Kind::Xid { .. } | Kind::EccDbe => Wants::Gpu,
        Kind::XidCrashLoop { .. } | Kind::XidBadGpu { .. } | Kind::XidBurst { .. } => Wants::Gpu,
        Kind::NvswitchSxid { .. } => Wants::Node,
        Kind::XidCancelledJobs { .. } => Wants::Cluster,
        Kind::GpuNvlink { .. } => Wants::Gpu,
        Kind::GpuThermalHost { .. } => Wants::Node,
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
        Kind::NcclHangDeadPeer => Wants::Gpu,
        Kind::NcclHangPortDown => Wants::Port,
        Kind::NcclHangUnknown
        | Kind::NcclCheckpoint { .. }
        | Kind::NcclEval { .. }
        | Kind::NcclJobExit { .. } => Wants::Cluster,
    }
}

/// The NFS target (`filer01:/datasets`, `nfs:filer01:/datasets`), or a
/// host's mount of it (`n003`, `n003/nfs:filer01:/datasets`).
fn parse_nfs(c: &Cluster, s: &str) -> Result<Target> {
    let target = crate::cluster::nfs::target();
    let is_target = |t: &str| t.strip_prefix("nfs:").unwrap_or(t) == target;
    if is_target(s) {
        return Ok(Target::Nfs { node: None });
    }
    let (host, mount) = match s.split_once('/') {
        Some((h, m)) if !h.contains(':') => (h, Some(m)),
        _ => (s, None),
    };
    match c.node_index(host) {
        Some(n) if mount.is_none_or(is_target) => Ok(Target::Nfs { node: Some(n) }),
        _ => bail!(
            "entity {s:?} does not fit this kind: it takes the NFS target {target} (every node mounts it) or a host n000..n{:03} (its mount alone)",
            c.nodes().saturating_sub(1)
        ),
    }
}

fn parse_target(c: &Cluster, s: &str, want: Wants, rng: &mut Rng) -> Result<Target> {
    if want == Wants::Nfs {
        return parse_nfs(c, s);
    }
    if want == Wants::Switch {
        let leaves = c.nodes().div_ceil(crate::cluster::NODES_PER_LEAF);
        let leaf = s
            .strip_prefix("leaf")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&l| l < leaves)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "entity {s:?} does not fit this kind: it takes a leaf switch leaf00..leaf{:02}",
                    leaves.saturating_sub(1)
                )
            })?;
        return Ok(Target::Switch(leaf));
    }
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
                Wants::Switch => "a leaf switch like leaf01",
                Wants::Nfs => "the NFS target filer01:/datasets or a host like n017",
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

/// A spec's parameters: those given, else the kind's defaults.
struct Given<'a> {
    keys: &'a [(&'static str, f64)],
    given: BTreeMap<&'a str, f64>,
}

impl Given<'_> {
    fn get(&self, key: &str) -> f64 {
        self.given.get(key).copied().unwrap_or_else(|| {
            self.keys
                .iter()
                .find(|(n, _)| *n == key)
                .map_or(f64::NAN, |(_, d)| *d)
        })
    }

    /// `key`'s value, when `ok` says it is in range.
    fn checked(&self, key: &str, ok: impl Fn(f64) -> bool, why: &str) -> Result<f64> {
        let v = self.get(key);
        if ok(v) {
            Ok(v)
        } else {
            bail!("{key}={} {why}", fmt_value(v))
        }
    }

    /// `factor=`, a slowdown (≥ 1).
    fn slowdown(&self) -> Result<f64> {
        self.checked("factor", |f| f >= 1.0, "must be ≥ 1 (a slowdown)")
    }

    /// `demand=`, a multiple of line rate.
    fn demand(&self) -> Result<f64> {
        self.checked(
            "demand",
            |d| d > 0.0 && d <= 4.0,
            "must be a multiple of line rate in (0, 4]",
        )
    }

    /// `fraction=`, of the ports.
    fn fraction(&self) -> Result<f64> {
        self.checked("fraction", |f| f > 0.0 && f <= 1.0, "must be in (0, 1]")
    }
}

/// The `KEY=VALUE,...` list of kind `kname`: known keys (and `at`), once each.
fn parse_params<'a>(
    kname: &str,
    keys: &'a [(&'static str, f64)],
    params: &'a str,
) -> Result<Given<'a>> {
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
    Ok(Given { keys, given })
}

/// Kind `kname` with its parameters checked against their physical ranges.
fn kind_of(kname: &str, g: &Given) -> Result<Kind> {
    if let Some(k) = gpu_kind_of(kname, g)? {
        return Ok(k);
    }
    Ok(match kname {
        "ib-link-degrade" => {
            let ber = g.checked(
                "ber",
                |b| b > 0.0 && b < 1e-3,
                "must be a bit error rate in (0, 1e-3)",
            )?;
            let ramp_s = g.checked("ramp", |r| r >= 0.0, "must be ≥ 0 seconds")?;
            Kind::IbLinkDegrade { ber, ramp_s }
        }
        "ib-switch-degrade" => Kind::IbSwitchDegrade {
            ber: g.checked(
                "ber",
                |b| b > 0.0 && b < 1e-3,
                "must be a bit error rate in (0, 1e-3)",
            )?,
            ports: g.checked(
                "ports",
                |p| p >= 1.0 && p.fract() == 0.0 && p <= 128.0,
                "must be a whole number of ports in 1..=128 (a leaf's HCA ports)",
            )? as usize,
        },
        "ib-link-down" => Kind::IbLinkDown,
        "ib-link-flap" => {
            let down_s = g.checked("down", |d| d > 0.0, "must be > 0 seconds")?;
            let period_s = g.checked(
                "period",
                |p| p > down_s,
                "must be longer than down= (the link must come back up between downs)",
            )?;
            Kind::IbLinkFlap { period_s, down_s }
        }
        "storage-stall" => Kind::StorageStall {
            factor: g.slowdown()?,
        },
        "nfs-slow" => Kind::NfsSlow {
            factor: g.checked(
                "factor",
                |f| (1.0..=1000.0).contains(&f),
                "must be an RTT multiplier in 1..=1000 (1 is healthy; 1000 turns a 1 ms RPC into a second)",
            )?,
        },
        "node-loss" => Kind::NodeLoss,
        "inference-slow" => Kind::InferenceSlow {
            factor: g.slowdown()?,
        },
        "nccl-hang" => Kind::NcclHang,
        "nccl-slow-rank" => Kind::NcclSlowRank {
            factor: g.slowdown()?,
        },
        "job-slow" => Kind::JobSlow {
            factor: g.slowdown()?,
        },
        "nccl-hang-dead-peer" => Kind::NcclHangDeadPeer,
        "nccl-hang-port-down" => Kind::NcclHangPortDown,
        "nccl-hang-unknown" => Kind::NcclHangUnknown,
        "nccl-checkpoint" | "nccl-eval" => {
            let d = g.checked("duration", |d| d > 0.0, "must be > 0 seconds")?;
            if kname == "nccl-eval" {
                Kind::NcclEval { duration_s: d }
            } else {
                Kind::NcclCheckpoint { duration_s: d }
            }
        }
        "nccl-job-exit" => Kind::NcclJobExit {
            gap_s: g.checked("gap", |x| x >= 0.0, "must be ≥ 0 seconds")?,
        },
        "job-end" => Kind::JobEnd {
            gap_s: g.checked("gap", |x| x >= 0.0, "must be ≥ 0 seconds")?,
        },
        "counter-reset" => Kind::CounterReset,
        "collector-restart" => Kind::CollectorRestart,
        "congestion" => Kind::Congestion {
            fraction: g.fraction()?,
            duration_s: g.checked("duration", |d| d > 0.0, "must be > 0 seconds")?,
        },
        "single-errors" => Kind::SingleErrors {
            fraction: g.fraction()?,
            every_s: g.checked("every", |e| e > 0.0, "must be > 0 seconds")?,
        },
        "storage-fleet-slow" => Kind::StorageFleetSlow {
            factor: g.slowdown()?,
        },
        "interference-storage" | "victim-more-data" => {
            let f = g.checked("factor", |f| f >= 1.0, "must be ≥ 1 (more I/O)")?;
            if kname == "victim-more-data" {
                Kind::VictimMoreData { factor: f }
            } else {
                Kind::InterferenceStorage { factor: f }
            }
        }
        "interference-link" => Kind::InterferenceLink {
            demand: g.demand()?,
        },
        "aggressor-harmless" => Kind::AggressorHarmless {
            demand: g.demand()?,
        },
        "interference-gpu" => Kind::InterferenceGpu {
            share: g.checked(
                "share",
                |s| s > 0.0 && s < 1.0,
                "must be a fraction of GPU time in (0, 1)",
            )?,
        },
        other => bail!("fault kind {other:?} has no parser"),
    })
}

/// A GPU fault kind `kname` with its parameters checked; `None` for other
/// kinds.
fn gpu_kind_of(kname: &str, g: &Given) -> Result<Option<Kind>> {
    Ok(Some(match kname {
        "gpu-thermal" => Kind::GpuThermal,
        "gpu-power" => Kind::GpuPower,
        "xid" => Kind::Xid {
            code: g.checked(
                "code",
                |c| c >= 1.0 && c.fract() == 0.0 && c <= 1023.0,
                "must be an XID code (a whole number in 1..=1023)",
            )? as u32,
        },
        "ecc-dbe" => Kind::EccDbe,
        "xid-crash-loop" | "xid-bad-gpu" | "nvswitch-sxid" | "xid-burst" | "xid-cancelled-jobs" => {
            xid_kind_of(kname, g)?
        }
        // GPU faults beyond one GPU's state (`cluster::gpu`).
        "gpu-thermal-host" => Kind::GpuThermalHost {
            gpus: g.checked(
                "gpus",
                |n| (2.0..=8.0).contains(&n) && n.fract() == 0.0,
                "must be a whole number of GPUs in 2..=8 (one GPU is gpu-thermal)",
            )? as usize,
        },
        "gpu-nvlink" => Kind::GpuNvlink {
            rate: g.checked(
                "rate",
                |r| r > 0.0 && r <= 1e6,
                "must be corrupted flits per second in (0, 1e6]",
            )?,
            link: g.checked(
                "link",
                |l| (0.0..18.0).contains(&l) && l.fract() == 0.0,
                "must be a link number in 0..=17",
            )? as usize,
        },
        _ => return Ok(None),
    }))
}

/// An entity of the kind `want` drawn from `rng` (no `@ENTITY` given).
fn draw_target(c: &Cluster, want: Wants, rng: &mut Rng) -> Target {
    match want {
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
        Wants::Switch => {
            Target::Switch(rng.below(c.nodes().div_ceil(crate::cluster::NODES_PER_LEAF).max(1)))
        }
        // The fleet's one target.
        Wants::Nfs => Target::Nfs { node: None },
        Wants::Cluster => Target::Cluster,
        Wants::Job => Target::Job,
        Wants::Model => Target::Model,
    }
}

/// `KIND[@ENTITY]` and its `KEY=VALUE,...` list, split at the first `:`
/// that is not part of an NFS entity: the one of `server:/export` (followed
/// by the export's `/`) and of the `nfs:` prefix stay in the entity.
fn split_spec(spec: &str) -> (&str, &str) {
    let at = spec.find('@');
    let sep = spec.match_indices(':').map(|(i, _)| i).find(|&i| {
        let in_entity = at.is_some_and(|a| i > a)
            && (spec[i + 1..].starts_with('/')
                || spec[..i].ends_with("@nfs")
                || spec[..i].ends_with("/nfs"));
        !in_entity
    });
    match sep {
        Some(i) => (&spec[..i], &spec[i + 1..]),
        None => (spec, ""),
    }
}

/// Parses one `KIND[@ENTITY][:KEY=VALUE,...]`; `rng` draws missing entities.
pub fn parse_one(spec: &str, c: &Cluster, rng: &mut Rng) -> Result<Fault> {
    let (head, params) = split_spec(spec);
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
    let given = parse_params(kname, keys, params)?;
    let kind = kind_of(kname, &given)?;
    let onset = match given.given.get("at") {
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
        None => draw_target(c, want, rng),
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

#[cfg(test)]
mod tests {
    use super::split_spec;

    #[test]
    fn nfs_entities_keep_their_colons() {
        for (spec, head, params) in [
            ("nfs-slow", "nfs-slow", ""),
            ("nfs-slow:factor=3", "nfs-slow", "factor=3"),
            (
                "nfs-slow@filer01:/datasets:factor=3,at=5",
                "nfs-slow@filer01:/datasets",
                "factor=3,at=5",
            ),
            (
                "nfs-slow@nfs:filer01:/datasets:factor=3",
                "nfs-slow@nfs:filer01:/datasets",
                "factor=3",
            ),
            (
                "nfs-slow@n003/nfs:filer01:/datasets",
                "nfs-slow@n003/nfs:filer01:/datasets",
                "",
            ),
            ("nfs-slow@n003:factor=2", "nfs-slow@n003", "factor=2"),
            (
                "storage-stall@n003/sda:factor=8",
                "storage-stall@n003/sda",
                "factor=8",
            ),
        ] {
            assert_eq!(split_spec(spec), (head, params), "{spec}");
        }
    }
}
