//! The registry of sources: starting those that are on, in window order,
//! and the OTLP receiver and libibverbs' event threads some of them read.
//! The one place that names every family (`sources/` names none).
use std::time::Duration;

use anyhow::Result;

use crate::{
    block::{BlockSource, Names},
    config::FileConfig,
    cuda::source::CudaSource,
    http::Exposition,
    nccl::source::NcclSource,
    probes::{ProbeState, Probes},
    sources::{Console, Source},
    verbs::{RdmaEventSource, VerbsSource},
};

/// Every source that is on, in window order (see [`crate::sources`]).
pub fn start_sources(
    cfg: &FileConfig,
    probes: &Probes,
    expo: &Exposition,
    console: Console,
    otlp: Option<crate::otlp::Receiver>,
) -> Result<Vec<Box<dyn Source>>> {
    let mut out: Vec<Box<dyn Source>> = Vec::new();
    let root = &cfg.collector.sysfs_root;
    if probes.block_active() {
        let mut b = BlockSource::new(
            probes.block_snapshot()?,
            Names::new(root, crate::block::cgroup2_root()),
        );
        expo.set_section("block", b.render());
        out.push(Box::new(b));
    }
    if cfg.nfs.enabled {
        let reader = crate::nfs::NfsReader::new(&cfg.collector.proc_root, &cfg.nfs);
        let n = crate::nfs::NfsSource::new(reader);
        expo.set_section("nfs", n.render());
        out.push(Box::new(n));
    }
    if cfg.lustre.enabled {
        let reader = crate::lustre::LustreReader::new(&cfg.collector.proc_root, &cfg.lustre);
        let l = crate::lustre::LustreSource::new(reader);
        expo.set_section("lustre", l.render());
        out.push(Box::new(l));
    }
    out.push(Box::new(RdmaEventSource::new(start_rdma(console))));
    out.push(Box::new(crate::ib::IbSource::new(
        root.clone(),
        cfg.ib.filter()?,
        cfg.ib.export,
    )));
    if cfg.switches.enabled {
        // Optional like a probe: a fabric file that cannot be used is
        // reported and the collector runs on without switch counters.
        match crate::switches::load(&cfg.switches.topology) {
            Ok(sw) => {
                let ports: usize = sw.iter().map(|s| s.ports.len()).sum();
                console.info(format_args!(
                    "switches: {} switches, {ports} cabled ports from {}, polled every {} s with {}",
                    sw.len(),
                    cfg.switches.topology.display(),
                    cfg.switches.interval_s,
                    cfg.switches.perfquery.display()
                ));
                let latest = crate::switches::start(cfg.switches.clone(), sw);
                out.push(Box::new(crate::switches::SwitchesSource::new(latest)));
            }
            Err(e) => console.info(e),
        }
    }
    let verbs_on = probes
        .status()
        .iter()
        .any(|s| s.name.starts_with("verbs:") && s.state == ProbeState::Attached);
    if verbs_on {
        out.push(Box::new(VerbsSource::new(probes.verbs_snapshot()?)));
    }
    if cfg.nvml.enabled {
        if let Some(gpu) = start_gpu(cfg, console) {
            out.push(Box::new(gpu));
        }
    }
    // Libraries that appear later (containers, new layers, new venvs),
    // attached before the CUDA and NCCL sources read their maps.
    let nccl_rescan = cfg.nccl.enabled && cfg.nccl.library.is_empty();
    let cuda_rescan = cfg.cuda.enabled && cfg.cuda.library.is_none();
    if cfg.nccl.rescan_s > 0.0 && (nccl_rescan || cuda_rescan) {
        out.push(Box::new(crate::sources::libraries::LibrarySource::new(
            cfg.collector.proc_root.clone(),
            nccl_rescan.then(|| crate::nccl_lib::Search {
                proc_root: Some(cfg.collector.proc_root.clone()),
                ..crate::nccl_lib::Search::default()
            }),
            cuda_rescan,
            Duration::from_secs_f64(cfg.nccl.rescan_s),
        )));
    }
    if probes.cuda_library().is_some() || cuda_rescan {
        out.push(Box::new(CudaSource::new(probes.cuda_snapshot()?)));
    }
    if cfg.nccl.enabled {
        let maps = probes.nccl_maps()?;
        let host = cfg.collector.hostname.clone().unwrap_or_default();
        out.push(Box::new(
            NcclSource::new(crate::nccl::ranks(&maps, &host)).with_exited(
                crate::nccl::ExitedRanks::new(
                    Duration::from_secs_f64(cfg.nccl.retain_exited_s),
                    cfg.nccl.max_job_totals,
                ),
            ),
        ));
    }
    if let Some(rx) = otlp {
        out.push(Box::new(crate::otlp::OtlpSource::new(rx)));
    }
    if cfg.usage.enabled {
        let post_send = probes.is_attached("verbs:post_send");
        out.push(Box::new(crate::usage::UsageSource::new(
            &cfg.usage, post_send,
        )));
    }
    if let Some(k) = start_kmsg(cfg, console) {
        out.push(Box::new(k));
    }
    Ok(out)
}

