//! `faultline-bench fleet`: a 100k-GPU fleet end to end on one machine.
//! The simulator ([`sim`]) drives N nodes × 8 GPUs × 8 HCA ports, one job
//! with a rank on every GPU and NCCL communicators across the leaf and
//! spine switches; every node's windows go through the collector's real
//! sender (its spool, on tmpfs, and its NATS JetStream publisher: one
//! connection per node, all in this process) into a real `nats-server
//! -js`, to one `faultline-correlator serve --nats` per shard (shards are
//! pods of whole leaf switches: fabric locality), which exchange their
//! summaries and publish their incidents to the `faultline-correlator
//! fleet` view (history, web UI). Partway through, a link degrades, a
//! leaf switch fails, a rank of the job slows and a node is lost.
//!
//! Per shard count: the windows per second offered and taken, the lag
//! from a window's hand-over (its end, for a real collector) to its
//! intake and to its incident per shard, CPU and peak RSS per component,
//! JetStream storage, and whether each fault became its one incident
//! within 2 windows of being physically visible with nothing else raised.
//! The simulator's generation runs on its own thread and is reported
//! apart from the senders (the product's code) in this process.
mod plan;
mod procs;
mod report;
mod watch;

use std::{
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};
use prost::Message as _;
use proto::v1::Window;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::{procstat, report::Failures};
use plan::Plan;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Simulated nodes (8 GPUs and 8 HCA ports each): 12,500 is 100k GPUs.
    #[arg(long, default_value_t = FLEET_NODES)]
    nodes: usize,
    /// Shard counts, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    shards: Vec<usize>,
    /// Every collector's window, seconds.
    #[arg(long, default_value_t = 10.0)]
    window_s: f64,
    /// Simulated seconds per row (the faults start at 130, 160, 190 and
    /// 220 s, after the detectors' 120 s warm-up).
    #[arg(long, default_value_t = 300.0)]
    duration: f64,
    /// Simulated seconds per wall-clock second: 1 hands every node's
    /// window over at its real end; 2 offers twice the fleet's rate.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// Seed of the simulated fleet.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only generate the windows, as fast as it goes: the simulator's own
    /// cost, no pipeline.
    #[arg(long)]
    sim_only: bool,
}

/// 100,000 GPUs.
const FLEET_NODES: usize = 12_500;

const ONSETS: [f64; 4] = [130.0, 160.0, 190.0, 220.0];

impl Args {
    /// The result file's name: `fleet.json` for the 100k-GPU fleet,
    /// `fleet_<nodes>.json` for another size, `fleet_sim.json` for the
    /// simulator alone.
    pub fn result_file(&self) -> String {
        if self.sim_only {
            "fleet_sim.json".into()
        } else if self.nodes == FLEET_NODES {
            "fleet.json".into()
        } else {
            format!("fleet_{}.json", self.nodes)
        }
    }

    fn spec(&self) -> sim::ClusterSpec {
        sim::ClusterSpec {
            nodes: self.nodes,
            window_s: self.window_s,
            seed: self.seed,
            ..sim::ClusterSpec::default()
        }
    }

    fn slots(&self) -> u64 {
        (self.duration / self.window_s).round().max(1.0) as u64
    }
}

/// What the generator thread hands over, per slot.
#[derive(Clone, Debug, Default)]
struct Slot {
    /// The simulator's window index.
    k: u64,
    /// Its windows' end (simulated time).
    end_ms: i64,
    /// When the last node's window was handed to its sender.
    handed: Option<Instant>,
    /// Windows per shard.
    windows: Vec<u64>,
    bytes: u64,
    /// Late: generation ended after the slot was due.
    late_s: f64,
}

/// Hand-overs per slot: a slot's windows go to their senders in this many
/// chunks spread over the window, as a real fleet's collectors, started at
/// different moments, end their windows at different moments.
const CHUNKS: usize = 100;

