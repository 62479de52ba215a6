//! `faultline-sim bench-detect`: detection accuracy of the engine on
//! seeded simulated scenarios that vary what real fleets vary — window
//! length, link rate, utilisation, cluster size, storage classes — with fault
//! parameters drawn from physical ranges (target BER and ramp time of a
//! degrading link, flap shapes shorter and longer than a window, storage
//! slowdowns), noisy variants with sporadic single errors, and
//! confounder-only runs for every confounder at every window length.
//!
//! Windows go straight into `Engine::default()` (the same code as live
//! ingest, no network). Scoring is by incident identity: a fault is detected
//! when some incident on its entity carries the expected kind (or, where a
//! fault can be caught without being named, an accepted stand-in: a slow
//! rank's job's `job_slowdown`, a hang on another communicator); it is
//! *named correctly* when the incident is the expected one and names what
//! physically happened (a hang: exactly the ranks holding the others up; a
//! link, GPU or host: the NCCL communicators with a rank there); every other
//! incident id is a false alarm; incidents per fault are the distinct ids
//! carrying the expected kind on the entity. Jobs without OTLP (`no OTLP`
//! rows) send no step times: the engine infers them from the collectives.
//!
//! Ground truth is physical and independent of the detector: a fault's
//! *visible* window is where it first shows in the data (for a degrading
//! link, where its excess errors become significant at the engine's default
//! reference BER; see [`super::cluster::Truth`]).
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Mutex,
    },
};

use anyhow::Result;
use serde::Serialize;
use serde_json::json;

use super::{
    cluster::{Cluster, ClusterSpec, LinkRate, StorageMix},
    faults::{self, fmt_value},
    rng::Rng,
};
use correlator::engine::{config::DetectConfig, Engine};

#[derive(Debug, Clone, clap::Args)]
pub struct DetectArgs {
    /// Window lengths in seconds.
    #[arg(long = "window", value_delimiter = ',', default_value = "1,10,30")]
    pub windows: Vec<f64>,
    /// Link rates (hdr, ndr, xdr).
    #[arg(
        long = "link-rate",
        value_enum,
        value_delimiter = ',',
        default_value = "hdr,ndr,xdr"
    )]
    pub link_rates: Vec<LinkRate>,
    /// Cluster sizes (nodes). Runs at 1-second windows use the sizes below
    /// 256 (their runs are 10-30x as many windows); sizes of 512 and more run
    /// once for each of ib-link-degrade, ib-link-flap, storage-stall,
    /// node-loss, single-errors, congestion and storage-fleet-slow, at the
    /// longest window length.
    #[arg(long, value_delimiter = ',', default_value = "8,64,256,1024")]
    pub sizes: Vec<usize>,
    /// Seeds per (fault kind, window length, link rate) cell and per
    /// (confounder, window length); each seed is one scenario with freshly
    /// drawn parameters, cycling through the sizes.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Tiny grid (8 nodes, one seed) for a smoke test.
    #[arg(long)]
    pub quick: bool,
    /// Worker threads (default: the available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Where to write the JSON result.
    #[arg(long, default_value = "bench/detect.json")]
    pub out: std::path::PathBuf,
    /// Only these fault kinds and confounders (default: all).
    #[arg(long, value_delimiter = ',')]
    pub kinds: Vec<String>,
}

impl Default for DetectArgs {
    fn default() -> Self {
        Self {
            windows: vec![1.0, 10.0, 30.0],
            link_rates: LinkRate::ALL.to_vec(),
            sizes: vec![8, 64, 256, 1024],
            seeds: 3,
            quick: false,
            jobs: None,
            out: "bench/detect.json".into(),
            kinds: Vec::new(),
        }
    }
}

const FAULTS: &[&str] = &[
    "ib-link-degrade",
    "ib-link-down",
    "ib-link-flap",
    "gpu-thermal",
    "gpu-power",
    "xid",
    "ecc-dbe",
    "storage-stall",
    "node-loss",
    "job-slow",
    "inference-slow",
    "interference-storage",
    "interference-link",
    "interference-gpu",
    "nccl-hang",
    "nccl-slow-rank",
];
/// Fault kinds also run with a job that sends no OTLP step times.
const NO_OTLP: &[&str] = &["ib-link-degrade", "nccl-slow-rank"];
const CONFOUNDERS: &[&str] = &[
    "job-end",
    "counter-reset",
    "collector-restart",
    "congestion",
    "single-errors",
    "storage-fleet-slow",
    "victim-more-data",
    "aggressor-harmless",
];

/// Kinds run at sizes of 512 nodes and more (one run each).
const BIG_KINDS: &[&str] = &[
    "ib-link-degrade",
    "ib-link-flap",
    "storage-stall",
    "node-loss",
    "single-errors",
    "congestion",
    "storage-fleet-slow",
];

/// Warm-up before the onset: max(10 windows, 120 s).
fn warmup_s(w: f64) -> f64 {
    (10.0 * w).max((120.0 / w).ceil() * w)
}
/// Windows after the visible window to judge "one incident per fault":
/// max(20 windows, 300 s).
fn tail_windows(w: f64) -> u64 {
    20u64.max((300.0 / w).ceil() as u64)
}

/// One scenario of the grid.
#[derive(Clone, Debug, Serialize)]
struct Scenario {
    /// Fault kind or confounder (`--inject` name).
    kind: &'static str,
    confounder: bool,
    window_s: f64,
    link_rate: LinkRate,
    nodes: usize,
    utilisation: f64,
    storage: StorageMix,
    seed: u64,
    /// With sporadic single errors in the background.
    noisy: bool,
    /// The training job sends its step times over OTLP.
    otlp: bool,
    /// `--inject` specs (the fault first).
    inject: Vec<String>,
    onset_s: f64,
    /// Windows after which the run stops even if the fault never became visible.
    max_windows: u64,
}

impl Scenario {
    /// The kind, marked when the job sends no OTLP steps.
    fn label(&self) -> String {
        if self.otlp {
            self.kind.to_string()
        } else {
            format!("{} (no OTLP)", self.kind)
        }
    }

