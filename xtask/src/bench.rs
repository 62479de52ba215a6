//! `cargo xtask bench`: every benchmark in turn, each writing its JSON
//! result in `bench/`, then `bench/results.json` combining them.
//!
//! A benchmark that fails (an error, a crash, or no end within
//! [`TIMEOUT`]) does not stop the others: its result file says
//! `"status": "failed"` with the reason (the benchmark's own partial result
//! when it wrote one, else a stub written here), and the run exits
//! non-zero at the end, listing every failure.
use std::{
    io,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

/// The longest one benchmark may run (the longest, `launch`, runs its
/// rounds twice, without load and under a parallel build: about 12 minutes
/// on a 2-core machine).
const TIMEOUT: Duration = Duration::from_secs(40 * 60);

/// The full suite: each benchmark's arguments.
const SUITE: &[&[&str]] = &[
    &["uprobe"],
    &["launch"],
    &["launch", "--entry", "cet"],
    &["launch", "--entry", "stepped"],
    &["nccl"],
    &["block"],
    &["ring"],
    &["footprint"],
    &["ingest"],
    &["ingest-tls"],
    &["otlp"],
    &["history"],
    &["shards"],
    &["discovery"],
    // The 100k-GPU fleet: 1, 2, 4 and 8 shards, each until it falls
    // behind or for its 5 simulated minutes; then 1,024 nodes at twice
    // real time, which this 2-core machine carries.
    &["fleet"],
    &["fleet", "--nodes", "1024", "--speed", "2"],
];

/// Result files combined into `bench/results.json` (`detect` comes from
/// `cargo xtask bench-detect`).
const COMBINED: &[&str] = &[
    "uprobe",
    "launch",
    "launch_cet",
    "launch_stepped",
    "nccl",
    "block",
    "ring",
    "footprint",
    "ingest",
    "ingest_tls",
    "otlp",
    "history",
    "shards",
    "discovery",
    "fleet",
    "fleet_1024",
    "detect",
];

/// The result file (name without `.json`) a `faultline-bench ARGS` run
/// writes in `bench/`; `None` when the arguments send it elsewhere.
pub fn result_name(args: &[String]) -> Option<String> {
    if args
        .iter()
        .any(|a| a.starts_with("--out-dir") || a.starts_with("--json"))
    {
        return None;
    }
    let name = args.first()?;
    let entry = args
        .iter()
        .position(|a| a == "--entry")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("--entry=")));
    let nodes = args
        .iter()
        .position(|a| a == "--nodes")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("--nodes=")));
    if name == "fleet" {
        return Some(match nodes {
            Some(n) if n != "12500" => format!("fleet_{n}"),
            _ => "fleet".into(),
        });
    }
    Some(match (name.as_str(), entry) {
        ("launch", Some("stepped")) => "launch_stepped".into(),
        ("launch", Some("cet")) => "launch_cet".into(),
        ("nccl", Some("plain")) => "nccl_plain".into(),
        ("ingest-tls", _) => "ingest_tls".into(),
        (n, _) => n.into(),
    })
}

/// The result of a benchmark that ended without writing one.
fn stub(name: &str, reason: &str) -> String {
    let v = serde_json::json!({"benchmark": name, "status": "failed", "reason": reason});
    format!("{v:#}\n")
}

/// Why one benchmark failed (its result file's `reason`).
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error("cannot start {bin}: {source}")]
    Start { bin: String, source: io::Error },
    #[error("no end within {} min: killed", .0.as_secs() / 60)]
    Timeout(Duration),
    #[error("exited with {0}")]
    Exited(ExitStatus),
    #[error("waiting for it: {0}")]
    Wait(io::Error),
    #[error("exited 0 without writing its result")]
    NoResult,
}

/// Runs `faultline-bench ARGS` in its own process group (so a timeout
/// also ends the collectors, stand-ins and bpftrace it started); `Err` with
/// the reason when it did not succeed.
fn run_one(bin: &Path, args: &[String]) -> Result<(), Failed> {
    let mut child = Command::new(bin)
        .args(args)
        .process_group(0)
        .spawn()
        .map_err(|source| Failed::Start {
            bin: bin.display().to_string(),
            source,
        })?;
    let pgid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = match rx.recv_timeout(TIMEOUT) {
        Ok(s) => s,
        Err(_) => {
            // SAFETY: signalling the process group this function started.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = rx.recv();
            return Err(Failed::Timeout(TIMEOUT));
        }
    };
    let r = match status {
        Ok(s) if s.success() => return Ok(()),
        Ok(s) => Failed::Exited(s),
        Err(e) => Failed::Wait(e),
    };
    // What a crashed benchmark left running in its group (a collector, a
    // stand-in) would skew the next one: it goes too.
    // SAFETY: as above; ESRCH when the group is gone already.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    Err(r)
}

