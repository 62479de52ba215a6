//! Correlator ingest and scaling: many simulated collectors stream windows of
//! ~200 series each over real gRPC on loopback to a `faultline-correlator
//! serve` process; its CPU time and RSS come from /proc. Samples per second
//! per core = samples / correlator CPU seconds.
use std::{path::Path, process::Command, time::Instant};

use anyhow::{Context as _, Result};
use proto::v1::{ingest_client::IngestClient, GpuSample, IbPort, Origin, Window};
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Cluster sizes (collectors) to measure.
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024,4096")]
    sizes: Vec<usize>,
    /// Windows per collector.
    #[arg(long, default_value_t = 5)]
    windows: u64,
    /// The `faultline-correlator` binary to measure (default: the one next
    /// to this bench), e.g. an older build to compare side by side.
    #[arg(long)]
    correlator: Option<std::path::PathBuf>,
    /// Write the table's JSON here (default: `ingest.json` in the bench
    /// output directory).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

impl Args {
    /// Where the result goes.
    pub fn result_path(&self, out_dir: &Path) -> std::path::PathBuf {
        self.json
            .clone()
            .unwrap_or_else(|| out_dir.join("ingest.json"))
    }
}

const COUNTERS: &[&str] = &[
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "unicast_xmit_packets",
    "unicast_rcv_packets",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_discards",
    "port_xmit_constraint_errors",
    "port_rcv_constraint_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_wait",
];
/// The first this many of [`COUNTERS`] count traffic; the rest are errors.
const TRAFFIC_COUNTERS: usize = 8;

/// Window times: an hour before the bench started, one second per
/// sequence number (inside the correlator's clock bounds, docs/security.md).
fn base_ms() -> i64 {
    static BASE: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            - 3_600_000
    })
}

/// One window: 8 ports × 20 counters + 8 GPUs × 5 fields = 200 samples.
pub(crate) fn window(node: usize, seq: u64) -> Window {
    window_with(node, seq, false)
}

/// As [`window`], with GPU 0 thermally throttled when `hot`.
fn window_with(node: usize, seq: u64, hot: bool) -> Window {
    Window {
        origin: Some(Origin {
            hostname: format!("n{node:04}"),
            boot_id: "b".into(),
            instance: format!("n{node}-bench"),
            machine_id: String::new(),
            cluster: String::new(),
        }),
        seq,
        start_unix_ms: base_ms() + (seq as i64 - 1) * 1000,
        end_unix_ms: base_ms() + seq as i64 * 1000,
        ib_ports: (0..8)
            .map(|p| IbPort {
                hca: format!("mlx5_{p}"),
                port: 1,
                state: 4,
                phys_state: 5,
                // A healthy port: traffic counters rise, error counters stay.
                counters: COUNTERS
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let v = if i < TRAFFIC_COUNTERS {
                            seq * 1_000_000
                        } else {
                            0
                        };
                        ((*c).to_string(), v)
                    })
                    .collect(),
                ..IbPort::default()
            })
            .collect(),
        gpus: (0..8)
            .map(|g| {
                let throttled = hot && g == 0;
                GpuSample {
                    index: g,
                    uuid: format!("GPU-{node}-{g}"),
                    temp_c: Some(if throttled { 92 } else { 60 }),
                    sm_clock_mhz: Some(if throttled { 1100 } else { 1980 }),
                    sm_clock_max_mhz: Some(1980),
                    throttle_reasons: Some(if throttled { 0x40 } else { 0 }),
                    power_w: Some(500.0),
                    ..GpuSample::default()
                }
            })
            .collect(),
        ..Window::default()
    }
}
pub(crate) const SAMPLES_PER_WINDOW: u64 = 8 * 20 + 8 * 5;

/// What one cluster size measured.
struct Measured {
    wall: f64,
    cpu: f64,
    rss: u64,
    /// Window close → candidate, and the other updates before it.
    latency: Option<f64>,
    others: Option<u64>,
}

type Channel = tonic::transport::Channel;

