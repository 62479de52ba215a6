//! The shipped systemd units stay hardened (`systemd-analyze security`
//! exposure ≤ 4.0 for the collector, ≤ 1.5 for the correlator) without
//! losing what each needs: the collector's syscall filter still allows
//! bpf(2), perf_event_open(2) and setrlimit, its capabilities are the six it
//! uses, and the DaemonSet keeps its security context; the correlator runs
//! as its own user with no capability at all. (tests/tests/it/deb_packages.rs
//! starts both units under a real systemd.)
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
    values_of("faultline-collector.service", key)
}

fn values_of(unit: &str, key: &str) -> Vec<String> {
    let text = std::fs::read_to_string(deploy(unit)).expect("unit");
    text.lines()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")))
        .map(str::to_string)
        .collect()
}

/// `systemd-analyze security`'s overall exposure of a shipped unit.
fn exposure(mut c: Command, unit: &str) -> f64 {
    let out = c
        .args(["security", "--offline=true", "--no-pager"])
        .arg(deploy(unit))
        .output()
        .expect("systemd-analyze security");
    let text = String::from_utf8_lossy(&out.stdout);
    let level: f64 = text
        .lines()
        .find_map(|l| {
            l.split(&format!("Overall exposure level for {unit}: "))
                .nth(1)
        })
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in {text}"));
    println!("systemd-analyze security exposure of {unit}: {level}");
    level
}

#[test]
fn collector_unit_exposure_is_at_most_4() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(c) = systemd_analyze() else {
        return;
    };
    let level = exposure(c, "faultline-collector.service");
    assert!(level <= 4.0, "exposure {level} > 4.0");
}

/// The correlator needs no privilege: its own user, no capabilities, no
/// devices, no kernel or other processes' state; the packaged unit is
/// near the floor `systemd-analyze` allows a networked service (1.1 now:
/// what is left is the network itself, the host's root and users).
#[test]
fn correlator_unit_runs_unprivileged_with_exposure_at_most_1_5() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(c) = systemd_analyze() else {
        return;
    };
    let level = exposure(c, "faultline-correlator.service");
    assert!(level <= 1.5, "exposure {level} > 1.5");
    let unit = "faultline-correlator.service";
    assert_eq!(values_of(unit, "User"), ["faultline"]);
    assert_eq!(values_of(unit, "CapabilityBoundingSet"), [""]);
    assert_eq!(values_of(unit, "AmbientCapabilities"), [""]);
    assert_eq!(values_of(unit, "NoNewPrivileges"), ["yes"]);
    assert_eq!(values_of(unit, "StateDirectory"), ["faultline-correlator"]);
    assert_eq!(
        values_of(unit, "RestrictAddressFamilies"),
        ["AF_INET AF_INET6 AF_UNIX"]
    );
    let filter = values_of(unit, "SystemCallFilter");
    assert!(filter.iter().any(|f| f == "@system-service"), "{filter:?}");
    assert!(
        filter
            .iter()
            .any(|f| f.starts_with('~') && f.contains("@privileged") && f.contains("@debug")),
        "{filter:?}"
    );
    // The packaged config's history is in the unit's state directory.
    let conf = std::fs::read_to_string(deploy("correlator.toml")).expect("correlator.toml");
    assert!(
        conf.contains("path = \"/var/lib/faultline-correlator/history.db\""),
        "{conf}"
    );
}

/// The unit's SystemCallFilter= expanded (recursively, by
/// deploy/seccomp/generate.py with systemd-analyze) is the DaemonSet's
/// seccomp allowlist; both must keep the calls the collector makes.
#[test]
fn collector_syscall_filter_still_allows_what_the_collector_does() {
    let _turn = tests::one_file_at_a_time(file!());
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
    let _turn = tests::one_file_at_a_time(file!());
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
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("unit_hardening_strace") {
        return;
    }
    let dir = tests::scratch_dir("strace");
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
