//! The bench's report: Markdown tables on stdout and the JSON result.
use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::{
    grid::Scenario,
    run::Outcome,
    score::{lat, optf, Interference, Joining, Tally},
    DetectArgs, BIG_KINDS, CONFOUNDERS, FAULTS, NO_OTLP, XID_FAULTS,
};
use crate::faults::fmt_value;
use correlator::engine::config::DetectConfig;

/// The link rates, sizes and seeds per cell the grid ran (`--quick`: NDR,
/// 8 nodes, one seed).
fn shape(a: &DetectArgs) -> (Vec<&'static str>, Vec<usize>, u64) {
    if a.quick {
        (vec!["ndr"], vec![8], 1)
    } else {
        (
            a.link_rates.iter().map(|r| r.name()).collect(),
            a.sizes.clone(),
            a.seeds,
        )
    }
}

/// A finished bench: its runs and what they add up to.
pub(super) struct Report<'a> {
    pub a: &'a DetectArgs,
    pub scenarios: &'a [Scenario],
    pub outcomes: &'a [Outcome],
    pub t: Tally,
    pub joining: Joining,
    pub interference: Interference,
    pub xid: super::xid::XidTally,
    pub jobs: usize,
    pub elapsed: f64,
}

impl Report<'_> {
    /// Every table, then the overall line.
    pub fn print(&self) {
        let a = self.a;
        let (conf_runs, _) = self.t.confounders();
        let (rates, sizes, seeds) = shape(a);
        println!(
            "detection accuracy: {} scenarios ({} fault runs, {conf_runs} confounder-only runs), windows {:?} s, link rates {:?}, sizes {:?}, {} seed(s) per cell{}; {} worker thread(s)",
            self.outcomes.len(),
            self.outcomes.len() as u64 - conf_runs,
            a.windows,
            rates,
            sizes,
            seeds,
            if a.quick { " (--quick)" } else { "" },
            self.jobs
        );
        println!();
        self.print_kinds();
        self.print_confounders_and_links();
        self.print_joining();
        self.print_interference();
        self.xid.print();
        self.print_overall();
    }

    /// Per (kind, window) and per kind.
    fn print_kinds(&self) {
        println!("| kind | window | runs | detected | named correctly | missed | false alarms | latency from onset, median / p95: windows (s) | from visible: windows (s) | incidents per fault |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for ((k, wk), c) in &self.t.by_kind_w {
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
        for (k, c) in &self.t.by_kind {
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
    }

    /// Confounders per window; link faults per rate; storage stalls per fleet.
    fn print_confounders_and_links(&self) {
        println!("| confounder | window | runs | false alarms | false alarm kinds | job_slowdown for a real slowdown (not false alarms) |");
        println!("|---|---|---|---|---|---|");
        for ((k, wk), c) in &self.t.by_conf_w {
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
        for ((k, r), c) in &self.t.by_rate {
            println!(
                "| {k} | {r} | {} | {} | {} | {} |",
                c.runs, c.tp, c.fn_, c.fa
            );
        }
        println!();
        println!("| storage_latency | fleet | runs | detected | missed | false alarms |");
        println!("|---|---|---|---|---|---|");
        for (st, c) in &self.t.by_storage {
            println!(
                "| storage_latency | {st} | {} | {} | {} | {} |",
                c.runs, c.tp, c.fn_, c.fa
            );
        }
        println!();
    }

    fn print_joining(&self) {
        let j = &self.joining;
        println!("| joining: fault | runs whose fault slowed the job ≥ {:.0} % | slowdown attached to the fault's incident | attached elsewhere | not attached | separate job_slowdown left open |", 100.0 * (j.min_slow - 1.0));
        println!("|---|---|---|---|---|---|");
        for (k, v) in &j.by_fault {
            println!(
                "| {k} | {} | {} | {} | {} | {} |",
                v[0], v[1], v[2], v[3], v[4]
            );
        }
        println!(
            "joining accuracy: {} ({} of {} slowdowns on the right root cause)",
            optf(j.accuracy),
            j.right,
            j.runs
        );
        println!();
    }

    fn print_interference(&self) {
        let i = &self.interference;
        println!(
            "interference: {} runs, {} detected, {} with the aggressor named; recall {} (aggressor named), precision {} ({} right of {} interference incidents); {} interference incidents in confounder-only runs",
            i.runs,
            i.detected,
            i.named,
            optf(i.recall()),
            optf(i.precision()),
            i.right,
            i.all,
            i.in_confounders
        );
        println!();
    }

    fn print_overall(&self) {
        let t = &self.t.total;
        let (precision, recall) = self.t.overall();
        let (_, conf_fa) = self.t.confounders();
        println!(
            "overall: precision {precision:.3}, recall {recall:.3} ({} detected, {} named correctly, {} missed, {} false alarms of which {conf_fa} in confounder-only runs); {} fault(s) never became visible within their run; {:.1} s",
            t.tp, t.named, t.fn_, t.fa, t.not_visible, self.elapsed
        );
    }

    /// What the grid was: its shape, rules, drawn parameters and truth.
    fn grid_json(&self) -> serde_json::Value {
        let a = self.a;
        let ib = DetectConfig::default().ib;
        let (rates, sizes, seeds) = shape(a);
        let kinds_run: BTreeSet<&str> = self.scenarios.iter().map(|s| s.kind).collect();
        let mut g = self.grid_json_base(a, &ib, (rates, sizes, seeds), kinds_run);
        // Every-rank hangs and their pauses (outside the one `json!`: its
        // macro recursion has a limit).
        let every = json!({
                "nccl-hang-dead-peer": "every rank issues the collective in flight at the onset; one rank's process (a GPU drawn by the seed) dies in it (its last row says exited); the others block in cuStreamSynchronize with their GPUs spinning at 100 %, the fabric goes quiet",
                "nccl-hang-port-down": "a port (drawn by the seed) goes down at the onset and every rank hangs in the collective in flight, blocked, GPUs spinning",
                "nccl-hang-unknown": "every rank hangs in the collective in flight at the onset, blocked, GPUs spinning; nothing else below",
                "nccl-checkpoint": "confounder: no step starts for uniform 60..300 s; GPUs idle, no kernel launches, the job writes 64x its usual bytes",
                "nccl-eval": "confounder: no step starts for uniform 60..300 s; kernels keep launching, GPUs 90 % busy",
                "nccl-job-exit": "confounder: the job's processes exit without destroying their communicators (every rank's last row says exited, within 0.4 s); a next job starts uniform 60..300 s later"
        });
        if let (Some(d), Some(e)) = (g["drawn"].as_object_mut(), every.as_object()) {
            d.extend(e.clone());
        }
        let xid = json!({
                "xid-crash-loop": "one single-GPU job (ft-debug, python3, one user) dies with XID 13 or 31 (half each) 20 times in 600 s, restarted with a new pid each time, each death followed by XID 45 (its channels' teardown) from the same pid; truth: the application's fault, visible at the onset",
                "xid-bad-gpu": "3 unrelated single-GPU jobs (another user and executable each) scheduled on the GPU gap log-uniform 60..1200 s apart, each dies at once with the same XID 13 or 31 (half each) and its XID 45; truth: the GPU's fault, visible at the second job's death",
                "nvswitch-sxid": "one fatal SXid 20034 on one of the host's four NVSwitches (drawn), kernel log only",
                "xid-burst": "10,000 XID 95 lines within one second from the training rank: folded as the collector sends them (one event per window, count) or each line its own event, half each",
                "xid-cancelled-jobs": "confounder: 200 jobs (1, 2, 4 or 8 GPUs of one host; 6 users, 5 executables) cancelled at times uniform over 600 s: every GPU logs XID 45, half the jobs XID 43 first; reports folded per window as the collector folds them",
                "xid attribution": "every XID names its process (pid, name), job, rank and uid as the collector attributes them, source nvml+kmsg; the xid fault's from the training rank (none for 79, 48 and the NVLink workflow's codes: the driver names no process)"
        });
        if let (Some(d), Some(e)) = (g["drawn"].as_object_mut(), xid.as_object()) {
            d.extend(e.clone());
        }
        g
    }

    fn grid_json_base(
        &self,
        a: &DetectArgs,
        ib: &correlator::engine::config::IbConfig,
        (rates, sizes, seeds): (Vec<&'static str>, Vec<usize>, u64),
        kinds_run: BTreeSet<&str>,
    ) -> serde_json::Value {
        json!({
            "quick": a.quick,
            "window_s": a.windows,
            "link_rates": rates,
            "sizes": sizes,
            "seeds_per_cell": seeds,
            "fault_kinds": FAULTS, "confounders": CONFOUNDERS,
            "xid_fault_kinds": XID_FAULTS,
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
            "truth": {"reference_ber": ib.reference_ber, "significance": ib.significance,
                       "visible": "ib-link-degrade: first window, from the onset window on, where the excess bit errors the fault injected since its onset are so many that a Poisson background at reference_ber over the bits the port signalled since the onset would reach them with probability below significance (the simulator's own Poisson tail, independent of the detector's tests); ib-link-flap: the second down; node-loss: onset + 3 windows; nccl-hang: the window in which another rank first waits on the stalled one (its entity <first host of the holding ranks>/nccl/<the communicator they hold up> from the simulated timeline); nccl-hang-*: the window in which the last rank issued the collective that never completes (entity <the culprit's host, else the first host>/nccl/<the job's ring>); job-slow, nccl-slow-rank, inference-slow and interference: onset + workload.min_persist_s; others: the onset window",
                       "detected": "an incident of the expected kind on the expected entity, or an accepted stand-in: job_slowdown of the job for nccl-slow-rank, collective_hang on any of the job's communicators for nccl-hang and the every-rank hangs (and the downed port's ib_link_down for nccl-hang-port-down)",
                       "named_correctly": "the expected incident, naming exactly the ranks holding the others up (nccl-hang), exactly one culprit line naming the dead rank or the downed port (nccl-hang-dead-peer, nccl-hang-port-down) or no culprit and 'no cause seen below' (nccl-hang-unknown), or every NCCL communicator with a rank on the faulty port, GPU or host (ib_link_*, gpu_*, node_lost); for the other kinds the same as the expected incident"},
        })
    }

    /// The JSON result.
    pub fn json(&self) -> serde_json::Value {
        let t = &self.t;
        let i = &self.interference;
        let (conf_runs, conf_fa) = t.confounders();
        let (precision, recall) = t.overall();
        let kinds_json: BTreeMap<String, serde_json::Value> = t
            .by_kind
            .iter()
            .map(|(k, c)| (k.clone(), c.json(None)))
            .collect();
        let kw_json: Vec<serde_json::Value> = t
            .by_kind_w
            .iter()
            .map(|((k, wk), c)| {
                let w = *wk as f64 / 1000.0;
                let mut v = c.json(Some(w));
                v["kind"] = json!(k);
                v["window_s"] = json!(w);
                v
            })
            .collect();
        let conf_json: Vec<serde_json::Value> = t
            .by_conf_w
            .iter()
            .map(|((k, wk), c)| json!({"confounder": k, "window_s": *wk as f64 / 1000.0, "runs": c.runs, "false_alarms": c.fa, "false_alarm_kinds": c.fa_kinds, "job_slowdown_for_real_slowdown": c.symptoms}))
            .collect();
        let rate_json: Vec<serde_json::Value> = t
            .by_rate
            .iter()
            .map(|((k, r), c)| json!({"kind": k, "link_rate": r, "runs": c.runs, "detected": c.tp, "missed": c.fn_, "false_alarms": c.fa}))
            .collect();
        let storage_json: Vec<serde_json::Value> = t
            .by_storage
            .iter()
            .map(|(s, c)| json!({"fleet": s, "runs": c.runs, "detected": c.tp, "missed": c.fn_, "false_alarms": c.fa}))
            .collect();
        json!({
            "benchmark": "detection_accuracy",
            "date": provenance().0,
            "commit": provenance().1,
            "elapsed_s": self.elapsed,
            "grid": self.grid_json(),
            "scenarios": self.outcomes.len(),
            "confounder_runs": conf_runs,
            "precision": precision, "recall": recall,
            "true_positives": t.total.tp, "false_positives": t.total.fa, "false_negatives": t.total.fn_,
            "confounder_false_alarms": conf_fa,
            "not_visible_within_run": t.total.not_visible,
            "kinds": kinds_json,
            "by_kind_and_window": kw_json,
            "confounders_by_window": conf_json,
            "link_faults_by_rate": rate_json,
            "storage_stall_by_fleet": storage_json,
            "interference": {
                "runs": i.runs, "detected": i.detected, "aggressor_named": i.named,
                "recall": i.recall(), "precision": i.precision(),
                "incidents": i.all, "right": i.right, "confounder_incidents": i.in_confounders,
                "rule": "recall: interference fault runs whose incident on the shared resource named etl-batch as the aggressor; precision: such incidents over every interference incident of every run",
            },
            "joining": {
                "accuracy": self.joining.accuracy,
                "rule": "fault runs (job-slow excluded) that were detected and whose fault slowed the job's step time (median after visible over median before onset) by at least workload.min_slowdown; right = the fault's incident carried `explains job …`",
                "by_fault": self.joining.by_fault.iter().map(|(k, v)| json!({"fault": k, "runs": v[0], "attached_to_fault": v[1], "attached_elsewhere": v[2], "not_attached": v[3], "separate_job_slowdown_open": v[4]})).collect::<Vec<_>>(),
            },
            "xid": self.xid.json(),
            "runs": self.outcomes,
            "note": "latency from onset in windows counts from the onset window (0: raised in it); in seconds it is to the end of the window in which the incident appeared. Latency from visible is signed (negative: the engine alarmed before the fault became visible, e.g. before a degrading link's excess errors since its onset were significant at the reference BER). False alarms are distinct incident ids that never carried the expected (kind, entity); in confounder-only runs every incident is one.",
        })
    }
}

/// Date and commit of the run, taken when it starts.
static PROVENANCE: std::sync::OnceLock<(String, Option<String>)> = std::sync::OnceLock::new();

/// Records the run's date and commit (at its start).
pub fn pin_provenance() {
    provenance();
}

fn provenance() -> &'static (String, Option<String>) {
    PROVENANCE.get_or_init(|| {
        let now = vocab::time::unix_ms(std::time::SystemTime::now());
        (vocab::time::utc(now), commit())
    })
}

/// The commit the result comes from (`git rev-parse HEAD` where it runs),
/// `+dirty` when the work tree differs from it; null outside a checkout.
fn commit() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"])?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty { format!("{head}+dirty") } else { head })
}
