//! Processes, files, deadlines.
use std::{
    fs,
    path::Path,
    process::{Child, Command, ExitStatus},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context as _, Result};

/// How long a stopped process may take to exit. The collector detaches
/// every uprobe on its way out (the CUDA and, with the NCCL part, the NCCL
/// ones), each after an RCU grace period: on a two-core test machine
/// loaded by parallel builds that was measured at 24 to 76 s with the CUDA
/// probes alone, on an idle machine a second or two.
pub const STOP_GRACE: Duration = Duration::from_secs(120);

/// A child process killed (and reaped) when dropped, so that no early return
/// leaves the collector, the workload or the sampler running.
pub struct Proc {
    pub child: Child,
    what: &'static str,
}

impl Proc {
    pub fn spawn(mut c: Command, stdout: &Path, stderr: &Path, what: &'static str) -> Result<Self> {
        let o =
            fs::File::create(stdout).with_context(|| format!("creating {}", stdout.display()))?;
        let e =
            fs::File::create(stderr).with_context(|| format!("creating {}", stderr.display()))?;
        let child = c
            .stdout(o)
            .stderr(e)
            .spawn()
            .with_context(|| format!("starting {what} ({c:?})"))?;
        Ok(Self { child, what })
    }

    /// An error naming the exit and the end of `stderr` once it exited.
    pub fn alive(&mut self, stderr: &Path) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!("{} exited early ({st}): {}", self.what, tail(stderr, 15));
        }
        Ok(())
    }

    /// SIGTERM, then wait up to [`STOP_GRACE`] or the deadline, whichever
    /// comes first (SIGKILL after it).
    pub fn stop(&mut self, deadline: Instant) -> Result<ExitStatus> {
        if let Some(st) = self.child.try_wait()? {
            return Ok(st);
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) on our own child's pid, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let give_up = deadline.min(Instant::now() + STOP_GRACE);
        loop {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st);
            }
            if Instant::now() >= give_up {
                let _ = self.child.kill();
                bail!("{} did not stop on SIGTERM", self.what);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `c` to its end with stdout and stderr in `log`, killed at the deadline.
pub fn run_logged(
    c: Command,
    log: &Path,
    deadline: Instant,
    what: &'static str,
) -> Result<ExitStatus> {
    let mut p = Proc::spawn(c, log, &log.with_extension("err"), what)?;
    loop {
        if let Some(st) = p.child.try_wait()? {
            return Ok(st);
        }
        if Instant::now() >= deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `ready` until it says true, or fails at the deadline.
pub fn wait_for(
    deadline: Instant,
    what: &str,
    mut ready: impl FnMut() -> Result<bool>,
) -> Result<()> {
    loop {
        if ready()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn read(p: &Path) -> String {
    fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Complete lines in the file.
pub fn lines(p: &Path) -> usize {
    read(p).bytes().filter(|&b| b == b'\n').count()
}

/// The last `n` lines of a file, on one line.
pub fn tail(p: &Path, n: usize) -> String {
    let text = read(p);
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let t = v[v.len().saturating_sub(n)..].join(" | ");
    if t.is_empty() {
        format!("(nothing in {})", p.display())
    } else {
        t
    }
}

pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
