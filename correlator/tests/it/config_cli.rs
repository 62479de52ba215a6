//! A config path that is a device or a FIFO used to be read forever: it is
//! one clear line and a non-zero exit, quickly.
use std::{
    process::Command,
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

#[test]
fn a_device_or_fifo_as_config_is_refused_at_once() {
    let _turn = tests::one_file_at_a_time(file!());
    let start = Instant::now();
    for cmd in ["check-config", "replay"] {
        let mut c = Command::new(BIN);
        c.arg(cmd);
        if cmd == "replay" {
            c.args(["/dev/null", "--config"]);
        }
        let out = c.arg("/dev/zero").output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // check-config exits 2 on a bad config, as the collector's does.
        let want = if cmd == "check-config" { 2 } else { 1 };
        assert_eq!(out.status.code(), Some(want), "{cmd}: {stderr}");
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

/// Both binaries take `check-config FILE` and `check-config --config FILE`,
/// print the effective settings ending in `# config ok`, and exit 2 with one
/// line on a bad file.
#[test]
fn check_config_takes_the_same_form_as_the_collectors() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-cc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let good = dir.join("good.toml");
    std::fs::write(&good, "[detect.nccl]\nstraggler_lag_fraction = 0.4\n").expect("write");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[detect.nccl]\nstraggler_lag_fraction = -1\n").expect("write");
    for form in [vec!["check-config"], vec!["check-config", "--config"]] {
        let out = Command::new(BIN)
            .args(&form)
            .arg(&good)
            .output()
            .expect("run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{form:?}: {stdout}");
        assert!(stdout.contains("straggler_lag_fraction = 0.4"), "{stdout}");
        assert!(stdout.trim_end().ends_with("# config ok"), "{stdout}");
        let out = Command::new(BIN)
            .args(&form)
            .arg(&bad)
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{form:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("straggler_lag_fraction"), "{stderr}");
    }
    let out = Command::new(BIN).arg("check-config").output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config path aimed at a file the operator should not read through the
/// correlator (a symlink to `/proc/self/environ`, a key with a secret) is
/// refused naming the path, line and column, never quoting the file: toml's
/// own error text quoted the offending line.
#[test]
fn a_parse_error_names_the_place_but_never_echoes_the_file() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = std::env::temp_dir().join(format!("faultline-cs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let secret = "s3cr3t-hunter2-7f9a";
    let file = dir.join("secret.toml");
    std::fs::write(
        &file,
        format!("[detect.ib]\nreference_ber = 1e-15\napi_key={secret} # x\n"),
    )
    .expect("write");
    let environ = dir.join("environ.toml");
    let _ = std::fs::remove_file(&environ);
    std::os::unix::fs::symlink("/proc/self/environ", &environ).expect("symlink");
    for (path, line) in [(&file, "line 3, column 9: "), (&environ, "line 1, column ")] {
        for args in [
            &["check-config"][..],
            &["replay", "/dev/null", "--config"][..],
        ] {
            let out = Command::new(BIN)
                .args(args)
                .arg(path)
                .env("FAULTLINE_TEST_SECRET", secret)
                .output()
                .expect("run");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?}: {stderr}");
            assert!(
                !stderr.contains(secret),
                "{args:?} echoed the file: {stderr}"
            );
            assert!(
                stderr.contains(&format!("config file {} {line}", path.display())),
                "{args:?}: {stderr}"
            );
            assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
