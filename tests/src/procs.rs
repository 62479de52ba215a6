//! Child processes: killed on drop, their output read on a thread, the
//! correlator's subscriber and a streaming collector started.
use std::{
    io,
    path::Path,
    process::{Command, Stdio},
};

use crate::bin;

/// A child process killed and reaped when dropped (also when a test panics).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child's stdout lines, read on a thread, as a channel (a test waits on
/// them with a timeout instead of sleeping).
pub fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for the collector's console line of window `n` or later (`window
/// N: …`); returns it.
pub fn wait_window(col: &std::sync::mpsc::Receiver<String>, n: u64) -> String {
    loop {
        let l = col
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("collector output");
        let k = l
            .strip_prefix("window ")
            .and_then(|r| r.split(':').next())
            .and_then(|k| k.parse::<u64>().ok());
        if k.is_some_and(|k| k >= n) {
            return l;
        }
    }
}

/// The JSON incident updates a `subscribe --json` printed so far.
pub fn updates(sub: &std::sync::mpsc::Receiver<String>) -> Vec<serde_json::Value> {
    sub.try_iter()
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// A JSON array of strings (an update's `evidence`, `affected_jobs`).
pub fn json_strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

/// `faultline-correlator subscribe --endpoint URL ARGS…` once the
/// correlator accepts it (retried for up to 20 s while it starts); stdout
/// piped.
pub fn subscriber(url: &str, args: &[&str]) -> std::process::Child {
    use std::io::BufRead as _;
    let start = std::time::Instant::now();
    loop {
        let mut s = Command::new(bin("faultline-correlator"))
            .args(["subscribe", "--endpoint", url])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("subscriber");
        let err = s.stderr.take().expect("stderr");
        let first = io::BufReader::new(err).lines().next();
        if matches!(&first, Some(Ok(l)) if l.starts_with("subscribed to")) {
            return s;
        }
        let _ = s.wait();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "correlator never accepted a subscriber"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The collector reading only the sysfs tree at `sysfs` (probes and NVML
/// off), closing a window every `window` seconds and streaming it to
/// `correlator` through the spool `spool`; stdout piped, stderr discarded.
pub fn streaming_collector(window: &str, correlator: &str, spool: &Path, sysfs: &Path) -> Command {
    let mut c = Command::new(bin("faultline-collector"));
    c.args([
        "--window",
        window,
        "--duration",
        "60",
        "--quiet",
        "--no-cuda",
        "--no-verbs",
        "--no-nvml",
        "--no-block",
        "--no-otlp",
    ])
    .args(["--metrics-addr", "127.0.0.1:0", "--correlator", correlator])
    .arg("--spool-dir")
    .arg(spool)
    .arg("--sysfs-root")
    .arg(sysfs)
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    c
}

/// `nats-server ARGS`, returned once its log says it is ready (20 s at
/// most); its log keeps being drained (printed with `NATS_LOG` set) so it
/// never blocks on a full pipe. `None` when the binary is missing outside
/// CI (in CI that is a failure: `scripts/setup.sh` installs it).
pub fn nats_server<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Option<KillOnDrop> {
    use std::io::BufRead as _;
    let mut child = match Command::new("nats-server")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            assert!(
                !crate::in_ci(),
                "nats-server missing ({e}): scripts/setup.sh installs Debian's nats-server"
            );
            eprintln!("skipping: nats-server not installed (scripts/setup.sh)");
            return None;
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for l in io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains("Server is ready") => break,
            Ok(_) => {}
            Err(e) => panic!("nats-server never became ready: {e}"),
        }
    }
    std::thread::spawn(move || {
        while let Ok(l) = rx.recv() {
            if std::env::var_os("NATS_LOG").is_some() {
                eprintln!("nats: {l}");
            }
        }
    });
    Some(KillOnDrop(child))
}
