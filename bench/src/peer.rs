//! The peer the benchmarks compare against: `bpftrace` (Debian's package,
//! installed by `scripts/setup.sh`) running the program a user would
//! otherwise run for the same question, on the same workload in the same run.
use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader, Read as _},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use anyhow::{bail, Context as _, Result};
use serde::Serialize;

/// A running `bpftrace -e PROGRAM`, attached once it printed its BEGIN line
/// (bpftrace runs BEGIN after every probe is attached).
pub struct Bpftrace {
    child: Child,
    out: mpsc::Receiver<String>,
    /// BPF program ids that appeared while it started (its programs).
    pub prog_ids: BTreeSet<u32>,
}

/// The first line the peer programs print from BEGIN.
const READY: &str = "faultline-bench-peer-ready";

/// Whether a benchmark's peer row runs: not skipped (`skip`) and bpftrace
/// found; a row wanted but missing is said on stdout.
pub fn wanted(skip: bool) -> bool {
    let peer = !skip && available();
    if !peer && !skip {
        println!("bpftrace not found: no peer row (scripts/setup.sh installs it)");
    }
    peer
}

/// A report's `peer` field: bpftrace's version when the peer `ran`, else
/// empty.
pub fn version_if(ran: bool) -> String {
    if ran {
        version()
    } else {
        String::new()
    }
}

/// Whether `bpftrace` is on PATH (`bpftrace --version` runs).
pub fn available() -> bool {
    Command::new("bpftrace")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The version string (`bpftrace v0.17.0`), for the report.
pub fn version() -> String {
    Command::new("bpftrace")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The value of a `@ = count();` map that bpftrace printed at exit
/// (`@: N`); 0 when absent.
pub fn count_printed(out: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix("@: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Ids of the BPF programs loaded now.
pub fn prog_ids() -> BTreeSet<u32> {
    aya::programs::loaded_programs()
        .filter_map(|p| p.ok().map(|p| p.id()))
        .collect()
}

/// In-kernel time (ns, while BPF_ENABLE_STATS is on) that programs loaded
/// since `before` have run so far.
pub fn run_ns_since(before: &BTreeSet<u32>) -> u64 {
    aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .filter(|p| !before.contains(&p.id()))
        .map(|p| p.run_time().as_nanos() as u64)
        .sum()
}

impl Bpftrace {
    /// Starts `bpftrace -e "BEGIN { printf(READY) } PROGRAM"` and waits
    /// (≤ 60 s) until it is attached.
    pub fn start(program: &str) -> Result<Self> {
        let before = prog_ids();
        let full = format!("BEGIN {{ printf(\"{READY}\\n\"); }}\n{program}");
        let mut child = Command::new("bpftrace")
            .arg("-e")
            .arg(&full)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning bpftrace (install it: scripts/setup.sh)")?;
        let stdout = child.stdout.take().context("bpftrace stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(l) if l.contains(READY) => break,
                Ok(_) => {}
                Err(_) => {
                    let _ = child.kill();
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    let _ = child.wait();
                    bail!("bpftrace did not attach: {}", err.trim());
                }
            }
        }
        let prog_ids = prog_ids().difference(&before).copied().collect();
        Ok(Self {
            child,
            out: rx,
            prog_ids,
        })
    }

    /// Kernel run statistics of its programs (while BPF_ENABLE_STATS is on):
    /// (name, runs, ns).
    pub fn run_stats(&self) -> Vec<ProgramCost> {
        aya::programs::loaded_programs()
            .filter_map(|p| p.ok())
            .filter(|p| self.prog_ids.contains(&p.id()) && p.run_count() > 0)
            .map(|p| ProgramCost {
                program: format!("bpftrace:{}", p.name_as_str().unwrap_or("?")),
                runs: p.run_count(),
                ns_per_run: p.run_time().as_nanos() as f64 / p.run_count() as f64,
            })
            .collect()
    }

    /// Stops it with SIGINT (repeated each second: bpftrace can miss one
    /// that arrives as its event loop starts; SIGKILL after 15 s) and
    /// returns what it printed at exit (its maps).
    pub fn stop(mut self) -> Result<String> {
        let mut status = None;
        for _ in 0..15 {
            // SAFETY: signalling our own child by pid.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
            for _ in 0..10 {
                status = self.child.try_wait().context("waiting for bpftrace")?;
                if status.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if status.is_some() {
                break;
            }
        }
        let Some(status) = status else {
            let _ = self.child.kill();
            bail!("bpftrace did not stop on SIGINT within 15 s");
        };
        let mut out = String::new();
        while let Ok(l) = self.out.recv_timeout(Duration::from_secs(5)) {
            out.push_str(&l);
            out.push('\n');
        }
        if !status.success() && status.signal_is_not_int() {
            bail!("bpftrace exited with {status}");
        }
        Ok(out)
    }
}

trait SignalCheck {
    fn signal_is_not_int(&self) -> bool;
}

impl SignalCheck for std::process::ExitStatus {
    fn signal_is_not_int(&self) -> bool {
        use std::os::unix::process::ExitStatusExt as _;
        self.signal().is_some_and(|s| s != libc::SIGINT)
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One BPF program's cost from the kernel's own accounting.
#[derive(Clone, Debug, Serialize)]
pub struct ProgramCost {
    pub program: String,
    pub runs: u64,
    pub ns_per_run: f64,
}
