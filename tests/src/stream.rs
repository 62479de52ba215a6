//! Collector → correlator runs with real processes on loopback: start and
//! stop them, read what the correlator's ingest log recorded. Shared by the
//! stream outage test and the fault-injection suite.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::bin;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `faultline-correlator serve --record RECORD` on `port`.
pub fn correlator(port: u16, record: &Path) -> Child {
    correlator_with(port, record, &[])
}

/// [`correlator`] with extra `serve` arguments (`--metrics-addr`, `--history`).
pub fn correlator_with(port: u16, record: &Path, extra: &[&str]) -> Child {
    Command::new(bin("faultline-correlator"))
        .args([
            "serve",
            "--insecure",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--record",
        ])
        .arg(record)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the correlator")
}

/// (instance, seq) of every window in the ingest log, in file order. Panics
/// on a line that is not a whole window (a half-written line).
pub fn recorded_windows(record: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("ingest log line is not a window ({e}): {l:?}"));
            let inst = v["origin"]["instance"].as_str().unwrap_or("").to_string();
            (inst, v["seq"].as_u64().unwrap_or(0))
        })
        .collect()
}

/// Sequence numbers in the ingest log, in file order.
pub fn recorded(record: &Path) -> Vec<u64> {
    recorded_windows(record)
        .into_iter()
        .map(|(_, s)| s)
        .collect()
}

pub fn wait_recorded(record: &Path, seq: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while recorded(record).last().copied().unwrap_or(0) < seq {
        assert!(
            Instant::now() < deadline,
            "correlator never recorded window {seq}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A value of the collector's exit summary (`stream: spooled N, …`).
pub fn summary_field(summary: &str, name: &str) -> u64 {
    summary
        .split(", ")
        .find_map(|p| {
            p.trim_start_matches("stream: ")
                .strip_prefix(&format!("{name} "))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {summary:?}"))
}

/// A fresh temporary directory for one test.
pub fn tmp(tag: &str) -> PathBuf {
    crate::scratch_dir(&format!("stream-{tag}"))
}

/// A streaming collector whose console is read on a thread.
pub struct Collector {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    /// Last window it reported closing.
    pub last_seq: u64,
}

impl Collector {
    pub fn start(port: u16, spool: &Path, spool_max: u64, sysfs: &Path) -> Self {
        Self::start_window("0.1", port, spool, spool_max, sysfs)
    }

    pub fn start_window(
        window: &str,
        port: u16,
        spool: &Path,
        spool_max: u64,
        sysfs: &Path,
    ) -> Self {
        let url = format!("http://127.0.0.1:{port}");
        let mut child = crate::streaming_collector(window, &url, spool, sysfs)
            .args(["--spool-max-bytes", &spool_max.to_string()])
            .spawn()
            .expect("start the collector");
        let lines = crate::lines_of(&mut child);
        Self::from_parts(child, lines)
    }

    /// A collector started by the caller, with its console lines.
    pub fn from_parts(child: Child, lines: mpsc::Receiver<String>) -> Self {
        Self {
            child,
            lines,
            last_seq: 0,
        }
    }

    fn note(&mut self, l: &str) {
        if let Some(rest) = l.strip_prefix("window ") {
            if let Some(n) = rest.split(':').next().and_then(|n| n.parse().ok()) {
                self.last_seq = n;
            }
        }
    }

    /// Reads output until the collector has closed window `seq`.
    pub fn wait_seq(&mut self, seq: u64) {
        while self.last_seq < seq {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("collector stopped before window {seq}: {e}"));
            self.note(&l);
        }
    }

    /// SIGKILL: no last window, no summary.
    pub fn kill9(mut self) -> u64 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for l in self.lines.try_iter().collect::<Vec<_>>() {
            self.note(&l);
        }
        self.last_seq
    }

    /// SIGTERM, then the rest of the output (final window and stream
    /// summary) and how long the exit took.
    pub fn stop(mut self) -> (u64, String, Duration) {
        let asked = Instant::now();
        // SAFETY: kill(2) on our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut summary = String::new();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(30)) {
            self.note(&l);
            if l.starts_with("stream:") {
                summary = l;
            }
        }
        let st = self.child.wait().expect("wait collector");
        let took = asked.elapsed();
        assert!(st.success(), "collector exit: {st}");
        (self.last_seq, summary, took)
    }
}
