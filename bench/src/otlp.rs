//! OTLP ingest cost (issue #17). Two parts, one run:
//!
//! 1. Throughput: the collector's OTLP receiver (`collector::otlp::start`, the
//!    code the collector runs, on its own 2-worker runtime) is driven in
//!    process by K concurrent clients per transport (gRPC through
//!    opentelemetry-proto's client, HTTP/protobuf as keep-alive HTTP/1.1),
//!    sending realistic export requests: training ranks (a cumulative 8-bucket
//!    step-duration histogram and a throughput gauge) and model servers (GenAI
//!    TTFT, request duration and token usage histograms for 4 models), while a
//!    window take runs every second as in the collector. gRPC and HTTP rounds
//!    alternate. Points per CPU-second use this process's CPU time (/proc),
//!    and the receiver runtime's threads alone (`otlp-rx*`).
//! 2. Footprint: the real `faultline-collector` with 8 training ranks
//!    exporting once per second (4 gRPC, 4 HTTP) beside the same collector
//!    with `--no-otlp`, both running at the same time; CPU and RSS from /proc;
//!    `faultline_otlp_accepted_points_total` must account for every point sent,
//!    and every rank's step time must reach `/metrics` through the windows.
//!    Each part waits on signals (addresses printed, windows closed, counters
//!    reaching the points sent), and a part that fails is written as failed
//!    while the others still run.
use std::{
    net::SocketAddr,
    path::Path,
    process::Command,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, ensure, Context as _, Result};
use collector::otlp::{self, OtlpSection};
use opentelemetry_proto::tonic::{
    collector::metrics::v1::{
        metrics_service_client::MetricsServiceClient, ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    },
    common::v1::{any_value::Value, AnyValue, InstrumentationScope, KeyValue},
    metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, Gauge, Histogram,
        HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    },
    resource::v1::Resource,
};
use prost::Message as _;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

use crate::{collector_proc::Collector, report::Failures};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds each transport is driven per round.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Alternating gRPC / HTTP rounds.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Concurrent clients per transport.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// OTLP series: half from training ranks (2 each), half from model
    /// servers (16 each: 4 models × TTFT, request duration, input and
    /// output tokens).
    #[arg(long, default_value_t = 1024)]
    series: usize,
    /// Seconds of the footprint measurement (after the warm-up windows).
    #[arg(long, default_value_t = 30.0)]
    footprint_seconds: f64,
    /// Windows both collectors close before the footprint is measured.
    #[arg(long, default_value_t = 2)]
    warmup_windows: u64,
    /// Skip the footprint part (it needs the collector binary and root).
    #[arg(long)]
    no_footprint: bool,
}

/// Step durations (s): 8 buckets.
const STEP_BOUNDS: &[f64] = &[0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0];
/// The GenAI semantic conventions' advised bucket boundaries.
const TTFT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const REQUEST_BOUNDS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
const TOKEN_BOUNDS: &[f64] = &[
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];
const MODELS: usize = 4;
/// Receiver runtime thread names (and the prefix their CPU is summed by).
const RX_THREADS: &str = "otlp-rx";

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn kv_int(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A cumulative explicit-bucket histogram series.
struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    attrs: Vec<KeyValue>,
}

impl Hist {
    fn new(bounds: &'static [f64], attrs: Vec<KeyValue>) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            attrs,
        }
    }

    /// `n` observations in buckets `centre - 1 ..= centre + 1`.
    fn observe(&mut self, rng: &mut u64, n: u64, centre: usize) {
        for _ in 0..n {
            let b = (centre + (next_rand(rng) % 3) as usize)
                .saturating_sub(1)
                .min(self.bounds.len());
            let v = match b {
                0 => self.bounds[0] * 0.5,
                b if b == self.bounds.len() => self.bounds[b - 1] * 1.5,
                b => (self.bounds[b - 1] + self.bounds[b]) / 2.0,
            };
            self.counts[b] += 1;
            self.sum += v;
        }
    }

    fn point(&self, start: u64, now: u64) -> HistogramDataPoint {
        HistogramDataPoint {
            attributes: self.attrs.clone(),
            start_time_unix_nano: start,
            time_unix_nano: now,
            count: self.counts.iter().sum(),
            sum: Some(self.sum),
            bucket_counts: self.counts.clone(),
            explicit_bounds: self.bounds.to_vec(),
            ..Default::default()
        }
    }
}

