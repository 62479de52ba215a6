//! The collector binary's behaviour in a bad environment: one clear line on
//! stderr, a non-zero exit code, and no panic backtrace.
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_faultline-collector");

/// Runs the collector with `args` and returns its stdout; it must exit 0.
fn stdout_of_success(args: &[&std::ffi::OsStr]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run the collector");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn unprivileged_run_names_the_missing_capabilities() {
    let _turn = tests::one_file_at_a_time(file!());
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
fn bad_flag_values_exit_2_with_one_line() {
    let _turn = tests::one_file_at_a_time(file!());
    let out = Command::new(BIN).arg("--no-such-flag").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: unexpected argument '--no-such-flag'"),
        "{stderr}"
    );

    let out = Command::new(BIN).args(["--window", "0"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "faultline-collector: config error: collector.window_secs: must be a number of seconds in [0.01, 3600], got 0"
    );
}

fn write_config(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("faultline-cli-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, text).expect("write config");
    p
}

#[test]
fn config_file_errors_are_one_line_with_exit_2() {
    let _turn = tests::one_file_at_a_time(file!());
    let p = write_config(
        "unknown",
        "[collector]\nwindow_secs = 2\n\n[cuda]\nlibary = \"/x\"\n",
    );
    let out = Command::new(BIN).arg("--config").arg(&p).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "faultline-collector: config error: {} line 5, column 1: unknown field `libary`",
            p.display()
        )),
        "{stderr}"
    );
    let p2 = write_config("badaddr", "[collector]\nmetrics_addr = \"nowhere\"\n");
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&p2)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("collector.metrics_addr: \"nowhere\" is not HOST:PORT"));
    let out = Command::new(BIN)
        .args(["--config", "/nonexistent/faultline.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with(
        "faultline-collector: config error: cannot read /nonexistent/faultline.toml:"
    ));
    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(p2);
}

#[test]
fn check_config_prints_the_effective_settings_flags_over_file() {
    let _turn = tests::one_file_at_a_time(file!());
    let p = write_config("ok", "[collector]\nwindow_secs = 2.5\nmetrics_addr = \"127.0.0.1:9600\"\n[cuda]\nevents_per_sec = 50\n");
    let stdout = stdout_of_success(&[
        "check-config".as_ref(),
        "--metrics-addr".as_ref(),
        "127.0.0.1:9700".as_ref(),
        "--no-nvml".as_ref(),
        "--config".as_ref(),
        p.as_os_str(),
    ]);
    for line in [
        "window_secs = 2.5",
        "metrics_addr = \"127.0.0.1:9700\"",
        "events_per_sec = 50",
        "# config ok",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line:?} in\n{stdout}"
        );
    }
    let nvml = stdout.split("[nvml]").nth(1).expect("nvml section");
    assert!(nvml.contains("enabled = false"), "{stdout}");
    let _ = std::fs::remove_file(p);
}

/// `check-config FILE` as `faultline-correlator check-config FILE` takes it,
/// the same as `--config FILE`; two different files are one error line.
#[test]
fn check_config_takes_the_file_as_the_correlator_does() {
    let _turn = tests::one_file_at_a_time(file!());
    let p = write_config("pos", "[collector]\nwindow_secs = 3.5\n");
    let stdout = stdout_of_success(&["check-config".as_ref(), p.as_os_str()]);
    assert!(stdout.lines().any(|l| l == "window_secs = 3.5"), "{stdout}");
    assert!(stdout.trim_end().ends_with("# config ok"), "{stdout}");
    let other = write_config("other", "");
    let out = std::process::Command::new(BIN)
        .arg("check-config")
        .arg(&p)
        .arg("--config")
        .arg(&other)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("two config files"), "{stderr}");
    let _ = std::fs::remove_file(p);
    let _ = std::fs::remove_file(other);
}

/// `--once --sysfs-root /typo` exited 0 with nothing: a root that does not
/// exist is a mistake, not a host without RDMA devices.
#[test]
fn once_with_a_missing_sysfs_root_fails_and_says_so() {
    let _turn = tests::one_file_at_a_time(file!());
    let out = Command::new(BIN)
        .args(["--once", "--sysfs-root", "/no/such/sysfs-root"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.starts_with(
            "faultline-collector: error: --sysfs-root /no/such/sysfs-root is not a directory"
        ),
        "{stderr}"
    );
    // An existing root without class/infiniband is a host without RDMA devices.
    let out = Command::new(BIN)
        .args(["--once", "--sysfs-root", "/tmp"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

/// `--metrics-addr :9477` (node_exporter's `:9100` form) is accepted.
#[test]
fn metrics_addr_accepts_a_bare_port() {
    let _turn = tests::one_file_at_a_time(file!());
    let stdout = stdout_of_success(&[
        "check-config".as_ref(),
        "--metrics-addr".as_ref(),
        ":9477".as_ref(),
    ]);
    assert!(stdout.contains("metrics_addr = \":9477\""), "{stdout}");
}

/// Values that used to pass `check-config` and then panic or run forever
/// (`Duration::from_secs_f64` on 1e-300, 1e20; NaN; an endpoint without a
/// host): each is one line and exit 2, before anything starts.
#[test]
fn accepted_values_never_panic() {
    let _turn = tests::one_file_at_a_time(file!());
    for (args, want) in [
        (
            &["--window", "1e-300"][..],
            "faultline-collector: config error: collector.window_secs: must be a number of seconds in [0.01, 3600], got 1e-300",
        ),
        (
            &["--duration", "1e20"][..],
            "error: invalid value '1e20' for '--duration <SECONDS>': must be a number of seconds in [0, 315360000], got 1e20",
        ),
        (
            &["--duration", "nan"][..],
            "error: invalid value 'nan' for '--duration <SECONDS>': must be a number of seconds in [0, 315360000], got NaN",
        ),
        (
            &["--correlator", "http://"][..],
            "faultline-collector: config error: stream.endpoint: \"http://\" is not a URL",
        ),
    ] {
        for check in [true, false] {
            let mut c = Command::new(BIN);
            if check {
                c.arg("check-config");
            }
            let out = c.args(args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.starts_with(want), "{args:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
        }
    }
}

/// A FIFO in the sysfs tree used to hang `--once` (blocking open) and
/// `/dev/zero` as a sysfs file or config was read until memory ran out:
/// both are refused as "not a regular file", quickly.
#[test]
fn fifo_and_dev_zero_in_sysfs_or_config_do_not_hang() {
    let _turn = tests::one_file_at_a_time(file!());
    let root = std::env::temp_dir().join(format!("faultline-cli-fifo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    std::fs::create_dir_all(port.join("counters")).unwrap();
    std::fs::write(port.join("phys_state"), "5: LinkUp\n").unwrap();
    std::fs::write(port.join("counters/symbol_error"), "7\n").unwrap();
    let c = std::ffi::CString::new(port.join("state").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/zero", port.join("rate")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", port.join("counters/port_rcv_data")).unwrap();
    let start = std::time::Instant::now();
    let out = Command::new(BIN)
        .arg("--once")
        .arg("--sysfs-root")
        .arg(&root)
        .output()
        .unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("symbol_error") && stdout.contains(" 7"),
        "the regular files are still read: {stdout}"
    );
    let out = Command::new(BIN)
        .args(["check-config", "--config", "/dev/zero"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "faultline-collector: config error: cannot read /dev/zero: not a regular file"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
