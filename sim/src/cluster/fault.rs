//! What can go wrong in the simulated cluster, on which entity, with which
//! physical parameters: the fault and confounder kinds the cluster's
//! physics applies (`apply.rs` and its siblings), their
//! `--inject` names and parameters ([`PARAMS`]), and the incident each one
//! should raise. The injection syntax that makes them is
//! [`crate::faults`].

/// A fault or confounder with its physical parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// Bit error rate ramping log-linearly from the port's base BER to `ber`
    /// over `ramp_s` seconds, then staying there.
    IbLinkDegrade {
        ber: f64,
        ramp_s: f64,
    },
    /// `ports` ports behind one leaf switch (spread over its nodes) degrade
    /// together to `ber` (one switch's fault: power, cooling, firmware, an
    /// optics batch): one incident on the switch.
    IbSwitchDegrade {
        ber: f64,
        ports: usize,
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
    /// An XID event with this code (NVIDIA's catalogue decides its action).
    Xid {
        code: u32,
    },
    EccDbe,
    /// One job crash-looping on one GPU: its launcher restarts it (a new
    /// process each time) and it dies again `crashes` times over `span_s`
    /// seconds, each with XID `code` from its own pid and the XID 45 of
    /// its teardown: an application fault, never the GPU's
    /// ([`super::xid`]).
    XidCrashLoop {
        code: u32,
        crashes: u32,
        span_s: f64,
    },
    /// A bad GPU: `jobs` unrelated jobs (other users, other executables)
    /// scheduled on it one after another, `gap_s` seconds apart, each dies
    /// at once with the same application-class XID `code`: the GPU's fault.
    XidBadGpu {
        code: u32,
        jobs: u32,
        gap_s: f64,
    },
    /// One fatal NVSwitch error (SXid `code`) on switch `switch` (0..4) of
    /// a host's HGX tray: `nvswitch_sxid` on `host/nvswitch/<pci>`.
    NvswitchSxid {
        code: u32,
        switch: usize,
    },
    /// A burst of `lines` XID `code` lines within one second on one GPU
    /// (NVSentinel's users report thousands of XID 95 a second): one fault;
    /// `folded`: as the collector sends them (one event per window with a
    /// count), else each line its own event.
    XidBurst {
        code: u32,
        lines: u32,
        folded: bool,
    },
    /// Confounder: `jobs` jobs of several users cancelled over `span_s`
    /// seconds; each of their GPUs logs XID 45 (its channels removed when
    /// the process is killed), half of them XID 43 first (killed with work
    /// in flight). Nothing is wrong with any GPU.
    XidCancelledJobs {
        jobs: u32,
        span_s: f64,
    },
    /// A host's shared cooling fails: its first `gpus` GPUs throttle
    /// thermally at once (one host incident).
    GpuThermalHost {
        gpus: usize,
    },
    /// One NVLink link of a GPU corrupts `rate` flits a second (each one
    /// a flit CRC error and a replay).
    GpuNvlink {
        rate: f64,
        link: usize,
    },
    /// One block device `factor` times slower.
    StorageStall {
        factor: f64,
    },
    /// The shared NFS target's RPC round trips `factor` times longer on
    /// every node mounting it (the server or its network path), or on one
    /// host's mount alone: `nfs_latency`.
    NfsSlow {
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
    /// Every rank issues the collective in flight and none returns: the
    /// rank's process dies in it (its last row says it exited); the others
    /// block in `cuStreamSynchronize` with their GPUs spinning:
    /// `collective_hang` naming the dead peer.
    NcclHangDeadPeer,
    /// The port goes down under the rank and every rank hangs in the
    /// collective in flight: `collective_hang` naming the port.
    NcclHangPortDown,
    /// Every rank hangs in the collective in flight with nothing to see
    /// below but the waiting itself: `collective_hang`, no cause seen.
    NcclHangUnknown,
    // Confounders: must raise nothing.
    /// The job checkpoints for `duration_s`: no step starts, its GPUs idle,
    /// its processes write to storage.
    NcclCheckpoint {
        duration_s: f64,
    },
    /// The job evaluates for `duration_s`: no collectives, kernels keep
    /// launching, GPUs busy.
    NcclEval {
        duration_s: f64,
    },
    /// The job's processes exit (no `ncclCommDestroy`): every rank's last
    /// row says so; a next job starts `gap_s` seconds later.
    NcclJobExit {
        gap_s: f64,
    },
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
    ("ib-switch-degrade", &[("ber", 1e-10), ("ports", 4.0)]),
    ("ib-link-down", &[]),
    ("ib-link-flap", &[("period", 6.0), ("down", 2.0)]),
    ("gpu-thermal", &[]),
    ("gpu-power", &[]),
    ("xid", &[("code", 79.0)]),
    ("ecc-dbe", &[]),
    (
        "xid-crash-loop",
        &[("code", 13.0), ("crashes", 20.0), ("span", 600.0)],
    ),
    (
        "xid-bad-gpu",
        &[("code", 13.0), ("jobs", 3.0), ("gap", 120.0)],
    ),
    ("nvswitch-sxid", &[("code", 20034.0), ("switch", 0.0)]),
    (
        "xid-burst",
        &[("code", 95.0), ("lines", 10000.0), ("folded", 1.0)],
    ),
    ("xid-cancelled-jobs", &[("jobs", 200.0), ("span", 600.0)]),
    ("gpu-thermal-host", &[("gpus", 4.0)]),
    ("gpu-nvlink", &[("rate", 1.0), ("link", 0.0)]),
    ("storage-stall", &[("factor", 20.0)]),
    ("nfs-slow", &[("factor", 10.0)]),
    ("node-loss", &[]),
    ("job-slow", &[("factor", 1.3)]),
    ("inference-slow", &[("factor", 1.6)]),
    ("nccl-hang", &[]),
    ("nccl-slow-rank", &[("factor", 1.6)]),
    ("nccl-hang-dead-peer", &[]),
    ("nccl-hang-port-down", &[]),
    ("nccl-hang-unknown", &[]),
    ("nccl-checkpoint", &[("duration", 120.0)]),
    ("nccl-eval", &[("duration", 120.0)]),
    ("nccl-job-exit", &[("gap", 120.0)]),
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
            Kind::IbSwitchDegrade { .. } => "ib-switch-degrade",
            Kind::IbLinkDown => "ib-link-down",
            Kind::IbLinkFlap { .. } => "ib-link-flap",
            Kind::GpuThermal => "gpu-thermal",
            Kind::GpuPower => "gpu-power",
            Kind::Xid { .. } => "xid",
            Kind::EccDbe => "ecc-dbe",
            Kind::XidCrashLoop { .. } => "xid-crash-loop",
            Kind::XidBadGpu { .. } => "xid-bad-gpu",
            Kind::NvswitchSxid { .. } => "nvswitch-sxid",
            Kind::XidBurst { .. } => "xid-burst",
            Kind::XidCancelledJobs { .. } => "xid-cancelled-jobs",
            Kind::GpuThermalHost { .. } => "gpu-thermal-host",
            Kind::GpuNvlink { .. } => "gpu-nvlink",
            Kind::StorageStall { .. } => "storage-stall",
            Kind::NfsSlow { .. } => "nfs-slow",
            Kind::NodeLoss => "node-loss",
            Kind::JobSlow { .. } => "job-slow",
            Kind::InferenceSlow { .. } => "inference-slow",
            Kind::NcclHang => "nccl-hang",
            Kind::NcclSlowRank { .. } => "nccl-slow-rank",
            Kind::NcclHangDeadPeer => "nccl-hang-dead-peer",
            Kind::NcclHangPortDown => "nccl-hang-port-down",
            Kind::NcclHangUnknown => "nccl-hang-unknown",
            Kind::NcclCheckpoint { .. } => "nccl-checkpoint",
            Kind::NcclEval { .. } => "nccl-eval",
            Kind::NcclJobExit { .. } => "nccl-job-exit",
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
            Kind::IbSwitchDegrade { ber, ports } => vec![("ber", ber), ("ports", ports as f64)],
            Kind::IbLinkFlap { period_s, down_s } => vec![("period", period_s), ("down", down_s)],
            Kind::StorageStall { factor }
            | Kind::NfsSlow { factor }
            | Kind::StorageFleetSlow { factor }
            | Kind::JobSlow { factor }
            | Kind::NcclSlowRank { factor }
            | Kind::InferenceSlow { factor } => {
                vec![("factor", factor)]
            }
            Kind::JobEnd { gap_s } | Kind::NcclJobExit { gap_s } => vec![("gap", gap_s)],
            Kind::NcclCheckpoint { duration_s } | Kind::NcclEval { duration_s } => {
                vec![("duration", duration_s)]
            }
            Kind::Xid { code } => vec![("code", code as f64)],
            Kind::XidCrashLoop {
                code,
                crashes,
                span_s,
            } => vec![
                ("code", code as f64),
                ("crashes", crashes as f64),
                ("span", span_s),
            ],
            Kind::XidBadGpu { code, jobs, gap_s } => {
                vec![("code", code as f64), ("jobs", jobs as f64), ("gap", gap_s)]
            }
            Kind::NvswitchSxid { code, switch } => {
                vec![("code", code as f64), ("switch", switch as f64)]
            }
            Kind::XidBurst {
                code,
                lines,
                folded,
            } => vec![
                ("code", code as f64),
                ("lines", lines as f64),
                ("folded", f64::from(u8::from(folded))),
            ],
            Kind::XidCancelledJobs { jobs, span_s } => {
                vec![("jobs", jobs as f64), ("span", span_s)]
            }
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
            Kind::GpuThermalHost { gpus } => vec![("gpus", gpus as f64)],
            Kind::GpuNvlink { rate, link } => vec![("rate", rate), ("link", link as f64)],
            _ => Vec::new(),
        }
    }

    pub fn is_confounder(&self) -> bool {
        self.expected_kind().is_none()
    }

    /// The incident kind this fault should raise (`None` for confounders).
    pub fn expected_kind(&self) -> Option<&'static str> {
        Some(match self {
            Kind::IbLinkDegrade { .. } | Kind::IbSwitchDegrade { .. } => "ib_link_degraded",
            Kind::IbLinkDown => "ib_link_down",
            Kind::IbLinkFlap { .. } => "ib_link_flapping",
            Kind::GpuThermal => "gpu_thermal_throttle",
            Kind::GpuPower => "gpu_power_throttle",
            // One job met an application-class code (13, 31: NVIDIA's
            // RESTART_APP): the application's; any other code the GPU's.
            Kind::Xid { code } if app_code(*code) => APP_XID,
            Kind::Xid { .. } | Kind::XidBadGpu { .. } | Kind::XidBurst { .. } => "gpu_xid",
            // An application's fault: the job's incident, not the GPU's.
            Kind::XidCrashLoop { .. } => APP_XID,
            Kind::NvswitchSxid { .. } => SXID_INCIDENT,
            Kind::EccDbe => "gpu_ecc",
            Kind::GpuThermalHost { .. } => "gpu_thermal_throttle",
            Kind::GpuNvlink { .. } => "gpu_nvlink_errors",
            Kind::StorageStall { .. } => "storage_latency",
            Kind::NfsSlow { .. } => "nfs_latency",
            Kind::NodeLoss => "node_lost",
            Kind::JobSlow { .. } => "job_slowdown",
            Kind::InferenceSlow { .. } => "inference_latency",
            Kind::NcclHang
            | Kind::NcclHangDeadPeer
            | Kind::NcclHangPortDown
            | Kind::NcclHangUnknown => "collective_hang",
            Kind::NcclSlowRank { .. } => "straggler",
            Kind::InterferenceStorage { .. }
            | Kind::InterferenceLink { .. }
            | Kind::InterferenceGpu { .. } => "interference",
            _ => return None,
        })
    }
}

