//! The stand-in `launch_storm`: started on the configured driver, its end
//! line (launches, seconds) read; its threads' CPU time.
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context as _, Result};

use super::Args;

pub(super) struct Storm {
    pub child: std::process::Child,
    pub lines: std::sync::mpsc::Receiver<String>,
    pub pid: u32,
}

pub(super) fn spawn(a: &Args) -> Result<Storm> {
    let mut child = Command::new(tests::launch_storm())
        .arg(a.library())
        .args([
            a.threads.to_string(),
            a.seconds.to_string(),
            a.work_ns.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning launch_storm")?;
    let lines = tests::lines_of(&mut child);
    let pid = lines
        .recv_timeout(crate::wait::READY)
        .ok()
        .and_then(|l| l.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()))
        .context("launch_storm did not start")?;
    Ok(Storm { child, lines, pid })
}

/// Waits for the stand-in's end line: (launches, seconds).
pub(super) fn finish(mut s: Storm) -> Result<(u64, f64)> {
    let status = s.child.wait()?;
    ensure!(status.success(), "launch_storm failed: {status}");
    for l in s.lines.iter() {
        if let Some(rest) = l.strip_prefix("launches ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            if let (Some(n), Some(secs)) = (f.first(), f.get(2)) {
                return Ok((n.parse()?, secs.parse()?));
            }
        }
    }
    bail!("launch_storm printed no count")
}

/// CPU ns of every thread of `pid` (`/proc/PID/task/*/schedstat`).
pub(super) fn task_cpu_ns(pid: u32) -> u64 {
    let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    d.filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}
