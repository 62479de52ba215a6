//! Correlator ingest through NATS JetStream with 1, 2 and 4 shards, beside
//! direct gRPC in the same run: simulated collectors' windows (the ingest
//! bench's 200-sample windows) published to a real `nats-server -js` with
//! publish acknowledgements and message ids, as the collector's NATS
//! sender does, and consumed by that many `faultline-correlator serve
//! --nats --nats-shards sK` processes (collectors spread over the shards
//! by node number). Samples per second per core = samples / the
//! correlators' CPU seconds; the NATS server's own CPU is reported apart.
use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use async_nats::jetstream::{self, message::PublishMessage};
use prost::Message as _;
use serde_json::json;

use crate::ingest::{window, SAMPLES_PER_WINDOW};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Simulated collectors.
    #[arg(long, default_value_t = 1024)]
    collectors: usize,
    /// Windows per collector.
    #[arg(long, default_value_t = 16)]
    windows: u64,
    /// Shard counts to measure through NATS.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    shards: Vec<usize>,
}

/// `nats-server -js` on a loopback port with a fresh store.
fn nats_server(dir: &Path) -> Result<(tests::KillOnDrop, u16)> {
    let port = crate::wait::free_port()?;
    let mut child = tests::KillOnDrop(
        Command::new("nats-server")
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nats-server (Debian's nats-server; scripts/setup.sh installs it)")?,
    );
    crate::wait::port(&mut child.0, port, "nats-server")?;
    Ok((child, port))
}

/// A correlator consuming one shard; its process and metrics address.
fn shard_correlator(
    bin: &Path,
    url: &str,
    stream: &str,
    prefix: &str,
    shard: usize,
) -> Result<(tests::KillOnDrop, String)> {
    let metrics = format!("127.0.0.1:{}", crate::wait::free_port()?);
    let mut child = tests::KillOnDrop(
        Command::new(bin)
            .args([
                "serve",
                "--insecure",
                "--listen",
                &format!("127.0.0.1:{}", crate::wait::free_port()?),
            ])
            .args([
                "--metrics-addr",
                &metrics,
                "--nats",
                url,
                "--nats-stream",
                stream,
            ])
            .args([
                "--nats-subject",
                prefix,
                "--nats-shards",
                &format!("s{shard}"),
            ])
            .args(["--nats-consumer", &format!("{stream}-s{shard}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );
    let port: u16 = metrics.rsplit(':').next().unwrap_or("0").parse()?;
    crate::wait::port(&mut child.0, port, "a shard correlator")?;
    Ok((child, metrics))
}

/// Windows the correlators' engines have taken, summed.
fn consumed(metrics: &[String]) -> u64 {
    metrics
        .iter()
        .map(|m| tests::metrics::counter(m, "faultline_correlator_windows_total", &[]))
        .sum()
}

/// Publishes every collector's windows (64 acknowledgements in flight).
async fn publish(url: &str, prefix: &str, shards: usize, n: usize, windows: u64) -> Result<()> {
    let js = jetstream::new(async_nats::connect(url).await?);
    let mut acks = std::collections::VecDeque::new();
    for seq in 1..=windows {
        for node in 0..n {
            let w = window(node, seq);
            let subject = collector::stream::nats::NatsTarget {
                prefix: prefix.into(),
                shard: format!("s{}", node % shards),
                ..Default::default()
            }
            .subject(&w);
            let msg = PublishMessage::build()
                .payload(w.encode_to_vec().into())
                .message_id(format!("n{node}/bench/{seq}"));
            acks.push_back(js.send_publish(subject, msg).await?);
            if acks.len() >= 64 {
                if let Some(a) = acks.pop_front() {
                    a.await?;
                }
            }
        }
    }
    for a in acks {
        a.await?;
    }
    Ok(())
}

struct Row {
    transport: String,
    shards: usize,
    wall: f64,
    cpu: f64,
    nats_cpu: f64,
}

/// One NATS row: `shards` correlators on their own stream.
fn nats_row(
    a: &Args,
    rt: &tokio::runtime::Runtime,
    bin: &Path,
    url: &str,
    nats_pid: u32,
    shards: usize,
) -> Result<Row> {
    let stream = format!("BENCH{shards}");
    let prefix = format!("bench.s{shards}");
    let mut procs = Vec::new();
    for k in 0..shards {
        procs.push(shard_correlator(bin, url, &stream, &prefix, k)?);
    }
    let metrics: Vec<String> = procs.iter().map(|(_, m)| m.clone()).collect();
    let pids: Vec<u32> = procs.iter().map(|(c, _)| c.0.id()).collect();
    let cpu = |pids: &[u32]| -> f64 {
        pids.iter()
            .filter_map(|p| crate::procstat::cpu_seconds(*p))
            .sum()
    };
    let (c0, n0) = (
        cpu(&pids),
        crate::procstat::cpu_seconds(nats_pid).unwrap_or(0.0),
    );
    let t0 = Instant::now();
    rt.block_on(publish(url, &prefix, shards, a.collectors, a.windows))?;
    let total = a.collectors as u64 * a.windows;
    crate::wait::until(
        "the shards to consume every window",
        Duration::from_secs(300),
        || {
            let got = consumed(&metrics);
            Ok((got < total).then(|| format!("{got} of {total}")))
        },
    )?;
    let wall = t0.elapsed().as_secs_f64();
    Ok(Row {
        transport: "nats".into(),
        shards,
        wall,
        cpu: cpu(&pids) - c0,
        nats_cpu: crate::procstat::cpu_seconds(nats_pid).unwrap_or(0.0) - n0,
    })
}

/// The direct gRPC row: one correlator, the collectors streaming to it.
fn grpc_row(a: &Args, rt: &tokio::runtime::Runtime, bin: &Path) -> Result<Row> {
    let (child, url) = crate::ingest::start_correlator(bin)?;
    let pid = child.0.id();
    let c0 = crate::procstat::cpu_seconds(pid).unwrap_or(0.0);
    let t0 = Instant::now();
    rt.block_on(crate::ingest::stream_windows(&url, a.collectors, a.windows))?;
    Ok(Row {
        transport: "grpc".into(),
        shards: 1,
        wall: t0.elapsed().as_secs_f64(),
        cpu: crate::procstat::cpu_seconds(pid).unwrap_or(0.0) - c0,
        nats_cpu: 0.0,
    })
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let bin = std::env::current_exe()?.with_file_name("faultline-correlator");
    let store = std::env::temp_dir().join(format!("faultline-bench-shards-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    let (nats, port) = nats_server(&store)?;
    let url = format!("nats://127.0.0.1:{port}");
    let samples = a.collectors as u64 * a.windows * SAMPLES_PER_WINDOW;
    let mut rows = vec![grpc_row(a, &rt, &bin)?];
    for &s in &a.shards {
        rows.push(nats_row(a, &rt, &bin, &url, nats.0.id(), s.max(1))?);
    }
    drop(nats);
    let _ = std::fs::remove_dir_all(&store);
    let grpc_per_core = samples as f64 / rows[0].cpu.max(1e-3);
    println!(
        "correlator ingest, {} collectors × {} windows × {SAMPLES_PER_WINDOW} samples, direct gRPC and through NATS JetStream (nats-server on this machine, file store)",
        a.collectors, a.windows
    );
    println!("| transport | shards | wall s | correlators' CPU s | samples/s/core | per-core ratio to gRPC | samples/s (wall) | nats-server CPU s |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut out = Vec::new();
    for r in &rows {
        let per_core = samples as f64 / r.cpu.max(1e-3);
        println!(
            "| {} | {} | {:.2} | {:.2} | {per_core:.0} | {:.2} | {:.0} | {:.2} |",
            r.transport,
            r.shards,
            r.wall,
            r.cpu,
            per_core / grpc_per_core,
            samples as f64 / r.wall.max(1e-3),
            r.nats_cpu
        );
        out.push(json!({"transport": r.transport, "shards": r.shards, "wall_seconds": r.wall, "correlator_cpu_seconds": r.cpu,
            "samples_per_second_per_core": per_core, "per_core_ratio_to_grpc": per_core / grpc_per_core,
            "samples_per_second_wall": samples as f64 / r.wall.max(1e-3), "nats_server_cpu_seconds": r.nats_cpu}));
    }
    crate::report::write(
        &out_dir.join("shards.json"),
        json!({"benchmark": "correlator_ingest_shards", "collectors": a.collectors, "windows_per_collector": a.windows,
            "samples_per_window": SAMPLES_PER_WINDOW, "bytes_per_window": window(0, 1).encoded_len(), "rows": out,
            "note": "2 cores shared by the publisher, nats-server and the correlators: wall time is contended; the per-core figures count the correlators' CPU only"}),
        &crate::report::Failures::default(),
    )
}
