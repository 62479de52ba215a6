//! `NO_COLOR` (<https://no-color.org>) on both binaries' logs: with stderr
//! on a terminal (a pseudo-terminal here) the logs are coloured, unless
//! `NO_COLOR` is set to a non-empty value — then not one ANSI escape.
use std::{
    fs::File,
    io::Read,
    os::fd::{FromRawFd, OwnedFd},
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use tests::{bin, KillOnDrop};

/// A pseudo-terminal: (master, slave).
fn pty() -> (File, File) {
    // SAFETY: plain libc calls on descriptors this function owns; every
    // return value is checked before use.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = OwnedFd::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0, "grantpt");
        assert_eq!(libc::unlockpt(m), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(
            libc::ptsname_r(m, name.as_mut_ptr(), name.len()),
            0,
            "ptsname_r"
        );
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(
            s >= 0,
            "open the pty slave: {}",
            std::io::Error::last_os_error()
        );
        (File::from(master), File::from_raw_fd(s))
    }
}

/// Runs `cmd` with stderr on a terminal until its stderr shows `marker`
/// and the end of that line; returns what it wrote there.
fn stderr_on_a_tty(mut cmd: Command, marker: &str) -> String {
    let (mut master, slave) = pty();
    let child = KillOnDrop(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(slave))
            .spawn()
            .expect("start the binary"),
    );
    // The child holds the slave now; reads end with EIO when it exits.
    drop(cmd);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    loop {
        let text = String::from_utf8_lossy(&out).into_owned();
        if let Some(i) = text.find(marker) {
            if text[i..].contains('\n') {
                drop(child);
                return text;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => out.extend(chunk),
            Err(_) => panic!("no {marker:?} on the terminal within 30 s: {text:?}"),
        }
    }
}

fn collector(no_color: Option<&str>, spool: &std::path::Path) -> Command {
    let mut c = Command::new(bin("faultline-collector"));
    c.args([
        "--duration",
        "0",
        "--log",
        "debug",
        "--no-nvml",
        "--no-otlp",
    ])
    .args(["--metrics-addr", "127.0.0.1:0", "--sysfs-root"])
    .arg(spool)
    .arg("--spool-dir")
    .arg(spool);
    c.env_remove("NO_COLOR").env_remove("RUST_LOG");
    if let Some(v) = no_color {
        c.env("NO_COLOR", v);
    }
    c
}

fn correlator(no_color: Option<&str>) -> Command {
    let mut c = Command::new(bin("faultline-correlator"));
    c.args(["serve", "--insecure", "--listen", "127.0.0.1:0"]);
    c.env_remove("NO_COLOR").env_remove("RUST_LOG");
    if let Some(v) = no_color {
        c.env("NO_COLOR", v);
    }
    c
}

#[test]
fn no_color_removes_every_ansi_escape_from_both_binaries() {
    let _turn = tests::one_file_at_a_time(file!());
    let spool = std::env::temp_dir().join(format!("faultline-no-color-{}", std::process::id()));
    std::fs::create_dir_all(&spool).unwrap();
    for (what, set, coloured) in [
        ("unset", None, true),
        // no-color.org: an empty value does not count.
        ("empty", Some(""), true),
        ("1", Some("1"), false),
    ] {
        let c = stderr_on_a_tty(collector(set, &spool), "RLIMIT_MEMLOCK");
        assert_eq!(
            c.contains('\u{1b}'),
            coloured,
            "collector, NO_COLOR {what}: {c:?}"
        );
        let r = stderr_on_a_tty(correlator(set), "faultline_correlator");
        assert_eq!(
            r.contains('\u{1b}'),
            coloured,
            "correlator, NO_COLOR {what}: {r:?}"
        );
        if !coloured {
            assert!(c.contains("DEBUG") && r.contains("INFO"), "{c:?} {r:?}");
        }
    }
    std::fs::remove_dir_all(&spool).unwrap();
}
