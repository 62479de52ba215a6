//! Every file the correlator's command line reads is read within a size
//! limit and refused with a clear line naming it: before the fix,
//! `--client-ca`, `--tls-cert`, `--token-file`, `--topology`, `replay FILE`
//! and `subscribe --ca` pointed at `/dev/zero` grew to ~6 GiB of memory.
//! Also: config values that used to pass `check-config` and then panic
//! `serve`, a token listed twice, and a garbage certificate named as such
//! (it used to surface as "peer sent no certificates" in a handshake).
use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

const BIN: &str = env!("CARGO_BIN_EXE_faultline-correlator");

fn dir(name: &str) -> PathBuf {
    tests::scratch_dir(&format!("inputs-{name}"))
}

/// What a finished run left: exit code, stderr, peak RSS (KiB) and time.
struct Run {
    code: Option<i32>,
    stderr: String,
    max_rss_kib: i64,
    took: Duration,
}

/// GNU time, which measures the correlator's own peak RSS: a child's
/// `ru_maxrss` from `wait4` starts at its parent's high-water mark (fork
/// copies it and exec keeps the old image's peak), and this test binary,
/// which runs every correlator integration test, grows past 256 MiB; GNU
/// time's own child is a copy of GNU time.
const TIME: &str = "/usr/bin/time";

