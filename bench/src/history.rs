//! `faultline-bench history`: the web API's latency for the incident list
//! with 10,000 incidents in history (side by side with the static page
//! shell on the same listener), and the history database's write cost per
//! window at 1024 nodes (side by side with the engine task's cost of
//! queueing the same window for the writer thread).
use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use correlator::history::{samples::Sample, HistoryConfig, Recorder, Store};
use proto::v1::CandidateUpdate;
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Incidents in history for the API latency test.
    #[arg(long, default_value_t = 10_000)]
    incidents: usize,
    /// Requests per endpoint.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Nodes whose windows are written.
    #[arg(long, default_value_t = 1024)]
    nodes: usize,
    /// Rounds of one window per node.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
}

const T0: i64 = 1_800_000_000_000;

fn incidents(n: usize) -> Vec<CandidateUpdate> {
    const KINDS: [&str; 5] = [
        "ib_link_degraded",
        "ib_link_down",
        "gpu_thermal_throttle",
        "storage_latency",
        "gpu_xid",
    ];
    let span = 30 * 86_400_000 / n.max(1) as i64;
    let mut out = Vec::with_capacity(2 * n);
    for i in 0..n {
        let opened = T0 + i as i64 * span;
        let mut u = CandidateUpdate {
            ts_unix_ms: opened,
            incident_id: format!("{i:016x}"),
            state: "opened".into(),
            kind: KINDS[i % KINDS.len()].into(),
            entity: format!("n{:04}/mlx5_{}/1", i % 1024, i % 8),
            confidence: 0.9,
            evidence: vec![
                "BER 2.1e-11 (95% interval 1.5e-11–2.8e-11) from symbol_error".into(),
                "reference BER 1.0e-14 (floor; fabric median 0 over 8192 ports)".into(),
            ],
            affected_jobs: vec![format!("job{}", i % 50)],
            runbook: "check the cable and switch port: `mlxlink -d mlx5_0 -p 1 -c`".into(),
            cluster: String::new(),
            severity: "warning".into(),
        };
        out.push(u.clone());
        u.state = "resolved".into();
        u.ts_unix_ms = opened + span / 2;
        out.push(u);
    }
    out
}

/// One host's window of samples, as the sampler makes them: 8 ports × 3
/// signals, 8 GPUs × 4, 2 devices × 2, one job.
fn window(host: usize, ts: i64) -> Vec<Sample> {
    let mut v = Vec::with_capacity(61);
    let mut s = |entity: String, signal: &'static str, value: f64| {
        v.push(Sample {
            entity,
            signal,
            ts,
            value,
        })
    };
    for p in 0..8 {
        let e = format!("n{host:04}/mlx5_{p}/1");
        s(e.clone(), "ber", 1e-14);
        s(e.clone(), "errors", 0.0);
        s(e, "retry_ratio", 1e-6);
    }
    for g in 0..8 {
        let e = format!("n{host:04}/gpu{g}");
        s(e.clone(), "temp_c", 61.0);
        s(e.clone(), "sm_clock_mhz", 1980.0);
        s(e.clone(), "power_w", 612.0);
        s(e, "throttle", 0.0);
    }
    for d in ["nvme0n1", "nvme1n1"] {
        let e = format!("n{host:04}/{d}");
        s(e.clone(), "p50_s", 8e-5);
        s(e, "p99_s", 4e-4);
    }
    s(format!("job{}", host / 64), "step_s", 1.01);
    v
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len().saturating_sub(1)) as f64 * p).round() as usize)
        .copied()
        .unwrap_or(0.0)
}

