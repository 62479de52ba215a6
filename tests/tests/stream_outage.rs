//! Collector → correlator over real gRPC on loopback, with real processes:
//! the correlator is killed under load and restarted, and every window
//! arrives exactly once and in order; with a tiny spool and no correlator,
//! the drop count equals what is missing.
use std::{
    collections::BTreeSet,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use tests::bin;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn correlator(port: u16, record: &Path) -> Child {
    Command::new(bin("faultline-correlator"))
        .args([
            "serve",
            "--insecure",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--record",
        ])
        .arg(record)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the correlator")
}

/// Sequence numbers in the ingest log, in file order.
fn recorded(record: &Path) -> Vec<u64> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let i = l.find("\"seq\":")? + 6;
            l[i..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

struct Collector {
    child: Child,
    lines: mpsc::Receiver<String>,
    last_seq: u64,
}

impl Collector {
    fn start(port: u16, spool: &Path, spool_max: u64, sysfs: &Path) -> Self {
        let url = format!("http://127.0.0.1:{port}");
        let mut child = tests::streaming_collector("0.1", &url, spool, sysfs)
            .args(["--spool-max-bytes", &spool_max.to_string()])
            .spawn()
            .expect("start the collector");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            lines,
            last_seq: 0,
        }
    }

    /// Reads output until the collector has closed window `seq`.
    fn wait_seq(&mut self, seq: u64) {
        while self.last_seq < seq {
            let l = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("collector stopped before window {seq}: {e}"));
            if let Some(rest) = l.strip_prefix("window ") {
                if let Some(n) = rest.split(':').next().and_then(|n| n.parse().ok()) {
                    self.last_seq = n;
                }
            }
        }
    }

    /// SIGTERM, then the rest of the output (final window and stream summary).
    fn stop(mut self) -> (u64, String) {
        // SAFETY: kill(2) on our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let mut summary = String::new();
        for l in self.lines.iter() {
            if let Some(rest) = l.strip_prefix("window ") {
                if let Some(n) = rest.split(':').next().and_then(|n| n.parse().ok()) {
                    self.last_seq = n;
                }
            }
            if l.starts_with("stream:") {
                summary = l;
            }
        }
        let st = self.child.wait().expect("wait collector");
        assert!(st.success(), "collector exit: {st}");
        (self.last_seq, summary)
    }
}

fn wait_recorded(record: &Path, seq: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while recorded(record).last().copied().unwrap_or(0) < seq {
        assert!(
            Instant::now() < deadline,
            "correlator never recorded window {seq}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn summary_field(summary: &str, name: &str) -> u64 {
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

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("faultline-stream-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

#[test]
fn correlator_outage_loses_nothing_and_duplicates_nothing() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("stream_outage") {
        return;
    }
    let dir = tmp("outage");
    let record = dir.join("ingest.jsonl");
    let ib = tests::FakeIb::new("outage");
    ib.active_port("mlx5_0", 1);
    let port = free_port();
    let mut corr = correlator(port, &record);
    let mut col = Collector::start(port, &dir.join("spool"), 64 << 20, ib.root());

    col.wait_seq(5);
    wait_recorded(&record, 5);
    // Kill the correlator under load; the collector keeps producing windows.
    corr.kill().expect("kill correlator");
    corr.wait().expect("reap");
    let down_at = col.last_seq;
    col.wait_seq(down_at + 15);
    corr = correlator(port, &record);
    let target = col.last_seq;
    wait_recorded(&record, target);
    let (final_seq, summary) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();

    let seqs = recorded(&record);
    let want: Vec<u64> = (1..=final_seq).collect();
    assert_eq!(
        seqs, want,
        "every window exactly once, in order ({summary})"
    );
    assert_eq!(summary_field(&summary, "dropped"), 0, "{summary}");
    assert_eq!(summary_field(&summary, "pending"), 0, "{summary}");
    assert!(
        summary_field(&summary, "connects") >= 2,
        "reconnected after the outage: {summary}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn spool_overflow_drop_count_equals_what_is_missing() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("stream_overflow") {
        return;
    }
    let dir = tmp("overflow");
    let record = dir.join("ingest.jsonl");
    // Several ports make each window ~2 KB, so a 6 KiB spool holds a few.
    let ib = tests::FakeIb::new("overflow");
    for p in 1..=4 {
        ib.active_port("mlx5_0", p);
        ib.active_port("mlx5_1", p);
    }
    let port = free_port();
    let mut col = Collector::start(port, &dir.join("spool"), 6 * 1024, ib.root());
    col.wait_seq(25);
    let corr_start = col.last_seq;
    let mut corr = correlator(port, &record);
    col.wait_seq(corr_start + 10);
    wait_recorded(&record, col.last_seq);
    let (final_seq, summary) = col.stop();
    wait_recorded(&record, final_seq);
    let _ = corr.kill();
    let _ = corr.wait();

    let seqs = recorded(&record);
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "in order, no duplicates: {seqs:?}"
    );
    let got: BTreeSet<u64> = seqs.iter().copied().collect();
    let missing = (1..=final_seq).filter(|s| !got.contains(s)).count() as u64;
    let dropped = summary_field(&summary, "dropped");
    assert!(dropped > 0, "the spool overflowed: {summary}");
    assert_eq!(
        dropped, missing,
        "drop count equals the windows missing at the correlator ({summary}; got {seqs:?})"
    );
    assert_eq!(*seqs.last().expect("some windows"), final_seq);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
