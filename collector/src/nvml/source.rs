//! NVML: per-window GPU samples, lost GPUs, and XID/ECC events from the
//! event thread → GPU rows and events; dcgm-exporter-like families.
use std::{collections::BTreeMap, path::PathBuf, sync::mpsc::Receiver};

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    jobmap::JobMap,
    nvml::{self, podresources, EventListener, GpuEvent, GpuEventKind, NvmlSource},
    sources::{Ctx, Fact, Facts, Source},
    usage::GpuReadings,
    window::unix_ms,
    workload::{gpu_workloads, GpuIndex},
};

/// What the GPU source read this window, for the sources that derive from
/// it (`cuda`'s lines, `kmsg`'s placement).
#[derive(Debug, Default)]
pub struct GpuFacts {
    pub gpus: Vec<nvml::GpuInfo>,
    pub samples: Vec<nvml::GpuSample>,
}

impl GpuFacts {
    /// This window's, or none when the GPU source is off.
    pub fn of(facts: &Facts) -> &Self {
        static NONE: GpuFacts = GpuFacts {
            gpus: Vec::new(),
            samples: Vec::new(),
        };
        facts.get().unwrap_or(&NONE)
    }
}

pub struct GpuSource {
    src: NvmlSource,
    events: Receiver<GpuEvent>,
    /// Keeps the event thread running.
    _listener: Option<EventListener>,
    /// XIDs since start by (GPU, code); bounded by GPUs × XID codes.
    xid_counts: BTreeMap<(u32, u64), u64>,
    /// The last XID per GPU (dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS`).
    last_xid: BTreeMap<u32, u64>,
    labels: GpuLabelConfig,
    /// The kubelet's GPU allocations, where its socket is mounted.
    pods: Option<podresources::Watcher>,
}

/// How the GPU series are labelled.
#[derive(Clone, Debug, Default)]
pub struct GpuLabelConfig {
    /// Also export dcgm-exporter's families (`[nvml] dcgm_compat`).
    pub dcgm_compat: bool,
    /// The scheduler's job files (`[collector] job_dir`).
    pub job_dir: Option<PathBuf>,
    /// dcgm-exporter's job mapping files (`[collector] hpc_job_mapping_dir`).
    pub hpc_job_mapping_dir: Option<PathBuf>,
    /// procfs, for the GPUs a process has open.
    pub proc_root: PathBuf,
    /// The kubelet's pod-resources socket (`[nvml] pod_resources_socket`):
    /// the pod, namespace and container each GPU is allocated to.
    pub pod_resources: Option<PathBuf>,
}

impl GpuSource {
    pub fn new(
        src: NvmlSource,
        events: Receiver<GpuEvent>,
        listener: Option<EventListener>,
        labels: GpuLabelConfig,
    ) -> Self {
        let pods = labels
            .pod_resources
            .as_deref()
            .and_then(|s| podresources::Watcher::start(s, podresources::REFRESH));
        Self {
            src,
            events,
            _listener: listener,
            xid_counts: BTreeMap::new(),
            last_xid: BTreeMap::new(),
            labels,
            pods,
        }
    }
}

/// The entity a GPU event is about: the GPU when its index is known, the
/// node otherwise (an event from a GPU NVML could not place).
fn entity(host: &str, index: Option<u32>) -> String {
    index.map_or_else(|| host.to_string(), |i| vocab::entity::gpu(host, i))
}

fn event(
    kind: vocab::EventKind,
    at: std::time::SystemTime,
    entity: String,
    detail: String,
    code: i64,
) -> pb::Event {
    pb::Event {
        unix_ms: unix_ms(at),
        kind: kind.to_string(),
        entity,
        detail,
        code,
        source: "nvml".into(),
        ..Default::default()
    }
}

