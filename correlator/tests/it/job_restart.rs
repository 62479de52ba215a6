//! A restarted job is a new run (issue 48 item 5): job 4711 runs 8 ranks on
//! 4 hosts (2 GPUs each) at 6 s steps, reported per 10 s window (the steps
//! that completed in it, their mean and max). It crashes three times; each
//! time its processes are gone for 20 s, then new ones (new pids) take the
//! first step 3x and the second 2x slower (warm-up), then run as before.
//! Before, the warm-up steps were compared with the run before the restart
//! and raised `job_slowdown`; now a restart starts a new baseline and its
//! warm-up is skipped. A job really slowed after a restart still raises it.
use correlator::engine::{DetectConfig, Engine};
use proto::v1::{CandidateUpdate, CudaProc, Origin, StepTime, Window};

const HOSTS: usize = 4;
const GPUS: usize = 2;
const WIN_MS: i64 = 10_000;
const T0: i64 = 1_800_000_000_000;
const STEP_S: f64 = 6.0;

/// One phase of the job's life.
#[derive(Clone, Copy)]
enum Phase {
    /// Running for `secs` at `factor` × the step time.
    Run { secs: f64, factor: f64 },
    /// Crashed: no processes, no steps for `secs`; then new processes
    /// whose first two steps are 3x and 2x.
    Restart { secs: f64 },
}

/// A step: its end (ms), seconds and the pid generation it ran under.
type Step = (i64, f64, u32);
/// A generation of processes: from, to (ms), generation.
type Life = (i64, i64, u32);

/// Every step, and when each generation's processes exist.
fn schedule(phases: &[Phase]) -> (Vec<Step>, Vec<Life>) {
    let (mut t, mut gen, mut gen_from) = (0.0f64, 1u32, 0.0f64);
    let (mut steps, mut lives) = (Vec::new(), Vec::new());
    for p in phases {
        match *p {
            Phase::Run { secs, factor } => {
                let end = t + secs;
                while t + STEP_S * factor <= end {
                    t += STEP_S * factor;
                    steps.push(((t * 1000.0) as i64, STEP_S * factor, gen));
                }
            }
            Phase::Restart { secs } => {
                lives.push(((gen_from * 1000.0) as i64, (t * 1000.0) as i64, gen));
                t += secs;
                gen += 1;
                gen_from = t;
                for f in [3.0, 2.0] {
                    t += STEP_S * f;
                    steps.push(((t * 1000.0) as i64, STEP_S * f, gen));
                }
            }
        }
    }
    lives.push((
        (gen_from * 1000.0) as i64,
        (t * 1000.0) as i64 + WIN_MS,
        gen,
    ));
    (steps, lives)
}

/// Runs the job through `phases`; `pids`: whether the collector sees its
/// processes (CUDA rows) or only its OTLP steps. The `job_slowdown`
/// incidents opened, with their window's time (s from the start).
fn run(phases: &[Phase], pids: bool) -> Vec<(i64, CandidateUpdate)> {
    let (steps, lives) = schedule(phases);
    let end = steps.last().map_or(0, |s| s.0) + WIN_MS;
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut out = Vec::new();
    let mut k = 0i64;
    while k * WIN_MS < end {
        let (from, to) = (k * WIN_MS, (k + 1) * WIN_MS);
        let done: Vec<f64> = steps
            .iter()
            .filter(|s| s.0 > from && s.0 <= to)
            .map(|s| s.1)
            .collect();
        let live = lives.iter().find(|l| l.0 < to && l.1 > from).map(|l| l.2);
        for h in 0..HOSTS {
            let mut w = Window {
                origin: Some(Origin {
                    hostname: format!("g{h:02}"),
                    ..Origin::default()
                }),
                seq: k as u64 + 1,
                start_unix_ms: T0 + from,
                end_unix_ms: T0 + to,
                ..Window::default()
            };
            for g in 0..GPUS {
                let rank = (h * GPUS + g) as u32;
                if let (true, Some(gen)) = (pids, live) {
                    w.cuda.push(CudaProc {
                        pid: gen * 1000 + rank + 100,
                        device: g as i32,
                        job: "4711".into(),
                        rank: Some(rank),
                        launches: 100,
                        ..CudaProc::default()
                    });
                }
                if !done.is_empty() {
                    w.steps.push(StepTime {
                        job: "4711".into(),
                        rank,
                        // The ranks of a synchronous job within 1 % of each
                        // other.
                        seconds: done.iter().sum::<f64>() / done.len() as f64
                            * (1.0 + 0.001 * f64::from(rank)),
                        count: done.len() as u32,
                        max_seconds: done.iter().copied().fold(0.0, f64::max),
                        device: g as i32,
                        ..StepTime::default()
                    });
                }
            }
            for u in e.ingest(&w) {
                if u.kind == "job_slowdown" && u.state == "opened" {
                    out.push((to / 1000, u));
                }
            }
        }
        k += 1;
    }
    out
}

/// 10 minutes running, then three crashes 5 minutes apart, each with 20 s
/// without processes (the steps pause for 38 s: too short for the pause
/// rule, so only the new pids tell the restart).
fn three_restarts() -> Vec<Phase> {
    let mut p = vec![Phase::Run {
        secs: 600.0,
        factor: 1.0,
    }];
    for _ in 0..3 {
        p.push(Phase::Restart { secs: 20.0 });
        p.push(Phase::Run {
            secs: 300.0,
            factor: 1.0,
        });
    }
    p
}

#[test]
fn a_job_restarted_three_times_with_warm_up_steps_raises_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let out = run(&three_restarts(), true);
    assert!(out.is_empty(), "{out:#?}");
}

#[test]
fn a_job_really_slowed_after_a_restart_still_raises_job_slowdown() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut p = three_restarts();
    // 1.5x slower steps from 5 minutes into the third run, for 5 minutes.
    p.push(Phase::Run {
        secs: 300.0,
        factor: 1.5,
    });
    let out = run(&p, true);
    assert_eq!(out.len(), 1, "{out:#?}");
    let (at, u) = &out[0];
    assert_eq!(u.entity, "4711");
    // The slowdown starts at 600 + 3 × (20 + 30 + 300) = 1650 s: found
    // within its persistence (20 s) and the grace (30 s), plus a slot or
    // two.
    let start = 600 + 3 * 350;
    assert!(
        (start..=start + 90).contains(at),
        "opened at {at} s: {u:#?}"
    );
}

#[test]
fn a_restart_not_seen_in_process_rows_is_recognised_by_the_pause() {
    let _turn = tests::one_file_at_a_time(file!());
    // OTLP steps only (no CUDA rows): the restart shows only as a pause
    // in the steps, here 90 s without processes and the first warm-up
    // step (18 s), past the rule's 60 s.
    let mut p = vec![Phase::Run {
        secs: 600.0,
        factor: 1.0,
    }];
    for _ in 0..3 {
        p.push(Phase::Restart { secs: 90.0 });
        p.push(Phase::Run {
            secs: 300.0,
            factor: 1.0,
        });
    }
    let out = run(&p, false);
    assert!(out.is_empty(), "{out:#?}");
}
