//! Throughput: the collector's OTLP receiver (`collector::otlp::start`, on
//! its own 2-worker runtime) driven in process by K concurrent clients per
//! transport in alternating gRPC / HTTP rounds, a window take every second
//! as in the collector; and the cost of one window take by size.
use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use anyhow::{ensure, Context as _, Result};
use collector::otlp::{self, OtlpSection};
use serde_json::json;

use super::{
    client::{closed_loop, Stats},
    export::{exporters, now_ns, Exporter, MODELS},
    runtime, Args, RX_THREADS,
};

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

#[derive(Default)]
struct Totals {
    stats: Stats,
    wall: f64,
    process_cpu: f64,
    receiver_cpu: f64,
}

/// Window takes during the run: (seconds, rows) each.
type Takes = Arc<Mutex<Vec<(f64, usize)>>>;

/// The receiver's gRPC and HTTP addresses, and its window loop (a take every
/// second, as the collector does) recording each take.
fn start_receiver(
    rx_rt: &tokio::runtime::Runtime,
) -> Result<(
    otlp::Receiver,
    SocketAddr,
    SocketAddr,
    Takes,
    tokio::task::JoinHandle<()>,
)> {
    let cfg = OtlpSection {
        grpc_addr: "127.0.0.1:0".into(),
        http_addr: "127.0.0.1:0".into(),
        ..OtlpSection::default()
    };
    let rx = rx_rt.block_on(otlp::start(&cfg));
    let grpc = rx
        .grpc
        .clone()
        .map_err(anyhow::Error::msg)?
        .context("gRPC receiver off")?;
    let http = rx
        .http
        .clone()
        .map_err(anyhow::Error::msg)?
        .context("HTTP receiver off")?;
    let takes: Takes = Arc::default();
    let (shared, t2) = (rx.shared.clone(), takes.clone());
    let take_task = rx_rt.spawn(async move {
        let mut iv = tokio::time::interval(Duration::from_secs(1));
        iv.tick().await;
        loop {
            iv.tick().await;
            let t = Instant::now();
            let (s, w) = shared.take_window(|_| None);
            let dt = t.elapsed().as_secs_f64();
            t2.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((dt, s.len() + w.len()));
        }
    });
    Ok((rx, grpc, http, takes, take_task))
}

/// Alternating gRPC / HTTP rounds of closed-loop clients: per transport,
/// the totals; and the exporters per transport.
fn drive(
    a: &Args,
    cl: &tokio::runtime::Runtime,
    grpc: SocketAddr,
    http: SocketAddr,
) -> Result<([Totals; 2], usize)> {
    let start = now_ns();
    let mut sets: Vec<Vec<Vec<Exporter>>> = ["grpc", "http"]
        .iter()
        .map(|tag| {
            let mut per: Vec<Vec<Exporter>> = (0..a.clients).map(|_| Vec::new()).collect();
            for (i, e) in exporters(a.series, tag, start).into_iter().enumerate() {
                per[i % a.clients].push(e);
            }
            per
        })
        .collect();
    let n_exporters: usize = sets[0].iter().map(Vec::len).sum();
    let mut totals = [Totals::default(), Totals::default()];
    let pid = std::process::id();
    for _ in 0..a.rounds {
        for (t, &(is_grpc, addr)) in [(true, grpc), (false, http)].iter().enumerate() {
            let set = std::mem::take(&mut sets[t]);
            let p0 = crate::procstat::cpu_seconds(pid).unwrap_or(0.0);
            let r0 = crate::procstat::own_threads_cpu_seconds(RX_THREADS);
            let t0 = Instant::now();
            let until = t0 + Duration::from_secs_f64(a.seconds);
            let (st, back) = cl.block_on(async {
                let tasks: Vec<_> = set
                    .into_iter()
                    .map(|ex| tokio::spawn(closed_loop(is_grpc, addr, ex, until)))
                    .collect();
                let mut st = Stats::default();
                let mut back = Vec::new();
                for task in tasks {
                    let (s, ex) = task.await??;
                    st.merge(s);
                    back.push(ex);
                }
                anyhow::Ok((st, back))
            })?;
            let tot = &mut totals[t];
            tot.wall += t0.elapsed().as_secs_f64();
            tot.process_cpu += crate::procstat::cpu_seconds(pid).unwrap_or(0.0) - p0;
            tot.receiver_cpu += crate::procstat::own_threads_cpu_seconds(RX_THREADS) - r0;
            tot.stats.merge(st);
            sets[t] = back;
        }
    }
    Ok((totals, n_exporters))
}

