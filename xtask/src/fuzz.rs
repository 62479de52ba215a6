//! `cargo xtask fuzz`: every cargo-fuzz target under `fuzz/` for a bounded
//! time, seeded from the corpora kept in the repo (`fuzz/corpus/TARGET`).
//! New inputs go to a scratch directory in the target dir, so the repo's
//! corpora stay small; a crash fails the run and leaves its input in
//! `fuzz/artifacts/TARGET/` (add it to the corpus once fixed).
use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context as _, Result};

/// The nightly the repo pins (also for the eBPF crate).
const NIGHTLY: &str = "+nightly-2026-05-19";
pub const TARGETS: [&str; 7] = [
    "replay_line",
    "wire_decode",
    "sysfs_parse",
    "config_parse",
    "spool_decode",
    "otlp_export",
    "web_query",
];

/// Absolute: cargo fuzz runs in `fuzz/`, the scratch corpus is made from here.
fn target_dir() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| "target".into(), PathBuf::from)
        .join("fuzz");
    std::path::absolute(&dir).unwrap_or(dir)
}

/// Builds every target, then runs each for `secs` seconds.
pub fn run(secs: u64) -> Result<()> {
    let target_dir = target_dir();
    let cargo_fuzz = |args: &[&str]| {
        let mut c = Command::new("cargo");
        c.arg(NIGHTLY)
            .arg("fuzz")
            .args(args)
            .arg("--sanitizer=none")
            .arg("--target-dir")
            .arg(&target_dir)
            .current_dir("fuzz")
            // The fuzzers link the collector library only: no eBPF object.
            .env("FAULTLINE_EBPF_STUB", "1");
        c
    };
    let mut build = cargo_fuzz(&["build"]);
    let st = build
        .status()
        .context("running cargo fuzz (scripts/setup.sh installs cargo-fuzz)")?;
    if !st.success() {
        bail!("cargo fuzz build failed: {st}");
    }
    let mut rows = Vec::new();
    for t in TARGETS {
        let scratch = target_dir.join("corpus").join(t);
        std::fs::create_dir_all(&scratch)
            .with_context(|| format!("creating {}", scratch.display()))?;
        let seeds = format!("corpus/{t}");
        let mut c = cargo_fuzz(&["run", t]);
        c.arg(&scratch).arg(&seeds).args([
            "--",
            &format!("-max_total_time={secs}"),
            "-max_len=65536",
            "-print_final_stats=1",
        ]);
        let out = c.output().with_context(|| format!("cargo fuzz run {t}"))?;
        let log = String::from_utf8_lossy(&out.stderr);
        let runs = log
            .lines()
            .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
            .map_or("?".to_string(), |v| v.trim().to_string());
        if !out.status.success() {
            eprintln!("{log}");
            bail!(
                "fuzz target {t} failed ({}); its input is in fuzz/artifacts/{t}/",
                out.status
            );
        }
        rows.push((t, runs));
    }
    println!("fuzz target     | executions in {secs} s | crashes");
    for (t, runs) in rows {
        println!("{t:<15} | {runs:>20} | 0");
    }
    Ok(())
}