/// The incident kind an NVSwitch error (SXid) should raise on
/// `host/nvswitch/<pci>`.
pub const SXID_INCIDENT: &str = "nvswitch_sxid";
/// The incident kind of an XID judged the application's (the job's owner
/// is told; never a GPU reset).
pub const APP_XID: &str = "app_xid";

/// Whether NVIDIA's catalogue makes `code` the application's (its
/// `RESTART_APP` bucket, but 94: a contained memory error is the memory's).
fn app_code(code: u32) -> bool {
    vocab::xid::class(code) == vocab::xid::Class::Application
}

/// What the fault's incident must recommend: an application's fault is
/// the job's (restart or fix it), never a GPU reset, node drain or page; a
/// hardware fault must name the hardware action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    Application,
    Hardware,
}

impl Kind {
    /// The class of action the fault's incident must carry (`None`: not
    /// judged, any action of the catalogue passes).
    pub fn expected_class(&self) -> Option<Class> {
        match self {
            Kind::XidCrashLoop { .. } => Some(Class::Application),
            Kind::Xid { code } if app_code(*code) => Some(Class::Application),
            Kind::XidBadGpu { .. } | Kind::XidBurst { .. } => Some(Class::Hardware),
            _ => None,
        }
    }

    /// Seconds after its onset the fault keeps acting (a run lasts at
    /// least that long past the onset, then its tail): 0 for faults that
    /// act at once or for good.
    pub fn active_s(&self) -> f64 {
        match *self {
            Kind::XidCrashLoop { span_s, .. } | Kind::XidCancelledJobs { span_s, .. } => span_s,
            Kind::XidBadGpu { jobs, gap_s, .. } => gap_s * f64::from(jobs.saturating_sub(1)),
            _ => 0.0,
        }
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
    /// A leaf switch of the fat tree, by index.
    Switch(usize),
    /// The shared NFS target ([`super::nfs`]), or one node's
    /// mount of it.
    Nfs {
        node: Option<usize>,
    },
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
}