    /// Rough cost for scheduling: node-windows, weighted by size (some
    /// engine work is per window over all hosts).
    fn cost(&self) -> f64 {
        self.nodes as f64 * self.max_windows as f64 * (1.0 + self.nodes as f64 / 64.0)
    }
}

/// An incident seen in a run.
#[derive(Clone, Debug, Serialize)]
struct Seen {
    id: String,
    kinds: Vec<String>,
    entity: String,
    first_window: u64,
    /// Carries the expected (kind, entity), or an accepted stand-in, at some point.
    expected: bool,
    /// Carries exactly the expected (kind, entity) at some point.
    exact: bool,
    /// The opening evidence, to say why a false alarm was raised.
    evidence: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
struct Outcome {
    scenario: Scenario,
    expected_kind: Option<String>,
    expected_entity: Option<String>,
    onset_window: u64,
    visible_window: Option<u64>,
    windows_run: u64,
    /// First window with an update of the expected kind on the entity (or
    /// an accepted stand-in).
    detected_window: Option<u64>,
    /// First window with the expected incident naming what physically
    /// happened.
    named_window: Option<u64>,
    /// Distinct incident ids carrying the expected kind on the entity.
    incidents_on_fault: u64,
    false_alarm_count: u64,
    /// False alarms by kind (`a>b`: an incident that changed kind).
    false_alarm_kinds: BTreeMap<String, u64>,
    /// The first few false alarms.
    false_alarms: Vec<Seen>,
    /// True errors the fault added beyond the base BER (degrading links).
    excess_errors: u64,
    /// The job's step time after the fault became visible over before the
    /// onset (medians), when the job ran through both.
    job_slowdown: Option<f64>,
    /// The job's slowdown was attached (`explains job …`) to the fault's
    /// incident / to another incident.
    joined_right: bool,
    joined_elsewhere: bool,
    /// A `job_slowdown` incident was opened (and stayed open: not superseded).
    own_job_slowdown: bool,
    /// The job's worst sustained step time over its pre-onset median.
    job_peak: f64,
    /// Confounder runs that slowed the job: `job_slowdown` incidents raised
    /// (true symptoms without an infrastructure fault, not false alarms).
    symptom_incidents: u64,
    /// `interference` incidents raised (distinct ids, any entity), and those
    /// on the expected entity whose evidence named the injected aggressor.
    interference_incidents: u64,
    interference_right: u64,
    seconds: f64,
}

fn draw_params(kind: &str, w: f64, r: &mut Rng) -> String {
    match kind {
        "ib-link-degrade" => format!(
            ":ber={},ramp={:.0}",
            fmt_value(sig3(r.log_uniform(1e-12, 1e-8))),
            r.range(120.0, 1800.0)
        ),
        "ib-link-flap" => {
            // Downs shorter than a window (only link_downed shows them) or
            // longer (the sampled state shows DOWN too); up times of seconds
            // to minutes between them.
            let down = if r.bernoulli(0.5) {
                r.log_uniform(0.2, 0.8 * w)
            } else {
                r.log_uniform(1.2 * w, 3.0 * w)
            };
            let up = r.log_uniform(5.0, 120.0);
            format!(
                ":period={},down={}",
                fmt_value(sig3(down + up)),
                fmt_value(sig3(down))
            )
        }
        "storage-stall" => format!(":factor={}", fmt_value(sig3(r.log_uniform(3.0, 50.0)))),
        "job-end" => format!(":gap={:.0}", r.range(60.0, 300.0)),
        "congestion" => format!(
            ":fraction={:.2},duration={:.0}",
            r.range(0.1, 0.6),
            r.range(60.0, 300.0)
        ),
        "single-errors" => format!(":fraction=0.01,every={:.0}", r.range(10.0, 60.0)),
        "storage-fleet-slow" => ":factor=5".into(),
        "job-slow" => format!(":factor={}", fmt_value(sig3(r.log_uniform(1.15, 2.0)))),
        "inference-slow" => format!(":factor={}", fmt_value(sig3(r.log_uniform(1.4, 3.0)))),
        "interference-storage" => format!(":factor={}", fmt_value(sig3(r.log_uniform(8.0, 30.0)))),
        "interference-link" | "aggressor-harmless" => {
            format!(":demand={}", fmt_value(sig3(r.range(1.3, 2.0))))
        }
        "interference-gpu" => format!(":share={}", fmt_value(sig3(r.range(0.3, 0.8)))),
        "nccl-slow-rank" => format!(":factor={}", fmt_value(sig3(r.log_uniform(1.4, 2.5)))),
        "victim-more-data" => format!(":factor={}", fmt_value(sig3(r.range(1.5, 3.0)))),
        _ => String::new(),
    }
}

/// Three significant digits.
fn sig3(x: f64) -> f64 {
    format!("{x:.2e}").parse().unwrap_or(x)
}

/// Seconds a fault may take to become visible after its onset (run cap).
fn visible_budget(inject: &str) -> f64 {
    let param = |k: &str| -> f64 {
        inject
            .split(['=', ',', ':'])
            .collect::<Vec<_>>()
            .windows(2)
            .find(|p| p[0] == k)
            .and_then(|p| p[1].parse().ok())
            .unwrap_or(0.0)
    };
    if inject.starts_with("ib-link-degrade") {
        param("ramp") + 300.0
    } else if inject.starts_with("ib-link-flap") {
        param("period") + 60.0
    } else if inject.starts_with("job-end") {
        param("gap")
    } else if inject.starts_with("congestion") {
        param("duration")
    } else {
        0.0
    }
}

fn grid(a: &DetectArgs) -> Vec<Scenario> {
    let (windows, rates, sizes, seeds) = if a.quick {
        (a.windows.clone(), vec![LinkRate::Ndr], vec![8usize], 1u64)
    } else {
        (
            a.windows.clone(),
            a.link_rates.clone(),
            a.sizes.clone(),
            a.seeds,
        )
    };
    let small: Vec<usize> = sizes.iter().copied().filter(|&s| s < 512).collect();
    let big: Vec<usize> = sizes.iter().copied().filter(|&s| s >= 512).collect();
    let longest = windows.iter().copied().fold(0.0, f64::max);
    let mut out = Vec::new();
    // Storage fleets cycle per kind so that each kind sees every fleet.
    let mut n_storage: BTreeMap<&str, usize> = BTreeMap::new();
    let wanted = |k: &str| a.kinds.is_empty() || a.kinds.iter().any(|x| x == k);
    let mut push = |kind: &'static str,
                    confounder: bool,
                    w: f64,
                    rate: LinkRate,
                    nodes: usize,
                    seed: u64,
                    noisy: bool,
                    otlp: bool| {
        if !wanted(kind) {
            return;
        }
        let variant = if otlp { "" } else { "|no-otlp" };
        let mut r = Rng::derive(
            seed,
            fnv(&format!("{kind}|{w}|{rate:?}|{nodes}|{noisy}{variant}")),
        );
        let utilisation = (r.range(0.0, 0.9) * 100.0).round() / 100.0;
        let storage = if kind == "storage-stall" || kind == "storage-fleet-slow" {
            let n = n_storage.entry(kind).or_default();
            *n += 1;
            StorageMix::ALL[*n % StorageMix::ALL.len()]
        } else {
            StorageMix::ALL[r.below(StorageMix::ALL.len())]
        };
        let mut inject = vec![format!("{kind}{}", draw_params(kind, w, &mut r))];
        if noisy {
            // Background noise from the start, through the warm-up.
            inject.push(format!(
                "single-errors{},at=0",
                draw_params("single-errors", w, &mut r)
            ));
        }
        let onset_s = warmup_s(w);
        let max_windows =
            ((onset_s + visible_budget(&inject[0])) / w).ceil() as u64 + 1 + tail_windows(w);
        out.push(Scenario {
            kind,
            confounder,
            window_s: w,
            link_rate: rate,
            nodes,
            utilisation,
            storage,
            seed,
            noisy,
            otlp,
            inject,
            onset_s,
            max_windows,
        });
    };
    for &w in &windows {
        // Sizes this window length runs at: 1-second runs are the longest
        // in windows, so they stay below 256 nodes (when there is a choice).
        let sizes_w: Vec<usize> = if w < 5.0 && small.iter().any(|&s| s < 256) {
            small.iter().copied().filter(|&s| s < 256).collect()
        } else {
            small.clone()
        };
        let sizes_w = if sizes_w.is_empty() {
            sizes.clone()
        } else {
            sizes_w
        };
        let variants = FAULTS
            .iter()
            .map(|k| (k, true))
            .chain(NO_OTLP.iter().map(|k| (k, false)));
        for (ki, (kind, otlp)) in variants.enumerate() {
            let mut i = ki;
            for (ri, &rate) in rates.iter().enumerate() {
                for seed in 1..=seeds {
                    let nodes = sizes_w[i % sizes_w.len()];
                    i += 1;
                    // Half the runs noisy, alternating by seed and rate.
                    let noisy = (seed as usize + ri).is_multiple_of(2);
                    push(kind, false, w, rate, nodes, seed, noisy, otlp);
                }
            }
        }
        for (ci, cf) in CONFOUNDERS.iter().enumerate() {
            for seed in 1..=seeds {
                let rate = rates[(ci + seed as usize) % rates.len()];
                let nodes = sizes_w[(ci + seed as usize) % sizes_w.len()];
                push(cf, true, w, rate, nodes, seed, false, true);
            }
        }
        // The big clusters: one run of each kind whose judgement depends on
        // the fleet (peers, baselines, the cluster clock), at the longest
        // window length only.
        if w == longest && !a.quick {
            for &nodes in &big {
                for (i, kind) in BIG_KINDS.iter().enumerate() {
                    let rate = rates[i % rates.len()];
                    let confounder = CONFOUNDERS.contains(kind);
                    push(
                        kind,
                        confounder,
                        w,
                        rate,
                        nodes,
                        1,
                        !confounder && i % 2 == 1,
                        true,
                    );
                }
            }
        }
    }
    out
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// An incident that detects the fault without being its expected one: a
/// slow rank's job slowing (all a job without OTLP step times can show),
/// a hang raised on another of the job's communicators.
fn stand_in(f: &faults::Fault, u: &proto::v1::CandidateUpdate) -> bool {
    match f.kind {
        faults::Kind::NcclSlowRank { .. } => {
            u.kind == "job_slowdown" && u.entity == super::cluster::JOB
        }
        faults::Kind::NcclHang => u.kind == "collective_hang",
        _ => false,
    }
}

/// Whether the expected incident names what physically happened: a hang
/// exactly the ranks holding the others up (`stalled rank R on HOST`); a
/// link, GPU or host every NCCL communicator with a rank there (`NCCL
/// communicator ID …`).
fn names_it(f: &faults::Fault, c: &Cluster, u: &proto::v1::CandidateUpdate) -> bool {
    if f.kind == faults::Kind::NcclHang {
        let Some(t) = c.truth().first() else {
            return false;
        };
        let mut want: Vec<String> = t
            .hang_holders
            .iter()
            .map(|(h, r)| format!("stalled rank {r} on {h} "))
            .collect();
        let mut got: Vec<String> = u
            .evidence
            .iter()
            .filter(|l| l.starts_with("stalled rank "))
            .filter_map(|l| l.split_once('(').map(|(head, _)| head.to_string()))
            .collect();
        want.sort();
        got.sort();
        return !want.is_empty() && want == got;
    }
    let annotated =
        u.kind.starts_with("ib_link") || u.kind.starts_with("gpu_") || u.kind == "node_lost";
    !annotated
        || c.comms_crossing(&f.target).iter().all(|id| {
            let line = format!("NCCL communicator {id} ");
            u.evidence.iter().any(|l| l.starts_with(&line))
        })
}

/// Runs one scenario through the engine and scores it.
fn run_one(s: &Scenario) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let spec = ClusterSpec {
        nodes: s.nodes,
        window_s: s.window_s,
        link_rate: s.link_rate,
        utilisation: s.utilisation,
        storage: s.storage,
        seed: s.seed * 1_000_003 + fnv(&s.inject.join(" ")) % 1_000_000,
        otlp_steps: s.otlp,
    };
    let mut c = Cluster::new(spec.clone());
    let fs = faults::parse_all(&s.inject, &c, spec.seed)?;
    let mut expected = None;
    let mut e = Engine::default();
    // incident id → what it carried.
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let mut detected = None;
    let mut named = None;
    let (mut joined_right, mut joined_elsewhere) = (false, false);
    let mut job_slowdown_ids: BTreeSet<String> = BTreeSet::new();
    let mut interference_ids: BTreeSet<String> = BTreeSet::new();
    let mut interference_right: BTreeSet<String> = BTreeSet::new();
    let aggressor = format!("aggressor job {} ", super::cluster::tenants::TENANT_JOB);
    let tail = tail_windows(s.window_s);
    let mut k = 0;
    while k < s.max_windows {
        c.advance(&fs, s.onset_s);
        k = c.window_index();
        // A hang's entity is physical fact once the others wait.
        expected = fs.first().and_then(|f| f.expected(&c)).map(|(kd, en)| {
            let hang = c.truth().first().and_then(|t| t.hang_entity.clone());
            (kd.to_string(), hang.unwrap_or(en))
        });
        for n in 0..s.nodes {
            let Some(w) = c.window(n) else {
                continue;
            };
            for u in e.ingest(&w) {
                let hit = expected
                    .as_ref()
                    .is_some_and(|(ek, ee)| u.kind == *ek && u.entity == *ee);
                let accepted = hit || fs.first().is_some_and(|f| stand_in(f, &u));
                if accepted && detected.is_none() {
                    detected = Some(k);
                }
                if hit && named.is_none() && fs.first().is_some_and(|f| names_it(f, &c, &u)) {
                    named = Some(k);
                }
                let explains_job = u
                    .evidence
                    .iter()
                    .any(|l| l.starts_with(&format!("explains job {}", super::cluster::JOB)));
                if explains_job && u.kind != "job_slowdown" {
                    if hit {
                        joined_right = true;
                    } else {
                        joined_elsewhere = true;
                    }
                }
                if u.kind == vocab::IncidentKind::Interference.as_str() {
                    interference_ids.insert(u.incident_id.clone());
                    if hit && u.evidence.iter().any(|l| l.starts_with(&aggressor)) {
                        interference_right.insert(u.incident_id.clone());
                    }
                }
                if u.kind == vocab::IncidentKind::JobSlowdown.as_str() {
                    if u.state == "opened" {
                        job_slowdown_ids.insert(u.incident_id.clone());
                    } else if u.state == vocab::UpdateState::Resolved.as_str()
                        && u.evidence
                            .iter()
                            .any(|l| l.starts_with("explained by incident"))
                    {
                        job_slowdown_ids.remove(&u.incident_id);
                    }
                }
                let inc = seen.entry(u.incident_id.clone()).or_insert_with(|| Seen {
                    id: u.incident_id.clone(),
                    kinds: Vec::new(),
                    entity: u.entity.clone(),
                    first_window: k,
                    expected: false,
                    exact: false,
                    evidence: u.evidence.clone(),
                });
                if !inc.kinds.contains(&u.kind) {
                    inc.kinds.push(u.kind.clone());
                }
                inc.expected |= accepted;
                inc.exact |= hit;
            }
        }
        c.finish_step();
        // Fault runs end `tail` windows after the fault became visible;
        // confounder runs last until their effect is over and a tail more.
        let visible = c.truth()[0].visible_window;
        if !s.confounder && visible.is_some_and(|v| k >= v + tail) {
            break;
        }
    }
    let truth = c.truth()[0].clone();
    let job_slowdown = {
        let steps = &c.job_steps;
        let on = truth.onset_window as usize;
        let vis = truth.visible_window.map_or(on, |v| v as usize);
        (on >= 3 && steps.len() > vis + 3).then(|| {
            correlator::engine::median(&steps[vis..])
                / correlator::engine::median(&steps[..on]).max(1e-9)
        })
    };
    // The job's worst sustained step time (median over min_persist_s) over
    // its pre-onset median: a confounder that really slowed the job
    // (congestion) makes `job_slowdown` a true symptom, not a false alarm.
    let wl = DetectConfig::default().workload;
    let job_peak = {
        let steps = &c.job_steps;
        let on = (truth.onset_window as usize).min(steps.len());
        let k = ((wl.min_persist_s / s.window_s).ceil() as usize).max(3);
        let before = correlator::engine::median(&steps[..on]).max(1e-9);
        if on >= 3 {
            steps[on..]
                .windows(k)
                .map(|x| correlator::engine::median(x) / before)
                .fold(0.0, f64::max)
        } else {
            0.0
        }
    };
    let slowed = job_peak >= 1.0 + wl.min_slowdown;
    let mut symptom_incidents = 0u64;
    seen.retain(|_, i| {
        let keep = !(slowed && s.confounder && i.kinds == ["job_slowdown"]);
        symptom_incidents += u64::from(!keep);
        keep
    });
    let (on_fault, mut false_alarms): (Vec<Seen>, Vec<Seen>) =
        seen.into_values().partition(|i| i.expected);
    let incidents_on_fault: Vec<&Seen> = on_fault.iter().filter(|i| i.exact).collect();
    false_alarms.sort_by_key(|f| f.first_window);
    let mut false_alarm_kinds: BTreeMap<String, u64> = BTreeMap::new();
    for f in &false_alarms {
        *false_alarm_kinds.entry(f.kinds.join(">")).or_default() += 1;
    }
    let false_alarm_count = false_alarms.len() as u64;
    false_alarms.truncate(10);
    Ok(Outcome {
        expected_kind: expected.as_ref().map(|e| e.0.clone()),
        expected_entity: expected.map(|e| e.1),
        onset_window: truth.onset_window,
        visible_window: truth.visible_window,
        windows_run: k,
        detected_window: detected,
        named_window: named,
        incidents_on_fault: incidents_on_fault.len() as u64,
        false_alarm_count,
        false_alarm_kinds,
        false_alarms,
        excess_errors: truth.excess_errors,
        job_slowdown,
        joined_right,
        joined_elsewhere,
        own_job_slowdown: !job_slowdown_ids.is_empty(),
        job_peak,
        symptom_incidents,
        interference_incidents: interference_ids.len() as u64,
        interference_right: interference_right.len() as u64,
        seconds: started.elapsed().as_secs_f64(),
        scenario: s.clone(),
    })
}

/// Runs the scenarios on `jobs` threads, biggest first; results in grid order.
fn run_all(scenarios: &[Scenario], jobs: usize, progress: bool) -> Result<Vec<Outcome>> {
    let mut order: Vec<usize> = (0..scenarios.len()).collect();
    order.sort_by(|&a, &b| scenarios[b].cost().total_cmp(&scenarios[a].cost()));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Outcome>>>> =
        Mutex::new((0..scenarios.len()).map(|_| None).collect());
    std::thread::scope(|sc| {
        for _ in 0..jobs.max(1) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&idx) = order.get(i) else {
                    break;
                };
                let r = run_one(&scenarios[idx]);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if progress && (d.is_multiple_of(50) || d == scenarios.len()) {
                    eprintln!("bench-detect: {d}/{} scenarios", scenarios.len());
                }
                if let Ok(mut g) = results.lock() {
                    g[idx] = Some(r);
                }
            });
        }
    });
    let results = results
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a worker panicked"))?;
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("scenario not run"))))
        .collect()
}

