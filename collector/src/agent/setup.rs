//! Start-up: the metrics endpoint, the probes, the sources, the event
//! drains, the launch controller, the host's identity and where windows go.
use std::time::SystemTime;

use anyhow::{Context as _, Result};
use proto::v1 as pb;

use super::{delivery::Delivery, describe, host, probe_enabled};
use crate::{
    block::probe::BlockSample,
    config::FileConfig,
    cuda::{launch_control::LaunchController, probe::CudaEvent},
    exec::ExecSource,
    http::{self, Exposition},
    identity::IdentityCache,
    probes::{drain::EventDrain, ProbeOptions, Probes},
    sources::{Console, Source},
};

/// Everything the window loop runs on.
pub(super) struct Agent {
    pub expo: Exposition,
    pub console: Console,
    pub probes: Probes,
    pub sources: Vec<Box<dyn Source>>,
    pub exec: ExecSource,
    /// The optional per-event rings, drained as they fill.
    pub block_events: Option<EventDrain<BlockSample>>,
    pub cuda_events: Option<EventDrain<CudaEvent>>,
    pub launch: Option<LaunchController>,
    pub ids: IdentityCache,
    /// The node's name (entity prefix) and the stream's origin.
    pub host: String,
    pub origin: pb::Origin,
    pub delivery: Delivery,
}

impl Agent {
    pub async fn start(cfg: &FileConfig) -> Result<Self> {
        let console = Console {
            quiet: cfg.collector.quiet,
        };
        let expo = serve_metrics(cfg, console).await?;
        // Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
        match crate::privilege::raise_memlock() {
            Ok(l) => tracing::debug!(memlock = l, "RLIMIT_MEMLOCK soft limit"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot raise RLIMIT_MEMLOCK; on kernels before 5.11 map creation may fail")
            }
        }
        let mut probes = Probes::load(&probe_options(cfg)?)?;
        for s in probes.status() {
            console.info(format_args!("probe {s}"));
        }
        probe_enabled::export(probes.status());
        // After the probes: a collector that cannot run says only why.
        let otlp = super::start::start_otlp(&cfg.otlp, console).await;
        let sources = super::start::start_sources(cfg, &probes, &expo, console, otlp)?;
        expo.set_ready(true);
        let exec = ExecSource::new(probes.take_exec_ring()?);
        // The per-event rings are written only when their keys are on; then
        // they are drained here, never left to fill.
        let block_sampled = cfg.block.sample_every > 0 && probes.block_active();
        let cuda_streamed = cfg.cuda.events_per_sec > 0 && probes.cuda_library().is_some();
        let block_events = EventDrain::take(&mut probes, block_sampled)?;
        let cuda_events = EventDrain::take(&mut probes, cuda_streamed)?;
        let launch = LaunchController::new(&cfg.cuda, &cfg.collector.proc_root, &probes, |l| {
            console.info(l)
        });
        let ids = IdentityCache::new(&cfg.collector.proc_root, 4096);
        let (host, origin) = origin(cfg);
        let delivery = Delivery::start(cfg, console)?;
        Ok(Self {
            expo,
            console,
            probes,
            sources,
            exec,
            block_events,
            cuda_events,
            launch,
            ids,
            host,
            origin,
            delivery,
        })
    }
}

/// The Prometheus recorder and `/metrics`, `/healthz`, `/readyz`.
async fn serve_metrics(cfg: &FileConfig, console: Console) -> Result<Exposition> {
    let metrics_addr = crate::config::parse_listen_addr(&cfg.collector.metrics_addr)
        .context("collector.metrics_addr")?;
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    describe::describe();
    proto::self_telemetry::start(proto::self_telemetry::Build {
        version: env!("CARGO_PKG_VERSION"),
        revision: env!("FAULTLINE_REVISION"),
        rustc: env!("FAULTLINE_RUSTC"),
    });
    let expo = Exposition::new(handle);
    let web = match &cfg.collector.web_config_file {
        Some(p) => Some(webconfig::Web::load(p).context("collector.web_config_file")?),
        None => None,
    };
    let scheme = web.as_ref().map_or("http", webconfig::Web::scheme);
    let auth = if web.as_ref().is_some_and(webconfig::Web::basic_auth) {
        " (basic auth)"
    } else {
        ""
    };
    let bound = http::serve_with(metrics_addr, expo.clone(), web)
        .await
        .with_context(|| {
            format!(
                "binding the metrics endpoint on {metrics_addr}; choose another with --metrics-addr"
            )
        })?;
    console.info(format_args!("metrics on {scheme}://{bound}/metrics{auth}"));
    Ok(expo)
}

/// The host's name and the stream's origin (this run's instance).
fn origin(cfg: &FileConfig) -> (String, pb::Origin) {
    let identity = host::identity(&cfg.collector.proc_root, cfg.collector.hostname.as_deref());
    let origin = pb::Origin {
        hostname: identity.hostname.clone(),
        machine_id: identity.machine_id,
        boot_id: identity.boot_id,
        instance: format!(
            "{:020}-{}",
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            std::process::id()
        ),
        cluster: cfg.collector.cluster.clone().unwrap_or_default(),
    };
    (identity.hostname, origin)
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
            Some(p) => Some(p.target().context("verbs.provider")?),
            None => None,
        },
        ..ProbeOptions::default()
    };
    opts.cuda_search.configured = cfg.cuda.library.clone();
    opts.nccl = cfg.nccl.enabled;
    opts.nccl_search.configured = cfg.nccl.library.clone();
    // Processes (and their roots) as the collector is told to see them.
    opts.cuda_search.proc_root = Some(cfg.collector.proc_root.clone());
    opts.nccl_search.proc_root = Some(cfg.collector.proc_root.clone());
    Ok(opts)
}
