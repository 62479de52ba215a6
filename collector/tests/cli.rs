//! The collector binary's behaviour in a bad environment: one clear line on
//! stderr, a non-zero exit code, and no panic backtrace.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-collector");

#[test]
fn unprivileged_run_names_the_missing_capabilities() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Already unprivileged: run directly.
        let out = Command::new(BIN)
            .args(["--duration", "0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        return;
    }
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(BIN)
        .args(["--duration", "0"])
        .output()
        .expect("setpriv (util-linux) runs the collector as nobody");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line: {stderr}");
    assert!(
        lines[0]
            .starts_with("faultline-collector: error: missing capability CAP_BPF and CAP_PERFMON:"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_flag_values_exit_2_or_1_with_one_line() {
    let out = Command::new(BIN).arg("--no-such-flag").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: unexpected argument '--no-such-flag'"),
        "{stderr}"
    );

    let out = Command::new(BIN).args(["--window", "0"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "faultline-collector: error: --window must be a positive number of seconds, got 0"
    );
}
