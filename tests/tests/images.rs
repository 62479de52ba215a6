//! Both images, built from this repository by `scripts/build-images.sh`
//! (a Debian root filesystem from Debian packages, the binaries copied in),
//! started as the Kubernetes base runs them. podman cannot run containers
//! in this sandbox (crun's setrlimit is refused: no CAP_SYS_RESOURCE), so
//! each image's root filesystem runs under `unshare --mount` + `chroot`, on
//! the host's loopback and PID namespace (the DaemonSet's hostPID), with the
//! DaemonSet's mounts (/sys read-only, the host's /proc at /host/proc, the
//! spool, the config) and `capsh` bounding the collector to the
//! capabilities the manifest grants (CAP_BPF, CAP_PERFMON,
//! CAP_DAC_READ_SEARCH, CAP_SYS_RESOURCE — the last one only where the
//! machine has it) and running the correlator as uid 65532 with none:
//!
//! * the correlator answers `/healthz`;
//! * the collector loads the NVML stand-in, attaches its probes with only
//!   those capabilities (`faultline_probe_attached` 1, `/readyz` ready) and
//!   streams its windows to the correlator (which reports the host's lag).
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tests::KillOnDrop;

/// CAP_DAC_READ_SEARCH, CAP_SYS_RESOURCE, CAP_PERFMON, CAP_BPF.
const GRANTED: [u32; 4] = [2, 24, 38, 39];
const HOST: &str = "img-node";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn get(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "3", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> Option<String>) -> String {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The pid of the process named `comm` whose root is `root`.
fn pid_in(root: &Path, comm: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let name = std::fs::read_to_string(e.path().join("comm")).ok()?;
        let r = std::fs::read_link(e.path().join("root")).ok()?;
        (name.trim() == comm && r == root).then_some(pid)
    })
}

