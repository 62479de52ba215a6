//! `faultline-sim`: a simulated cluster streaming real windows,
//! through the collector's real streaming code (spool, gRPC client stream,
//! resume) and port-snapshot conversion, to a real correlator on loopback, with
//! a subscriber printing the candidates live.
//!
//! Model: N nodes with 8 GPUs and 8 HCA ports each on a two-level fat tree
//! (`leaf = node / 16`); one data-parallel job with a rank per GPU, rank r on
//! node r/8 using GPU r%8 and HCA `mlx5_{r%8}`. Each rank's step time is its
//! compute time scaled by what slows it (throttled GPU, degraded link, slow
//! storage); the job's step time is the slowest rank's. The job's NCCL
//! communicators (a ring over every rank, a tree over the nodes' GPU 0)
//! issue their collectives on that cadence ([`cluster::nccl`]).
pub mod cluster;
pub mod detect;
pub mod faults;
pub mod rng;

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use proto::v1::{candidates_client::CandidatesClient, SubscribeRequest};

use correlator::{
    engine::Engine,
    ingest::{IngestService, IngestState},
    subscribe::{spawn_engine_with, CandidatesService},
};

pub use cluster::{ClusterSpec, LinkRate, StorageMix};

#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Simulated nodes (8 GPUs and 8 HCA ports each).
    #[arg(long, default_value_t = 32)]
    pub nodes: usize,
    /// Fault to inject (repeatable): `KIND[@ENTITY][:KEY=VALUE,...]`.
    /// Faults and their keys (defaults): ib-link-degrade (ber=1e-10: target
    /// bit error rate; ramp=0: seconds of log-linear ramp from the port's
    /// base BER), ib-link-down, ib-link-flap (period=6, down=2: seconds
    /// between downs and of each down), gpu-thermal, gpu-power, xid, ecc-dbe,
    /// storage-stall (factor=20: slowdown of one device), node-loss; tenants
    /// (a second team's job `etl-batch` sharing the target's node):
    /// interference-storage (factor=8: its I/O demand on the device),
    /// interference-link (demand=1.3: the port's demand over line rate),
    /// interference-gpu (share=0.5: of the time-sliced GPU); NCCL (ENTITY a
    /// rank by its GPU, `n003/gpu5`, or a host, `n003`, for all its ranks):
    /// nccl-hang (the ranks stop issuing collectives), nccl-slow-rank
    /// (factor=1.6: the ranks' compute slows, the communicators' cadence
    /// stretches). Confounders, which must raise nothing: job-end (gap=120: seconds until
    /// the next job), counter-reset, collector-restart, congestion
    /// (fraction=0.3 of the ports, duration=300 s), single-errors
    /// (fraction=0.01 of the ports get one symbol error, every=20 s on
    /// average), storage-fleet-slow (factor=5), victim-more-data (factor=2:
    /// the training job's data per step), aggressor-harmless (demand=1.3:
    /// the tenant saturates a port, nobody slows). Every kind takes `at=SECONDS`
    /// (onset; default `--onset`). ENTITY like `n017/mlx5_2/1`, `n003/gpu5`,
    /// `n009/nvme0n1` or `n009`; chosen by the seed when omitted. Example:
    /// `ib-link-degrade@n017/mlx5_2/1:ber=1e-9,ramp=600`.
    #[arg(long, value_name = "KIND[@ENTITY][:KEY=VALUE,...]")]
    pub inject: Vec<String>,
    /// Scenario file: one fault per line, `KIND[@ENTITY][:KEY=VALUE,...]
    /// [at=SECONDS]`, `#` comments (added to `--inject`).
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Seed for entity choice and noise (runs are reproducible).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated seconds per wall-clock second.
    #[arg(long, default_value_t = 10.0)]
    pub speed: f64,
    /// Simulated seconds to run.
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Simulated second at which the injected faults start.
    #[arg(long, default_value_t = 10.0)]
    pub onset: f64,
    /// Window length in seconds (every collector's).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub window: f64,
    /// InfiniBand link rate of every port: hdr (200 Gb/s), ndr (400 Gb/s),
    /// xdr (800 Gb/s).
    #[arg(long, value_enum, default_value_t = LinkRate::Ndr)]
    pub link_rate: LinkRate,
    /// Fraction of the link rate the job's traffic uses.
    #[arg(long, value_name = "FRAC", default_value_t = 0.7)]
    pub utilisation: f64,
    /// Block devices of the nodes: nvme, ssd, hdd, or mixed (each node some
    /// of them).
    #[arg(long, value_enum, default_value_t = StorageMix::Nvme)]
    pub storage: StorageMix,
    /// The training job sends no OTLP step times: the correlator sees its
    /// steps only through its NCCL collectives' cadence.
    #[arg(long)]
    pub no_otlp: bool,
    /// Print candidates as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Also write every window to FILE in the replay format.
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Web UI and history (`--web`, `--history`, `--keep-serving`).
    #[command(flatten)]
    pub ui: correlator::web::UiArgs,
}