/// Every node streams the windows `ws(node)` on its own stream, at most 64
/// streams at a time.
async fn stream_all(
    chan: &Channel,
    sem: &std::sync::Arc<tokio::sync::Semaphore>,
    n: usize,
    ws: impl Fn(usize) -> Vec<Window>,
) -> Result<()> {
    let mut tasks = Vec::new();
    for node in 0..n {
        let mut client = IngestClient::new(chan.clone());
        let permit = sem.clone().acquire_owned().await?;
        let ws = ws(node);
        tasks.push(tokio::spawn(async move {
            let r = client.stream(tokio_stream::iter(ws)).await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// `n` collectors' `windows` windows each, streamed to the correlator at
/// `url` (64 streams at a time); returns once it has accepted them all.
pub(crate) async fn stream_windows(url: &str, n: usize, windows: u64) -> Result<()> {
    let chan = tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect()
        .await
        .with_context(|| format!("connecting to the correlator on {url}"))?;
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
    stream_all(&chan, &sem, n, |node| {
        (1..=windows).map(|s| window(node, s)).collect()
    })
    .await
}

/// The subscriber's `opened` update for node 0's hot GPU: seconds since
/// `since`, and the other updates before it.
async fn candidate(
    sub: &mut tonic::Streaming<proto::v1::CandidateUpdate>,
    since: Instant,
    n: usize,
) -> (Option<f64>, Option<u64>) {
    let mut seen: std::collections::BTreeMap<String, u64> = Default::default();
    let got = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        loop {
            match sub.message().await {
                Ok(Some(u)) => {
                    if u.state == "opened"
                        && u.kind == "gpu_thermal_throttle"
                        && u.entity.starts_with("n0000/")
                    {
                        return Some(since.elapsed().as_secs_f64());
                    }
                    *seen.entry(format!("{} {}", u.state, u.kind)).or_default() += 1;
                }
                Ok(None) => return None,
                Err(e) => {
                    eprintln!("ingest bench: subscription ended: {e}");
                    return None;
                }
            }
        }
    })
    .await;
    let latency = got.ok().flatten();
    let others = latency.is_some().then(|| seen.values().sum::<u64>());
    if latency.is_none() || !seen.is_empty() {
        eprintln!("ingest bench, {n} collectors: other updates before the candidate: {seen:?}");
    }
    (latency, others)
}

/// `n` collectors, `windows` windows each, into the correlator at `url`
/// (process `pid`): throughput, then the candidate latency.
async fn measure(url: &str, pid: u32, n: usize, windows: u64) -> Result<Measured> {
    let chan = tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect()
        .await
        .with_context(|| format!("connecting to the correlator on {url}"))?;
    // Subscribed from the start: a healthy cluster opens nothing, so
    // every update before the hot GPU's is a false alarm.
    let mut sub = proto::v1::candidates_client::CandidatesClient::new(chan.clone())
        .subscribe(proto::v1::SubscribeRequest::default())
        .await?
        .into_inner();
    let c0 = crate::procstat::cpu_seconds(pid).unwrap_or(0.0);
    let t0 = Instant::now();
    // Bounded concurrency: 64 streams at a time.
    let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
    stream_all(&chan, &sem, n, |node| {
        (1..=windows).map(|s| window(node, s)).collect()
    })
    .await?;
    let wall = t0.elapsed().as_secs_f64();
    // CPU of the throughput part only (the latency rounds come after).
    let cpu = crate::procstat::cpu_seconds(pid).unwrap_or(0.0) - c0;
    let rss = crate::procstat::rss_bytes(pid).unwrap_or(0);
    // Latency: two more rounds in which node 0's GPU 0 throttles; time
    // from the start of the second round (its windows closing) to the
    // subscriber's `opened` update.
    let (mut latency, mut others) = (None, None);
    for round in 1..=2u64 {
        let t_round = Instant::now();
        stream_all(&chan, &sem, n, |node| {
            vec![window_with(node, windows + round, node == 0)]
        })
        .await?;
        if round == 2 {
            (latency, others) = candidate(&mut sub, t_round, n).await;
        }
    }
    Ok(Measured {
        wall,
        cpu,
        rss,
        latency,
        others,
    })
}

/// A `faultline-correlator serve` on a free loopback port: the process and
/// its URL.
pub(crate) fn start_correlator(bin: &Path) -> Result<(tests::KillOnDrop, String)> {
    let port = crate::wait::free_port()?;
    let mut child = tests::KillOnDrop(
        Command::new(bin)
            .args([
                "serve",
                "--insecure",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--max-windows-per-sec",
                "0",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );
    crate::wait::port(&mut child.0, port, "the correlator")?;
    Ok((child, format!("http://127.0.0.1:{port}")))
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let bin = match &a.correlator {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("faultline-correlator"),
    };
    let mut rows = Vec::new();
    println!("correlator ingest over gRPC on loopback ({}): {} windows per collector, {SAMPLES_PER_WINDOW} samples per window", bin.display(), a.windows);
    println!("| collectors | windows | samples | wall s | correlator CPU s | samples/s/core | RSS MiB | RSS KiB per entity | window close → candidate (s) | other updates |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &n in &a.sizes {
        let (mut child, url) = start_correlator(&bin)?;
        let pid = child.0.id();
        let windows = a.windows;
        let Measured {
            wall,
            cpu,
            rss,
            latency,
            others,
        } = rt.block_on(measure(&url, pid, n, windows))?;
        let _ = child.0.kill();
        let samples = n as u64 * windows * SAMPLES_PER_WINDOW;
        let per_core = samples as f64 / cpu.max(1e-3);
        let entities = n * (8 + 8 + 1);
        println!(
            "| {n} | {} | {samples} | {wall:.2} | {cpu:.2} | {per_core:.0} | {:.1} | {:.1} | {} | {} |",
            n as u64 * windows,
            rss as f64 / (1 << 20) as f64,
            rss as f64 / 1024.0 / entities as f64,
            latency.map_or_else(|| "-".to_string(), |l| format!("{l:.3}")),
            others.map_or_else(|| "-".to_string(), |o| o.to_string())
        );
        rows.push(json!({"collectors": n, "windows": n as u64 * windows, "samples": samples, "wall_seconds": wall,
            "correlator_cpu_seconds": cpu, "samples_per_second_per_core": per_core, "rss_bytes": rss, "entities": entities,
            "window_close_to_candidate_seconds": latency, "other_updates": others}));
    }
    crate::report::write(
        &a.result_path(out_dir),
        json!({"benchmark": "correlator_ingest_scaling", "samples_per_window": SAMPLES_PER_WINDOW, "windows_per_collector": a.windows, "rows": rows, "note": "correlator CPU includes process start-up; RSS measured after ingest"}),
        &crate::report::Failures::default(),
    )
}