pub(super) fn throughput(a: &Args, cl: &tokio::runtime::Runtime) -> Result<serde_json::Value> {
    ensure!(
        a.clients > 0 && a.rounds > 0,
        "--clients and --rounds must be > 0"
    );
    let rx_rt = runtime(RX_THREADS)?;
    let (rx, grpc, http, takes, take_task) = start_receiver(&rx_rt)?;
    let (mut totals, n_exporters) = drive(a, cl, grpc, http)?;
    take_task.abort();
    let ranks = (a.series / 4).max(1);
    let servers = (a.series / 32).max(1);
    let series = ranks * 2 + servers * MODELS * 4;
    println!(
        "OTLP receiver in process (collector::otlp::start, 2 runtime workers, a window take every 1 s): {series} series ({ranks} training ranks × 2, {servers} model servers × {MODELS} models × 4), {n_exporters} exporters per transport, {} clients per transport, {} alternating rounds × {} s",
        a.clients, a.rounds, a.seconds
    );
    println!("| transport | requests/s | points/s | points per process CPU-s | points per receiver CPU-s | p50 latency ms | p99 latency ms | process CPU % | receiver CPU % |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    let mut per_rx = [0.0; 2];
    for (t, name) in ["gRPC", "HTTP"].into_iter().enumerate() {
        let tot = &mut totals[t];
        let st = &mut tot.stats;
        ensure!(
            st.rejected == 0,
            "{name}: the receiver rejected {} of {} points",
            st.rejected,
            st.points
        );
        ensure!(st.requests > 0, "{name}: no request completed");
        let accepted = st.points - st.rejected;
        let p50 = quantile(&mut st.latency_s, 0.5) * 1e3;
        let p99 = quantile(&mut st.latency_s, 0.99) * 1e3;
        let rps = st.requests as f64 / tot.wall;
        let pps = accepted as f64 / tot.wall;
        let per_cpu = accepted as f64 / tot.process_cpu.max(1e-3);
        per_rx[t] = accepted as f64 / tot.receiver_cpu.max(1e-3);
        let pcpu = 100.0 * tot.process_cpu / tot.wall;
        let rcpu = 100.0 * tot.receiver_cpu / tot.wall;
        println!(
            "| {name} | {rps:.0} | {pps:.0} | {per_cpu:.0} | {:.0} | {p50:.3} | {p99:.3} | {pcpu:.0} | {rcpu:.0} |",
            per_rx[t]
        );
        rows.push(json!({"transport": name, "requests": st.requests, "points_accepted": accepted,
            "wall_seconds": tot.wall, "process_cpu_seconds": tot.process_cpu, "receiver_cpu_seconds": tot.receiver_cpu,
            "requests_per_second": rps, "points_per_second": pps, "points_per_process_cpu_second": per_cpu,
            "points_per_receiver_cpu_second": per_rx[t], "latency_p50_ms": p50, "latency_p99_ms": p99}));
    }
    let http_over_grpc = per_rx[1] / per_rx[0].max(1e-9);
    println!("HTTP / gRPC points per receiver CPU-s: {http_over_grpc:.2}");
    let during: Vec<(f64, usize)> = takes.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let mut dts: Vec<f64> = during.iter().map(|d| d.0).collect();
    let take_rows_max = during.iter().map(|d| d.1).max().unwrap_or(0);
    let take_p50 = quantile(&mut dts, 0.5) * 1e6;
    let take_max = dts.last().copied().unwrap_or(0.0) * 1e6;
    drop(rx);
    Ok(
        json!({"series": series, "training_ranks": ranks, "model_servers": servers, "models_per_server": MODELS,
        "exporters_per_transport": n_exporters, "clients_per_transport": a.clients, "rounds": a.rounds,
        "seconds_per_round": a.seconds, "rows": rows, "http_over_grpc_points_per_receiver_cpu": http_over_grpc,
        "window_takes_during_run": {"count": dts.len(), "median_us": take_p50, "max_us": take_max, "max_rows": take_rows_max}}),
    )
}

/// Time of the window take with a window of `series` series (median of 5).
pub(super) fn take_cost(series: usize) -> Result<(usize, usize, f64, f64)> {
    let cfg = OtlpSection {
        max_series_per_window: series.max(2048),
        ..OtlpSection::default()
    };
    let shared = otlp::Shared::new(&cfg);
    let mut ex = exporters(series, "take", now_ns());
    let mut times = Vec::new();
    let (mut targets, mut rows) = (0, 0);
    for _ in 0..5 {
        for e in &mut ex {
            let r = shared.export(&e.next(), "bench");
            ensure!(r.partial_success.is_none(), "take cost: {r:?}");
        }
        let t = Instant::now();
        let (s, w) = shared.take_window(|_| None);
        times.push(t.elapsed().as_secs_f64() * 1e6);
        rows = s.len() + w.len();
        targets = ex.iter().map(Exporter::points).sum::<u64>() as usize;
    }
    let max = times.iter().copied().fold(0.0, f64::max);
    Ok((targets, rows, crate::median(&times), max))
}