/// The generator: advances the cluster slot by slot on its own thread
/// (named `fleet-sim`; its CPU is measured apart as the simulator's),
/// handing node `n`'s window of slot `i` to its sender at
/// `(i − 1 + (n + 1) / N) · tick` (in [`CHUNKS`] steps), so every slot's
/// last window is handed over at the slot's end.
fn generate(
    mut plan: Plan,
    senders: Option<Vec<mpsc::Sender<Window>>>,
    slots: u64,
    tick: Duration,
    behind: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<(Plan, Vec<Slot>, f64)>> {
    std::thread::Builder::new()
        .name("fleet-sim".into())
        .spawn(move || {
            let t0 = Instant::now();
            let cpu0 = thread_cpu_seconds();
            let nodes = plan.cluster.nodes();
            let mut out = Vec::new();
            for i in 1..=slots {
                if behind.load(Ordering::Relaxed) {
                    break;
                }
                plan.cluster.advance(&plan.faults, ONSETS[0]);
                let mut slot = Slot {
                    k: plan.cluster.window_index(),
                    windows: vec![0; plan.shards],
                    ..Slot::default()
                };
                let start = t0 + tick.mul_f64((i - 1) as f64);
                for c in 0..CHUNKS {
                    let mut ws = Vec::new();
                    for n in (c * nodes / CHUNKS)..((c + 1) * nodes / CHUNKS) {
                        if let Some(w) = plan.cluster.window(n) {
                            slot.end_ms = slot.end_ms.max(w.end_unix_ms);
                            slot.bytes += w.encoded_len() as u64;
                            slot.windows[plan.shard_of[n]] += 1;
                            ws.push((n, w));
                        }
                    }
                    let Some(tx) = &senders else { continue };
                    let due = start + tick.mul_f64((c + 1) as f64 / CHUNKS as f64);
                    let now = Instant::now();
                    slot.late_s = slot
                        .late_s
                        .max(now.saturating_duration_since(due).as_secs_f64());
                    std::thread::sleep(due.saturating_duration_since(now));
                    for (n, w) in ws {
                        tx[n]
                            .blocking_send(w)
                            .map_err(|_| anyhow::anyhow!("the sender of n{n:03} stopped"))?;
                    }
                }
                slot.handed = Some(Instant::now());
                out.push(slot);
            }
            Ok((plan, out, thread_cpu_seconds() - cpu0))
        })
        .unwrap_or_else(|e| panic!("spawning the generator thread: {e}"))
}

/// CPU seconds of the calling thread.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The simulator alone: its CPU and bytes per slot.
fn sim_only(a: &Args) -> Result<Value> {
    let plan = Plan::new(a.spec(), 1, plan::faults(a.nodes, ONSETS))?;
    let t = Instant::now();
    let never = Arc::new(AtomicBool::new(false));
    let (_, slots, cpu) = generate(plan, None, a.slots(), Duration::ZERO, never)
        .join()
        .map_err(|_| anyhow::anyhow!("the generator panicked"))??;
    let wall = t.elapsed().as_secs_f64();
    let windows: u64 = slots.iter().map(|s| s.windows.iter().sum::<u64>()).sum();
    let bytes: u64 = slots.iter().map(|s| s.bytes).sum();
    println!(
        "simulator alone: {} nodes, {} slots: {windows} windows, {:.1} MB, {wall:.1} s wall, {cpu:.1} CPU s ({:.0} µs a window)",
        a.nodes,
        slots.len(),
        bytes as f64 / 1e6,
        1e6 * cpu / windows.max(1) as f64
    );
    Ok(
        json!({"nodes": a.nodes, "slots": slots.len(), "windows": windows, "bytes": bytes,
        "wall_seconds": wall, "cpu_seconds": cpu, "cpu_us_per_window": 1e6 * cpu / windows.max(1) as f64}),
    )
}

/// A scratch directory on tmpfs when there is one (the senders' spools:
/// 12,500 collectors' fsyncs are their own disks' in a real fleet, not
/// this machine's one disk).
fn spool_root(tag: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("faultline-fleet-{}-{tag}", std::process::id()))
}

/// Each node's window queue and its sender's counters.
type Senders = (
    Vec<mpsc::Sender<Window>>,
    Vec<Arc<collector::stream::SenderStats>>,
);

/// One real collector sender per node, publishing to its shard's subject.
fn spawn_senders(
    plan: &Plan,
    url: &str,
    stream: &str,
    prefix: &str,
    spools: &Path,
) -> Result<Senders> {
    let (mut txs, mut stats) = (Vec::new(), Vec::new());
    for n in 0..plan.cluster.nodes() {
        let (tx, rx) = mpsc::channel(8);
        let (_, st) = collector::stream::spawn(
            collector::stream::SenderConfig {
                endpoint: url.to_string(),
                spool_dir: spools.join(plan.cluster.node_name(n)),
                spool_max_bytes: 16 << 20,
                backoff_min: Duration::from_millis(200),
                backoff_max: Duration::from_secs(5),
                resume_every: Duration::from_secs(10),
                auth: collector::stream::tls::ClientAuth::default(),
                nats: collector::stream::nats::NatsTarget {
                    stream: stream.into(),
                    prefix: prefix.into(),
                    shard: plan::shard_key(plan.shard_of[n]),
                    ..Default::default()
                },
            },
            rx,
            Duration::from_secs(5),
        )
        .with_context(|| format!("the sender of node {n}"))?;
        txs.push(tx);
        stats.push(st);
    }
    Ok((txs, stats))
}