/// `unshare --mount` + `chroot ROOT`, after `mounts` (shell lines run with
/// `$R` = ROOT), then `capsh ARGS -- -c CMD`.
fn chrooted(root: &Path, mounts: &str, capsh: &[String], cmd: &str) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--fork", "--kill-child", "--", "sh", "-ec"])
        .arg(format!(
            "R='{}'\nmount --make-rprivate /\nmount --rbind /proc \"$R/proc\"\nmount --rbind /dev \"$R/dev\"\n{mounts}\nexec chroot \"$R\" /usr/sbin/capsh {} -- -c '{cmd}'",
            root.display(),
            capsh.join(" ")
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn images_built_from_the_repo_start_and_the_collector_streams_with_the_granted_capabilities() {
    let _k = tests::kernel_lock();
    if !tests::require_bpf("images") {
        return;
    }
    if Command::new("mmdebstrap")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            !tests::in_ci(),
            "mmdebstrap missing under CI: scripts/setup.sh installs it"
        );
        eprintln!("skipping: mmdebstrap missing (scripts/setup.sh)");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo");
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf();
    let out = target.join("images");
    // Build (the binaries are the debug ones `cargo xtask test` built).
    let t = Instant::now();
    let b = Command::new("bash")
        .arg(repo.join("scripts/build-images.sh"))
        .args(["--profile", "debug"])
        .arg(&out)
        .env("CARGO_TARGET_DIR", &target)
        .env("FAULTLINE_IMAGES_NO_BUILD", "1")
        // podman cannot run them here; importing them costs ~30 s of disk.
        .env("FAULTLINE_IMAGES_NO_PODMAN", "1")
        .output()
        .expect("run build-images.sh");
    assert!(
        b.status.success(),
        "build-images.sh: {}",
        String::from_utf8_lossy(&b.stderr)
    );
    eprintln!("images built in {:.1} s", t.elapsed().as_secs_f64());
    let col_root = std::fs::canonicalize(out.join("collector/rootfs")).expect("collector rootfs");
    let corr_root =
        std::fs::canonicalize(out.join("correlator/rootfs")).expect("correlator rootfs");
    for (root, bin) in [
        (&col_root, "usr/local/bin/faultline-collector"),
        (&corr_root, "usr/local/bin/faultline-correlator"),
    ] {
        assert!(root.join(bin).is_file(), "{bin} in the image");
        assert!(root.join("etc/debian_version").is_file());
    }

    // The correlator: uid 65532, no capabilities, loopback.
    let (grpc, web) = (free_port(), free_port());
    let _corr = KillOnDrop(
        chrooted(
            &corr_root,
            "",
            &["--gid=65532".into(), "--groups=65532".into(), "--uid=65532".into()],
            &format!(
                "exec /usr/local/bin/faultline-correlator serve --insecure --listen 127.0.0.1:{grpc} --web 127.0.0.1:{web} --history /var/lib/faultline/history.db"
            ),
        )
        .spawn()
        .expect("start the correlator image"),
    );
    wait_for("the correlator's /healthz", Duration::from_secs(30), || {
        get(&format!("http://127.0.0.1:{web}/healthz"))
    });
    let corr_pid = pid_in(&corr_root, "faultline-corre").expect("correlator pid");
    let status = std::fs::read_to_string(format!("/proc/{corr_pid}/status")).expect("status");
    assert!(status.contains("\nCapEff:\t0000000000000000\n"), "{status}");
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t65532")),
        "{status}"
    );

    // The collector: the DaemonSet's mounts, bounded to its capabilities.
    let dir = target.join("tmp/images-test");
    let _ = std::fs::remove_dir_all(&dir);
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).expect("spool");
    let standins = PathBuf::from(tests::STANDINS_DIR);
    let mounts = format!(
        "mount --rbind /sys \"$R/sys\"\nmount -o remount,bind,ro \"$R/sys\"\n\
         mkdir -p \"$R/host/proc\" \"$R/opt/standins\"\nmount --rbind /proc \"$R/host/proc\"\n\
         mount --bind '{}' \"$R/var/lib/faultline\"\nmount --bind '{}' \"$R/opt/standins\"\n\
         mount -o remount,bind,ro \"$R/opt/standins\"",
        spool.display(),
        standins.display()
    );
    let drop: Vec<String> = (0..=40u32)
        .filter(|c| !GRANTED.contains(c))
        .map(|c| c.to_string())
        .collect();
    let mut col = KillOnDrop(
        chrooted(
            &col_root,
            &mounts,
            &[format!("--drop={}", drop.join(","))],
            &format!(
                "NODE_NAME={HOST} FAKE_NVML_GPUS=2 exec /usr/local/bin/faultline-collector --config /etc/faultline/collector.toml --proc-root /host/proc --window 0.5 --metrics-addr 127.0.0.1:0 --no-otlp --correlator http://127.0.0.1:{grpc} --nvml-library /opt/standins/nvml/libnvidia-ml.so.1"
            ),
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the collector image"),
    );
    let lines = tests::lines_of(&mut col.0);
    let addr = loop {
        let l = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| {
                let mut err = String::new();
                if let Some(mut s) = col.0.stderr.take() {
                    use std::io::Read as _;
                    let _ = s.read_to_string(&mut err);
                }
                panic!("collector image printed no metrics address: {e}\n{err}")
            });
        if let Some(a) = l.strip_prefix("metrics on http://") {
            break a.trim_end_matches("/metrics").to_string();
        }
    };
    wait_for("the collector's /readyz", Duration::from_secs(30), || {
        get(&format!("http://{addr}/readyz")).filter(|r| r.contains("ready"))
    });
    let col_pid = pid_in(&col_root, "faultline-colle").expect("collector pid");
    let status = std::fs::read_to_string(format!("/proc/{col_pid}/status")).expect("status");
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:\t"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapEff");
    let granted: u64 = GRANTED.iter().map(|c| 1u64 << c).sum();
    assert_eq!(eff & !granted, 0, "only the granted capabilities: {eff:x}");
    assert_eq!(
        eff & ((1 << 38) | (1 << 39)),
        (1 << 38) | (1 << 39),
        "CAP_BPF and CAP_PERFMON: {eff:x}"
    );
    let metrics = wait_for("probes attached", Duration::from_secs(30), || {
        get(&format!("http://{addr}/metrics")).filter(|m| {
            m.lines()
                .any(|l| l.starts_with("faultline_probe_attached{") && l.ends_with(" 1"))
                && m.contains("DCGM_FI_DEV_GPU_TEMP{")
        })
    });
    let attached: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("faultline_probe_attached{") && l.ends_with(" 1"))
        .collect();
    assert!(
        attached.iter().any(|l| l.contains("block")),
        "the block tracepoints attached: {attached:?}"
    );
    assert!(
        metrics.contains(&format!("Hostname=\"{HOST}\"")),
        "NODE_NAME names the host"
    );
    // The correlator receives its windows.
    wait_for(
        "the correlator hears the collector",
        Duration::from_secs(30),
        || {
            get(&format!("http://127.0.0.1:{web}/metrics")).filter(|m| {
                m.contains(&format!(
                    "faultline_correlator_collector_lag_seconds{{host=\"{HOST}\"}}"
                ))
            })
        },
    );
    assert!(
        std::fs::read_dir(&spool).map(|d| d.count()).unwrap_or(0) <= 64,
        "the spool drains"
    );
}
