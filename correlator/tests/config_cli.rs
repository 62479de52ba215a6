//! A config path that is a device or a FIFO used to be read forever: it is
//! one clear line and a non-zero exit, quickly.
use std::{
    process::Command,
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

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
