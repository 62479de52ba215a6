//! XIDs and SXids as the collector reports them from the kernel log.
//!
//! The driver's kernel-log line names the process that met an XID
//! (`NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, …`); the
//! collector attributes that pid to its job, rank and user from its CUDA
//! probes, and joins the line with NVML's event of the same XID into one
//! event (`source` `nvml+kmsg`). An NVSwitch error (`SXid`) is in the
//! kernel log only (`source` `kmsg`, no process).
//!
//! Who meets an XID here, by fault:
//! * `xid`: the training rank on the GPU (pid `PID_BASE + gpu`, `python3`,
//!   job [`JOB`], its rank, uid [`TRAIN_UID`]); the codes NVIDIA routes to
//!   the node or a hardware workflow without a channel (79 fallen off the
//!   bus, 48 double-bit ECC, the NVLink workflow's) name no process (pid 0).
//! * `xid-crash-loop`: one single-GPU job ([`CRASH_JOB`], `python3`, uid
//!   [`CRASH_UID`]) that its launcher restarts: each crash a new pid, the
//!   same code, then XID 45 of the channels' teardown from the same pid.
//! * `xid-bad-gpu`: `jobs` unrelated single-GPU jobs (each another user and
//!   executable, [`BAD_GPU_JOBS`]) scheduled on the GPU `gap` seconds apart,
//!   each dying at once with the same code (and its XID 45).
//! * `xid-burst`: `lines` XIDs of one code spread over one second from the
//!   training rank: folded (`folded=1`, the collector's one event per
//!   window with a count) or each line its own event (`folded=0`, as a
//!   collector that does not fold them sends them).
//!
//! A window's reports are folded as the collector folds them
//! (`collector/src/kmsg/source.rs`): one event per (kind, entity, code),
//! the first report's process and time, `count` the reports.
//! * `xid-cancelled-jobs`: `jobs` jobs of 1, 2, 4 or 8 GPUs of one host,
//!   each of [`USERS`] users running one of [`PROCESSES`], cancelled at
//!   times uniform over `span`: every GPU of a job logs XID 45 from its
//!   rank's pid; half the jobs (killed with work in flight) log XID 43
//!   first. Drawn per job from its own stream, whatever the window length.
//! * `nvswitch-sxid`: one SXid on NVSwitch `switch` of the host's tray
//!   ([`NVSWITCH_PCI`]: an HGX H100 baseboard's four).
//!
//! These jobs time-slice the GPU beside the training rank (as the
//! `interference-gpu` tenant does); the training job's physics is not
//! changed by them, as it is not by the `xid` fault.
use proto::v1::Event;

use super::{nccl::PID_BASE, Cluster, Fault, Kind, Span, Target, GPUS, JOB};
use crate::rng::Rng;

/// The training job's processes' user.
pub const TRAIN_UID: u32 = 1000;
/// The crash-looping job, its executable and user.
pub const CRASH_JOB: &str = "ft-debug";
pub const CRASH_UID: u32 = 2001;
/// The bad GPU's victims: (job, executable), each its own user (uid
/// `4001 + j`); cycled with the job's number appended past the fifth.
pub const BAD_GPU_JOBS: &[(&str, &str)] = &[
    ("render-frames", "blender"),
    ("md-sweep", "gmx_mpi"),
    ("eval-harness", "python3"),
    ("cfd-run", "simpleFoam"),
    ("genomics-align", "parabricks"),
];
/// The cancelled jobs' users (uid `3000 + u`) and executables.
pub const USERS: usize = 6;
pub const PROCESSES: &[&str] = &["python3", "torchrun", "julia", "lmp", "gmx_mpi"];
/// NVSwitches of a tray and their PCI addresses (an HGX H100 baseboard).
pub const NVSWITCHES: usize = 4;
pub const NVSWITCH_PCI: [&str; NVSWITCHES] = [
    "0000:05:00.0",
    "0000:06:00.0",
    "0000:07:00.0",
    "0000:08:00.0",
];
/// XID 45: the driver removes a dead or killed process's channels.
pub const TEARDOWN: u32 = 45;
/// XID 43: a channel stopped with work in flight.
pub const STOPPED: u32 = 43;
/// The teardown's XID 45 follows the fault this long after.
const TEARDOWN_S: f64 = 0.05;

/// `host/nvswitch/<pci>` of switch `switch` of the host's tray.
pub fn switch_entity(host: &str, switch: usize) -> String {
    vocab::entity::nvswitch(host, NVSWITCH_PCI[switch.min(NVSWITCHES - 1)])
}

/// The process an XID names and what the collector attributed to it.
struct Who {
    pid: u32,
    process: String,
    job: String,
    rank: Option<u32>,
    uid: u32,
}