/// Runs `faultline-correlator args…` with at most 4 GiB of address space
/// (an unbounded read fails there instead of taking the machine's memory),
/// in its own process group killed after 20 s; its peak RSS from GNU time.
fn run(args: &[&str]) -> Run {
    use std::os::unix::process::CommandExt as _;
    assert!(
        Path::new(TIME).exists(),
        "{TIME} missing: install Debian's `time` package (scripts/setup.sh does)"
    );
    let t = Instant::now();
    // One directory for every run's report (`dir` would empty it under the
    // file's other tests, which run beside this one).
    let d = std::env::temp_dir().join(format!("faultline-inputs-rss-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("report directory");
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let rss_file = d.join(format!("rss-{n}"));
    let mut cmd = Command::new(TIME);
    cmd.args(["-f", "%M", "-o"]).arg(&rss_file).arg(BIN);
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .process_group(0)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let pgid = child.id() as libc::pid_t;
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let killer = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            done_rx.recv_timeout(Duration::from_secs(20))
        {
            // SAFETY: a signal to our own child's process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    });
    let status = child.wait().expect("wait");
    drop(done_tx);
    let _ = killer.join();
    // GNU time's last line is the peak in KiB (a line before it says how a
    // command that failed ended).
    let report = std::fs::read_to_string(&rss_file).unwrap_or_default();
    let stderr = reader.join().expect("stderr");
    let max_rss_kib = report
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("{TIME} wrote no peak RSS: {report:?} ({status}: {stderr})"));
    Run {
        code: status.code(),
        stderr,
        max_rss_kib,
        took: t.elapsed(),
    }
}

fn pki(d: &Path) {
    let out = Command::new(BIN)
        .args(["certs", "--out"])
        .arg(d)
        .args(["--host", "n1"])
        .output()
        .expect("certs");
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn every_file_read_is_bounded_and_named() {
    let _turn = tests::one_file_at_a_time(file!());
    let d = dir("zero");
    pki(&d);
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    let (cert, key, ca) = (p("server.pem"), p("server.key"), p("ca.pem"));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--client-ca",
                "/dev/zero",
            ],
            "cannot read /dev/zero: not a regular file",
        ),
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                "/dev/zero",
                "--tls-key",
                &key,
                "--client-ca",
                &ca,
            ],
            "cannot read /dev/zero: not a regular file",
        ),
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--token-file",
                "/dev/zero",
            ],
            "cannot read /dev/zero: not a regular file",
        ),
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--insecure",
                "--topology",
                "/dev/zero",
            ],
            "reading the topology /dev/zero: not a regular file",
        ),
        (
            vec!["replay", "/dev/zero"],
            "/dev/zero line 1: longer than 67108864 bytes without a newline",
        ),
        (
            vec![
                "subscribe",
                "--endpoint",
                "https://127.0.0.1:1",
                "--ca",
                "/dev/zero",
            ],
            "cannot read /dev/zero: not a regular file",
        ),
    ];
    for (args, want) in cases {
        let r = run(&args);
        println!(
            "{}: exit {:?} in {:?}, peak RSS {} MiB",
            args.join(" "),
            r.code,
            r.took,
            r.max_rss_kib / 1024
        );
        assert!(r.stderr.contains(want), "{args:?}: {:?}", r.stderr);
        assert!(matches!(r.code, Some(1 | 2)), "{args:?}: {:?}", r.code);
        assert!(r.took < Duration::from_secs(10), "{args:?}: {:?}", r.took);
        assert!(
            r.max_rss_kib < 256 * 1024,
            "{args:?}: {} KiB",
            r.max_rss_kib
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn garbage_certificates_and_keys_are_named_at_start() {
    let _turn = tests::one_file_at_a_time(file!());
    let d = dir("garbage");
    pki(&d);
    let garbage = d.join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").expect("write");
    let g = garbage.to_string_lossy().into_owned();
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    let (cert, key, ca) = (p("server.pem"), p("server.key"), p("ca.pem"));
    let no_cert = format!("no PEM certificate found in {g}");
    for (args, want) in [
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                &g,
                "--tls-key",
                &key,
                "--client-ca",
                &ca,
            ],
            no_cert.clone(),
        ),
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--client-ca",
                &g,
            ],
            no_cert.clone(),
        ),
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                &cert,
                "--tls-key",
                &g,
                "--client-ca",
                &ca,
            ],
            format!("no PEM private key found in {g}"),
        ),
        (
            vec!["subscribe", "--endpoint", "https://127.0.0.1:1", "--ca", &g],
            no_cert.clone(),
        ),
    ] {
        let r = run(&args);
        assert!(r.stderr.contains(&want), "{args:?}: {:?}", r.stderr);
        assert_eq!(r.code, Some(1), "{args:?}");
        assert!(
            !r.stderr.contains("peer sent no certificates"),
            "{:?}",
            r.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_duplicate_token_refuses_to_start() {
    let _turn = tests::one_file_at_a_time(file!());
    let d = dir("dup");
    pki(&d);
    let tokens = d.join("tokens");
    std::fs::write(&tokens, "n1 s3cret\nn2 s3cret\n").expect("tokens");
    let p = |f: &str| d.join(f).to_string_lossy().into_owned();
    let r = run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        &p("server.pem"),
        "--tls-key",
        &p("server.key"),
        "--token-file",
        &tokens.to_string_lossy(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "{} line 2: this token is already on line 1 (for \"n1\")",
            tokens.display()
        )),
        "{}",
        r.stderr
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// Values that passed `check-config` and then made `serve` panic (tokio's
/// channel and semaphore capacities) are out of range in `check-config`.
#[test]
fn huge_capacities_fail_check_config_not_serve() {
    let _turn = tests::one_file_at_a_time(file!());
    let d = dir("huge");
    for (table, key) in [
        ("history", "queue"),
        ("detect.limits", "max_connections"),
        ("detect.limits", "max_connections_per_peer"),
        ("web.limits", "max_connections"),
    ] {
        let f = d.join("c.toml");
        std::fs::write(&f, format!("[{table}]\n{key} = 2305843009213693952\n")).expect("write");
        let f = f.to_string_lossy().into_owned();
        let r = run(&["check-config", &f]);
        // check-config: exit 2 on a bad value, as the collector's.
        assert_eq!(r.code, Some(2), "[{table}] {key}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("{table}.{key}")) && r.stderr.contains("within 1..="),
            "[{table}] {key}: {}",
            r.stderr
        );
        // And `serve` says the same instead of panicking.
        let r = run(&[
            "serve",
            "--insecure",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &f,
        ]);
        assert_eq!(r.code, Some(1), "[{table}] {key}: {}", r.stderr);
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    }
    let _ = std::fs::remove_dir_all(&d);
}
