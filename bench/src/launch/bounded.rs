//! Bounded-overhead mode as the collector runs it: the launch controller
//! toggling the probes on its duty schedule within the budget, a window
//! each second; its estimated launch count against the stand-in's truth,
//! and the trap cost it used against the one the stand-in paid.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use collector::{
    cuda::launch_control::LaunchController,
    probes::{ProbeOptions, Probes},
};

use super::{
    storm::{finish, spawn, task_cpu_ns},
    Args, BoundedRound, Measured,
};

/// What the agent's loop saw until the stand-in exited.
struct Seen {
    /// Launches counted (scaled) since the start.
    estimate: u64,
    /// The controller's attached fraction per window.
    fractions: Vec<f64>,
    round: BoundedRound,
    /// The stand-in's CPU, ns: all of it, and while the probes were attached.
    cpu_all: u64,
    cpu_attached: u64,
}

/// The agent's loop: a window each second, toggles on schedule, until the
/// stand-in `pid` exits; `before` is its count at the start.
fn agent_loop(p: &mut Probes, ctl: &mut LaunchController, pid: u32, before: u64) -> Result<Seen> {
    let mut fractions = Vec::new();
    let mut round = BoundedRound::default();
    // The stand-in's CPU: all of it, and while the probes were attached.
    let (cpu_start, mut cpu_att, mut cpu_mark) = (task_cpu_ns(pid), 0u64, 0u64);
    let mut cpu_end = cpu_start;
    let mut next_window = Instant::now() + Duration::from_secs(1);
    let estimate = loop {
        // Exited but not reaped: the last snapshot still reads its
        // final CPU time (the scaling's basis).
        let exited = collector::probes::bench::child_exited_unreaped(pid);
        if !exited {
            // A thread's CPU leaves the sum when it exits (the workers end
            // before the process): the total is the largest reading.
            cpu_end = cpu_end.max(task_cpu_ns(pid));
        }
        let now = Instant::now();
        if exited || now >= next_window {
            let snap = p.cuda_snapshot()?;
            fractions.push(ctl.fraction());
            let terms = ctl.bound_terms();
            if ctl.fraction() < 1.0 {
                if terms.changes == 0 {
                    // Sampled before a rate change was measured: the bound
                    // says so (unmeasured rate, approximate).
                    round.unmeasured_windows += 1;
                }
                round.approximate |= ctl.approximate();
                if ctl.error_bound() >= round.estimated_error_bound {
                    round.estimated_error_bound = ctl.error_bound();
                    round.terms = Some(terms.into());
                }
            }
            next_window = now + Duration::from_secs(1);
            if exited {
                break snap
                    .launches
                    .iter()
                    .filter(|(k, _)| k.pid == pid)
                    .map(|(_, v)| v.launches)
                    .sum::<u64>()
                    - before;
            }
            continue;
        }
        let t = ctl.next_event(p.launch_probes_attached());
        if t <= now {
            let was = p.launch_probes_attached();
            ctl.on_event(p)?;
            if was != p.launch_probes_attached() {
                let c = task_cpu_ns(pid);
                if was {
                    cpu_att += c.saturating_sub(cpu_mark);
                }
                cpu_mark = c;
            }
        } else {
            std::thread::sleep(t.min(next_window) - now);
        }
    };
    // Ended while attached: its last attached stretch.
    if p.launch_probes_attached() {
        cpu_att += cpu_end.saturating_sub(cpu_mark);
    }
    Ok(Seen {
        estimate,
        fractions,
        round,
        cpu_all: cpu_end.saturating_sub(cpu_start),
        cpu_attached: cpu_att,
    })
}

/// One bounded-mode measurement.
pub(super) fn measure(a: &Args, opts: &ProbeOptions) -> Result<Measured> {
    // Run counts of the launch program: every trap, counted or gated.
    let _stats = collector::probes::enable_run_stats().context("BPF_ENABLE_STATS")?;
    let mut p = Probes::load(opts)?;
    // As the collector runs it: the hit cost measured at start and
    // again while the stand-in is bounded.
    let kind = p.launch_entry_kind().context("no launch probes attached")?;
    let mut ctl = LaunchController::calibrating(
        a.budget,
        Duration::from_millis(a.period_ms),
        Path::new("/proc"),
        kind,
    )?;
    let first = p.cuda_snapshot()?;
    let me = std::process::id();
    let (cpu0, t0) = (
        crate::procstat::cpu_seconds(me).unwrap_or(0.0),
        Instant::now(),
    );
    let s = spawn(a)?;
    let pid = s.pid;
    let before: u64 = first
        .launches
        .iter()
        .filter(|(k, _)| k.pid == pid)
        .map(|(_, v)| v.launches)
        .sum();
    let seen = agent_loop(&mut p, &mut ctl, pid, before)?;
    let Seen {
        estimate,
        fractions,
        mut round,
        ..
    } = seen;
    let runs: u64 = p
        .program_run_stats()
        .iter()
        .filter(|(n, _, _)| n == "cuda_launch")
        .map(|(_, c, _)| *c)
        .sum();
    let agent_cpu =
        (crate::procstat::cpu_seconds(me).unwrap_or(0.0) - cpu0) / t0.elapsed().as_secs_f64();
    let raw = p.raw_launch_totals()?.get(&pid).copied().unwrap_or(0);
    println!(
        "  bounded: the agent's loop (snapshots, checks, attach/detach) used {:.2} % of a CPU",
        100.0 * agent_cpu
    );
    println!(
        "  bounded: {runs} traps, {raw} counted ({} gated); hit cost at the end {:.0} ns",
        runs.saturating_sub(raw),
        ctl.hit_cost_s() * 1e9
    );
    // The exit line (the child has exited).
    let (n, secs) = finish(s)?;
    // Every trap (counted or gated) fell in an attached phase; the
    // other launches ran detached.
    let cpu_all = seen.cpu_all as f64 * 1e-9;
    let cpu_on = seen.cpu_attached as f64 * 1e-9;
    round.calibrated_hit_cost_ns = ctl.hit_cost_s() * 1e9;
    round.paid_hit_cost_ns = if runs > 0 && n > runs {
        1e9 * (cpu_on / runs as f64 - (cpu_all - cpu_on) / (n - runs) as f64)
    } else {
        0.0
    };
    println!(
        "  bounded: count / truth {:.3}{}, estimated error bound {:.1} %; a trap cost the stand-in {:.0} ns, the controller used {:.0} ns",
        estimate as f64 / n as f64,
        if round.approximate { " (approximate)" } else { "" },
        round.estimated_error_bound * 100.0,
        round.paid_hit_cost_ns,
        round.calibrated_hit_cost_ns
    );
    Ok(Measured {
        launches_per_sec: n as f64 / secs,
        count_over_truth: Some(estimate as f64 / n as f64),
        fractions,
        bounded: Some(round),
    })
}