impl Source for GpuSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let (samples, lost) = self.src.sample();
        for e in lost {
            let entity = entity(cx.host, e.index);
            cx.console.detail(format_args!(
                "gpu event {entity} {} LOST (fell off the bus)",
                e.uuid
            ));
            wire.events
                .push(event(vocab::EventKind::GpuLost, cx.now, entity, e.uuid, 0));
        }
        for s in &samples {
            let Some(mask) = s.throttle else { continue };
            let names: Vec<&str> = nvml::throttle_names(mask)
                .into_iter()
                .filter(|n| *n != "idle")
                .collect();
            if !names.is_empty() {
                cx.console.detail(format_args!(
                    "gpu {} throttle={} temp={:?}C sm_clock={:?}MHz",
                    vocab::entity::gpu(cx.host, s.index),
                    names.join(","),
                    s.temp_c,
                    s.sm_clock_mhz
                ));
            }
        }
        wire.gpus = nvml::wire::gpus(self.src.gpus(), &samples);
        while let Ok(e) = self.events.try_recv() {
            let entity = entity(cx.host, e.index);
            let GpuEventKind::Xid { code, meaning } = &e.kind else {
                cx.console
                    .detail(format_args!("gpu event {entity} {} {:?}", e.uuid, e.kind));
                continue;
            };
            match e.index {
                Some(i) => {
                    *self.xid_counts.entry((i, *code)).or_default() += 1;
                    self.last_xid.insert(i, *code);
                }
                None => {
                    metrics::counter!(crate::metrics_catalog::GPU_XID_UNPLACED.name).increment(1)
                }
            }
            cx.console.detail(format_args!(
                "gpu event {entity} {} XID {code}: {meaning}",
                e.uuid
            ));
            let detail = format!("{}: {meaning}", e.uuid);
            let code = i64::try_from(*code).unwrap_or(i64::MAX);
            wire.events
                .push(event(vocab::EventKind::GpuXid, e.at, entity, detail, code));
        }
        let readings = samples
            .iter()
            .map(|s| crate::usage::GpuReading {
                index: s.index,
                lost: s.lost,
                util_pct: s.util_gpu_pct,
                energy_mj: s.energy_mj,
                procs: if s.lost {
                    Vec::new()
                } else {
                    self.src.processes(s.index)
                },
            })
            .collect();
        let gpus = self.src.gpus().to_vec();
        Ok(Some(Fact::Typed(vec![
            Box::new(GpuFacts { gpus, samples }),
            Box::new(GpuReadings(readings)),
        ])))
    }

    /// The GPU families, labelled with the workloads of the processes the
    /// CUDA probes saw this window (and the job files, and the kubelet).
    fn derive(&mut self, cx: &mut Ctx<'_>, facts: &Facts, _: &mut pb::Window) -> Result<()> {
        let mut jobs = self
            .labels
            .job_dir
            .as_deref()
            .map(JobMap::read)
            .unwrap_or_default();
        if let Some(d) = self.labels.hpc_job_mapping_dir.as_deref() {
            jobs.read_hpc_job_mapping(d);
        }
        if jobs.unreadable + jobs.over_limit > 0 {
            metrics::gauge!(nvml::prom::JOB_FILES_UNREAD.name)
                .set((jobs.unreadable + jobs.over_limit) as f64);
        }
        let index = GpuIndex {
            by_minor: self
                .src
                .gpus()
                .iter()
                .map(|g| (g.minor.unwrap_or(g.index), g.index))
                .collect(),
            by_uuid: self
                .src
                .gpus()
                .iter()
                .map(|g| (g.uuid.clone(), g.index))
                .collect(),
        };
        let mut workloads = gpu_workloads(
            &index,
            &facts.cuda_pids,
            cx.ids,
            &self.labels.proc_root,
            &jobs,
        );
        // The kubelet names the container a GPU is allocated to; the
        // cgroups' container id stays for GPUs it does not list.
        if let Some(p) = &self.pods {
            p.current().label(self.src.gpus(), &mut workloads);
        }
        cx.expo
            .set_section("jobs", job_hca_info(&jobs, &facts.cuda_pids, cx.ids));
        let ex = nvml::Export {
            hostname: cx.host,
            driver_version: self.src.driver_version(),
            dcgm_compat: self.labels.dcgm_compat,
            workloads: &workloads,
            last_xid: &self.last_xid,
        };
        cx.expo.set_section(
            "gpu",
            nvml::render_with(
                self.src.gpus(),
                &GpuFacts::of(facts).samples,
                &self.xid_counts,
                &ex,
            ),
        );
        Ok(())
    }
}

/// At most this many (job, HCA) info rows.
const MAX_JOB_HCAS: usize = 4096;

/// `faultline_job_hca_info{hpc_job, device}`: the HCAs each job uses, from the
/// job files and from the `NCCL_IB_HCA` of the processes the CUDA probes
/// saw, to join the InfiniBand series on (`* on (instance, device)
/// group_left (job)`).
fn job_hca_info(
    jobs: &JobMap,
    pids: &crate::sources::CudaPids,
    ids: &mut crate::identity::IdentityCache,
) -> String {
    let mut rows = std::collections::BTreeSet::new();
    for j in &jobs.jobs {
        for h in &j.hcas {
            rows.insert((j.job.clone(), h.clone()));
        }
    }
    for &pid in pids.keys() {
        let Some(id) = ids.get(pid) else { continue };
        let Some(job) = id.job() else { continue };
        for h in id.hcas() {
            rows.insert((job.clone(), h));
        }
    }
    let mut t = crate::prom_text::Text::new();
    for (job, dev) in rows.iter().take(MAX_JOB_HCAS) {
        t.add(
            &nvml::prom::JOB_HCA_INFO,
            &[("hpc_job", job.as_str()), ("device", dev.as_str())],
            1,
        );
    }
    t.render()
}