/// The web API's latency with `a.incidents` incidents in history: one row
/// per endpoint.
fn api_latency(
    a: &Args,
    dir: &Path,
    cfg: &HistoryConfig,
    rt: &tokio::runtime::Runtime,
) -> Result<Vec<serde_json::Value>> {
    // 1. API latency with `incidents` incidents in history.
    let db = dir.join("api.db");
    let mut st = Store::open(&db, cfg)?;
    let t = Instant::now();
    st.write(&incidents(a.incidents), &[])?;
    let load_s = t.elapsed().as_secs_f64();
    drop(st);
    let reader = Store::open_reader(&db, cfg)?;
    let port = crate::wait::free_port()?;
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let (utx, _) = tokio::sync::broadcast::channel(16);
    let state = correlator::web::AppState {
        history: Some(std::sync::Arc::new(std::sync::Mutex::new(reader))),
        updates: utx,
        open: Default::default(),
        ingest: None,
        acks: None,
    };
    rt.block_on(correlator::web::serve(addr, state, std::future::pending()))?;
    let endpoints = [
        ("page shell /", "/".to_string()),
        ("incident list (200 newest)", "/api/incidents".to_string()),
        (
            "list filtered by kind",
            "/api/incidents?kind=gpu_xid".to_string(),
        ),
        (
            "list filtered by host",
            "/api/incidents?host=n0007".to_string(),
        ),
        (
            "list filtered by job, 7 days",
            format!("/api/incidents?job=job7&since_ms={}", T0 + 23 * 86_400_000),
        ),
        (
            "recurring offenders (30 d)",
            format!("/api/offenders?since_ms={T0}"),
        ),
    ];
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); endpoints.len()];
    // Alternating rounds: every endpoint once per round.
    for _ in 0..a.requests {
        for (i, (_, path)) in endpoints.iter().enumerate() {
            let url = format!("http://{addr}{path}");
            let t = Instant::now();
            let (status, body) = rt
                .block_on(correlator::http_client::request(
                    "GET",
                    &url,
                    None,
                    Duration::from_secs(10),
                ))
                .with_context(|| format!("GET {path}"))?;
            anyhow::ensure!(
                status == 200 && !body.is_empty(),
                "GET {path}: HTTP {status}"
            );
            lat[i].push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    println!("web API with {} incidents in history (loaded in {load_s:.2} s), {} requests each, alternating", a.incidents, a.requests);
    println!("| request | p50 ms | p99 ms | p50 / page shell |");
    println!("|---|---|---|---|");
    let shell = pct(&mut lat[0].clone(), 0.5);
    let mut api_rows = Vec::new();
    for (i, (name, path)) in endpoints.iter().enumerate() {
        let (p50, p99) = (pct(&mut lat[i], 0.5), pct(&mut lat[i], 0.99));
        println!(
            "| {name} | {p50:.2} | {p99:.2} | {:.1}x |",
            p50 / shell.max(1e-9)
        );
        api_rows.push(json!({"request": name, "path": path, "p50_ms": p50, "p99_ms": p99, "ratio_to_shell": p50 / shell.max(1e-9)}));
    }

    Ok(api_rows)
}

/// History writes at `a.nodes` nodes.
struct WriteCost {
    samples_per_window: usize,
    /// Medians, µs per window: the writer's transaction, the engine's enqueue.
    write_us: f64,
    enqueue_us: f64,
    rollup_ms: f64,
    bytes: u64,
    dropped: u64,
}

/// Write cost per window at `a.nodes` nodes: the writer's transaction per
/// fleet round against the engine task's enqueue of the same window.
fn write_cost(
    a: &Args,
    dir: &Path,
    cfg: &HistoryConfig,
    rt: &tokio::runtime::Runtime,
) -> Result<WriteCost> {
    let db = dir.join("write.db");
    let mut st = Store::open(&db, cfg)?;
    let (mut write_us, mut enqueue_us) = (Vec::new(), Vec::new());
    let rec_store = Store::open(&dir.join("queue.db"), cfg)?;
    let (rec, _h) = Recorder::start(rec_store, 1 << 20)?;
    let mut rows = 0usize;
    for r in 0..a.rounds {
        let ts = T0 + r as i64 * 1000;
        let ws: Vec<Vec<Sample>> = (0..a.nodes).map(|h| window(h, ts)).collect();
        rows += ws.iter().map(Vec::len).sum::<usize>();
        let flat: Vec<Sample> = ws.iter().flatten().cloned().collect();
        let t = Instant::now();
        st.write(&[], &flat)?;
        write_us.push(t.elapsed().as_secs_f64() * 1e6 / a.nodes as f64);
        let t = Instant::now();
        for w in ws {
            rec.samples(w);
        }
        enqueue_us.push(t.elapsed().as_secs_f64() * 1e6 / a.nodes as f64);
        rt.block_on(rec.flush());
    }
    let t = Instant::now();
    st.rollup(T0 + a.rounds as i64 * 1000 + 120_000)?;
    let rollup_ms = t.elapsed().as_secs_f64() * 1000.0;
    let (w50, e50) = (pct(&mut write_us, 0.5), pct(&mut enqueue_us, 0.5));
    let dropped = rec
        .stats
        .dropped_windows
        .load(std::sync::atomic::Ordering::Relaxed);
    let bytes = st.used_bytes()?;
    println!();
    println!(
        "history writes: {} nodes × {} rounds of one window, {} samples per window",
        a.nodes,
        a.rounds,
        rows / (a.nodes * a.rounds).max(1)
    );
    println!("| per window | µs (median round) | share of one core at 1 s windows |");
    println!("|---|---|---|");
    println!(
        "| writer thread: one transaction per fleet round | {w50:.1} | {:.1}% |",
        w50 * a.nodes as f64 / 1e4
    );
    println!(
        "| engine task: samples queued for the writer | {e50:.2} | {:.2}% |",
        e50 * a.nodes as f64 / 1e4
    );
    println!("| ratio write / enqueue | {:.0}x | |", w50 / e50.max(1e-9));
    println!("rollup of the run to 1 min and 1 h: {rollup_ms:.0} ms; {:.1} MiB in use; {dropped} windows dropped by the queue", bytes as f64 / (1 << 20) as f64);
    Ok(WriteCost {
        samples_per_window: rows / (a.nodes * a.rounds).max(1),
        write_us: w50,
        enqueue_us: e50,
        rollup_ms,
        bytes,
        dropped,
    })
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("faultline-bench-history-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = HistoryConfig::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let api_rows = api_latency(a, &dir, &cfg, &rt)?;
    let w = write_cost(a, &dir, &cfg, &rt)?;
    crate::report::write(
        &out_dir.join("history.json"),
        json!({
            "benchmark": "history",
            "incidents": a.incidents,
            "requests": a.requests,
            "api": api_rows,
            "nodes": a.nodes,
            "rounds": a.rounds,
            "samples_per_window": w.samples_per_window,
            "write_us_per_window": w.write_us,
            "enqueue_us_per_window": w.enqueue_us,
            "writer_core_share_at_1s_windows": w.write_us * a.nodes as f64 / 1e6,
            "rollup_ms": w.rollup_ms,
            "bytes_in_use": w.bytes,
            "queue_drops": w.dropped,
        }),
        &crate::report::Failures::default(),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
