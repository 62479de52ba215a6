//! The stand-in `nccl_storm`: started on the configured library, its
//! end line (the calls it made) parsed.
use std::process::{Command, Stdio};

use anyhow::{ensure, Context as _, Result};
use serde::Serialize;

use super::Args;

/// What the stand-in says it did.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(super) struct Truth {
    /// NCCL calls in the timed loop (all-reduces + group starts + ends).
    pub calls: u64,
    pub seconds: f64,
    pub allreduce: u64,
    pub group_start: u64,
    pub group_end: u64,
    /// `ncclCommInitAll` calls (one per thread) and `ncclCommDestroy` calls.
    pub init: u64,
    pub destroy: u64,
}

pub(super) struct Storm {
    pub child: std::process::Child,
    pub lines: std::sync::mpsc::Receiver<String>,
    pub pid: u32,
}

pub(super) fn spawn(a: &Args, seconds: f64) -> Result<Storm> {
    let mut child = Command::new(tests::nccl_storm())
        .arg(a.library())
        .args([
            a.threads.to_string(),
            a.ndev.to_string(),
            seconds.to_string(),
            a.work_ns.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning nccl_storm")?;
    let lines = tests::lines_of(&mut child);
    let pid = lines
        .recv_timeout(crate::wait::READY)
        .ok()
        .and_then(|l| l.strip_prefix("ready ").and_then(|p| p.trim().parse().ok()))
        .context("nccl_storm did not start")?;
    Ok(Storm { child, lines, pid })
}

/// Parses the stand-in's end line.
fn parse_truth(line: &str) -> Option<Truth> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let get = |key: &str| -> Option<&str> {
        f.iter()
            .position(|w| *w == key)
            .and_then(|i| f.get(i + 1))
            .copied()
    };
    let int = |key: &str| -> Option<u64> { get(key)?.parse().ok() };
    Some(Truth {
        calls: int("calls")?,
        seconds: get("seconds")?.parse().ok()?,
        allreduce: int("allreduce")?,
        group_start: int("group_start")?,
        group_end: int("group_end")?,
        init: int("init")?,
        destroy: int("destroy")?,
    })
}

/// Waits for the stand-in's end line.
pub(super) fn finish(s: Storm) -> Result<Truth> {
    let Storm {
        mut child, lines, ..
    } = s;
    let status = child.wait()?;
    ensure!(status.success(), "nccl_storm failed: {status}");
    lines
        .iter()
        .find_map(|l| l.starts_with("calls ").then(|| parse_truth(&l)).flatten())
        .context("nccl_storm printed no count")
}

#[cfg(test)]
mod parse {
    #[test]
    fn the_storm_end_line_parses() {
        let t = super::parse_truth(
            "calls 146736 seconds 1.000 allreduce 97824 group_start 24456 group_end 24456 init 1 destroy 4",
        )
        .expect("parses");
        assert_eq!(t.calls, 146_736);
        assert_eq!(t.allreduce + t.group_start + t.group_end, t.calls);
        assert_eq!((t.init, t.destroy), (1, 4));
        assert!(super::parse_truth("calls 1 seconds x").is_none());
    }
}
