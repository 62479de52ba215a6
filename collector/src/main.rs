//! `faultline-collector`: the host agent.
use std::{process::ExitCode, time::Duration};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use collector::{
    config::{ConfigError, FileConfig},
    http::{self, Exposition},
    probes::{exec::ExecRecord, ProbeOptions, Probes},
    storage::{self, BlockWindow, Names},
};
use collector_common::stat;
use tokio::time::{interval, MissedTickBehavior};

/// faultline's host agent: eBPF probes on the kernel/driver boundary, windowed
/// and streamed to the correlator.
#[derive(Debug, Parser)]
#[command(name = "faultline-collector", version)]
struct Cli {
    /// Print one snapshot (InfiniBand ports) in Prometheus text format and exit.
    /// Needs no privileges.
    #[arg(long)]
    once: bool,
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Attach the probes and print what they see (the default).
    Run(RunArgs),
    /// Check the configuration (file and flags), print the effective settings
    /// as TOML and exit: 0 when valid, 2 with one line naming the problem.
    CheckConfig(RunArgs),
}

/// Flags override the configuration file (`--config`), which overrides the
/// defaults; `docs/config.md` documents every key.
#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// TOML configuration file.
    #[arg(long, value_name = "FILE", env = "FAULTLINE_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECONDS", value_parser = collector::config::duration_arg)]
    duration: Option<Duration>,
    /// Window length in seconds [collector.window_secs, default 1].
    #[arg(long, value_name = "SECONDS")]
    window: Option<f64>,
    /// Do not print one line per exec event [collector.quiet].
    #[arg(long)]
    quiet: bool,
    /// Prometheus `/metrics`, `/healthz`, `/readyz` address [collector.metrics_addr, default 127.0.0.1:9477].
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Disable the block I/O probes [block.enabled].
    #[arg(long)]
    no_block: bool,
    /// Disable the CUDA driver-API probes [cuda.enabled].
    #[arg(long)]
    no_cuda: bool,
    /// Path of libcuda.so.1 [cuda.library] (default: ld.so cache, running processes, usual paths).
    #[arg(long, value_name = "PATH")]
    cuda_library: Option<std::path::PathBuf>,
    /// Disable NVML sampling [nvml.enabled].
    #[arg(long)]
    no_nvml: bool,
    /// Path of libnvidia-ml.so.1 [nvml.library] (default: the system's).
    #[arg(long, value_name = "PATH")]
    nvml_library: Option<std::path::PathBuf>,
    /// Disable the verbs (RDMA) probes [verbs.enabled].
    #[arg(long)]
    no_verbs: bool,
    /// libibverbs for the control-path probes [verbs.library] (default: ld.so cache).
    #[arg(long, value_name = "PATH")]
    verbs_library: Option<std::path::PathBuf>,
    /// Provider data-path functions as `PATH:POLL_CQ:POST_SEND:POST_RECV`, each
    /// a symbol or a `0x` file offset [verbs.provider] (default: resolved through
    /// the ops table of a context on the first RDMA device).
    #[arg(long, value_name = "SPEC", value_parser = parse_provider)]
    verbs_provider: Option<collector::probes::ProviderTarget>,
    /// Directory that holds `class/infiniband` and `dev/block` [collector.sysfs_root, default /sys].
    #[arg(long, value_name = "DIR")]
    sysfs_root: Option<std::path::PathBuf>,
    /// procfs for process attribution [collector.proc_root, default /proc].
    #[arg(long, value_name = "DIR")]
    proc_root: Option<std::path::PathBuf>,
    /// Stream windows to this correlator, e.g. http://127.0.0.1:50051 [stream.endpoint].
    #[arg(long, value_name = "URL")]
    correlator: Option<String>,
    /// Spool directory [stream.spool_dir, default /var/lib/faultline/spool].
    #[arg(long, value_name = "DIR")]
    spool_dir: Option<std::path::PathBuf>,
    /// Spool bound in bytes [stream.spool_max_bytes, default 64 MiB].
    #[arg(long, value_name = "BYTES")]
    spool_max_bytes: Option<u64>,
    /// Also write every window to FILE as JSON lines, the correlator's replay
    /// format [stream.record].
    #[arg(long, value_name = "FILE")]
    record: Option<std::path::PathBuf>,
    /// Disable the OTLP metrics receiver, gRPC and HTTP [otlp.enabled].
    #[arg(long)]
    no_otlp: bool,
    /// Disable the OTLP gRPC receiver [otlp.grpc_enabled].
    #[arg(long)]
    no_otlp_grpc: bool,
    /// Disable the OTLP HTTP/protobuf receiver [otlp.http_enabled].
    #[arg(long)]
    no_otlp_http: bool,
    /// OTLP gRPC receiver address [otlp.grpc_addr, default 127.0.0.1:4317].
    #[arg(long, value_name = "HOST:PORT")]
    otlp_grpc_addr: Option<std::net::SocketAddr>,
    /// OTLP HTTP/protobuf receiver address (`POST /v1/metrics`) [otlp.http_addr, default 127.0.0.1:4318].
    #[arg(long, value_name = "HOST:PORT")]
    otlp_http_addr: Option<std::net::SocketAddr>,
    /// Log filter, tracing EnvFilter syntax [collector.log, default info].
    #[arg(long, env = "FAULTLINE_LOG")]
    log: Option<String>,
}