/// Nearest-rank percentile of signed values.
fn pct(v: &[i64], p: f64) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    Some(s[i])
}

#[derive(Default)]
struct Cell {
    runs: u64,
    tp: u64,
    /// Detected with the expected incident naming what happened.
    named: u64,
    fn_: u64,
    fa: u64,
    not_visible: u64,
    /// Latency from onset / visible, in windows.
    from_onset: Vec<i64>,
    from_visible: Vec<i64>,
    named_from_onset: Vec<i64>,
    incidents: Vec<u64>,
    fa_kinds: BTreeMap<String, u64>,
    /// Confounder runs: `job_slowdown` raised for a real slowdown.
    symptoms: u64,
}

impl Cell {
    fn add(&mut self, o: &Outcome) {
        self.runs += 1;
        self.fa += o.false_alarm_count;
        self.symptoms += o.symptom_incidents;
        for (k, n) in &o.false_alarm_kinds {
            *self.fa_kinds.entry(k.clone()).or_default() += n;
        }
        if o.scenario.confounder {
            return;
        }
        if o.visible_window.is_none() {
            self.not_visible += 1;
        }
        match o.detected_window {
            Some(d) => {
                self.tp += 1;
                self.from_onset.push(d as i64 - o.onset_window as i64);
                if let Some(v) = o.visible_window {
                    self.from_visible.push(d as i64 - v as i64);
                }
            }
            None => self.fn_ += 1,
        }
        if let Some(d) = o.named_window {
            self.named += 1;
            self.named_from_onset.push(d as i64 - o.onset_window as i64);
        }
        self.incidents.push(o.incidents_on_fault);
    }

