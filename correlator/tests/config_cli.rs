//! Values the correlator accepted and then panicked on, or read forever:
//! each is now one clear line and a non-zero exit, quickly.
use std::{
    process::Command,
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

#[test]
fn sim_speed_and_duration_out_of_range_are_errors_not_panics() {
    for (args, want) in [
        (
            ["--speed", "1e-320"],
            "faultline-correlator: error: --speed must be within 0.01..=10000 simulated seconds per second, got 1e-320",
        ),
        (
            ["--speed", "NaN"],
            "faultline-correlator: error: --speed must be within 0.01..=10000 simulated seconds per second, got NaN",
        ),
        (
            ["--duration", "1e20"],
            "faultline-correlator: error: --duration must be within (0, 1e7] simulated seconds, got 1e20",
        ),
    ] {
        let out = Command::new(BIN)
            .arg("sim")
            .args(args)
            .output()
            .expect("run sim");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.trim(), want, "{args:?}");
    }
}

#[test]
fn a_device_or_fifo_as_config_is_refused_at_once() {
    let start = Instant::now();
    for cmd in ["check-config", "replay"] {
        let mut c = Command::new(BIN);
        c.arg(cmd);
        if cmd == "replay" {
            c.args(["/dev/null", "--config"]);
        }
        let out = c.arg("/dev/zero").output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {stderr}");
        assert_eq!(
            stderr.trim(),
            "faultline-correlator: error: cannot read the config file /dev/zero: not a regular file",
            "{cmd}"
        );
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}