/// [`spawn_senders`] on `rt`, once every one has connected to NATS.
fn connected_senders(
    rt: &tokio::runtime::Runtime,
    plan: &Plan,
    url: &str,
    (stream, prefix): (&str, &str),
    spools: &Path,
) -> Result<Senders> {
    let (txs, stats) = {
        let _g = rt.enter();
        spawn_senders(plan, url, stream, prefix, spools)?
    };
    let nodes = plan.cluster.nodes();
    crate::wait::until(
        "every sender to connect to NATS",
        Duration::from_secs(600),
        || {
            let up = stats
                .iter()
                .filter(|s| s.connected.load(Ordering::Relaxed))
                .count();
            Ok((up < nodes).then(|| format!("{up} of {nodes}")))
        },
    )?;
    Ok((txs, stats))
}

/// CPU seconds of each measured process now.
fn cpu_of(procs: &[&procs::Proc]) -> Vec<f64> {
    procs
        .iter()
        .map(|p| procstat::cpu_seconds(p.pid()).unwrap_or(0.0))
        .collect()
}

/// Peak RSS of each measured process.
fn peak_rss_of(procs: &[&procs::Proc]) -> Vec<Option<u64>> {
    procs
        .iter()
        .map(|p| procstat::peak_rss_bytes(p.pid()))
        .collect()
}

/// This process's CPU (all threads).
fn own_cpu() -> f64 {
    procstat::cpu_seconds(std::process::id()).unwrap_or(0.0)
}

/// The `q` quantile of seconds, rounded to ms.
fn q(v: &[f64], p: f64) -> f64 {
    (crate::quantile(v, p) * 1000.0).round() / 1000.0
}

/// Waits up to `wait_for` until each shard's durable consumer has taken
/// its `total` windows.
fn wait_taken(
    monitor: &str,
    consumers: &[String],
    total: &[u64],
    wait_for: Duration,
) -> Result<()> {
    crate::wait::until("the shards to take every window", wait_for, || {
        let taken = watch::jetstream(monitor)
            .map(|j| j.taken)
            .unwrap_or_default();
        let got: Vec<u64> = consumers
            .iter()
            .map(|c| taken.get(c).copied().unwrap_or(0))
            .collect();
        Ok(got
            .iter()
            .zip(total)
            .any(|(g, t)| g < t)
            .then(|| format!("{got:?} of {total:?}")))
    })
}

/// The windows each shard's engine processed, read once at the end (a
/// scrape renders every host's series).
fn engine_windows(shards: &[procs::Proc]) -> Vec<u64> {
    shards
        .iter()
        .map(|p| {
            tests::metrics::scrape(&p.addr).ok().map_or(0, |t| {
                tests::metrics::value(&t, "faultline_correlator_windows_total", &[]).unwrap_or(0.0)
                    as u64
            })
        })
        .collect()
}