    fn precision(&self) -> Option<f64> {
        (self.tp + self.fa > 0).then(|| self.tp as f64 / (self.tp + self.fa) as f64)
    }

    fn recall(&self) -> Option<f64> {
        (self.tp + self.fn_ > 0).then(|| self.tp as f64 / (self.tp + self.fn_) as f64)
    }

    fn ipf(&self) -> (f64, u64) {
        let n = self.incidents.len().max(1) as f64;
        (
            self.incidents.iter().sum::<u64>() as f64 / n,
            self.incidents.iter().copied().max().unwrap_or(0),
        )
    }

    fn json(&self, w: Option<f64>) -> serde_json::Value {
        let secs = |v: Option<i64>| match (v, w) {
            (Some(v), Some(w)) => Some(v as f64 * w),
            _ => None,
        };
        let (ipf_mean, ipf_max) = self.ipf();
        json!({
            "runs": self.runs, "detected": self.tp, "named_correctly": self.named, "missed": self.fn_, "false_alarms": self.fa,
            "not_visible_within_run": self.not_visible,
            "precision": self.precision(), "recall": self.recall(),
            "latency_from_onset_windows": {"median": pct(&self.from_onset, 0.5), "p95": pct(&self.from_onset, 0.95)},
            "latency_from_onset_s": {"median": secs(pct(&self.from_onset, 0.5)).map(|s| s + w.unwrap_or(0.0)), "p95": secs(pct(&self.from_onset, 0.95)).map(|s| s + w.unwrap_or(0.0))},
            "latency_from_visible_windows": {"median": pct(&self.from_visible, 0.5), "p95": pct(&self.from_visible, 0.95)},
            "latency_from_visible_s": {"median": secs(pct(&self.from_visible, 0.5)), "p95": secs(pct(&self.from_visible, 0.95))},
            "latency_named_from_onset_windows": {"median": pct(&self.named_from_onset, 0.5), "p95": pct(&self.named_from_onset, 0.95)},
            "incidents_per_fault_mean": ipf_mean, "incidents_per_fault_max": ipf_max,
            "false_alarm_kinds": self.fa_kinds,
        })
    }
}

