//! The agent: starts every source, then closes a window on each tick by
//! asking each source for its part, and hands the wire window to the
//! recorder and the sender. `main.rs` keeps the CLI and wiring only.
mod describe;
pub mod host;
pub mod kernel;
pub mod probe_enabled;
pub mod shutdown;
mod source;

use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use proto::v1 as pb;
use tokio::time::{interval, MissedTickBehavior};

pub use source::{Console, Ctx, GpuFacts, Source};

use crate::{
    config::FileConfig,
    http::{self, Exposition},
    identity::IdentityCache,
    probes::{
        drain::{self, EventDrain},
        ProbeOptions, ProbeState, Probes,
    },
    sources::{
        block::BlockSource, cuda::CudaSource, exec::ExecSource, gpu::GpuSource, ib::IbSource,
        otlp::OtlpSource, rdma::RdmaEventSource, verbs::VerbsSource,
    },
    storage::Names,
    stream,
};

/// What ends the run: a signal or `--duration`.
pub struct Stop {
    pub duration: Option<Duration>,
}

/// Runs the agent until SIGINT/SIGTERM or the duration; the window open at
/// that moment is closed and reported before the probes detach.
pub async fn run(cfg: FileConfig, stop: Stop) -> Result<()> {
    let metrics_addr = crate::config::parse_listen_addr(&cfg.collector.metrics_addr)
        .context("collector.metrics_addr")?;
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    describe::describe();
    let expo = Exposition::new(handle);
    let bound = http::serve(metrics_addr, expo.clone())
        .await
        .with_context(|| {
            format!(
                "binding the metrics endpoint on {metrics_addr}; choose another with --metrics-addr"
            )
        })?;
    let console = Console {
        quiet: cfg.collector.quiet,
    };
    console.info(format_args!("metrics on http://{bound}/metrics"));

    // Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
    match crate::privilege::raise_memlock() {
        Ok(l) => tracing::debug!(memlock = l, "RLIMIT_MEMLOCK soft limit"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise RLIMIT_MEMLOCK; on kernels before 5.11 map creation may fail")
        }
    }
    let mut probes = Probes::load(&probe_options(&cfg)?)?;
    for s in probes.status() {
        console.info(format_args!("probe {s}"));
    }
    probe_enabled::export(probes.status());
    // After the probes: a collector that cannot run says only why.
    let otlp = start_otlp(&cfg.otlp, console).await;
    let mut sources = start_sources(&cfg, &probes, &expo, console, otlp)?;
    expo.set_ready(true);
    let mut exec = ExecSource::new(probes.take_exec_ring()?);
    // The per-event rings are written only when their keys are on; then
    // they are drained here, never left to fill.
    let block_sampled = cfg.block.sample_every > 0 && probes.block_active();
    let cuda_streamed = cfg.cuda.events_per_sec > 0 && probes.cuda_library().is_some();
    let mut block_events =
        EventDrain::<crate::probes::block::BlockSample>::take(&mut probes, block_sampled)?;
    let mut cuda_events =
        EventDrain::<crate::probes::cuda::CudaEvent>::take(&mut probes, cuda_streamed)?;
    let mut launch = crate::probes::launch_control::LaunchController::new(
        &cfg.cuda,
        &cfg.collector.proc_root,
        &probes,
        |l| console.info(l),
    );
    let mut ids = IdentityCache::new(&cfg.collector.proc_root, 4096);
    let identity = host::identity(&cfg.collector.proc_root, cfg.collector.hostname.as_deref());
    let host = identity.hostname.clone();
    let origin = pb::Origin {
        hostname: identity.hostname,
        machine_id: identity.machine_id,
        boot_id: identity.boot_id,
        instance: format!(
            "{:020}-{}",
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            std::process::id()
        ),
    };
    let (win_tx, sender) = start_sender(&cfg, console)?;
    let mut recorder = open_record(&cfg)?;

    let mut tick = interval(cfg.collector.window());
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    let deadline = async {
        match stop.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(deadline);
    let mut shutdown = shutdown::Shutdown::install().context("installing the signal handlers")?;
    let mut gpu = GpuFacts::default();
    let mut feed = crate::sources::usage::UsageFeed::default();
    let mut window_start = SystemTime::now();
    let mut window_no = 0u64;
    loop {
        // A signal or the deadline still closes the current window, so the last
        // partial window is reported before the probes detach.
        let last = tokio::select! {
            r = exec.drain(&mut ids, console) => { r?; continue; }
            r = drain::next(&mut block_events, |e| console.detail(e)) => {
                r.context("reading the block event ring")?;
                continue;
            }
            r = drain::next(&mut cuda_events, |e| console.detail(e)) => {
                r.context("reading the CUDA event ring")?;
                continue;
            }
            _ = sleep_until(launch.as_ref().map(|l| l.next_event(probes.launch_probes_attached()))) => {
                if let Some(l) = launch.as_mut() {
                    if let Some(line) = l.on_event(&mut probes)? {
                        console.info(line);
                    }
                }
                continue;
            }
            _ = tick.tick() => false,
            _ = &mut deadline => true,
            _ = shutdown.recv() => true,
        };
        window_no += 1;
        let now = SystemTime::now();
        let mut wire = pb::Window {
            origin: Some(origin.clone()),
            seq: window_no,
            start_unix_ms: vocab::time::unix_ms(window_start),
            end_unix_ms: vocab::time::unix_ms(now),
            ..Default::default()
        };
        window_start = now;
        let k = probes.kernel_stats()?;
        console.info(format_args!(
            "window {window_no}: seq={window_no} exec events={} total={} kernel: exec_events={} exec_ring_full={}",
            exec.window,
            exec.total,
            k[collector_common::stat::EXEC_EVENTS as usize],
            k[collector_common::stat::EXEC_RING_FULL as usize],
        ));
        exec.window = 0;
        let mut cx = Ctx {
            host: &host,
            now,
            probes: &mut probes,
            ids: &mut ids,
            expo: &expo,
            console,
            gpu: &mut gpu,
            feed: &mut feed,
        };
        for s in sources.iter_mut() {
            s.window(&mut cx, &mut wire)?;
        }
        kernel::export(&k);
        if let Some(r) = recorder.as_mut() {
            // A full disk costs the recording, not the collector.
            if let Err(e) = r.append(&wire) {
                metrics::counter!("faultline_record_errors_total").increment(1);
                tracing::warn!(error = %e, "cannot write the record file: window not recorded");
            }
        }
        if let Some(tx) = &win_tx {
            if tx.try_send(wire).is_err() {
                metrics::counter!("faultline_windows_dropped_total", "reason" => "queue_full")
                    .increment(1);
                tracing::warn!("sender queue full: window dropped");
            }
        }
        if last {
            // What the rings hold at the end is printed, not lost.
            if let Some(d) = block_events.as_mut() {
                d.take_ready().into_iter().for_each(|e| console.detail(e));
            }
            if let Some(d) = cuda_events.as_mut() {
                d.take_ready().into_iter().for_each(|e| console.detail(e));
            }
            break;
        }
    }
    console.info(format_args!(
        "stopped after {window_no} windows, {} exec events",
        exec.total
    ));
    drop(win_tx);
    if let Some((h, stats)) = sender {
        // The sender delivers what it can within its drain time; the rest
        // stays spooled. A panic in it is an error of the run, not hidden.
        let joined = h.await;
        console.info(stats.summary());
        if let Err(e) = joined {
            if e.is_panic() {
                anyhow::bail!(
                    "the window sender task panicked ({e}); undelivered windows stay in the spool and are sent on the next start"
                );
            }
            tracing::warn!("window sender task ended abnormally: {e}");
        }
    }
    Ok(())
}

/// Sleeps until `t`; never returns for `None`.
async fn sleep_until(t: Option<std::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

fn probe_options(cfg: &FileConfig) -> Result<ProbeOptions> {
    let mut opts = ProbeOptions {
        block: cfg.block.enabled,
        block_sample_every: cfg.block.sample_every,
        block_btf: cfg.block.btf,
        cuda: cfg.cuda.enabled,
        cuda_events_per_sec: cfg.cuda.events_per_sec,
        verbs: cfg.verbs.enabled,
        verbs_library: cfg.verbs.library.clone(),
        verbs_provider: match &cfg.verbs.provider {
            Some(p) => Some(p.target().map_err(anyhow::Error::msg)?),
            None => None,
        },
        ..ProbeOptions::default()
    };
    opts.cuda_search.configured = cfg.cuda.library.clone();
    opts.nccl = cfg.nccl.enabled;
    opts.nccl_search.configured = cfg.nccl.library.clone();
    Ok(opts)
}

/// Every source that is on, in window order (see `sources`).
fn start_sources(
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
            Names::new(root, crate::storage::cgroup2_root()),
        );
        expo.set_section("block", b.render());
        out.push(Box::new(b));
    }
    out.push(Box::new(RdmaEventSource::new(start_rdma(console))));
    let ib_filter = crate::ib::DeviceFilter::new(
        cfg.ib.device_include.as_deref(),
        cfg.ib.device_exclude.as_deref(),
    )?;
    out.push(Box::new(IbSource::new(root.clone(), ib_filter)));
    let verbs_on = probes
        .status()
        .iter()
        .any(|s| s.name.starts_with("verbs:") && s.state == ProbeState::Attached);
    if verbs_on {
        out.push(Box::new(VerbsSource::new(probes.verbs_snapshot()?)));
    }
    if cfg.nvml.enabled {
        match crate::nvml::NvmlSource::open(cfg.nvml.library.as_deref()) {
            Ok(src) => {
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
                let labels = crate::sources::gpu::GpuLabelConfig {
                    dcgm_compat: cfg.nvml.dcgm_compat,
                    job_dir: Some(cfg.collector.job_dir.clone()),
                    proc_root: cfg.collector.proc_root.clone(),
                    pod_resources: Some(cfg.nvml.pod_resources_socket.clone())
                        .filter(|p| !p.as_os_str().is_empty()),
                };
                out.push(Box::new(GpuSource::new(src, rx, listener, labels)));
            }
            Err(e) => console.info(e),
        }
    }
    if probes.cuda_library().is_some() {
        out.push(Box::new(CudaSource::new(probes.cuda_snapshot()?)));
    }
    if cfg.nccl.enabled {
        let maps = probes.nccl_maps()?;
        let host = cfg.collector.hostname.clone().unwrap_or_default();
        let rescan = (cfg.nccl.library.is_empty() && cfg.nccl.rescan_s > 0.0).then(|| {
            (
                crate::nccl_lib::Search::default(),
                Duration::from_secs_f64(cfg.nccl.rescan_s),
            )
        });
        out.push(Box::new(crate::sources::nccl::NcclSource::new(
            crate::nccl::ranks(&maps, &host),
            rescan,
        )));
    }
    if let Some(rx) = otlp {
        out.push(Box::new(OtlpSource::new(rx)));
    }
    if cfg.usage.enabled {
        let post_send = probes
            .status()
            .iter()
            .any(|s| s.name == "verbs:post_send" && s.state == ProbeState::Attached);
        out.push(Box::new(crate::sources::usage::UsageSource::new(
            &cfg.usage, post_send,
        )));
    }
    Ok(out)
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

type Sender = (
    Option<tokio::sync::mpsc::Sender<pb::Window>>,
    Option<(
        tokio::task::JoinHandle<()>,
        std::sync::Arc<stream::SenderStats>,
    )>,
);

fn start_sender(cfg: &FileConfig, console: Console) -> Result<Sender> {
    let Some(endpoint) = &cfg.stream.endpoint else {
        return Ok((None, None));
    };
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    let sc = stream::SenderConfig {
        endpoint: endpoint.clone(),
        spool_dir: cfg.stream.spool_dir.clone(),
        spool_max_bytes: cfg.stream.spool_max_bytes,
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(10),
        resume_every: Duration::from_secs(1),
        auth: cfg.stream.auth(),
    };
    // Unreadable credentials stop the collector here, not in the sender.
    sc.auth
        .endpoint(endpoint)
        .with_context(|| format!("the correlator endpoint {endpoint}"))?;
    let (h, stats) = stream::spawn(sc, rx, Duration::from_secs(3))
        .with_context(|| format!("opening the spool {}", cfg.stream.spool_dir.display()))?;
    console.info(format_args!(
        "streaming to {endpoint} (spool {})",
        cfg.stream.spool_dir.display()
    ));
    Ok((Some(tx), Some((h, stats))))
}

fn open_record(cfg: &FileConfig) -> Result<Option<proto::record::RecordLog>> {
    let Some(p) = &cfg.stream.record else {
        return Ok(None);
    };
    let log = proto::record::RecordLog::open(p)
        .with_context(|| format!("opening the record file {}", p.display()))?;
    Ok(Some(log))
}

/// Starts the OTLP receiver; a transport that cannot bind is reported like
/// the other optional sources and the collector runs on without it.
async fn start_otlp(
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