impl Who {
    /// The training rank on `node`'s GPU `gpu`.
    fn rank(node: usize, gpu: usize) -> Self {
        Self {
            pid: PID_BASE + gpu as u32,
            process: "python3".into(),
            job: JOB.into(),
            rank: Some((node * GPUS + gpu) as u32),
            uid: TRAIN_UID,
        }
    }
}

/// Whether NVIDIA's catalogue routes `code` without a channel, so the
/// driver's line names no process.
fn names_no_process(code: u32) -> bool {
    use vocab::xid::Action;
    matches!(
        vocab::xid::action(code),
        Action::RebootNode | Action::EccWorkflow | Action::NvlinkWorkflow
    )
}

impl Cluster {
    /// An XID event at simulated second `t` (met by `who`, or by no
    /// process), as NVML and the kernel log report it together.
    fn xid_event(&self, t: f64, node: usize, gpu: usize, code: u32, who: Option<&Who>) -> Event {
        let name = &self.nodes[node].name;
        let mut e = Event {
            unix_ms: self.t0_ms + (t * 1000.0).round() as i64,
            kind: vocab::EventKind::GpuXid.to_string(),
            entity: vocab::entity::gpu(name, gpu),
            detail: format!("GPU-{name}-{gpu}"),
            code: i64::from(code),
            source: "nvml+kmsg".into(),
            count: 1,
            ..Default::default()
        };
        if let Some(w) = who {
            e.pid = w.pid;
            e.process = w.process.clone();
            e.job = w.job.clone();
            e.rank = w.rank;
            e.uid = Some(w.uid);
        }
        e
    }

    /// The `xid` fault's event: from the training rank on the GPU unless
    /// the code names no process.
    pub(super) fn xid_fault_event(&self, t: f64, node: usize, gpu: usize, code: u32) -> Event {
        let who = (!names_no_process(code)).then(|| Who::rank(node, gpu));
        self.xid_event(t, node, gpu, code, who.as_ref())
    }

    /// A job's death at `t` on the GPU: XID `code`, then its channels'
    /// teardown (XID 45) from the same process, within the window.
    fn death(&mut self, s: Span, t: f64, (node, gpu): (usize, usize), code: u32, who: &Who) {
        let down = t + TEARDOWN_S.min(0.5 * (s.b - t));
        let first = self.xid_event(t, node, gpu, code, Some(who));
        let second = self.xid_event(down, node, gpu, TEARDOWN, Some(who));
        self.nodes[node].events.extend([first, second]);
    }

    /// The window's kernel-log XIDs and SXids of the XID faults, folded
    /// as the collector folds them.
    pub(super) fn xid_advance(&mut self, faults: &[Fault], s: Span) {
        let start: Vec<usize> = self.nodes.iter().map(|n| n.events.len()).collect();
        let raw = self.xid_reports(faults, s);
        for (node, from) in self.nodes.iter_mut().zip(start) {
            let new = node.events.split_off(from);
            node.events.extend(fold(new));
        }
        for (node, e) in raw {
            self.nodes[node].events.push(e);
        }
    }

    /// The window's reports of the XID faults (into the nodes' events),
    /// and the burst lines sent unfolded (node, event).
    fn xid_reports(&mut self, faults: &[Fault], s: Span) -> Vec<(usize, Event)> {
        let mut raw = Vec::new();
        let inside = |t: f64| t >= s.a - 1e-9 && t < s.b - 1e-9;
        for (fi, f) in faults.iter().enumerate() {
            let o = s.on(f);
            match (&f.kind, &f.target) {
                (
                    &Kind::XidCrashLoop {
                        code,
                        crashes,
                        span_s,
                    },
                    &Target::Gpu { node, gpu },
                ) => {
                    for i in 0..crashes {
                        let t = o + f64::from(i) * span_s / f64::from(crashes);
                        if inside(t) {
                            let who = Who {
                                pid: 30_000 + i,
                                process: "python3".into(),
                                job: CRASH_JOB.into(),
                                rank: None,
                                uid: CRASH_UID,
                            };
                            self.death(s, t, (node, gpu), code, &who);
                        }
                    }
                }
                (&Kind::XidBadGpu { code, jobs, gap_s }, &Target::Gpu { node, gpu }) => {
                    for j in 0..jobs {
                        let t = o + f64::from(j) * gap_s;
                        if inside(t) {
                            self.death(s, t, (node, gpu), code, &bad_gpu_job(j));
                        }
                    }
                }
                (
                    &Kind::XidBurst {
                        code,
                        lines,
                        folded,
                    },
                    &Target::Gpu { node, gpu },
                ) => {
                    // Line l at o + l / lines: those inside [a, b).
                    let n = f64::from(lines);
                    let from = ((s.a - o) * n).ceil().clamp(0.0, n) as u32;
                    let to = ((s.b - o) * n).ceil().clamp(0.0, n) as u32;
                    let who = Who::rank(node, gpu);
                    for l in from..to {
                        let e = self.xid_event(o + f64::from(l) / n, node, gpu, code, Some(&who));
                        if folded {
                            self.nodes[node].events.push(e);
                        } else {
                            raw.push((node, e));
                        }
                    }
                }
                (&Kind::NvswitchSxid { code, switch }, &Target::Node(node)) if inside(o) => {
                    let host = self.nodes[node].name.clone();
                    let e = Event {
                        unix_ms: self.t0_ms + (o * 1000.0).round() as i64,
                        kind: vocab::EventKind::NvswitchSxid.to_string(),
                        entity: switch_entity(&host, switch),
                        detail: format!(
                            "{}: SXid {code}: Fatal, Link 46",
                            NVSWITCH_PCI[switch.min(NVSWITCHES - 1)]
                        ),
                        code: i64::from(code),
                        source: "kmsg".into(),
                        count: 1,
                        ..Default::default()
                    };
                    self.nodes[node].events.push(e);
                }
                (&Kind::XidCancelledJobs { jobs, span_s }, _) => {
                    self.cancelled(fi, (jobs, span_s), o, s);
                }
                _ => {}
            }
        }
        raw
    }