fn optf(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// `median / p95` in windows and seconds (`plus` seconds added: the window
/// in which the alarm is raised counts from the onset).
fn lat(v: &[i64], w: f64, plus: f64) -> String {
    match (pct(v, 0.5), pct(v, 0.95)) {
        (Some(m), Some(p)) => format!(
            "{m} / {p} ({} / {} s)",
            fmt_value(m as f64 * w + plus),
            fmt_value(p as f64 * w + plus)
        ),
        _ => "-".into(),
    }
}

pub fn run(a: &DetectArgs) -> Result<()> {
    anyhow::ensure!(!a.windows.is_empty(), "--window needs at least one length");
    anyhow::ensure!(
        a.windows
            .iter()
            .all(|w| w.is_finite() && (0.1..=60.0).contains(w)),
        "--window lengths must be within 0.1..=60 seconds"
    );
    anyhow::ensure!(
        !a.link_rates.is_empty(),
        "--link-rate needs at least one rate"
    );
    anyhow::ensure!(
        !a.sizes.is_empty() && a.sizes.iter().all(|&s| (2..=4096).contains(&s)),
        "--sizes must be within 2..=4096"
    );
    anyhow::ensure!(a.seeds >= 1, "--seeds must be at least 1");
    let started = std::time::Instant::now();
    let scenarios = grid(a);
    let jobs = a.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let outcomes = run_all(&scenarios, jobs, !a.quick)?;
    let elapsed = started.elapsed().as_secs_f64();

    // Aggregates.
    let mut by_kind_w: BTreeMap<(String, u64), Cell> = BTreeMap::new();
    let mut by_kind: BTreeMap<String, Cell> = BTreeMap::new();
    let mut by_conf_w: BTreeMap<(String, u64), Cell> = BTreeMap::new();
    let mut by_rate: BTreeMap<(String, &'static str), Cell> = BTreeMap::new();
    let mut by_storage: BTreeMap<&'static str, Cell> = BTreeMap::new();
    let mut total = Cell::default();
    let wkey = |w: f64| (w * 1000.0).round() as u64;
    for o in &outcomes {
        let s = &o.scenario;
        total.add(o);
        if s.confounder {
            by_conf_w
                .entry((s.kind.to_string(), wkey(s.window_s)))
                .or_default()
                .add(o);
            continue;
        }
        let mut k = o.expected_kind.clone().unwrap_or_default();
        if !s.otlp {
            k.push_str(" (no OTLP)");
        }
        by_kind_w
            .entry((k.clone(), wkey(s.window_s)))
            .or_default()
            .add(o);
        by_kind.entry(k.clone()).or_default().add(o);
        if k.starts_with("ib_") {
            by_rate.entry((k, s.link_rate.name())).or_default().add(o);
        }
        if s.kind == "storage-stall" {
            by_storage.entry(s.storage.name()).or_default().add(o);
        }
    }
    let conf_runs: u64 = by_conf_w.values().map(|c| c.runs).sum();
    let conf_fa: u64 = by_conf_w.values().map(|c| c.fa).sum();

    // The report.
    let kinds_run: BTreeSet<&str> = scenarios.iter().map(|s| s.kind).collect();
    println!(
        "detection accuracy: {} scenarios ({} fault runs, {conf_runs} confounder-only runs), windows {:?} s, link rates {:?}, sizes {:?}, {} seed(s) per cell{}; {} worker thread(s)",
        outcomes.len(),
        outcomes.len() as u64 - conf_runs,
        a.windows,
        if a.quick { vec!["ndr"] } else { a.link_rates.iter().map(|r| r.name()).collect() },
        if a.quick { vec![8] } else { a.sizes.clone() },
        if a.quick { 1 } else { a.seeds },
        if a.quick { " (--quick)" } else { "" },
        jobs
    );
    println!();
    println!("| kind | window | runs | detected | named correctly | missed | false alarms | latency from onset, median / p95: windows (s) | from visible: windows (s) | incidents per fault |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for ((k, wk), c) in &by_kind_w {
        let w = *wk as f64 / 1000.0;
        let (m, x) = c.ipf();
        println!(
            "| {k} | {} s | {} | {} | {} | {} | {} | {} | {} | {m:.2} (max {x}) |",
            fmt_value(w),
            c.runs,
            c.tp,
            c.named,
            c.fn_,
            c.fa,
            lat(&c.from_onset, w, w),
            lat(&c.from_visible, w, 0.0),
        );
    }
    println!();
    println!("| kind | runs | detected | named correctly | missed | false alarms | precision | recall | incidents per fault |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (k, c) in &by_kind {
        let (m, x) = c.ipf();
        println!(
            "| {k} | {} | {} | {} | {} | {} | {} | {} | {m:.2} (max {x}) |",
            c.runs,
            c.tp,
            c.named,
            c.fn_,
            c.fa,
            optf(c.precision()),
            optf(c.recall())
        );
    }
    println!();
    println!("| confounder | window | runs | false alarms | false alarm kinds | job_slowdown for a real slowdown (not false alarms) |");
    println!("|---|---|---|---|---|---|");
    for ((k, wk), c) in &by_conf_w {
        println!(
            "| {k} | {} s | {} | {} | {} | {} |",
            fmt_value(*wk as f64 / 1000.0),
            c.runs,
            c.fa,
            c.fa_kinds
                .iter()
                .map(|(k, n)| format!("{k} ×{n}"))
                .collect::<Vec<_>>()
                .join(", "),
            c.symptoms
        );
    }
    println!();
    println!("| link fault | link rate | runs | detected | missed | false alarms |");
    println!("|---|---|---|---|---|---|");
    for ((k, r), c) in &by_rate {
        println!(
            "| {k} | {r} | {} | {} | {} | {} |",
            c.runs, c.tp, c.fn_, c.fa
        );
    }
    println!();
    println!("| storage_latency | fleet | runs | detected | missed | false alarms |");
    println!("|---|---|---|---|---|---|");
    for (st, c) in &by_storage {
        println!(
            "| storage_latency | {st} | {} | {} | {} | {} |",
            c.runs, c.tp, c.fn_, c.fa
        );
    }
    println!();
    // Joining: fault runs (not job-slow) whose fault slowed the job by at
    // least the configured min_slowdown, by fault kind.
    let min_slow = 1.0 + DetectConfig::default().workload.min_slowdown;
    let mut joins: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for o in &outcomes {
        let s = &o.scenario;
        // No infrastructure cause to join to.
        let no_cause = matches!(s.kind, "job-slow" | "nccl-slow-rank");
        if s.confounder || no_cause || o.detected_window.is_none() {
            continue;
        }
        if !o.job_slowdown.is_some_and(|r| r >= min_slow) {
            continue;
        }
        let e = joins.entry(s.label()).or_default();
        e[0] += 1;
        e[1] += u64::from(o.joined_right);
        e[2] += u64::from(o.joined_elsewhere);
        e[3] += u64::from(!o.joined_right && !o.joined_elsewhere);
        e[4] += u64::from(o.own_job_slowdown);
    }
    println!("| joining: fault | runs whose fault slowed the job ≥ {:.0} % | slowdown attached to the fault's incident | attached elsewhere | not attached | separate job_slowdown left open |", 100.0 * (min_slow - 1.0));
    println!("|---|---|---|---|---|---|");
    for (k, v) in &joins {
        println!(
            "| {k} | {} | {} | {} | {} | {} |",
            v[0], v[1], v[2], v[3], v[4]
        );
    }
    let jt: [u64; 5] = joins.values().fold([0; 5], |mut a, v| {
        for i in 0..5 {
            a[i] += v[i];
        }
        a
    });
    let joining_accuracy = (jt[0] > 0).then(|| jt[1] as f64 / jt[0] as f64);
    println!(
        "joining accuracy: {} ({} of {} slowdowns on the right root cause)",
        optf(joining_accuracy),
        jt[1],
        jt[0]
    );
    println!();
    // Interference: recall over the interference fault runs (detected with
    // the aggressor named), precision over every interference incident of
    // every run (a confounder's or another fault's is a false one).
    let (mut i_runs, mut i_named, mut i_detected, mut i_all, mut i_right, mut i_conf) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    for o in &outcomes {
        i_all += o.interference_incidents;
        i_right += o.interference_right;
        if o.expected_kind.as_deref() == Some("interference") {
            i_runs += 1;
            i_detected += u64::from(o.detected_window.is_some());
            i_named += u64::from(o.interference_right > 0);
        } else if o.scenario.confounder {
            i_conf += o.interference_incidents;
        }
    }
    let i_recall = (i_runs > 0).then(|| i_named as f64 / i_runs as f64);
    let i_precision = (i_all > 0).then(|| i_right as f64 / i_all as f64);
    println!(
        "interference: {i_runs} runs, {i_detected} detected, {i_named} with the aggressor named; recall {} (aggressor named), precision {} ({i_right} right of {i_all} interference incidents); {i_conf} interference incidents in confounder-only runs",
        optf(i_recall),
        optf(i_precision)
    );
    println!();
    let (tp, fn_) = (total.tp, total.fn_);
    let fa = total.fa;
    let precision = if tp + fa > 0 {
        tp as f64 / (tp + fa) as f64
    } else {
        0.0
    };
    let recall = if tp + fn_ > 0 {
        tp as f64 / (tp + fn_) as f64
    } else {
        0.0
    };
    let not_visible = total.not_visible;
    println!(
        "overall: precision {precision:.3}, recall {recall:.3} ({tp} detected, {} named correctly, {fn_} missed, {fa} false alarms of which {conf_fa} in confounder-only runs); {not_visible} fault(s) never became visible within their run; {elapsed:.1} s",
        total.named
    );

    let ib = DetectConfig::default().ib;
    let kinds_json: BTreeMap<String, serde_json::Value> = by_kind
        .iter()
        .map(|(k, c)| (k.clone(), c.json(None)))
        .collect();
    let kw_json: Vec<serde_json::Value> = by_kind_w
        .iter()
        .map(|((k, wk), c)| {
            let w = *wk as f64 / 1000.0;
            let mut v = c.json(Some(w));
            v["kind"] = json!(k);
            v["window_s"] = json!(w);
            v
        })
        .collect();
    let conf_json: Vec<serde_json::Value> = by_conf_w
        .iter()
        .map(|((k, wk), c)| json!({"confounder": k, "window_s": *wk as f64 / 1000.0, "runs": c.runs, "false_alarms": c.fa, "false_alarm_kinds": c.fa_kinds, "job_slowdown_for_real_slowdown": c.symptoms}))
        .collect();
    let rate_json: Vec<serde_json::Value> = by_rate
        .iter()
        .map(|((k, r), c)| json!({"kind": k, "link_rate": r, "runs": c.runs, "detected": c.tp, "missed": c.fn_, "false_alarms": c.fa}))
        .collect();
    let storage_json: Vec<serde_json::Value> = by_storage
        .iter()
        .map(|(s, c)| json!({"fleet": s, "runs": c.runs, "detected": c.tp, "missed": c.fn_, "false_alarms": c.fa}))
        .collect();
    let out = json!({
        "benchmark": "detection_accuracy",
        "elapsed_s": elapsed,
        "grid": {
            "quick": a.quick,
            "window_s": a.windows,
            "link_rates": if a.quick { vec!["ndr"] } else { a.link_rates.iter().map(|r| r.name()).collect::<Vec<_>>() },
            "sizes": if a.quick { vec![8] } else { a.sizes.clone() },
            "seeds_per_cell": if a.quick { 1 } else { a.seeds },
            "fault_kinds": FAULTS, "confounders": CONFOUNDERS,
            "no_otlp_kinds": NO_OTLP,
            "no_otlp_rule": "the kinds in no_otlp_kinds run a second time with a job that sends no OTLP step times (rows `KIND (no OTLP)`): the engine infers its step time from its NCCL collectives' cadence",
            "kinds_run": kinds_run,
            "sizes_rule": "1 s windows run at sizes below 256 (when listed); sizes >= 512 run once per kind in big_kinds at the longest window length; other cells cycle through the sizes by seed",
            "big_kinds": BIG_KINDS,
            "noisy_rule": "half the fault runs (alternating by seed and link rate) add single-errors (1% of ports get one symbol error per event, every 10-60 s)",
            "onset": "after a warm-up of max(10 windows, 120 s), at a window boundary",
            "run_length": "fault runs: until the fault's visible window + max(20 windows, 300 s), at most onset + visibility budget (ramp + 300 s for degrading links, period + 60 s for flaps) + that tail; confounder runs: onset + the confounder's span (job-end gap, congestion duration) + that tail",
            "drawn": {
                "utilisation": "uniform 0-0.9 per run",
                "storage": "nvme/ssd/hdd/mixed: cycled by seed for storage-stall and storage-fleet-slow, drawn otherwise",
                "ib-link-degrade": "ber log-uniform 1e-12..1e-8, ramp uniform 120..1800 s",
                "ib-link-flap": "down log-uniform 0.2 s..0.8 W (shorter than a window) or 1.2..3 W (longer), half each; up time log-uniform 5..120 s; period = down + up",
                "storage-stall": "factor log-uniform 3..50",
                "job-end": "gap uniform 60..300 s",
                "congestion": "fraction uniform 0.1..0.6 of the ports, duration uniform 60..300 s",
                "single-errors": "fraction 0.01, every uniform 10..60 s",
                "storage-fleet-slow": "factor 5",
                "interference-storage": "the tenant's I/O demand x log-uniform 8..30 on a device it shares with the training job (0.2 and 0.3 requests in flight before)",
                "interference-link": "the port's demand uniform 1.3..2 x line rate (tenant 0.05 before)",
                "interference-gpu": "the tenant takes uniform 0.3..0.8 of a time-sliced GPU the training rank keeps 90 % busy",
                "victim-more-data": "the training job reads uniform 1.5..3 x the data per step",
                "aggressor-harmless": "the tenant takes a shared port to uniform 1.3..2 x line rate; the training job does not slow",
                "job-slow": "factor log-uniform 1.15..2 on every rank's step time (no infrastructure cause)",
                "nccl-hang": "one rank (a GPU drawn by the seed) stops issuing collectives at the onset; the others block one collective ahead",
                "nccl-slow-rank": "one rank's compute x log-uniform 1.4..2.5 (no infrastructure cause): every collective waits for it, the communicators' cadence stretches by the factor",
                "communicators": "ring: every rank (GPU g on mlx5_g), 4 gradient AllReduces per step; tree: GPU 0 of every node (mlx5_0), 1 AllReduce per step",
                "inference-slow": "factor log-uniform 1.4..3 on the model server's time to first token (no infrastructure cause); the server (last node, GPU 7 / mlx5_7) serves 20 requests/s at 0.15 s mean TTFT, log-normal sigma 0.5",
                "port base BER": "log-uniform 1e-16..1e-14 per port",
                "device medians": "nvme 0.08-0.2 ms, ssd 0.2-0.5 ms, hdd 4-9 ms (log-uniform), lognormal sigma 0.5, median jitter +-10 % per window, 30-80 requests/s",
            },
            "truth": {"reference_ber": ib.reference_ber, "horizon_s": ib.horizon_s, "significance": ib.significance,
                       "visible": "ib-link-degrade: first window where the fault's excess errors pass stats::scan_test at the reference BER; ib-link-flap: the second down; node-loss: onset + 3 windows; nccl-hang: the window in which another rank first waits on the stalled one (its entity <first host of the holding ranks>/nccl/<the communicator they hold up> from the simulated timeline); job-slow, nccl-slow-rank, inference-slow and interference: onset + workload.min_persist_s; others: the onset window",
                       "detected": "an incident of the expected kind on the expected entity, or an accepted stand-in: job_slowdown of the job for nccl-slow-rank, collective_hang on any of the job's communicators for nccl-hang",
                       "named_correctly": "the expected incident, naming exactly the ranks holding the others up (nccl-hang) or every NCCL communicator with a rank on the faulty port, GPU or host (ib_link_*, gpu_*, node_lost); for the other kinds the same as the expected incident"},
        },
        "scenarios": outcomes.len(),
        "confounder_runs": conf_runs,
        "precision": precision, "recall": recall,
        "true_positives": tp, "false_positives": fa, "false_negatives": fn_,
        "confounder_false_alarms": conf_fa,
        "not_visible_within_run": not_visible,
        "kinds": kinds_json,
        "by_kind_and_window": kw_json,
        "confounders_by_window": conf_json,
        "link_faults_by_rate": rate_json,
        "storage_stall_by_fleet": storage_json,
        "interference": {
            "runs": i_runs, "detected": i_detected, "aggressor_named": i_named,
            "recall": i_recall, "precision": i_precision,
            "incidents": i_all, "right": i_right, "confounder_incidents": i_conf,
            "rule": "recall: interference fault runs whose incident on the shared resource named etl-batch as the aggressor; precision: such incidents over every interference incident of every run",
        },
        "joining": {
            "accuracy": joining_accuracy,
            "rule": "fault runs (job-slow excluded) that were detected and whose fault slowed the job's step time (median after visible over median before onset) by at least workload.min_slowdown; right = the fault's incident carried `explains job …`",
            "by_fault": joins.iter().map(|(k, v)| json!({"fault": k, "runs": v[0], "attached_to_fault": v[1], "attached_elsewhere": v[2], "not_attached": v[3], "separate_job_slowdown_open": v[4]})).collect::<Vec<_>>(),
        },
        "runs": outcomes,
        "note": "latency from onset in windows counts from the onset window (0: raised in it); in seconds it is to the end of the window in which the incident appeared. Latency from visible is signed (negative: the engine alarmed before the fault's excess errors were significant at the reference BER). False alarms are distinct incident ids that never carried the expected (kind, entity); in confounder-only runs every incident is one.",
    });
    if let Some(dir) = a.out.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    std::fs::write(&a.out, serde_json::to_string_pretty(&out)?)?;
    println!("wrote {}", a.out.display());
    Ok(())
}