/// One shard count's run.
fn row(a: &Args, shards: usize, failures: &mut Failures) -> Result<Value> {
    let bin = std::env::current_exe()?.with_file_name("faultline-correlator");
    let dir = std::env::temp_dir().join(format!(
        "faultline-bench-fleet-{}-s{shards}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let spools = spool_root(&format!("s{shards}"));
    let _ = std::fs::remove_dir_all(&spools);
    let plan = Plan::new(a.spec(), shards, plan::faults(a.nodes, ONSETS))?;
    let (stream, prefix) = ("FLEET", "fleet");
    let procs::Pipeline {
        nats,
        url,
        shards: shard_procs,
        view,
        history,
    } = procs::pipeline(&bin, &dir, a.nodes, shards, stream, prefix)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fleet-send")
        .enable_all()
        .build()?;
    let seen = rt.block_on(watch::incidents(&url))?;
    let t_connect = Instant::now();
    let (txs, stats) = connected_senders(&rt, &plan, &url, (stream, prefix), &spools)?;
    let connect_s = t_connect.elapsed().as_secs_f64();
    let nodes = plan.cluster.nodes();
    let per_shard = plan.nodes_per_shard();
    let consumers: Vec<String> = (0..shards)
        .map(|k| format!("{stream}-{}", plan::shard_key(k)))
        .collect();
    let (stop, behind) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let limits = per_shard.iter().map(|n| 3 * *n as u64).collect();
    let poller = watch::poll(
        (consumers.clone(), limits),
        (nats.addr.clone(), view.addr.clone()),
        (stop.clone(), behind.clone()),
    );
    let measured: Vec<&procs::Proc> = std::iter::once(&nats)
        .chain(shard_procs.iter())
        .chain(std::iter::once(&view))
        .collect();
    let (cpu0, own0) = (cpu_of(&measured), own_cpu());
    let tick = Duration::from_secs_f64(a.window_s / a.speed.max(1e-3));
    let t_run = Instant::now();
    let (plan, slots, sim_cpu) = generate(plan, Some(txs), a.slots(), tick, behind.clone())
        .join()
        .map_err(|_| anyhow::anyhow!("the generator panicked"))??;
    let total: Vec<u64> = (0..shards)
        .map(|s| slots.iter().map(|x| x.windows[s]).sum())
        .collect();
    let fell_behind_at = behind
        .load(Ordering::Relaxed)
        .then(|| slots.last().map_or(0, |s| s.k));
    // A shard that fell behind is not waited for: what it took is counted.
    let wait_for = Duration::from_secs(if fell_behind_at.is_some() { 0 } else { 600 });
    let drained = wait_taken(&nats.addr, &consumers, &total, wait_for);
    let t_drained = Instant::now();
    std::thread::sleep(Duration::from_secs(3)); // the last slots' incidents reach the view
    let (cpu1, own1) = (cpu_of(&measured), own_cpu());
    stop.store(true, Ordering::Relaxed);
    let polled = poller
        .join()
        .map_err(|_| anyhow::anyhow!("the watcher panicked"))?;
    let fleet_open_end = watch::open_list(&view.addr);
    let (ui_status, _) = procs::http_get(&view.addr, "/").unwrap_or((0, String::new()));
    let history_bytes = std::fs::metadata(&history).map_or(0, |m| m.len());
    let rss = peak_rss_of(&measured);
    let engines = engine_windows(&shard_procs);
    let own_rss = procstat::peak_rss_bytes(std::process::id());
    let (delivered, dropped) = stats.iter().fold((0, 0), |(a, b), s| {
        let n = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        (a + n(&s.delivered), b + n(&s.dropped))
    });
    let updates: Vec<watch::Seen> = seen.lock().map(|v| v.clone()).unwrap_or_default();
    rt.shutdown_background();
    drop(measured);
    drop((shard_procs, view, nats));
    let _ = std::fs::remove_dir_all(&spools);
    // The logs stay for a row that fails; the JetStream store goes.
    let _ = std::fs::remove_dir_all(dir.join("js"));
    if fell_behind_at.is_none() {
        drained?;
    }

    Ok(report::judge(
        a,
        report::Measured {
            shards,
            nodes,
            plan,
            slots,
            total,
            run_s: t_drained.duration_since(t_run).as_secs_f64(),
            tick,
            polled,
            engines,
            fell_behind_at,
            updates,
            cpu: cpu1.iter().zip(&cpu0).map(|(x, y)| x - y).collect(),
            rss,
            own_cpu: own1 - own0,
            own_rss,
            sim_cpu,
            per_shard,
            connect_s,
            delivered,
            dropped,
            fleet_open_end,
            ui_status,
            history_bytes,
        },
        failures,
    ))
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    if a.nodes == 0 || a.window_s <= 0.0 || a.speed <= 0.0 {
        bail!("--nodes, --window-s and --speed must be positive");
    }
    let path = out_dir.join(a.result_file());
    if a.sim_only {
        let v = sim_only(a)?;
        return crate::report::write(
            &path,
            json!({"benchmark": "fleet_simulator_only", "result": v}),
            &Failures::default(),
        );
    }
    let mut failures = Failures::default();
    let mut rows = Vec::new();
    for &s in &a.shards {
        println!("== {} nodes on {s} shard(s)", a.nodes);
        let r = row(a, s.max(1), &mut failures);
        let v = failures.value(&format!("{s} shards"), r);
        print_row(&v);
        rows.push(v);
    }
    crate::report::write(
        &path,
        json!({"benchmark": "fleet", "nodes": a.nodes, "window_seconds": a.window_s,
            "speed": a.speed, "duration_seconds": a.duration, "seed": a.seed,
            "injected": plan::faults(a.nodes, ONSETS), "machine_cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "rows": rows,
            "note": "one machine carries the simulator, 12,500 collector senders, nats-server, every shard and the fleet view; spools on tmpfs"}),
        &failures,
    )
}

fn print_row(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}