/// Defaults → file → flags.
fn settings(args: &RunArgs) -> Result<FileConfig, ConfigError> {
    let mut c = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    if let Some(w) = args.window {
        c.collector.window_secs = w;
    }
    if let Some(a) = args.metrics_addr {
        c.collector.metrics_addr = a.to_string();
    }
    if let Some(p) = &args.sysfs_root {
        c.collector.sysfs_root = p.clone();
    }
    if let Some(p) = &args.proc_root {
        c.collector.proc_root = p.clone();
    }
    if let Some(l) = &args.log {
        c.collector.log = l.clone();
    }
    c.collector.quiet |= args.quiet;
    if args.correlator.is_some() {
        c.stream.endpoint = args.correlator.clone();
    }
    if let Some(d) = &args.spool_dir {
        c.stream.spool_dir = d.clone();
    }
    if let Some(b) = args.spool_max_bytes {
        c.stream.spool_max_bytes = b;
    }
    if args.record.is_some() {
        c.stream.record = args.record.clone();
    }
    c.block.enabled &= !args.no_block;
    c.cuda.enabled &= !args.no_cuda;
    c.nvml.enabled &= !args.no_nvml;
    c.verbs.enabled &= !args.no_verbs;
    c.otlp.enabled &= !args.no_otlp;
    c.otlp.grpc_enabled &= !args.no_otlp_grpc;
    c.otlp.http_enabled &= !args.no_otlp_http;
    if let Some(a) = args.otlp_grpc_addr {
        c.otlp.grpc_addr = a.to_string();
    }
    if let Some(a) = args.otlp_http_addr {
        c.otlp.http_addr = a.to_string();
    }
    if args.cuda_library.is_some() {
        c.cuda.library = args.cuda_library.clone();
    }
    if args.nvml_library.is_some() {
        c.nvml.library = args.nvml_library.clone();
    }
    if args.verbs_library.is_some() {
        c.verbs.library = args.verbs_library.clone();
    }
    if let Some(t) = &args.verbs_provider {
        let loc = |l: &collector::probes::CodeLoc| match l {
            collector::probes::CodeLoc::Symbol(s) => s.clone(),
            collector::probes::CodeLoc::Offset(o) => format!("0x{o:x}"),
        };
        c.verbs.provider = Some(collector::config::ProviderSection {
            path: t.path.clone(),
            poll_cq: loc(&t.poll_cq),
            post_send: loc(&t.post_send),
            post_recv: loc(&t.post_recv),
        });
    }
    c.validate()?;
    Ok(c)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (args, check) = match &cli.command {
        Some(Command::Run(a)) => (a.clone(), false),
        Some(Command::CheckConfig(a)) => (a.clone(), true),
        None => (cli.run.clone(), false),
    };
    let cfg = match settings(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("faultline-collector: {e}");
            return ExitCode::from(2);
        }
    };
    if check {
        print!("{}", cfg.to_toml());
        println!("# config ok");
        return ExitCode::SUCCESS;
    }
    init_tracing(&cfg.collector.log);
    if cli.once {
        return match collector::ib::read_ports(&cfg.collector.sysfs_root) {
            Ok(ports) => {
                print!("{}", collector::ib::prom::render(&ports, None));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "faultline-collector: error: reading {}/class/infiniband: {e}",
                    cfg.collector.sysfs_root.display()
                );
                ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("faultline-collector: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args, cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultline-collector: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // `try_init` also bridges the `log` records that aya-log emits.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn run(args: RunArgs, cfg: FileConfig) -> Result<()> {
    let metrics_addr: std::net::SocketAddr = cfg
        .collector
        .metrics_addr
        .parse()
        .context("collector.metrics_addr")?;
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    let expo = Exposition::new(handle);
    let bound = http::serve(metrics_addr, expo.clone())
        .await
        .with_context(|| {
            format!(
                "binding the metrics endpoint on {metrics_addr}; choose another with --metrics-addr"
            )
        })?;
    println!("metrics on http://{bound}/metrics");

    let mut opts = ProbeOptions {
        block: cfg.block.enabled,
        block_sample_every: cfg.block.sample_every,
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
    let mut probes = Probes::load(&opts)?;
    for s in probes.status() {
        println!("probe {s}");
    }
    // After the probes: a collector that cannot run says only why.
    let otlp = start_otlp(&cfg.otlp).await;
    let block_on = probes.block_active();
    let mut names = Names::new(&cfg.collector.sysfs_root, "/sys/fs/cgroup");
    let mut ids = collector::identity::IdentityCache::new(&cfg.collector.proc_root, 4096);
    let mut ib = collector::ib::RateTracker::new();
    // Prime the port counters now, so the first window shows what changed since start.
    if let Ok(ports) = collector::ib::read_ports(&cfg.collector.sysfs_root) {
        let _ = ib.update(ports);
    }
    let (rdma_tx, rdma_rx) = std::sync::mpsc::channel();
    match collector::rdma::Verbs::load() {
        Ok(v) => {
            let v = std::sync::Arc::new(v);
            let ports = v.ports(8);
            if ports.is_empty() {
                println!("rdma: libibverbs loaded, no RDMA devices on this host");
            }
            for p in &ports {
                println!(
                    "rdma: {}/{} state={} phys_state={} lid={} mtu_enum={} width={} speed={} link_layer={}",
                    p.device, p.port, p.state, p.phys_state, p.lid, p.active_mtu, p.active_width,
                    p.active_speed, p.link_layer
                );
            }
            let n = v.listen_async_events(rdma_tx);
            tracing::info!(devices = n, "listening for RDMA async events");
        }
        Err(e) => println!("{e}"),
    }
    let host = hostname();
    let mut block_prev = if block_on {
        Some(probes.block_snapshot()?)
    } else {
        None
    };
    let verbs_on = probes.status().iter().any(|s| {
        s.name.starts_with("verbs:") && s.state == collector::probes::ProbeState::Attached
    });
    let mut verbs_prev = if verbs_on {
        probes.verbs_snapshot()?
    } else {
        collector::probes::verbs::VerbsSnapshot::default()
    };
    let (gpu_tx, gpu_rx) = std::sync::mpsc::channel();
    let mut nvml_src = None;
    let mut _nvml_events = None;
    if cfg.nvml.enabled {
        match collector::nvml::NvmlSource::open(cfg.nvml.library.as_deref()) {
            Ok(src) => {
                for g in src.gpus() {
                    println!(
                        "gpu {}: {} {} pci={}",
                        g.index, g.uuid, g.name, g.pci_bus_id
                    );
                }
                match collector::nvml::spawn_event_listener(cfg.nvml.library.clone(), gpu_tx) {
                    Ok(l) => _nvml_events = Some(l),
                    Err(e) => println!("{e}"),
                }
                nvml_src = Some(src);
            }
            Err(e) => println!("{e}"),
        }
    }
    let mut gpu_samples: Vec<collector::nvml::GpuSample> = Vec::new();
    let mut xid_counts: std::collections::BTreeMap<(u32, u64), u64> =
        std::collections::BTreeMap::new();
    let mut cuda_prev = if probes.cuda_library().is_some() {
        Some(probes.cuda_snapshot()?)
    } else {
        None
    };
    if let Some(snap) = &block_prev {
        expo.set_section("block", storage::render_prometheus(snap, &mut names));
    }
    expo.set_ready(true);
    let mut ring = probes.take_exec_ring()?;
    let mut tick = interval(cfg.collector.window());
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick.tick().await;
    let deadline = async {
        match args.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(deadline);
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;

    let mut batch: Vec<ExecRecord> = Vec::with_capacity(256);
    let identity = collector::identity::HostIdentity::read(
        std::path::Path::new("/proc"),
        std::path::Path::new("/etc"),
    );
    let origin = proto::v1::Origin {
        hostname: if identity.hostname.is_empty() {
            host.clone()
        } else {
            identity.hostname.clone()
        },
        machine_id: identity.machine_id.clone(),
        boot_id: identity.boot_id.clone(),
        instance: format!(
            "{:020}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            std::process::id()
        ),
    };
    let mut window_start = std::time::SystemTime::now();
    let (win_tx, sender) = match &cfg.stream.endpoint {
        Some(endpoint) => {
            let (tx, rx) = tokio::sync::mpsc::channel(1024);
            let sc = collector::stream::SenderConfig {
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
            let (h, stats) = collector::stream::spawn(sc, rx, Duration::from_secs(3))
                .with_context(|| format!("opening the spool {}", cfg.stream.spool_dir.display()))?;
            println!(
                "streaming to {endpoint} (spool {})",
                cfg.stream.spool_dir.display()
            );
            (Some(tx), Some((h, stats)))
        }
        None => (None, None),
    };
    let mut recorder = match &cfg.stream.record {
        Some(p) => Some(
            proto::record::RecordLog::open(p)
                .with_context(|| format!("opening the record file {}", p.display()))?,
        ),
        None => None,
    };
    let mut window_execs = 0u64;
    let mut total_execs = 0u64;
    let mut window_no = 0u64;
    loop {
        // A signal or the deadline still closes the current window, so the last
        // partial window is reported before the probes detach.
        let mut last = false;
        tokio::select! {
            r = ring.recv_batch(&mut batch) => {
                r.context("reading the exec ring")?;
                window_execs += batch.len() as u64;
                for e in &batch {
                    // Exec changes a process's identity: re-read it on next use.
                    ids.invalidate(e.pid);
                }
                total_execs += batch.len() as u64;
                if !cfg.collector.quiet {
                    for e in &batch {
                        println!(
                            "exec pid={} comm={} file={} cgroup={}",
                            e.pid, e.comm, e.filename, e.cgroup_id
                        );
                    }
                }
                batch.clear();
                continue;
            }
            _ = tick.tick() => {}
            _ = &mut deadline => last = true,
            _ = tokio::signal::ctrl_c() => last = true,
            _ = sigterm.recv() => last = true,
        }
        window_no += 1;
        let now = std::time::SystemTime::now();
        let mut wire = proto::v1::Window {
            origin: Some(origin.clone()),
            seq: window_no,
            start_unix_ms: collector::window::unix_ms(window_start),
            end_unix_ms: collector::window::unix_ms(now),
            ..Default::default()
        };
        window_start = now;
        let k = probes.kernel_stats()?;
        println!(
            "window {window_no}: seq={window_no} exec events={window_execs} total={total_execs} \
             kernel: exec_events={} exec_ring_full={}",
            k[stat::EXEC_EVENTS as usize],
            k[stat::EXEC_RING_FULL as usize],
        );
        window_execs = 0;
        if let Some(prev) = block_prev.as_mut() {
            let cur = probes.block_snapshot()?;
            let win = BlockWindow::between(prev, &cur, &mut names);
            for line in win.lines() {
                println!("  {line}");
            }
            wire.block = collector::window::block(&win);
            expo.set_section("block", storage::render_prometheus(&cur, &mut names));
            *prev = cur;
        }
        while let Ok(ev) = rdma_rx.try_recv() {
            metrics::counter!("faultline_rdma_async_events_total", "device" => ev.device.clone(), "event" => ev.name).increment(1);
            println!("  rdma event {host}/{}/{} {}", ev.device, ev.port, ev.name);
            wire.events.push(proto::v1::Event {
                unix_ms: collector::window::unix_ms(ev.at),
                kind: vocab::EventKind::RdmaAsync.to_string(),
                entity: vocab::entity::port(&host, &ev.device, ev.port),
                detail: ev.name.into(),
                code: i64::from(ev.event_type),
            });
        }
        match collector::ib::read_ports(&cfg.collector.sysfs_root) {
            Ok(ports) => {
                for p in &ports {
                    for (file, err) in &p.read_errors {
                        metrics::counter!("faultline_sysfs_read_errors_total", "file" => file.clone()).increment(1);
                        tracing::debug!(port = %p.entity(&host), file, err, "sysfs read error");
                    }
                }
                expo.set_section("ib", collector::ib::prom::render(&ports, Some(&ib)));
                wire.ib_ports = collector::window::ib_ports(&ports);
                for r in ib.update(ports) {
                    print_ib_window(&host, &r);
                    if let Some((a, b)) = r.state_change {
                        wire.events.push(proto::v1::Event {
                            unix_ms: collector::window::unix_ms(now),
                            kind: vocab::EventKind::IbState.to_string(),
                            entity: vocab::entity::port(&host, &r.device, r.port),
                            detail: format!(
                                "{}->{}",
                                vocab::ib::state_name(a),
                                vocab::ib::state_name(b)
                            ),
                            code: i64::from(b),
                        });
                    }
                }
            }
            Err(e) => {
                metrics::counter!("faultline_sysfs_read_errors_total", "file" => "class/infiniband").increment(1);
                tracing::warn!(error = %e, "reading InfiniBand sysfs");
            }
        }
        if verbs_on {
            let cur = probes.verbs_snapshot()?;
            for line in verbs_window_lines(&verbs_prev, &cur) {
                println!("  {line}");
            }
            wire.verbs = collector::window::verbs(&verbs_prev, &cur, &mut ids);
            expo.set_section("verbs", cur.render_prometheus());
            verbs_prev = cur;
        }
        if let Some(src) = nvml_src.as_mut() {
            let (samples, events) = src.sample();
            for e in events {
                println!(
                    "  gpu event {host}/gpu{} {} LOST (fell off the bus)",
                    e.index, e.uuid
                );
                wire.events.push(proto::v1::Event {
                    unix_ms: collector::window::unix_ms(now),
                    kind: vocab::EventKind::GpuLost.to_string(),
                    entity: vocab::entity::gpu(&host, e.index),
                    detail: e.uuid.clone(),
                    code: 0,
                });
            }
            for s in &samples {
                if let Some(mask) = s.throttle {
                    let names: Vec<&str> = collector::nvml::throttle_names(mask)
                        .into_iter()
                        .filter(|n| *n != "idle")
                        .collect();
                    if !names.is_empty() {
                        println!(
                            "  gpu {host}/gpu{} throttle={} temp={:?}C sm_clock={:?}MHz",
                            s.index,
                            names.join(","),
                            s.temp_c,
                            s.sm_clock_mhz
                        );
                    }
                }
            }
            wire.gpus = collector::window::gpus(src.gpus(), &samples);
            gpu_samples = samples;
        }
        while let Ok(e) = gpu_rx.try_recv() {
            if let collector::nvml::GpuEventKind::Xid { code, meaning } = &e.kind {
                *xid_counts.entry((e.index, *code)).or_default() += 1;
                wire.events.push(proto::v1::Event {
                    unix_ms: e
                        .at
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as i64),
                    kind: vocab::EventKind::GpuXid.to_string(),
                    entity: vocab::entity::gpu(&host, e.index),
                    detail: format!("{}: {meaning}", e.uuid),
                    code: *code as i64,
                });
                println!(
                    "  gpu event {host}/gpu{} {} XID {code}: {meaning}",
                    e.index, e.uuid
                );
            } else {
                println!("  gpu event {host}/gpu{} {} {:?}", e.index, e.uuid, e.kind);
            }
        }
        if let Some(src) = nvml_src.as_ref() {
            expo.set_section(
                "gpu",
                collector::nvml::render_prometheus(src.gpus(), &gpu_samples, &xid_counts),
            );
        }
        if let Some(prev) = cuda_prev.as_mut() {
            let cur = probes.cuda_snapshot()?;
            // Export first, print after: whoever reads the console line can scrape it.
            expo.set_section("cuda", collector::cuda::render_prometheus(&cur));
            let gpus = nvml_src
                .as_ref()
                .map(|s| s.gpus().to_vec())
                .unwrap_or_default();
            for line in collector::cuda::window_lines(prev, &cur) {
                let dev = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("gpu="))
                    .and_then(|d| d.parse::<i32>().ok());
                let who = line
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("pid="))
                    .and_then(|p| p.parse::<u32>().ok())
                    .and_then(|p| ids.get(p))
                    .map(|id| format!(" {{{}}}", id.describe()))
                    .unwrap_or_default();
                match dev.and_then(|d| collector::nvml::describe_gpu(d, &gpus, &gpu_samples)) {
                    Some(g) => println!("  {line}{who} [{g}]"),
                    None => println!("  {line}{who}"),
                }
            }
            wire.cuda = collector::window::cuda(prev, &cur, &mut ids);
            *prev = cur;
        }
        if let Some(rx) = &otlp {
            let (steps, workload) = rx.shared.take_window(|pid| ids.get(pid).cloned());
            for s in &steps {
                println!(
                    "  steps job={} rank={} count={} mean={:.4}s max={:.4}s",
                    s.job, s.rank, s.count, s.seconds, s.max_seconds
                );
            }
            wire.steps = steps;
            wire.workload = workload;
        }
        export_kernel_stats(&k);
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
            break;
        }
    }
    println!("stopped after {window_no} windows, {total_execs} exec events");
    drop(win_tx);
    if let Some((h, stats)) = sender {
        // The sender delivers what it can within its drain time; the rest stays spooled.
        let _ = h.await;
        println!("{}", stats.summary());
    }
    Ok(())
}

/// Starts the OTLP receiver; a transport that cannot bind is reported like
/// the other optional sources and the collector runs on without it.
async fn start_otlp(cfg: &collector::otlp::OtlpSection) -> Option<collector::otlp::Receiver> {
    if !cfg.enabled {
        println!("otlp: disabled (otlp.enabled = false)");
        return None;
    }
    let rx = collector::otlp::start(cfg).await;
    for (name, state, path) in [("grpc", &rx.grpc, ""), ("http", &rx.http, "/v1/metrics")] {
        match state {
            Ok(Some(addr)) => {
                tracing::info!(transport = name, addr = %addr, "OTLP metrics receiver listening");
                println!("otlp: {name} receiver on {addr}{path}");
            }
            Ok(None) => println!("otlp: {name} receiver disabled"),
            Err(e) => {
                tracing::error!(transport = name, "{e}");
                println!("otlp: {name} receiver not running: {e}");
            }
        }
    }
    Some(rx)
}

/// In-kernel counters exported as Prometheus counters: (metric, `probe` label, `STATS` slot).
const KERNEL_COUNTERS: &[(&str, &str, u32)] = &[
    (
        "faultline_probe_kernel_events_total",
        "exec",
        stat::EXEC_EVENTS,
    ),
    ("faultline_ring_lost_total", "exec", stat::EXEC_RING_FULL),
    (
        "faultline_probe_kernel_events_total",
        "block",
        stat::BLOCK_COMPLETED,
    ),
    (
        "faultline_ring_lost_total",
        "block_sampled",
        stat::BLOCK_RING_FULL,
    ),
    (
        "faultline_block_unmatched_total",
        "block",
        stat::BLOCK_UNMATCHED,
    ),
    (
        "faultline_block_partial_completions_total",
        "block",
        stat::BLOCK_PARTIAL,
    ),
    (
        "faultline_probe_map_full_total",
        "block_inflight",
        stat::BLOCK_START_MAP_FULL,
    ),
    (
        "faultline_probe_map_full_total",
        "block_agg",
        stat::BLOCK_AGG_MAP_FULL,
    ),
    (
        "faultline_probe_kernel_events_total",
        "cuda",
        stat::CUDA_CALLS,
    ),
    ("faultline_ring_lost_total", "cuda", stat::CUDA_RING_FULL),
    (
        "faultline_probe_rate_limited_total",
        "cuda",
        stat::CUDA_EVENTS_RATE_LIMITED,
    ),
    (
        "faultline_probe_map_full_total",
        "cuda_agg",
        stat::CUDA_AGG_MAP_FULL,
    ),
    (
        "faultline_cuda_unmatched_returns_total",
        "cuda",
        stat::CUDA_UNMATCHED_RETURN,
    ),
    (
        "faultline_probe_kernel_events_total",
        "verbs",
        stat::VERBS_WC,
    ),
    (
        "faultline_probe_map_full_total",
        "verbs",
        stat::VERBS_MAP_FULL,
    ),
];

/// In-kernel drop and event counters as Prometheus counters (absolute values).
fn export_kernel_stats(k: &[u64; stat::COUNT as usize]) {
    for &(name, probe, slot) in KERNEL_COUNTERS {
        metrics::counter!(name, "probe" => probe).absolute(k[slot as usize]);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// One console line per port with traffic, errors or a state change.
fn print_ib_window(host: &str, r: &collector::ib::PortRates) {
    use collector::ib::rates::CounterChange;
    let rx = r.bytes_per_sec("port_rcv_data").unwrap_or(0.0);
    let tx = r.bytes_per_sec("port_xmit_data").unwrap_or(0.0);
    let errors: Vec<String> = r
        .counters
        .iter()
        .filter(|(f, _)| !f.contains("data") && !f.contains("packets") && *f != "port_xmit_wait")
        .filter_map(|(f, c)| match c {
            CounterChange::Delta { delta, .. } if *delta > 0 => Some(format!("{f}+{delta}")),
            CounterChange::Reset { .. } => Some(format!("{f}:reset")),
            CounterChange::Saturated => Some(format!("{f}:saturated")),
            _ => None,
        })
        .collect();
    let hw: u64 = r
        .hw_counters
        .values()
        .filter_map(CounterChange::delta)
        .sum();
    if rx == 0.0 && tx == 0.0 && errors.is_empty() && r.state_change.is_none() && hw == 0 {
        return;
    }
    let mut line = format!(
        "  ib {host}/{}/{} rx={rx:.0}B/s tx={tx:.0}B/s",
        r.device, r.port
    );
    if !errors.is_empty() {
        line.push_str(&format!(" errors=[{}]", errors.join(" ")));
    }
    if let Some(ber) = r.symbol_error_ratio {
        line.push_str(&format!(" symbol_error_ratio={ber:.2e}"));
    }
    if let Some((a, b)) = r.state_change {
        line.push_str(&format!(
            " state {}→{}",
            vocab::ib::state_name(a),
            vocab::ib::state_name(b)
        ));
    }
    println!("{line}");
}

fn parse_provider(s: &str) -> Result<collector::probes::ProviderTarget, String> {
    let parts: Vec<&str> = s.rsplitn(4, ':').collect();
    let [recv, send, poll, path] = parts.as_slice() else {
        return Err("expected PATH:POLL_CQ:POST_SEND:POST_RECV".into());
    };
    let loc = collector::config::parse_loc;
    Ok(collector::probes::ProviderTarget {
        path: std::path::PathBuf::from(path),
        poll_cq: loc(poll)?,
        post_send: loc(send)?,
        post_recv: loc(recv)?,
    })
}

/// Completions by status and QP transitions that happened in the window.
fn verbs_window_lines(
    prev: &collector::probes::verbs::VerbsSnapshot,
    cur: &collector::probes::verbs::VerbsSnapshot,
) -> Vec<String> {
    use collector_common::verbs::{qp_state_name, wc_status_name};
    let mut out = Vec::new();
    for (k, v) in &cur.completions {
        let n = v.completions
            - prev
                .completions
                .get(k)
                .map_or(0, |p| p.completions.min(v.completions));
        if n > 0 {
            out.push(format!(
                "verbs pid={} qp={} {}={n}",
                k.pid,
                k.qp_num,
                wc_status_name(k.status)
            ));
        }
    }
    for (k, v) in &cur.qp_states {
        let n = v - prev.qp_states.get(k).copied().unwrap_or(0).min(*v);
        if n > 0 {
            out.push(format!(
                "verbs pid={} qp={} -> {} ×{n}",
                k.pid,
                k.qp_num,
                qp_state_name(k.state)
            ));
        }
    }
    out
}
