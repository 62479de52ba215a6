//! The live simulation: a real correlator on loopback, one real collector
//! sender (spool + gRPC stream) per node, a subscriber printing the
//! candidates as they come, and the cluster advancing in lockstep with
//! them at `--speed`.
use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context as _, Result};
use collector::stream::SenderStats;
use proto::v1::{candidates_client::CandidatesClient, CandidateUpdate, SubscribeRequest, Window};
use tokio::{sync::mpsc, task::JoinHandle};

use super::{
    cluster::{self, Cluster},
    faults::{self, Fault},
    SimArgs,
};
use correlator::{
    engine::Engine,
    ingest::{IngestService, IngestState},
    subscribe::{spawn_engine_with, CandidatesService},
};

/// The `--inject` faults and the `--scenario` file's.
fn load_faults(args: &SimArgs, cluster: &Cluster) -> Result<Vec<Fault>> {
    let mut faults = faults::parse_all(&args.inject, cluster, args.seed)?;
    if let Some(p) = &args.scenario {
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("reading the scenario {}", p.display()))?;
        faults.extend(
            faults::parse_scenario(&text, cluster, args.seed)
                .with_context(|| format!("scenario {}", p.display()))?,
        );
    }
    Ok(faults)
}

/// The in-process correlator.
struct Correlator {
    endpoint: String,
    state: IngestState,
    ui: Option<correlator::web::Attached>,
}

/// Starts the correlator (engine, ingest and candidates services, the web
/// UI when asked for) on a loopback port.
async fn start_correlator(args: &SimArgs) -> Result<Correlator> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let state = IngestState::default();
    let (wtx, wrx) = mpsc::channel(8192);
    let (utx, _) = tokio::sync::broadcast::channel(8192);
    let open = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut engine = Engine::default();
    engine.ib.set_topology(
        correlator::engine::ib::parse_topology(&crate::cluster::topology::ibnetdiscover(
            args.nodes,
        ))
        .map_err(|e| anyhow::anyhow!("the simulated fabric's topology: {e}"))?,
    );
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
    Ok(Correlator {
        endpoint: format!("http://{addr}"),
        state,
        ui,
    })
}

/// One candidate update, as a JSON line or as text.
fn print_update(u: &CandidateUpdate, json: bool) {
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
            u.state.to_uppercase(),
            u.kind,
            u.entity,
            u.confidence,
            u.affected_jobs.join(","),
            u.evidence.join("; "),
            u.runbook
        );
    }
}

/// The subscriber: prints every update until told to stop; returns them.
async fn subscribe(
    endpoint: &str,
    json: bool,
) -> Result<(
    tokio::sync::oneshot::Sender<()>,
    JoinHandle<Vec<CandidateUpdate>>,
)> {
    let chan = tonic::transport::Endpoint::from_shared(endpoint.to_string())?
        .connect()
        .await
        .context("connecting the subscriber")?;
    let mut sub = CandidatesClient::new(chan)
        .subscribe(SubscribeRequest::default())
        .await?
        .into_inner();
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
            print_update(&u, json);
            seen.push(u);
        }
        seen
    });
    Ok((stop_tx, printer))
}

/// A node's collector sender: its window queue, task and counters.
type Sender = (mpsc::Sender<Window>, JoinHandle<()>, Arc<SenderStats>);

/// One real collector sender (spool + stream) per node, spooling under
/// `spool_root`.
fn spawn_senders(
    cluster: &Cluster,
    endpoint: &str,
    spool_root: &std::path::Path,
) -> Result<Vec<Sender>> {
    let mut senders = Vec::new();
    for n in 0..cluster.nodes() {
        let (tx, rx) = mpsc::channel(64);
        let (h, stats) = collector::stream::spawn(
            collector::stream::SenderConfig {
                endpoint: endpoint.to_string(),
                spool_dir: spool_root.join(cluster.node_name(n)),
                spool_max_bytes: 16 << 20,
                backoff_min: Duration::from_millis(50),
                backoff_max: Duration::from_secs(2),
                resume_every: Duration::from_secs(1),
                auth: collector::stream::tls::ClientAuth::default(),
                nats: Default::default(),
            },
            rx,
            Duration::from_secs(3),
        )?;
        senders.push((tx, h, stats));
    }
    Ok(senders)
}

/// A spool directory of its own per run: two simulations on one host must
/// not pick up each other's spooled windows.
fn spool_root() -> PathBuf {
    std::env::temp_dir().join(format!(
        "faultline-sim-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ))
}

fn print_header(args: &SimArgs, faults: &[Fault]) {
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

/// `--record`'s file.
type Recorder = std::io::BufWriter<std::fs::File>;

fn open_recorder(args: &SimArgs) -> Result<Option<Recorder>> {
    args.record
        .as_ref()
        .map(|p| {
            std::fs::File::create(p)
                .map(std::io::BufWriter::new)
                .with_context(|| format!("creating {}", p.display()))
        })
        .transpose()
}

/// Advances the cluster `windows` times at `--speed`, every node's window
/// into its sender (and the recording), in lockstep with the engine.
async fn stream_windows(
    args: &SimArgs,
    cluster: &mut Cluster,
    faults: &[Fault],
    senders: &[Sender],
    state: &IngestState,
    windows: u64,
    mut recorder: Option<Recorder>,
) -> Result<()> {
    let tick = Duration::try_from_secs_f64(args.window / args.speed)
        .context("--window / --speed is not a valid tick")?;
    let mut next = tokio::time::Instant::now();
    let mut queued = vec![0u64; senders.len()];
    for _ in 1..=windows {
        cluster.advance(faults, args.onset);
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
    Ok(())
}

/// The job's step time before the faults and at its worst; the windows
/// accepted and confirmed.
fn print_summary(
    args: &SimArgs,
    cluster: &Cluster,
    state: &IngestState,
    windows: u64,
    delivered: u64,
) {
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

/// Runs the simulation; returns the candidate updates seen by the subscriber.
pub async fn run(args: SimArgs) -> Result<Vec<CandidateUpdate>> {
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
    let mut cluster = Cluster::new(spec);
    let faults = load_faults(&args, &cluster)?;
    let correlator = start_correlator(&args).await?;
    let (stop_tx, printer) = subscribe(&correlator.endpoint, args.json).await?;
    let spool_root = spool_root();
    let senders = spawn_senders(&cluster, &correlator.endpoint, &spool_root)?;
    let recorder = open_recorder(&args)?;
    if !args.json {
        print_header(&args, &faults);
    }
    let windows = (args.duration / args.window).ceil() as u64;
    let state = &correlator.state;
    stream_windows(
        &args,
        &mut cluster,
        &faults,
        &senders,
        state,
        windows,
        recorder,
    )
    .await?;
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
    if !args.json {
        print_summary(&args, &cluster, state, windows, delivered);
    }
    if let Some(ui) = correlator.ui {
        ui.finish().await;
    }
    Ok(seen)
}