fn histogram(name: &str, unit: &str, data_points: Vec<HistogramDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(Data::Histogram(Histogram {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    }
}

enum Kind {
    /// Step durations and a tokens/s gauge.
    Rank { steps: Hist },
    /// Per model: TTFT, request duration, input tokens, output tokens.
    Server { models: Vec<[Hist; 4]> },
}

/// One exporting process: its resource and cumulative series.
struct Exporter {
    resource: Vec<KeyValue>,
    scope: &'static str,
    kind: Kind,
    start: u64,
    rng: u64,
}

fn sdk_attrs(service: String, instance: String) -> Vec<KeyValue> {
    vec![
        kv("service.name", &service),
        kv("service.instance.id", &instance),
        kv("telemetry.sdk.language", "python"),
        kv("telemetry.sdk.name", "opentelemetry"),
        kv("telemetry.sdk.version", "1.45.2"),
    ]
}

impl Exporter {
    /// Rank `rank` of Slurm job `job`; `tag` keeps otherwise equal series apart.
    fn rank(job: u32, rank: u32, tag: &str, start: u64) -> Self {
        let mut resource = sdk_attrs("trainer".into(), format!("{tag}-{job}-{rank}"));
        resource.extend([
            kv("host.name", &format!("gpu{:04}", rank / 8)),
            kv("slurm.job.id", &job.to_string()),
            kv_int("RANK", i64::from(rank)),
        ]);
        Self {
            resource,
            scope: "trainer",
            kind: Kind::Rank {
                steps: Hist::new(STEP_BOUNDS, vec![]),
            },
            start,
            rng: 0x9e37_79b9_7f4a_7c15 ^ (u64::from(job) << 20 | u64::from(rank)),
        }
    }

    fn server(i: u32, tag: &str, start: u64) -> Self {
        let mut resource = sdk_attrs(format!("model-server-{i}"), format!("{tag}-{i}"));
        resource.extend([
            kv("k8s.namespace.name", "inference"),
            kv("k8s.pod.name", &format!("vllm-{tag}-{i}")),
            kv("k8s.pod.uid", &format!("5f0c{i:08x}-{tag}")),
        ]);
        let models = (0..MODELS)
            .map(|m| {
                let base = vec![
                    kv("gen_ai.request.model", &format!("model-{m}")),
                    kv("gen_ai.provider.name", "vllm"),
                    kv("gen_ai.operation.name", "chat"),
                ];
                let with = |t: &str| {
                    let mut a = base.clone();
                    a.push(kv("gen_ai.token.type", t));
                    a
                };
                [
                    Hist::new(TTFT_BOUNDS, base.clone()),
                    Hist::new(REQUEST_BOUNDS, base.clone()),
                    Hist::new(TOKEN_BOUNDS, with("input")),
                    Hist::new(TOKEN_BOUNDS, with("output")),
                ]
            })
            .collect();
        Self {
            resource,
            scope: "vllm",
            kind: Kind::Server { models },
            start,
            rng: 0x2545_f491_4f6c_dd1d ^ u64::from(i + 1),
        }
    }

    /// Data points per export.
    fn points(&self) -> u64 {
        match &self.kind {
            Kind::Rank { .. } => 2,
            Kind::Server { models } => 4 * models.len() as u64,
        }
    }

    /// The next export: an interval's observations added to the cumulative series.
    fn next(&mut self) -> ExportMetricsServiceRequest {
        let now = now_ns();
        let rng = &mut self.rng;
        let metrics = match &mut self.kind {
            Kind::Rank { steps } => {
                steps.observe(rng, 10, 2);
                let tps = 180_000.0 + (next_rand(rng) % 20_000) as f64;
                vec![
                    histogram(
                        "training.step.duration",
                        "s",
                        vec![steps.point(self.start, now)],
                    ),
                    Metric {
                        name: "train.tokens_per_second".into(),
                        unit: "{token}/s".into(),
                        data: Some(Data::Gauge(Gauge {
                            data_points: vec![NumberDataPoint {
                                time_unix_nano: now,
                                value: Some(number_data_point::Value::AsDouble(tps)),
                                ..Default::default()
                            }],
                        })),
                        ..Default::default()
                    },
                ]
            }
            Kind::Server { models } => {
                for [ttft, req, tin, tout] in models.iter_mut() {
                    ttft.observe(rng, 20, 8);
                    req.observe(rng, 20, 6);
                    tin.observe(rng, 20, 7);
                    tout.observe(rng, 20, 6);
                }
                let pts = |i: usize| -> Vec<HistogramDataPoint> {
                    models.iter().map(|m| m[i].point(self.start, now)).collect()
                };
                let mut tokens = pts(2);
                tokens.extend(pts(3));
                vec![
                    histogram("gen_ai.server.time_to_first_token", "s", pts(0)),
                    histogram("gen_ai.server.request.duration", "s", pts(1)),
                    histogram("gen_ai.client.token.usage", "{token}", tokens),
                ]
            }
        };
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: self.resource.clone(),
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: self.scope.into(),
                        version: "1.0.0".into(),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }
}

/// Exporters for about `series` OTLP series: a quarter as many ranks (jobs
/// of 64 ranks), a 32nd as many model servers.
fn exporters(series: usize, tag: &str, start: u64) -> Vec<Exporter> {
    let ranks = (series / 4).max(1) as u32;
    let servers = (series / 32).max(1) as u32;
    let mut v: Vec<Exporter> = (0..ranks)
        .map(|r| Exporter::rank(1000 + r / 64, r % 64, tag, start))
        .collect();
    v.extend((0..servers).map(|i| Exporter::server(i, tag, start)));
    v
}

/// Keep-alive HTTP/1.1 client for `POST /v1/metrics`.
struct HttpClient {
    addr: SocketAddr,
    rd: tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    wr: tokio::net::tcp::OwnedWriteHalf,
}

impl HttpClient {
    async fn connect(addr: SocketAddr) -> Result<Self> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok(Self {
            addr,
            rd: tokio::io::BufReader::new(r),
            wr: w,
        })
    }

    async fn export(
        &mut self,
        req: &ExportMetricsServiceRequest,
    ) -> Result<ExportMetricsServiceResponse> {
        let body = req.encode_to_vec();
        let mut msg = format!(
            "POST /v1/metrics HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        )
        .into_bytes();
        msg.extend_from_slice(&body);
        self.wr.write_all(&msg).await?;
        let mut line = String::new();
        self.rd.read_line(&mut line).await?;
        let code: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("no HTTP status line: {line:?}"))?;
        let mut len = None;
        loop {
            line.clear();
            ensure!(self.rd.read_line(&mut line).await? > 0, "connection closed");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = Some(v.trim().parse::<usize>()?);
                }
            }
        }
        let mut body = vec![0; len.context("response without Content-Length")?];
        self.rd.read_exact(&mut body).await?;
        ensure!(code == 200, "HTTP {code}");
        Ok(ExportMetricsServiceResponse::decode(body.as_slice())?)
    }
}