/// Runs the suite (or the one benchmark `args` names) and combines the
/// results; fails at the end when any benchmark failed.
pub fn run(args: Vec<String>) -> Result<()> {
    let mut c = super::cargo();
    c.args([
        "build",
        "--release",
        "-p",
        "bench",
        "-p",
        "collector",
        "-p",
        "correlator",
    ]);
    super::run(c)?;
    let bin = super::release_bin("faultline-bench");
    let which: Vec<Vec<String>> = if args.is_empty() {
        SUITE
            .iter()
            .map(|a| a.iter().map(|s| (*s).to_string()).collect())
            .collect()
    } else {
        vec![args]
    };
    let dir = PathBuf::from("bench");
    let mut failures = Vec::new();
    for w in &which {
        let label = w.join(" ");
        let file = result_name(w).map(|n| dir.join(format!("{n}.json")));
        // The previous run's result must not pass for this one's.
        if let Some(f) = &file {
            let _ = std::fs::remove_file(f);
        }
        println!("== faultline-bench {label}");
        let t0 = Instant::now();
        let r = run_one(&bin, w);
        let written = file.as_ref().is_some_and(|f| f.exists());
        let r = match r {
            Ok(()) if !written && file.is_some() => Err(Failed::NoResult),
            r => r,
        };
        if let Err(reason) = r {
            if let Some(f) = file.as_ref().filter(|_| !written) {
                std::fs::write(f, stub(&label, &reason.to_string()))
                    .with_context(|| format!("writing {}", f.display()))?;
            }
            eprintln!("== faultline-bench {label}: FAILED ({reason})");
            failures.push(format!("{label}: {reason}"));
        } else {
            println!(
                "== faultline-bench {label}: ok in {:.0} s",
                t0.elapsed().as_secs_f64()
            );
        }
    }
    combine(&dir)?;
    if !failures.is_empty() {
        bail!(
            "{} of {} benchmarks failed (their results say why):\n  {}",
            failures.len(),
            which.len(),
            failures.join("\n  ")
        );
    }
    Ok(())
}

/// Writes `results.json`: every result file there is, by name.
fn combine(dir: &Path) -> Result<()> {
    let mut all = String::from("{\n");
    let mut first = true;
    for name in COMBINED {
        let path = dir.join(format!("{name}.json"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        // A truncated or garbled file is reported as such, not pasted in.
        let text = match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(_) => text,
            Err(e) => stub(name, &format!("{} is not JSON: {e}", path.display())),
        };
        if !first {
            all.push_str(",\n");
        }
        first = false;
        all.push_str(&format!("\"{name}\": {}", text.trim()));
    }
    all.push_str("\n}\n");
    let out = dir.join("results.json");
    std::fs::write(&out, all).with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn every_suite_entry_has_its_own_combined_result_file() {
        let mut names: Vec<String> = SUITE
            .iter()
            .map(|a| {
                let a: Vec<String> = a.iter().map(|s| (*s).to_string()).collect();
                result_name(&a).expect("in bench/")
            })
            .collect();
        for n in &names {
            assert!(COMBINED.contains(&n.as_str()), "{n} not combined");
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), SUITE.len());
        assert_eq!(
            result_name(&args("launch --rounds 1 --entry=cet")).as_deref(),
            Some("launch_cet")
        );
        assert_eq!(
            result_name(&args("fleet --nodes 2000")).as_deref(),
            Some("fleet_2000")
        );
        assert_eq!(result_name(&args("fleet")).as_deref(), Some("fleet"));
        assert_eq!(
            result_name(&args("nccl --entry plain")).as_deref(),
            Some("nccl_plain")
        );
        assert_eq!(result_name(&args("ingest --json /tmp/x.json")), None);
        assert_eq!(result_name(&args("--out-dir /tmp otlp")), None);
    }

    #[test]
    fn a_benchmark_that_fails_leaves_a_failed_result_and_the_next_one_runs() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sh = |script: &str| -> Vec<String> { vec!["-c".into(), script.into()] };
        let bin = Path::new("/bin/sh");
        // A crash without a result: the reason is the exit status.
        let e = run_one(bin, &sh("exit 3")).unwrap_err().to_string();
        assert_eq!(e, "exited with exit status: 3");
        std::fs::write(dir.join("ring.json"), stub("ring", &e)).unwrap();
        // The next one runs and succeeds.
        run_one(bin, &sh("true")).unwrap();
        std::fs::write(dir.join("footprint.json"), "{\"status\": \"ok\"}").unwrap();
        std::fs::write(dir.join("otlp.json"), "{\"status\": ").unwrap();
        combine(&dir).unwrap();
        let all: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap())
                .unwrap();
        assert_eq!(all["ring"]["status"], "failed");
        assert_eq!(all["ring"]["reason"], "exited with exit status: 3");
        assert_eq!(all["footprint"]["status"], "ok");
        assert_eq!(all["otlp"]["status"], "failed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
