//! Operations of the correlator as a service: JSON logs (`--log-format
//! json`, `FAULTLINE_LOG_FORMAT`, the config file's `log_format`), one
//! object per line on stderr with the fields a log shipper keys on; and the
//! config file from `FAULTLINE_CONFIG` (the collector's variable), whose
//! errors name the variable.
use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

fn scratch(name: &str) -> std::path::PathBuf {
    tests::scratch_dir(&format!("ops-{name}"))
}

/// `serve` on ephemeral loopback ports until it says it serves; its stderr
/// lines then (after SIGTERM and its exit).
fn serve_lines(c: &mut Command, after: &[&str]) -> Vec<String> {
    let mut child = c
        .args(["serve", "--insecure", "--listen", "127.0.0.1:0"])
        .args(after)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut lines = Vec::new();
    let start = Instant::now();
    // The `serving` event (text or JSON), not the INSECURE warning's words.
    let serving =
        |l: &String| l.contains("serving listen=") || l.contains("\"message\":\"serving\"");
    while !lines.iter().any(serving) {
        match rx.recv_timeout(Duration::from_secs(10).saturating_sub(start.elapsed())) {
            Ok(l) => lines.push(l),
            Err(_) => {
                let _ = child.kill();
                panic!("serve did not start: {lines:?}");
            }
        }
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = child.wait().expect("wait");
    // The handler is installed just after `serving` is logged: a SIGTERM
    // before it ends the process by the signal (logs are under test here).
    assert!(
        status.success()
            || std::os::unix::process::ExitStatusExt::signal(&status) == Some(libc::SIGTERM),
        "{status}: {lines:?}"
    );
    lines.extend(rx.iter());
    lines
}

/// Every line is one JSON object with a timestamp, level, target and
/// message; the `serving` event carries its fields.
fn assert_json(lines: &[String]) {
    assert!(!lines.is_empty());
    for l in lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        for k in ["timestamp", "level", "target"] {
            assert!(v[k].is_string(), "{k} missing: {l}");
        }
        assert!(v["fields"]["message"].is_string(), "{l}");
        assert!(!l.contains('\u{1b}'), "colour codes in JSON: {l}");
    }
    let serving: serde_json::Value = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "serving")
        .expect("the serving event");
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["fields"]["listen"], "127.0.0.1:0");
    assert_eq!(serving["fields"]["tls"], false);
    // --insecure is said as a warning, machine-readably.
    assert!(lines
        .iter()
        .any(|l| l.contains("\"level\":\"WARN\"") && l.contains("INSECURE")));
}

#[test]
fn logs_are_json_from_the_flag_the_variable_or_the_file() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = scratch("json");
    let json_conf = dir.join("json.toml");
    std::fs::write(&json_conf, "log_format = \"json\"\n").expect("write");

    // The default is text.
    let text = serve_lines(Command::new(BIN).env_remove("FAULTLINE_LOG_FORMAT"), &[]);
    assert!(text.iter().all(|l| !l.starts_with('{')), "{text:?}");
    assert!(text
        .iter()
        .any(|l| l.contains("INFO") && l.contains("serving")));

    assert_json(&serve_lines(
        Command::new(BIN).args(["--log-format", "json"]),
        &[],
    ));
    // Global: after the subcommand too.
    assert_json(&serve_lines(
        &mut Command::new(BIN),
        &["--log-format", "json"],
    ));
    assert_json(&serve_lines(
        Command::new(BIN).env("FAULTLINE_LOG_FORMAT", "json"),
        &[],
    ));
    let json_conf = json_conf.to_str().expect("utf-8 path");
    assert_json(&serve_lines(
        Command::new(BIN).env_remove("FAULTLINE_LOG_FORMAT"),
        &["--config", json_conf],
    ));
    // The flag wins over the file.
    let text = serve_lines(
        Command::new(BIN).args(["--log-format", "text"]),
        &["--config", json_conf],
    );
    assert!(text.iter().all(|l| !l.starts_with('{')), "{text:?}");

    // An unknown format is refused by name.
    let out = Command::new(BIN)
        .args(["--log-format", "xml", "serve", "--insecure"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("'xml'") && stderr.contains("--log-format"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn faultline_config_picks_the_file_and_its_errors_name_the_variable() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = scratch("env");
    let conf = dir.join("correlator.toml");
    std::fs::write(
        &conf,
        "log_format = \"json\"\n[detect.nccl]\nstraggler_lag_fraction = 0.4\n",
    )
    .expect("write");
    // serve and check-config read the file the variable names.
    assert_json(&serve_lines(
        Command::new(BIN)
            .env_remove("FAULTLINE_LOG_FORMAT")
            .env("FAULTLINE_CONFIG", &conf),
        &[],
    ));
    let out = Command::new(BIN)
        .arg("check-config")
        .env("FAULTLINE_CONFIG", &conf)
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("straggler_lag_fraction = 0.4"), "{stdout}");

    // A path that is not there, or a file that does not parse: one line
    // naming the variable, before anything starts.
    let missing = dir.join("nope.toml");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[detect.nccl]\nstraggler_lag_fraction = -1\n").expect("write");
    for (path, why) in [
        (&missing, "No such file or directory"),
        (&bad, "straggler_lag_fraction"),
    ] {
        for (cmd, code) in [("serve", 1), ("check-config", 2), ("fleet", 1)] {
            let mut c = Command::new(BIN);
            c.arg(cmd).env("FAULTLINE_CONFIG", path);
            if cmd == "fleet" {
                c.args(["--nats", "nats://127.0.0.1:1"]);
            }
            let out = c.output().expect("run");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{cmd}: {stderr}");
            assert_eq!(stderr.trim().lines().count(), 1, "{cmd}: {stderr}");
            assert!(
                stderr.contains(&format!("{} (from FAULTLINE_CONFIG)", path.display())),
                "{cmd}: {stderr}"
            );
            assert!(stderr.contains(why), "{cmd}: {stderr}");
        }
    }
    // The flag's own errors do not blame the environment.
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&missing)
        .env_remove("FAULTLINE_CONFIG")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        !stderr.contains("FAULTLINE_CONFIG") && stderr.contains("nope.toml"),
        "{stderr}"
    );
    // `check-config FILE` checks FILE whatever the environment says.
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&conf)
        .env("FAULTLINE_CONFIG", &missing)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