enum Client {
    Grpc(MetricsServiceClient<tonic::transport::Channel>),
    Http(HttpClient),
}

impl Client {
    async fn connect(grpc: bool, addr: SocketAddr) -> Result<Self> {
        Ok(if grpc {
            Self::Grpc(MetricsServiceClient::connect(format!("http://{addr}")).await?)
        } else {
            Self::Http(HttpClient::connect(addr).await?)
        })
    }

    /// One export; the points the receiver rejected.
    async fn export(&mut self, req: ExportMetricsServiceRequest) -> Result<u64> {
        let r = match self {
            Self::Grpc(c) => c.export(req).await?.into_inner(),
            Self::Http(c) => c.export(&req).await?,
        };
        Ok(r.partial_success
            .map_or(0, |p| u64::try_from(p.rejected_data_points).unwrap_or(0)))
    }
}

#[derive(Default)]
struct Stats {
    requests: u64,
    points: u64,
    rejected: u64,
    latency_s: Vec<f64>,
}

impl Stats {
    fn merge(&mut self, o: Self) {
        self.requests += o.requests;
        self.points += o.points;
        self.rejected += o.rejected;
        self.latency_s.extend(o.latency_s);
    }
}

/// Sends `ex`'s exports back to back until `until`.
async fn closed_loop(
    grpc: bool,
    addr: SocketAddr,
    mut ex: Vec<Exporter>,
    until: Instant,
) -> Result<(Stats, Vec<Exporter>)> {
    let mut st = Stats::default();
    let n = ex.len();
    if n == 0 {
        return Ok((st, ex));
    }
    let mut c = Client::connect(grpc, addr).await?;
    let mut i = 0;
    while Instant::now() < until {
        let e = &mut ex[i % n];
        i += 1;
        let req = e.next();
        let t = Instant::now();
        st.rejected += c.export(req).await?;
        st.latency_s.push(t.elapsed().as_secs_f64());
        st.requests += 1;
        st.points += e.points();
    }
    Ok((st, ex))
}

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