/// NVML and its event thread, when the library loads.
fn start_gpu(cfg: &FileConfig, console: Console) -> Option<crate::nvml::GpuSource> {
    let src = match crate::nvml::NvmlSource::open(cfg.nvml.library.as_deref()) {
        Ok(src) => src,
        Err(e) => {
            console.info(e);
            return None;
        }
    };
    for g in src.gpus() {
        console.info(format_args!(
            "gpu {}: {} {} pci={}",
            g.index, g.uuid, g.name, g.pci_bus_id
        ));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    // The library that loaded (the configured one, the loader's, or
    // a usual path such as the GPU Operator's /run/nvidia/driver).
    let lib = Some(src.library().to_path_buf());
    let listener = crate::nvml::spawn_event_listener(lib, tx)
        .map_err(|e| console.info(e))
        .ok();
    let labels = crate::nvml::GpuLabelConfig {
        dcgm_compat: cfg.nvml.dcgm_compat,
        job_dir: Some(cfg.collector.job_dir.clone()),
        hpc_job_mapping_dir: Some(cfg.collector.hpc_job_mapping_dir.clone())
            .filter(|p| !p.as_os_str().is_empty()),
        proc_root: cfg.collector.proc_root.clone(),
        pod_resources: Some(cfg.nvml.pod_resources_socket.clone())
            .filter(|p| !p.as_os_str().is_empty()),
    };
    Some(crate::nvml::GpuSource::new(src, rx, listener, labels))
}

/// The kernel log reader, when `[kmsg]` is on and the log opens (without
/// CAP_SYSLOG under `kernel.dmesg_restrict = 1` it does not: reported, and
/// the collector runs on without it).
fn start_kmsg(cfg: &FileConfig, console: Console) -> Option<crate::kmsg::source::KmsgSource> {
    if !cfg.kmsg.enabled {
        return None;
    }
    let boot = crate::kmsg::boot_id(&cfg.collector.proc_root);
    match crate::kmsg::KmsgLog::open(&cfg.kmsg, boot) {
        Ok(log) => {
            console.info(format_args!(
                "kmsg: reading {} for the GPU driver's XIDs and SXids",
                cfg.kmsg.path.display()
            ));
            Some(crate::kmsg::source::KmsgSource::new(
                log,
                &cfg.kmsg,
                cfg.collector.proc_root.clone(),
            ))
        }
        Err(e) => {
            console.info(format_args!(
                "kmsg: cannot read {}: {e} (CAP_SYSLOG is needed where kernel.dmesg_restrict = 1); no XIDs from the kernel log",
                cfg.kmsg.path.display()
            ));
            None
        }
    }
}

/// libibverbs' device facts and async-event threads, when it loads.
fn start_rdma(console: Console) -> std::sync::mpsc::Receiver<crate::rdma::AsyncEvent> {
    let (tx, rx) = std::sync::mpsc::channel();
    match crate::rdma::Verbs::load() {
        Ok(v) => {
            let v = std::sync::Arc::new(v);
            let ports = v.ports(8);
            if ports.is_empty() {
                console.info("rdma: libibverbs loaded, no RDMA devices on this host");
            }
            for p in &ports {
                console.info(format_args!(
                    "rdma: {}/{} state={} phys_state={} lid={} mtu_enum={} width={} speed={} link_layer={}",
                    p.device, p.port, p.state, p.phys_state, p.lid, p.active_mtu, p.active_width,
                    p.active_speed, p.link_layer
                ));
            }
            let n = v.listen_async_events(tx);
            tracing::info!(devices = n, "listening for RDMA async events");
        }
        Err(e) => console.info(e),
    }
    rx
}

/// Starts the OTLP receiver; a transport that cannot bind is reported like
/// the other optional sources and the collector runs on without it.
pub async fn start_otlp(
    cfg: &crate::otlp::OtlpSection,
    console: Console,
) -> Option<crate::otlp::Receiver> {
    if !cfg.enabled {
        console.info("otlp: disabled (otlp.enabled = false)");
        return None;
    }
    let rx = crate::otlp::start(cfg).await;
    for (name, state, path) in [("grpc", &rx.grpc, ""), ("http", &rx.http, "/v1/metrics")] {
        match state {
            Ok(Some(addr)) => {
                tracing::info!(transport = name, addr = %addr, "OTLP metrics receiver listening");
                console.info(format_args!("otlp: {name} receiver on {addr}{path}"));
            }
            Ok(None) => console.info(format_args!("otlp: {name} receiver disabled")),
            Err(e) => {
                tracing::error!(transport = name, "{e}");
                console.info(format_args!("otlp: {name} receiver not running: {e}"));
            }
        }
    }
    Some(rx)
}