impl Default for SimArgs {
    fn default() -> Self {
        Self {
            nodes: 32,
            inject: Vec::new(),
            scenario: None,
            seed: 1,
            speed: 10.0,
            duration: 60.0,
            onset: 10.0,
            window: 1.0,
            link_rate: LinkRate::Ndr,
            utilisation: 0.7,
            storage: StorageMix::Nvme,
            no_otlp: false,
            json: false,
            record: None,
            ui: correlator::web::UiArgs::default(),
        }
    }
}

impl SimArgs {
    pub fn spec(&self) -> ClusterSpec {
        ClusterSpec {
            nodes: self.nodes,
            window_s: self.window,
            link_rate: self.link_rate,
            utilisation: self.utilisation,
            storage: self.storage,
            seed: self.seed,
            otlp_steps: !self.no_otlp,
        }
    }
}

/// Runs the simulation; returns the candidate updates seen by the subscriber.
pub async fn run(args: SimArgs) -> Result<Vec<proto::v1::CandidateUpdate>> {
    let spec = args.spec();
    spec.validate().context("bad cluster settings")?;
    // Ranges that keep `window / speed` a valid, non-zero tick and the
    // number of windows finite.
    anyhow::ensure!(
        (0.01..=10_000.0).contains(&args.speed),
        "--speed must be within 0.01..=10000 simulated seconds per second, got {:e}",
        args.speed
    );
    anyhow::ensure!(
        args.duration > 0.0 && args.duration <= 1e7,
        "--duration must be within (0, 1e7] simulated seconds, got {:e}",
        args.duration
    );
    let mut cluster = cluster::Cluster::new(spec);
    let mut faults = faults::parse_all(&args.inject, &cluster, args.seed)?;
    if let Some(p) = &args.scenario {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("reading the scenario {}", p.display()))?;
        faults.extend(
            faults::parse_scenario(&text, &cluster, args.seed)
                .with_context(|| format!("scenario {}", p.display()))?,
        );
    }

    // The correlator, in process, on a loopback port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = IngestState::default();
    let (wtx, wrx) = tokio::sync::mpsc::channel(8192);
    let (utx, _) = tokio::sync::broadcast::channel(8192);
    let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut engine = Engine::default();
    let ui = correlator::web::attach(&args.ui, &mut engine, &utx, &open, &state).await?;
    let hooks = ui
        .as_ref()
        .map(correlator::web::Attached::hooks)
        .unwrap_or_default();
    spawn_engine_with(engine, wrx, utx.clone(), open.clone(), hooks);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(proto::v1::ingest_server::IngestServer::new(IngestService {
                state: state.clone(),
                engine: Some(wtx),
                max_windows_per_sec: 0,
            }))
            .add_service(proto::v1::candidates_server::CandidatesServer::new(
                CandidatesService { updates: utx, open },
            ))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let endpoint = format!("http://{addr}");

    // The subscriber.
    let chan = tonic::transport::Endpoint::from_shared(endpoint.clone())?
        .connect()
        .await
        .context("connecting the subscriber")?;
    let mut sub = CandidatesClient::new(chan)
        .subscribe(SubscribeRequest::default())
        .await?
        .into_inner();
    let json = args.json;
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let printer = tokio::spawn(async move {
        let mut seen = Vec::new();
        loop {
            let u = tokio::select! {
                m = sub.message() => match m {
                    Ok(Some(u)) => u,
                    _ => break,
                },
                _ = &mut stop_rx => break,
            };
            if json {
                println!(
                    "{}",
                    serde_json::json!({"ts": u.ts_unix_ms, "incident_id": u.incident_id, "state": u.state,
                        "kind": u.kind, "entity": u.entity, "confidence": u.confidence, "evidence": u.evidence,
                        "affected_jobs": u.affected_jobs, "runbook": u.runbook})
                );
            } else {
                println!(
                    "{:>8} {} {} confidence={:.2} jobs=[{}]\n         evidence: {}\n         runbook: {}",
                    u.state.to_uppercase(), u.kind, u.entity, u.confidence, u.affected_jobs.join(","),
                    u.evidence.join("; "), u.runbook
                );
            }
            seen.push(u);
        }
        seen
    });

    // One real collector sender (spool + stream) per node.
    // A spool directory of its own per run: two simulations on one host must
    // not pick up each other's spooled windows.
    let spool_root = std::env::temp_dir().join(format!(
        "faultline-sim-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let mut senders = Vec::new();
    for n in 0..args.nodes {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let (h, stats) = collector::stream::spawn(
            collector::stream::SenderConfig {
                endpoint: endpoint.clone(),
                spool_dir: spool_root.join(cluster.node_name(n)),
                spool_max_bytes: 16 << 20,
                backoff_min: Duration::from_millis(50),
                backoff_max: Duration::from_secs(2),
                resume_every: Duration::from_secs(1),
                auth: collector::stream::tls::ClientAuth::default(),
            },
            rx,
            Duration::from_secs(3),
        )?;
        senders.push((tx, h, stats));
    }
    let mut recorder = match &args.record {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };
    if !json {
        println!(
            "simulating {} nodes ({} GPUs, {} {} HCA ports, {} storage, utilisation {:.0}%) for {} s in {} s windows at {}x; faults: {}",
            args.nodes,
            args.nodes * 8,
            args.nodes * 8,
            args.link_rate.name().to_uppercase(),
            args.storage.name(),
            100.0 * args.utilisation,
            args.duration,
            args.window,
            args.speed,
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults
                    .iter()
                    .map(|f| f.describe())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
    }
    let windows = (args.duration / args.window).ceil() as u64;
    let tick = Duration::try_from_secs_f64(args.window / args.speed)
        .context("--window / --speed is not a valid tick")?;
    let mut next = tokio::time::Instant::now();
    let mut queued = vec![0u64; senders.len()];
    for _ in 1..=windows {
        cluster.advance(&faults, args.onset);
        for (n, sender) in senders.iter().enumerate() {
            let Some(w) = cluster.window(n) else {
                continue;
            };
            if let Some(r) = recorder.as_mut() {
                use std::io::Write as _;
                writeln!(r, "{}", serde_json::to_string(&w)?)?;
            }
            // Event time is simulated, so a busy machine slows the wall
            // clock instead of losing windows (which would look like lost
            // nodes); a sender stuck for seconds drops (and counts) rather
            // than stopping the simulation.
            if tokio::time::timeout(Duration::from_secs(5), sender.0.send(w))
                .await
                .is_ok_and(|r| r.is_ok())
            {
                queued[n] += 1;
            }
        }
        // Lockstep: every node's window is in the engine before the next
        // slot, so a starved stream cannot fall windows behind its peers
        // (the correlator would call that node lost on the cluster's clock).
        let want: u64 = queued.iter().sum();
        let waited = std::time::Instant::now();
        while state.counters().0 < want && waited.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        cluster.finish_step();
        next += tick;
        tokio::time::sleep_until(next).await;
    }
    let mut delivered = 0;
    for (tx, h, stats) in senders {
        drop(tx);
        let _ = h.await;
        delivered += stats.delivered.load(std::sync::atomic::Ordering::Relaxed);
    }
    // Give the engine a moment to publish the last updates, then stop listening.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = stop_tx.send(());
    let seen = printer.await.unwrap_or_default();
    let _ = std::fs::remove_dir_all(&spool_root);
    if !json {
        let steps = &cluster.job_steps;
        let before_onset = (args.onset / args.window).floor() as usize;
        let before: Vec<f64> = steps.iter().take(before_onset).copied().collect();
        let base = correlator::engine::median(&before);
        let worst = steps.iter().copied().fold(0.0, f64::max);
        if base > 0.0 {
            println!(
                "job step time (slowest rank): {base:.2} s before the faults, worst {worst:.2} s ({:+.0}%); {} leaf switches",
                100.0 * (worst / base - 1.0),
                args.nodes.div_ceil(cluster::NODES_PER_LEAF)
            );
        }
        let (accepted, duplicates, missing) = state.counters();
        println!("done: {windows} windows per node, {accepted} accepted by the correlator ({duplicates} duplicates, {missing} missing), {delivered} confirmed to collectors");
    }
    if let Some(ui) = ui {
        ui.finish().await;
    }
    Ok(seen)
}
