//! The shipped systemd unit stays hardened (`systemd-analyze security`
//! exposure ≤ 4.0) without losing what the collector needs: its syscall
//! filter still allows bpf(2), perf_event_open(2) and setrlimit, its
//! capabilities are the four the collector uses, and the DaemonSet keeps its
//! security context.
use std::{path::PathBuf, process::Command};

fn deploy(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

/// `systemd-analyze` (Debian package `systemd`, scripts/setup.sh), or a
/// skip locally / failure in CI.
fn systemd_analyze() -> Option<Command> {
    match Command::new("systemd-analyze").arg("--version").output() {
        Ok(o) if o.status.success() => Some(Command::new("systemd-analyze")),
        _ if tests::in_ci() => panic!("CI=true but systemd-analyze is missing"),
        _ => {
            eprintln!("SKIPPED unit_hardening: systemd-analyze not installed");
            None
        }
    }
}

/// The system calls deploy/seccomp/faultline-collector.json allows (its
/// default action refuses everything else).
fn seccomp_allowlist() -> Vec<String> {
    let profile: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(deploy("seccomp/faultline-collector.json")).expect("profile"),
    )
    .expect("JSON");
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
    profile["syscalls"][0]["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn unit_values(key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(deploy("faultline-collector.service")).expect("unit");
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

#[test]
fn collector_unit_exposure_is_at_most_4() {
    let Some(mut c) = systemd_analyze() else {
        return;
    };
    let out = c
        .args(["security", "--offline=true", "--no-pager"])
        .arg(deploy("faultline-collector.service"))
        .output()
        .expect("systemd-analyze security");
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for faultline-collector.service: ")
                .nth(1)
        })
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in {text}"));
    println!("systemd-analyze security exposure: {level}");
    assert!(level <= 4.0, "exposure {level} > 4.0:\n{text}");
}

/// The unit's SystemCallFilter= expanded (recursively, by
/// deploy/seccomp/generate.py with systemd-analyze) is the DaemonSet's
/// seccomp allowlist; both must keep the calls the collector makes.
#[test]
fn collector_syscall_filter_still_allows_what_the_collector_does() {
    let Some(mut c) = systemd_analyze() else {
        return;
    };
    let filter = unit_values("SystemCallFilter");
    assert!(
        filter
            .iter()
            .any(|f| !f.starts_with('~') && f.contains("bpf perf_event_open")),
        "{filter:?}"
    );
    // perf_event_open is in @debug: denying that group would break the probes.
    assert!(
        !filter
            .iter()
            .any(|f| f.starts_with('~') && f.contains("@debug")),
        "{filter:?}"
    );
    let out = c
        .args(["syscall-filter", "@debug"])
        .output()
        .expect("systemd-analyze syscall-filter");
    assert!(String::from_utf8_lossy(&out.stdout).contains("perf_event_open"));
    let allowed = seccomp_allowlist();
    for needed in [
        "bpf",
        "perf_event_open",
        "setrlimit",
        "prlimit64",
        "openat",
        "mmap",
        "socket",
        "connect",
        "epoll_wait",
        "ioctl",
        "clone3",
        "fsync",
        "rename",
    ] {
        assert!(
            allowed.iter().any(|a| a == needed),
            "{needed} not in the seccomp profile"
        );
    }
    for denied in [
        "mount",
        "reboot",
        "kexec_load",
        "init_module",
        "swapon",
        "ptrace",
        // CAP_SYS_PTRACE is granted for /proc access checks only.
        "process_vm_readv",
        "process_vm_writev",
    ] {
        assert!(!allowed.iter().any(|a| a == denied), "{denied} allowed");
    }
    let caps = unit_values("CapabilityBoundingSet");
    assert_eq!(
        caps,
        ["CAP_BPF CAP_PERFMON CAP_SYS_RESOURCE CAP_DAC_READ_SEARCH CAP_SYS_PTRACE CAP_SYSLOG"]
    );
    assert_eq!(unit_values("AmbientCapabilities"), caps);
    assert_eq!(unit_values("LimitNOFILE"), ["65536"]);
}

#[test]
fn daemonset_security_context_is_locked_down() {
    let text =
        std::fs::read_to_string(deploy("kubernetes/collector/collector.yaml")).expect("daemonset");
    for want in [
        "allowPrivilegeEscalation: false",
        "readOnlyRootFilesystem: true",
        "seccompProfile:",
        "drop: [ALL]",
        "add: [BPF, PERFMON, SYS_RESOURCE, DAC_READ_SEARCH, SYS_PTRACE, SYSLOG]",
        "metrics_addr = \"127.0.0.1:9477\"",
    ] {
        assert!(text.contains(want), "daemonset.yaml lacks {want:?}");
    }
    assert!(!text.contains("0.0.0.0:9477"), "/metrics open to the world");
    assert!(!text.contains("privileged: true"));
}

/// Every system call a real collector run makes (probes attached, a window
/// recorded and spooled, the correlator unreachable) is in the seccomp
/// allowlist, so the filter cannot break it. strace(1) from scripts/setup.sh.
#[test]
fn a_real_collector_run_stays_inside_the_allowlist() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("unit_hardening_strace") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("faultline-strace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let trace = dir.join("trace");
    let ib = tests::FakeIb::new("strace");
    ib.active_port("mlx5_0", 1);
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&trace)
        .arg(tests::bin("faultline-collector"))
        .args(["--duration", "1.2", "--window", "0.3", "--quiet"])
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--correlator",
            "http://127.0.0.1:1",
        ])
        .arg("--spool-dir")
        .arg(dir.join("spool"))
        .arg("--record")
        .arg(dir.join("rec.jsonl"))
        .arg("--sysfs-root")
        .arg(ib.root())
        .output()
        .expect("strace (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let allowed = seccomp_allowlist();
    let text = std::fs::read_to_string(&trace).expect("trace");
    let mut used: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let rest = l.split_once(' ')?.1.trim_start();
            let rest = rest.strip_prefix("<... ").unwrap_or(rest);
            let name = rest.split(['(', ' ']).next()?;
            (!name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
            .then_some(name)
        })
        .collect();
    used.sort_unstable();
    used.dedup();
    for must in ["bpf", "perf_event_open"] {
        assert!(used.contains(&must), "the run attached no probes: {used:?}");
    }
    let outside: Vec<&&str> = used
        .iter()
        .filter(|n| !allowed.iter().any(|a| a == *n))
        .collect();
    assert!(
        outside.is_empty(),
        "system calls outside the seccomp allowlist: {outside:?}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