    /// The cancelled jobs whose kill falls in the window.
    fn cancelled(&mut self, fi: usize, (jobs, span_s): (u32, f64), o: f64, s: Span) {
        for j in 0..jobs {
            let mut r = Rng::derive(
                self.spec.seed ^ 0x5ca1_ce11,
                (fi as u64) << 32 | u64::from(j),
            );
            let t = o + span_s * r.uniform();
            let node = r.below(self.nodes.len());
            let gpus = [1usize, 2, 4, 8][r.below(4)];
            let first = r.below(GPUS / gpus) * gpus;
            let user = r.below(USERS) as u32;
            let process = PROCESSES[r.below(PROCESSES.len())];
            let in_flight = r.bernoulli(0.5);
            if !(t >= s.a - 1e-9 && t < s.b - 1e-9) {
                continue;
            }
            for (i, gpu) in (first..first + gpus).enumerate() {
                let who = Who {
                    pid: 50_000 + j * GPUS as u32 + i as u32,
                    process: process.into(),
                    job: format!("batch-{j:04}"),
                    rank: (gpus > 1).then_some(i as u32),
                    uid: 3000 + user,
                };
                if in_flight {
                    let e = self.xid_event(t, node, gpu, STOPPED, Some(&who));
                    self.nodes[node].events.push(e);
                }
                let down = t + 0.01f64.min(0.5 * (s.b - t));
                let e = self.xid_event(down, node, gpu, TEARDOWN, Some(&who));
                self.nodes[node].events.push(e);
            }
        }
    }
}

/// Folds one window's reports as the collector does: one event per
/// (kind, entity, code) with the first report's process and time, and a
/// count of the reports it stands for.
fn fold(events: Vec<Event>) -> Vec<Event> {
    let mut at: std::collections::HashMap<(String, String, i64), usize> = Default::default();
    let mut out: Vec<Event> = Vec::with_capacity(events.len());
    for e in events {
        let key = (e.kind.clone(), e.entity.clone(), e.code);
        match at.get(&key) {
            Some(&i) => out[i].count += e.count.max(1),
            None => {
                at.insert(key, out.len());
                out.push(e);
            }
        }
    }
    out
}