fn runtime(name: &str) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()?)
}

fn throughput(a: &Args, cl: &tokio::runtime::Runtime) -> Result<serde_json::Value> {
    ensure!(
        a.clients > 0 && a.rounds > 0,
        "--clients and --rounds must be > 0"
    );
    let rx_rt = runtime(RX_THREADS)?;
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
    // The window loop: a take every second, as the collector does.
    let takes: Arc<Mutex<Vec<(f64, usize)>>> = Arc::default();
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
fn take_cost(series: usize) -> Result<(usize, usize, f64, f64)> {
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

fn collector_cmd(bin: &Path, with_otlp: bool) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args([
        "--quiet",
        "--no-cuda",
        "--no-verbs",
        "--no-nvml",
        "--no-block",
        "--metrics-addr",
        "127.0.0.1:0",
        "--window",
        "1",
    ]);
    if with_otlp {
        cmd.args([
            "--otlp-grpc-addr",
            "127.0.0.1:0",
            "--otlp-http-addr",
            "127.0.0.1:0",
        ]);
    } else {
        cmd.arg("--no-otlp");
    }
    cmd
}

/// A training rank exporting once per second until `stop` is set: points
/// sent (every export acknowledged before this returns).
async fn rank_at_1hz(
    mut ex: Exporter,
    grpc: bool,
    addr: SocketAddr,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<u64> {
    let mut c = Client::connect(grpc, addr).await?;
    let mut iv = tokio::time::interval(Duration::from_secs(1));
    let mut sent = 0;
    loop {
        tokio::select! {
            _ = iv.tick() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return Ok(sent);
        }
        let rejected = c.export(ex.next()).await?;
        ensure!(rejected == 0, "the collector rejected {rejected} points");
        sent += ex.points();
    }
}

/// The footprint's ranks: job 4242, ranks 0–7.
const FP_JOB: u32 = 4242;
const FP_RANKS: u32 = 8;

/// Step-time series of the footprint's job on the collector's `/metrics`.
fn step_series(text: &str) -> usize {
    let job = format!("job=\"{FP_JOB}\"");
    text.lines()
        .filter(|l| l.starts_with("faultline_job_step_seconds{") && l.contains(&job))
        .count()
}

fn accepted_points(c: &Collector) -> Result<f64> {
    Ok(crate::collector_proc::samples(&c.scrape()?, "faultline_otlp_accepted_points_total").sum())
}

fn footprint(a: &Args, cl: &tokio::runtime::Runtime) -> Result<serde_json::Value> {
    let bin = crate::collector_proc::binary()?;
    let mut with = Collector::start(collector_cmd(&bin, true), true)?;
    let mut without = Collector::start(collector_cmd(&bin, false), false)?;
    let (grpc, http) = (
        with.grpc.context("gRPC address")?,
        with.http.context("HTTP address")?,
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let start = now_ns();
    let clients: Vec<_> = (0..FP_RANKS)
        .map(|r| {
            let ex = Exporter::rank(FP_JOB, r, "fp", start);
            let (is_grpc, addr) = if r < 4 { (true, grpc) } else { (false, http) };
            cl.spawn(rank_at_1hz(ex, is_grpc, addr, stop_rx.clone()))
        })
        .collect();
    // Steady state: every rank's first export accepted, and both collectors
    // past their start-up windows.
    let first = f64::from(FP_RANKS) * 2.0;
    crate::wait::until(
        "every rank's first export to be accepted",
        crate::wait::READY,
        || {
            let n = accepted_points(&with)?;
            Ok((n < first).then(|| format!("{n} of {first} points accepted")))
        },
    )?;
    with.wait_windows(a.warmup_windows.max(1))?;
    without.wait_windows(a.warmup_windows.max(1))?;
    let c0 = (with.cpu_seconds()?, without.cpu_seconds()?);
    let w0 = with.windows();
    let t0 = Instant::now();
    let mut peak = (0u64, 0u64);
    while t0.elapsed().as_secs_f64() < a.footprint_seconds {
        std::thread::sleep(Duration::from_millis(500));
        peak.0 = peak
            .0
            .max(crate::procstat::rss_bytes(with.pid).unwrap_or(0));
        peak.1 = peak
            .1
            .max(crate::procstat::rss_bytes(without.pid).unwrap_or(0));
    }
    let c1 = (with.cpu_seconds()?, without.cpu_seconds()?);
    let wall = t0.elapsed().as_secs_f64();
    let windows = with.windows() - w0;
    let last = (
        crate::procstat::rss_bytes(with.pid).unwrap_or(0),
        crate::procstat::rss_bytes(without.pid).unwrap_or(0),
    );
    let _ = stop_tx.send(true);
    let mut sent = 0;
    for c in clients {
        sent += cl.block_on(c)??;
    }
    // Every acknowledged point is counted (a counter reaching a value, not
    // a guess at how long that takes).
    let mut accepted = 0.0;
    crate::wait::until(
        "faultline_otlp_accepted_points_total to reach the points sent",
        crate::wait::READY,
        || {
            accepted = accepted_points(&with)?;
            if accepted > sent as f64 {
                bail!("the collector accepted {accepted} points, the clients sent {sent}");
            }
            Ok((sent == 0 || accepted < sent as f64)
                .then(|| format!("{accepted} of {sent} accepted")))
        },
    )?;
    // The windows carried the ranks' step times: each rank's latest step
    // time is on `/metrics` once a window took it.
    let mut steps = 0;
    crate::wait::until(
        "the windows to carry every rank's step times (faultline_job_step_seconds)",
        crate::wait::READY,
        || {
            steps = step_series(&with.scrape()?);
            Ok((steps < FP_RANKS as usize).then(|| format!("{steps} of {FP_RANKS} ranks")))
        },
    )?;
    let pct = |d: f64| 100.0 * d / wall;
    let (cpu_with, cpu_without) = (pct(c1.0 - c0.0), pct(c1.1 - c0.1));
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    println!(
        "footprint: faultline-collector --no-cuda --no-verbs --no-nvml --no-block --window 1, with {FP_RANKS} training ranks exporting at 1 Hz (4 gRPC, 4 HTTP; 2 points per export), beside the same collector with --no-otlp, both running at once, {wall:.0} s ({windows} windows)"
    );
    println!("| collector | CPU (% of one core) | peak RSS MiB | final RSS MiB |");
    println!("|---|---|---|---|");
    println!(
        "| OTLP, 8 ranks at 1 Hz | {cpu_with:.2} | {:.1} | {:.1} |",
        mib(peak.0),
        mib(last.0)
    );
    println!(
        "| --no-otlp | {cpu_without:.2} | {:.1} | {:.1} |",
        mib(peak.1),
        mib(last.1)
    );
    println!(
        "| difference | {:+.2} | {:+.1} | {:+.1} |",
        cpu_with - cpu_without,
        mib(peak.0) - mib(peak.1),
        mib(last.0) - mib(last.1)
    );
    println!(
        "accepted points (faultline_otlp_accepted_points_total): {accepted} of {sent} sent; ranks with step times on /metrics (faultline_job_step_seconds): {steps} of {FP_RANKS}"
    );
    Ok(
        json!({"ranks": FP_RANKS, "grpc_ranks": 4, "http_ranks": 4, "export_interval_seconds": 1, "seconds": wall,
        "windows": windows, "points_sent": sent, "points_accepted": accepted, "ranks_with_step_times": steps,
        "with_otlp": {"cpu_percent_of_one_core": cpu_with, "peak_rss_bytes": peak.0, "final_rss_bytes": last.0},
        "no_otlp": {"cpu_percent_of_one_core": cpu_without, "peak_rss_bytes": peak.1, "final_rss_bytes": last.1},
        "difference": {"cpu_percent_of_one_core": cpu_with - cpu_without,
            "peak_rss_bytes": peak.0 as i64 - peak.1 as i64, "final_rss_bytes": last.0 as i64 - last.1 as i64}}),
    )
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let load = crate::procstat::load_average();
    println!(
        "load average at start: {load} on {} CPUs (a noisy machine: compare the ratios)",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let mut failures = Failures::default();
    let cl = runtime("otlp-cl")?;
    let tp = failures.value("throughput", throughput(a, &cl));
    let mut sizes = vec![256, a.series, 2048];
    sizes.sort_unstable();
    sizes.dedup();
    println!(
        "window take (Shared::take_window: swap, sort, attribute; no process lookups), median of 5"
    );
    println!("| series sent | window rows | median µs | max µs |");
    println!("|---|---|---|---|");
    let mut takes = Vec::new();
    for n in sizes {
        let r = take_cost(n).map(|(series, rows, med, max)| {
            println!("| {series} | {rows} | {med:.0} | {max:.0} |");
            json!({"series": series, "window_rows": rows, "median_us": med, "max_us": max})
        });
        takes.push(failures.value(&format!("window take of {n} series"), r));
    }
    if let Some(during) = tp.get("window_takes_during_run") {
        println!(
            "takes during the throughput run: {} takes, median {:.0} µs, max {:.0} µs, up to {} rows",
            during["count"],
            during["median_us"].as_f64().unwrap_or(0.0),
            during["max_us"].as_f64().unwrap_or(0.0),
            during["max_rows"]
        );
    }
    let fp = if a.no_footprint {
        serde_json::Value::Null
    } else {
        failures.value("footprint", footprint(a, &cl))
    };
    crate::report::write(
        &out_dir.join("otlp.json"),
        json!({
            "benchmark": "otlp_ingest", "load_average_at_start": load,
            "cpus": std::thread::available_parallelism().map_or(0, usize::from),
            "throughput": tp, "window_take": takes, "footprint": fp,
            "note": "clients run in the same process: points per process CPU-s include building and sending the requests; points per receiver CPU-s count only the receiver runtime's threads"
        }),
        &failures,
    )?;
    failures.into_result()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_of_the_bench_requests_lands_in_the_window() {
        let shared = otlp::Shared::new(&OtlpSection::default());
        let mut ex = exporters(64, "t", now_ns());
        assert_eq!(ex.len(), 16 + 2);
        for _ in 0..2 {
            for e in &mut ex {
                let r = shared.export(&e.next(), "t");
                assert_eq!(r.partial_success, None);
            }
        }
        let (steps, work) = shared.take_window(|_| None);
        // 16 ranks: 2 exports × 10 steps each.
        assert_eq!(steps.len(), 16);
        assert!(steps
            .iter()
            .all(|s| s.job.starts_with("1000") && s.count == 20));
        // A throughput sample per rank; TTFT, request duration and tokens per
        // model of each of the 2 servers.
        let count = |sig: &str| work.iter().filter(|w| w.signal == sig).count();
        assert_eq!(count("throughput"), 16);
        for sig in ["ttft_seconds", "request_seconds", "tokens"] {
            assert_eq!(count(sig), 2 * MODELS, "{sig}: {work:?}");
        }
    }
}
