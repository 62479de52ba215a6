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

/// CPU seconds of each measured process now.
fn cpu_of(procs: &[&procs::Proc]) -> Vec<f64> {
    procs
        .iter()
        .map(|p| procstat::cpu_seconds(p.pid()).unwrap_or(0.0))
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
    let (nats, url) = procs::nats_server(&dir)?;
    let topo = dir.join("fabric.topo");
    std::fs::write(&topo, sim::cluster::topology::ibnetdiscover(a.nodes))?;
    // Simulated time is not this machine's: no clock checks.
    let cfg = dir.join("correlator.toml");
    std::fs::write(&cfg, "[detect.limits]\nmax_future_s = 0\nmax_past_s = 0\n")?;
    let (stream, prefix) = ("FLEET", "fleet");
    let setup = procs::ShardSetup {
        bin: &bin,
        url: &url,
        stream,
        prefix,
        topology: &topo,
        config: &cfg,
        dir: &dir,
    };
    let mut shard_procs = Vec::new();
    for k in 0..shards {
        shard_procs.push(procs::shard(&setup, &plan::shard_key(k))?);
    }
    let (view, history) = procs::fleet_view(&bin, &url, &dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("fleet-send")
        .enable_all()
        .build()?;
    let seen = rt.block_on(watch::incidents(&url))?;
    let t_connect = Instant::now();
    let (txs, stats) = {
        let _g = rt.enter();
        spawn_senders(&plan, &url, stream, prefix, &spools)?
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
    let connect_s = t_connect.elapsed().as_secs_f64();
    let per_shard = plan.nodes_per_shard();
    let consumers: Vec<String> = (0..shards)
        .map(|k| format!("{stream}-{}", plan::shard_key(k)))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let behind = Arc::new(AtomicBool::new(false));
    let poller = watch::poll(
        consumers.clone(),
        per_shard.iter().map(|n| 3 * *n as u64).collect(),
        nats.addr.clone(),
        view.addr.clone(),
        stop.clone(),
        behind.clone(),
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
    let wait_for = if fell_behind_at.is_some() {
        Duration::ZERO
    } else {
        Duration::from_secs(600)
    };
    let drained = crate::wait::until("the shards to take every window", wait_for, || {
        let taken = watch::jetstream(&nats.addr)
            .map(|j| j.taken)
            .unwrap_or_default();
        let got: Vec<u64> = consumers
            .iter()
            .map(|c| taken.get(c).copied().unwrap_or(0))
            .collect();
        Ok(got
            .iter()
            .zip(&total)
            .any(|(g, t)| g < t)
            .then(|| format!("{got:?} of {total:?}")))
    });
    let t_drained = Instant::now();
    // The incidents of the last slots reach the fleet view.
    std::thread::sleep(Duration::from_secs(3));
    let (cpu1, own1) = (cpu_of(&measured), own_cpu());
    stop.store(true, Ordering::Relaxed);
    let polled = poller
        .join()
        .map_err(|_| anyhow::anyhow!("the watcher panicked"))?;
    let fleet_open_end = watch::open_list(&view.addr);
    let (ui_status, _) = procs::http_get(&view.addr, "/").unwrap_or((0, String::new()));
    let history_bytes = std::fs::metadata(&history).map_or(0, |m| m.len());
    let rss: Vec<Option<u64>> = measured.iter().map(|p| procs::peak_rss(p.pid())).collect();
    // The engines' own count, once (a scrape renders every host's series).
    let engines: Vec<u64> = shard_procs
        .iter()
        .map(|p| {
            tests::metrics::scrape(&p.addr).ok().map_or(0, |t| {
                tests::metrics::value(&t, "faultline_correlator_windows_total", &[]).unwrap_or(0.0)
                    as u64
            })
        })
        .collect();
    let own_rss = procs::peak_rss(std::process::id());
    let sender_stats =
        |f: fn(&collector::stream::SenderStats) -> u64| -> u64 { stats.iter().map(|s| f(s)).sum() };
    let delivered = sender_stats(|s| s.delivered.load(Ordering::Relaxed));
    let dropped = sender_stats(|s| s.dropped.load(Ordering::Relaxed));
    let updates: Vec<watch::Seen> = seen.lock().map(|v| v.clone()).unwrap_or_default();
    rt.shutdown_background();
    drop(measured);
    drop(shard_procs);
    drop(view);
    drop(nats);
    let _ = std::fs::remove_dir_all(&spools);
    // The logs stay for a row that fails; the JetStream store goes.
    let _ = std::fs::remove_dir_all(dir.join("js"));
    if fell_behind_at.is_none() {
        drained?;
    }

    // Throughput.
    let windows: u64 = total.iter().sum();
    let bytes: u64 = slots.iter().map(|s| s.bytes).sum();
    let first = t_run;
    let run_s = t_drained.duration_since(first).as_secs_f64();
    let offered = nodes as f64 * a.speed / a.window_s;
    let taken_by: Vec<u64> = polled
        .samples
        .last()
        .map_or_else(|| vec![0; shards], |s| s.consumed.clone());
    let taken_total: u64 = taken_by.iter().sum();
    // What the engines processed (the shards acknowledge a window once it
    // is in their engine's queue): each component's CPU is per window of
    // these.
    let engines_total: u64 = engines.iter().sum();
    let taken = taken_total as f64 / run_s.max(1e-3);
    // Windows of the whole fleet a second at its window length.
    let fleet_rate = nodes as f64 / a.window_s;
    let late: Vec<f64> = slots.iter().map(|s| s.late_s).collect();
    // Intake lag per shard: hand-over of a slot to the first poll at which
    // the shard had taken every window up to it.
    let mut intake: Vec<Vec<f64>> = vec![Vec::new(); shards];
    for (s, lags) in intake.iter_mut().enumerate() {
        let mut cum = 0;
        for slot in &slots {
            cum += slot.windows[s];
            let Some(h) = slot.handed else { continue };
            if let Some(at) = polled
                .samples
                .iter()
                .find(|x| x.consumed.get(s).copied().unwrap_or(0) >= cum)
                .and_then(|x| x.at)
            {
                lags.push(at.saturating_duration_since(h).as_secs_f64());
            }
        }
    }
    let js_max = polled
        .samples
        .iter()
        .map(|s| s.js_storage)
        .max()
        .unwrap_or(0);
    let js_end = polled.samples.last().map_or(0, |s| s.js_storage);

    // Faults → incidents.
    let slot_of = |ts: i64| slots.iter().find(|s| s.end_ms >= ts);
    let opened: Vec<&watch::Seen> = updates
        .iter()
        .filter(|u| u.update.state == "opened")
        .collect();
    let mut matched_ids = std::collections::BTreeSet::new();
    let mut outcomes = Vec::new();
    let mut incident_lag: Vec<Vec<f64>> = vec![Vec::new(); shards];
    for (i, f) in plan.faults.iter().enumerate() {
        let Some((kind, entity)) = f.expected(&plan.cluster) else {
            continue;
        };
        let visible = plan.cluster.truth().get(i).and_then(|t| t.visible_window);
        let mine: Vec<&&watch::Seen> = opened
            .iter()
            .filter(|u| u.update.kind == kind && u.update.entity == entity)
            .collect();
        for m in &mine {
            matched_ids.insert((m.shard.clone(), m.update.incident_id.clone()));
        }
        let first = mine.iter().min_by_key(|u| u.at);
        let (opened_k, lag, shard) = match first {
            Some(u) => {
                let s = slot_of(u.update.ts_unix_ms);
                let lag = s
                    .and_then(|s| s.handed)
                    .map(|h| u.at.saturating_duration_since(h).as_secs_f64());
                let shard_ix = (0..shards).find(|k| u.shard.ends_with(&plan::shard_key(*k)));
                if let (Some(l), Some(k)) = (lag, shard_ix) {
                    incident_lag[k].push(l);
                }
                (s.map(|s| s.k), lag, u.shard.clone())
            }
            None => (None, None, String::new()),
        };
        let within = matches!((opened_k, visible), (Some(o), Some(v)) if o <= v + 2);
        let in_view = polled
            .fleet_first
            .keys()
            .filter(|(k, e)| k == kind && e == &entity)
            .count();
        let ok = within && mine.len() == 1 && in_view == 1;
        if !ok {
            failures.add(
                &format!("{shards} shards: {}", plan.injected[i]),
                &anyhow::anyhow!(
                    "expected one {kind} on {entity} within 2 windows of window {visible:?}: opened {} time(s), first in window {opened_k:?}, {in_view} in the fleet view",
                    mine.len()
                ),
            );
        }
        outcomes.push(
            json!({"fault": plan.injected[i], "kind": kind, "entity": entity,
            "visible_window": visible, "opened_window": opened_k, "opened_by": shard,
            "shard_incidents": mine.len(), "fleet_view_incidents": in_view,
            "lag_seconds_from_hand_over": lag, "within_2_windows": within, "ok": ok}),
        );
    }
    // A symptom raised before its cause was found and then resolved as
    // "explained by incident <the fault's>" is that fault's (the engine's
    // own merge), reported apart; anything else is a false alarm.
    let ids: std::collections::BTreeSet<&String> = matched_ids.iter().map(|(_, id)| id).collect();
    let merged_into = |u: &watch::Seen| {
        updates.iter().find_map(|x| {
            (x.shard == u.shard
                && x.update.incident_id == u.update.incident_id
                && x.update.state == "resolved")
                .then(|| {
                    x.update.evidence.iter().find_map(|l| {
                        l.strip_prefix("explained by incident ")
                            .and_then(|r| r.split_whitespace().next())
                            .filter(|id| ids.contains(&id.to_string()))
                            .map(|id| (id.to_string(), slot_of(x.update.ts_unix_ms).map(|s| s.k)))
                    })
                })
                .flatten()
        })
    };
    let mut merged = Vec::new();
    let mut others = Vec::new();
    for u in opened
        .iter()
        .filter(|u| !matched_ids.contains(&(u.shard.clone(), u.update.incident_id.clone())))
    {
        let opened_k = slot_of(u.update.ts_unix_ms).map(|s| s.k);
        let v = json!({"shard": u.shard, "kind": u.update.kind, "entity": u.update.entity,
            "window": opened_k});
        match merged_into(u) {
            Some((into, resolved_k)) => merged.push(json!({"symptom": v, "merged_into": into,
                "merged_in_window": resolved_k})),
            None => others.push(v),
        }
    }
    if !others.is_empty() {
        failures.add(
            &format!("{shards} shards: nothing else raised"),
            &anyhow::anyhow!("{} other incident(s): {others:?}", others.len()),
        );
    }
    let fell_behind = intake
        .iter()
        .flatten()
        .any(|l| *l > tick.as_secs_f64() + watch::POLL.as_secs_f64());
    if let Some(k) = fell_behind_at {
        failures.add(
            &format!("{shards} shards: carrying the fleet"),
            &anyhow::anyhow!(
                "fell behind at window {k}: a shard had more than 3 slots of windows waiting; taken {taken:.0} windows/s of {offered:.0} offered"
            ),
        );
    } else if fell_behind {
        failures.add(
            &format!("{shards} shards: keeping up"),
            &anyhow::anyhow!("a shard took a slot later than the next slot was due"),
        );
    }

    // Per component.
    let mut components = Vec::new();
    let names: Vec<String> = std::iter::once("nats-server".to_string())
        .chain((0..shards).map(|k| format!("shard {}", plan::shard_key(k))))
        .chain(std::iter::once("fleet view".to_string()))
        .collect();
    for (i, name) in names.iter().enumerate() {
        let cpu = cpu1[i] - cpu0[i];
        // Its CPU per window it handled (a shard's: those it took; the
        // server's and the view's: every window taken), and what the whole
        // fleet's rate would cost at that price.
        let handled = i
            .checked_sub(1)
            .and_then(|k| engines.get(k).copied().filter(|n| *n > 0))
            .unwrap_or(engines_total)
            .max(1);
        let per_window = cpu / handled as f64;
        let mut c = json!({"component": name, "cpu_seconds": cpu, "cores": cpu / run_s.max(1e-3),
            "peak_rss_bytes": rss[i], "cpu_us_per_window": 1e6 * per_window,
            "cores_at_the_fleet_rate": per_window * fleet_rate * if (1..=shards).contains(&i) {
                handled as f64 / engines_total.max(1) as f64 } else { 1.0 }});
        if let Some(k) = i.checked_sub(1).filter(|k| *k < shards) {
            c["nodes"] = json!(per_shard[k]);
            c["windows"] = json!(total[k]);
            c["intake_lag_seconds"] = json!({"p50": q(&intake[k], 0.5), "p99": q(&intake[k], 0.99),
                "max": q(&intake[k], 1.0)});
            c["incident_lag_seconds"] = json!(incident_lag[k]);
        }
        components.push(c);
    }
    let own = own1 - own0;
    components.push(
        json!({"component": "simulator (generation thread)", "cpu_seconds": sim_cpu,
        "cores": sim_cpu / run_s.max(1e-3)}),
    );
    components.push(
        json!({"component": "collector senders (this process, less the simulator)",
        "cpu_seconds": own - sim_cpu, "cores": (own - sim_cpu) / run_s.max(1e-3),
        "cpu_us_per_window": 1e6 * (own - sim_cpu) / windows.max(1) as f64,
        "peak_rss_bytes_with_simulator": own_rss}),
    );
    Ok(json!({
        "shards": shards, "nodes": nodes, "gpus": nodes * 8, "hca_ports": nodes * 8,
        "nodes_per_shard": per_shard, "window_seconds": a.window_s, "speed": a.speed,
        "slots": slots.len(), "windows": windows, "bytes": bytes,
        "senders_connect_seconds": connect_s,
        "offered_windows_per_second": offered, "taken_windows_per_second": taken,
        "run_seconds": run_s, "generation_late_seconds_max": q(&late, 1.0),
        "kept_up": !fell_behind && fell_behind_at.is_none(),
        "fell_behind_at_window": fell_behind_at, "windows_taken": taken_by,
        "delivered": delivered, "dropped": dropped,
        "engine_windows": engines,
        "jetstream_storage_bytes_max": js_max, "jetstream_storage_bytes_end": js_end,
        "fleet_view": {"web_ui_status": ui_status, "history_bytes": history_bytes,
            "open_at_end": fleet_open_end, "poll_errors": polled.fleet_errors},
        "components": components, "faults": outcomes,
        "symptoms_merged_into_a_faults_incident": merged, "other_incidents": others,
    }))
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