/// The bad GPU's `j`-th victim: another user, another executable.
fn bad_gpu_job(j: u32) -> Who {
    let (job, exe) = BAD_GPU_JOBS[j as usize % BAD_GPU_JOBS.len()];
    let job = if (j as usize) < BAD_GPU_JOBS.len() {
        job.to_string()
    } else {
        format!("{job}-{j}")
    };
    Who {
        pid: 40_000 + j,
        process: exe.into(),
        job,
        rank: None,
        uid: 4001 + j,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cluster::ClusterSpec, faults};

    /// Runs `spec` (`--inject` syntax) on 8 nodes at `w`-second windows
    /// for `secs` and returns every event the nodes sent.
    fn events(spec: &str, w: f64, secs: f64) -> Vec<Event> {
        let mut c = Cluster::new(ClusterSpec {
            nodes: 8,
            window_s: w,
            ..ClusterSpec::default()
        });
        let fs = faults::parse_all(&[spec.to_string()], &c, 7).expect("spec");
        let mut out = Vec::new();
        while (c.window_index() as f64) * w < secs {
            c.advance(&fs, 10.0);
            for n in 0..8 {
                if let Some(win) = c.window(n) {
                    out.extend(win.events);
                }
            }
            c.finish_step();
        }
        out
    }

    #[test]
    fn a_crash_loop_is_one_job_restarting_with_a_new_pid_each_time() {
        let ev = events("xid-crash-loop@n002/gpu3", 10.0, 700.0);
        let crashes: Vec<&Event> = ev.iter().filter(|e| e.code == 13).collect();
        assert_eq!(crashes.len(), 20);
        assert_eq!(ev.iter().filter(|e| e.code == 45).count(), 20);
        let mut pids: Vec<u32> = crashes.iter().map(|e| e.pid).collect();
        pids.dedup();
        assert_eq!(pids.len(), 20, "a new process each restart");
        for e in &ev {
            assert_eq!(e.entity, "n002/gpu3");
            assert_eq!((e.job.as_str(), e.uid), (CRASH_JOB, Some(CRASH_UID)));
            assert_eq!(
                (e.process.as_str(), e.source.as_str()),
                ("python3", "nvml+kmsg")
            );
        }
        // Twenty in ten minutes: the first at the onset, the last 570 s on.
        let span = crashes[19].unix_ms - crashes[0].unix_ms;
        assert_eq!(span, 570_000);
    }

    #[test]
    fn a_bad_gpu_fails_unrelated_jobs_and_cancelled_jobs_log_43_and_45() {
        let ev = events("xid-bad-gpu@n001/gpu0:code=31,gap=100", 1.0, 300.0);
        let deaths: Vec<&Event> = ev.iter().filter(|e| e.code == 31).collect();
        assert_eq!(deaths.len(), 3);
        let mut users: Vec<Option<u32>> = deaths.iter().map(|e| e.uid).collect();
        let mut exes: Vec<&str> = deaths.iter().map(|e| e.process.as_str()).collect();
        users.dedup();
        exes.dedup();
        assert_eq!((users.len(), exes.len()), (3, 3), "unrelated jobs");
        let ev = events("xid-cancelled-jobs:jobs=200,span=600", 0.1, 700.0);
        let jobs: std::collections::BTreeSet<&str> = ev.iter().map(|e| e.job.as_str()).collect();
        assert_eq!(jobs.len(), 200, "every job cancelled within the run");
        assert!(ev.iter().all(|e| e.code == 43 || e.code == 45));
        let n = |v: &[Event], code: i64| -> u64 {
            v.iter().filter(|e| e.code == code).map(|e| e.count).sum()
        };
        let (kills, stopped) = (n(&ev, 45), n(&ev, 43));
        assert!(
            kills >= 200 && stopped > 0 && stopped < kills,
            "{kills} {stopped}"
        );
        // The same reports at 30 s windows, folded into fewer events
        // (several jobs' XID 45 on one GPU in one window: one event).
        let again = events("xid-cancelled-jobs:jobs=200,span=600", 30.0, 700.0);
        assert_eq!((n(&again, 45), n(&again, 43)), (kills, stopped));
        assert!(again.len() < ev.len());
    }

    #[test]
    fn a_burst_is_its_lines_within_a_second_and_an_sxid_names_its_switch() {
        let ev = events("xid-burst@n004/gpu7", 0.5, 20.0);
        assert_eq!(ev.len(), 2, "one event per window");
        assert_eq!(ev.iter().map(|e| e.count).sum::<u64>(), 10_000);
        let ev = events("xid-burst@n004/gpu7:folded=0", 0.5, 20.0);
        assert_eq!(ev.len(), 10_000);
        assert!(ev.iter().all(|e| e.code == 95 && e.pid == PID_BASE + 7));
        let ms: Vec<i64> = ev.iter().map(|e| e.unix_ms).collect();
        assert!(ms.iter().max().unwrap() - ms.iter().min().unwrap() <= 1000);
        let ev = events("nvswitch-sxid@n003:switch=2", 1.0, 20.0);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].kind, "nvswitch_sxid");
        assert_eq!(ev[0].entity, "n003/nvswitch/0000:07:00.0");
        assert_eq!(
            (ev[0].code, ev[0].pid, ev[0].source.as_str()),
            (20034, 0, "kmsg")
        );
        // The `xid` fault: the training rank, or no process for XID 79.
        let ev = events("xid@n001/gpu2:code=13", 1.0, 20.0);
        assert_eq!(
            (ev[0].pid, ev[0].rank, ev[0].job.as_str()),
            (PID_BASE + 2, Some(10), JOB)
        );
        let ev = events("xid@n001/gpu2:code=79", 1.0, 20.0);
        assert_eq!((ev[0].pid, ev[0].job.as_str()), (0, ""));
    }
}
