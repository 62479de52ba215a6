//! Both images, built from this repository by `scripts/build-images.sh`
//! (a Debian root filesystem from Debian packages, the binaries copied in),
//! started as the Kubernetes base runs them, on loopback:
//!
//! * with podman as root where it can run containers (runc; crun refuses
//!   this sandbox's hybrid cgroup layout, and the rlimits are lowered
//!   because the sandbox has no CAP_SYS_RESOURCE to raise them): host
//!   network and PID namespace, read-only root, the DaemonSet's mounts, the
//!   seccomp profile `deploy/seccomp/faultline-collector.json`, all
//!   capabilities dropped but the ones the DaemonSet adds;
//! * else each image's root filesystem under `unshare --mount` + `chroot`,
//!   with the same mounts and `capsh` bounding the collector to the same
//!   capabilities.
//!
//! The test prints which ran. Either way, the correlator image's default
//! command is authenticated: without its certificates it refuses to start
//! (it never falls back to plaintext); with a PKI from `faultline-correlator
//! certs` mounted it runs as uid 65532 with no capabilities and answers
//! `/healthz`; the collector loads NVML (the stand-in), attaches its probes
//! with only the granted capabilities (CAP_BPF, CAP_PERFMON,
//! CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_SYS_RESOURCE — the last only where the machine
//! has it), reports ready and streams its windows over mTLS with its host's
//! certificate to the correlator, which reports the host's lag.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tests::KillOnDrop;

/// CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_SYS_RESOURCE, CAP_PERFMON, CAP_BPF.
const GRANTED: [u32; 5] = [2, 19, 24, 38, 39];
const GRANTED_NAMES: [&str; 5] = [
    "DAC_READ_SEARCH",
    "SYS_PTRACE",
    "SYS_RESOURCE",
    "PERFMON",
    "BPF",
];

/// The capabilities this process may hand on (its bounding set).
fn bounding() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapBnd:\t"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// `podman rm -f` on drop.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", &self.0])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `podman run` as the tests need it here (see the module doc).
fn podman_run(name: &str) -> Command {
    let mut c = Command::new("podman");
    c.args(["--runtime", "runc", "run", "--rm", "--name", name])
        .args(["--network=host", "--read-only"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Whether podman runs containers here (the collector image's `--version`).
fn podman_works() -> bool {
    Command::new("podman")
        .args(["--runtime", "runc", "run", "--rm", "--network=none"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
        ])
        .args(["localhost/faultline/collector:latest", "--version"])
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"faultline-collector"))
}

fn podman_pid(name: &str) -> Option<u32> {
    let o = Command::new("podman")
        .args(["inspect", "-f", "{{.State.Pid}}", name])
        .output()
        .ok()?;
    String::from_utf8_lossy(&o.stdout).trim().parse().ok()
}
const HOST: &str = "img-node";

/// The `CMD ["…", …]` line of a Dockerfile, as its arguments.
fn dockerfile_cmd(dockerfile: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dockerfile).expect("Dockerfile");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD line");
    serde_json::from_str(line).expect("CMD in JSON form")
}

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
    let _turn = tests::one_file_at_a_time(file!());
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

    // FAULTLINE_IMAGES_CHROOT=1 runs the chroot path where podman works too.
    let podman = std::env::var_os("FAULTLINE_IMAGES_CHROOT").is_none() && podman_works();
    eprintln!(
        "images run with {}",
        if podman {
            "podman (runc)"
        } else {
            "unshare + chroot (no working podman, or FAULTLINE_IMAGES_CHROOT set)"
        }
    );
    let dir = target.join("tmp/images-test");
    let _ = std::fs::remove_dir_all(&dir);
    let spool = dir.join("spool");
    let history = dir.join("history");
    std::fs::create_dir_all(&spool).expect("spool");
    std::fs::create_dir_all(&history).expect("history dir");
    std::os::unix::fs::chown(&history, Some(65532), Some(65532)).expect("chown");
    let tag = std::process::id();
    let (corr_name, col_name) = (format!("fl-corr-{tag}"), format!("fl-col-{tag}"));
    let mut guards = Vec::new();

    // The default command (the Dockerfile's CMD, which build-images.sh
    // gives the imported image) is authenticated: without its PKI it
    // refuses to start.
    let default_cmd = dockerfile_cmd(&repo.join("deploy/images/correlator.Dockerfile"));
    assert!(
        !default_cmd.iter().any(|a| a == "--insecure")
            && default_cmd.iter().any(|a| a == "--client-ca"),
        "{default_cmd:?}"
    );
    let refused = if podman {
        let cmd = Command::new("podman")
            .args(["image", "inspect", "--format", "{{json .Config.Cmd}}"])
            .arg("localhost/faultline/correlator:latest")
            .output()
            .expect("podman image inspect");
        let got: Vec<String> = serde_json::from_slice(&cmd.stdout).expect("Cmd as JSON");
        assert_eq!(
            got, default_cmd,
            "the image's default command is the Dockerfile's"
        );
        let labels = Command::new("podman")
            .args(["image", "inspect", "--format", "{{json .Config.Labels}}"])
            .arg("localhost/faultline/correlator:latest")
            .output()
            .expect("podman image inspect");
        let labels: serde_json::Value =
            serde_json::from_slice(&labels.stdout).expect("Labels as JSON");
        let label = |k: &str| labels[format!("org.opencontainers.image.{k}")].clone();
        assert_eq!(label("title"), "faultline-correlator", "{labels}");
        assert_eq!(label("licenses"), "Apache-2.0", "{labels}");
        assert_eq!(label("version"), env!("CARGO_PKG_VERSION"), "{labels}");
        let rev = label("revision");
        let rev = rev.as_str().unwrap_or_default();
        assert!(
            rev == "unknown" || (rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())),
            "{labels}"
        );
        Command::new("podman")
            .args([
                "--runtime",
                "runc",
                "run",
                "--rm",
                "--network=none",
                "--read-only",
            ])
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=4096:4096",
            ])
            .args(["--user", "65532:65532", "--cap-drop=all"])
            .arg("localhost/faultline/correlator:latest")
            .output()
            .expect("podman run the default command")
    } else {
        chrooted(
            &corr_root,
            "",
            &["--uid=65532".into()],
            &format!(
                "exec /usr/local/bin/faultline-correlator {}",
                default_cmd.join(" ")
            ),
        )
        .output()
        .expect("run the default command")
    };
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "the default command started without its PKI"
    );
    assert!(
        err.contains("cannot read /etc/faultline/tls/server.pem"),
        "{err}"
    );

    // A PKI for the correlator (readable by its uid) and the collector's host.
    let pki = dir.join("pki");
    let certs = Command::new(tests::bin("faultline-correlator"))
        .args(["certs", "--out"])
        .arg(&pki)
        .args(["--host", HOST])
        .output()
        .expect("certs");
    assert!(certs.status.success(), "{certs:?}");
    for e in std::fs::read_dir(&pki).expect("pki").flatten() {
        std::os::unix::fs::chown(e.path(), Some(65532), Some(65532)).expect("chown");
    }
    // The collector's config: the image's, with TLS to the correlator.
    let col_conf = dir.join("collector-etc");
    std::fs::create_dir_all(col_conf.join("tls")).expect("config dir");
    for f in ["ca.pem", &format!("{HOST}.pem"), &format!("{HOST}.key")] {
        std::fs::copy(pki.join(f), col_conf.join("tls").join(f)).expect("copy");
    }
    let conf = std::fs::read_to_string(repo.join("deploy/collector.toml")).expect("collector.toml");
    let conf = conf.replacen(
        "[stream]\n",
        &format!(
            "[stream]\ntls_ca = \"/etc/faultline/tls/ca.pem\"\ntls_cert = \"/etc/faultline/tls/{HOST}.pem\"\ntls_key = \"/etc/faultline/tls/{HOST}.key\"\n"
        ),
        1,
    );
    assert!(
        conf.contains("tls_ca"),
        "deploy/collector.toml has a [stream] table"
    );
    std::fs::write(col_conf.join("collector.toml"), conf).expect("write config");

    // The correlator: the default command on loopback ports, uid 65532, no
    // capabilities.
    let (grpc, web) = (free_port(), free_port());
    let mut args = default_cmd.clone();
    for (flag, value) in [
        ("--listen", format!("127.0.0.1:{grpc}")),
        ("--web", format!("127.0.0.1:{web}")),
    ] {
        let i = args.iter().position(|a| a == flag).expect("flag in CMD");
        args[i + 1] = value;
    }
    args.extend(["--history".into(), "/var/lib/faultline/history.db".into()]);
    let serve = args.join(" ");
    let _corr = if podman {
        guards.push(Container(corr_name.clone()));
        KillOnDrop(
            podman_run(&corr_name)
                .args(["--user", "65532:65532", "--cap-drop=all"])
                .arg("-v")
                .arg(format!("{}:/var/lib/faultline", history.display()))
                .arg("-v")
                .arg(format!("{}:/etc/faultline/tls:ro", pki.display()))
                .arg("localhost/faultline/correlator:latest")
                .args(serve.split(' '))
                .spawn()
                .expect("podman run the correlator image"),
        )
    } else {
        KillOnDrop(
            chrooted(
                &corr_root,
                &format!(
                    "mount --bind '{}' \"$R/var/lib/faultline\"\nmkdir -p \"$R/etc/faultline/tls\"\nmount --bind '{}' \"$R/etc/faultline/tls\"",
                    history.display(),
                    pki.display()
                ),
                &[
                    "--gid=65532".into(),
                    "--groups=65532".into(),
                    "--uid=65532".into(),
                ],
                &format!("exec /usr/local/bin/faultline-correlator {serve}"),
            )
            .spawn()
            .expect("start the correlator image"),
        )
    };
    wait_for("the correlator's /healthz", Duration::from_secs(30), || {
        get(&format!("http://127.0.0.1:{web}/healthz"))
    });
    let corr_pid = if podman {
        podman_pid(&corr_name)
    } else {
        pid_in(&corr_root, "faultline-corre")
    }
    .expect("correlator pid");
    let status = std::fs::read_to_string(format!("/proc/{corr_pid}/status")).expect("status");
    assert!(status.contains("\nCapEff:\t0000000000000000\n"), "{status}");
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t65532")),
        "{status}"
    );

    // The collector: the DaemonSet's mounts, bounded to its capabilities.
    let standins = PathBuf::from(tests::STANDINS_DIR);
    let args = format!(
        "--config /etc/faultline/collector.toml --proc-root /host/proc --window 0.5 --metrics-addr 127.0.0.1:0 --no-otlp --correlator https://127.0.0.1:{grpc} --nvml-library /opt/standins/nvml/libnvidia-ml.so.1"
    );
    let mut col = if podman {
        let caps: Vec<&str> = GRANTED
            .iter()
            .zip(GRANTED_NAMES)
            .filter(|(c, _)| bounding() & (1u64 << **c) != 0)
            .map(|(_, n)| n)
            .collect();
        guards.push(Container(col_name.clone()));
        let mut c = podman_run(&col_name);
        c.args(["--pid=host", "--cap-drop=all"])
            .arg(format!("--cap-add={}", caps.join(",")))
            .arg("--security-opt")
            .arg(format!(
                "seccomp={}",
                repo.join("deploy/seccomp/faultline-collector.json")
                    .display()
            ))
            .args(["-e", &format!("NODE_NAME={HOST}"), "-e", "FAKE_NVML_GPUS=2"])
            .args(["-v", "/sys:/sys:ro", "-v", "/proc:/host/proc:ro"])
            .arg("-v")
            .arg(format!("{}:/var/lib/faultline", spool.display()))
            .arg("-v")
            .arg(format!("{}:/opt/standins:ro", standins.display()))
            .arg("-v")
            .arg(format!("{}:/etc/faultline:ro", col_conf.display()))
            .arg("localhost/faultline/collector:latest")
            .args(args.split(' '))
            .stdout(Stdio::piped());
        KillOnDrop(c.spawn().expect("podman run the collector image"))
    } else {
        let mounts = format!(
            "mount --rbind /sys \"$R/sys\"\nmount -o remount,bind,ro \"$R/sys\"\n\
             mkdir -p \"$R/host/proc\" \"$R/opt/standins\"\nmount --rbind /proc \"$R/host/proc\"\n\
             mount --bind '{}' \"$R/var/lib/faultline\"\nmount --bind '{}' \"$R/opt/standins\"\n\
             mount -o remount,bind,ro \"$R/opt/standins\"\nmount --bind '{}' \"$R/etc/faultline\"",
            spool.display(),
            standins.display(),
            col_conf.display()
        );
        let drop: Vec<String> = (0..=40u32)
            .filter(|c| !GRANTED.contains(c))
            .map(|c| c.to_string())
            .collect();
        KillOnDrop(
            chrooted(
                &col_root,
                &mounts,
                &[format!("--drop={}", drop.join(","))],
                &format!(
                    "NODE_NAME={HOST} FAKE_NVML_GPUS=2 exec /usr/local/bin/faultline-collector {args}"
                ),
            )
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the collector image"),
        )
    };
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
    let col_pid = if podman {
        podman_pid(&col_name)
    } else {
        pid_in(&col_root, "faultline-colle")
    }
    .expect("collector pid");
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
    drop(col);
    drop(guards);
}

/// `ARG NAME=value` of a Dockerfile.
fn dockerfile_arg(text: &str, name: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("ARG {name}=")))
        .map(str::to_string)
}

/// Both Dockerfiles build FROM one base pinned by digest (a tag alone can
/// move under a rebuild) and label their image as OCI asks, the base's
/// digest among the labels.
#[test]
fn dockerfiles_pin_their_base_by_digest_and_carry_oci_labels() {
    let _turn = tests::one_file_at_a_time(file!());
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut bases = Vec::new();
    for name in ["collector", "correlator"] {
        let text = std::fs::read_to_string(repo.join(format!("deploy/images/{name}.Dockerfile")))
            .expect("Dockerfile");
        let base = dockerfile_arg(&text, "BASE").expect("ARG BASE");
        let (image, digest) = base.split_once('@').expect("BASE pinned by digest");
        let hex = digest.strip_prefix("sha256:").unwrap_or_default();
        assert!(
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{name}: {base}"
        );
        let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
        assert_eq!(froms.len(), 2, "{name}: build and runtime stages");
        for f in &froms {
            assert!(
                f.starts_with("FROM ${BASE}"),
                "{name}: {f} is not the pinned base"
            );
        }
        let label = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("LABEL org.opencontainers.image.{k}=")))
                .map(|v| v.trim_matches('"').to_string())
                .unwrap_or_else(|| panic!("{name}: no {k} label"))
        };
        assert_eq!(label("title"), format!("faultline-{name}"));
        assert_eq!(label("licenses"), "Apache-2.0");
        assert_eq!(label("version"), "${VERSION}");
        assert_eq!(label("revision"), "${REVISION}");
        assert_eq!(label("base.name"), image);
        assert_eq!(label("base.digest"), digest);
        assert!(!label("description").is_empty());
        assert_eq!(
            dockerfile_arg(&text, "VERSION").as_deref(),
            Some(env!("CARGO_PKG_VERSION")),
            "{name}: the default version is the workspace's"
        );
        bases.push(base);
    }
    assert_eq!(bases[0], bases[1], "one base for both images");
}

/// This machine's address on its default route (no packet is sent), if it
/// has one that is not loopback.
fn network_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("10.255.255.255:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// The status code of `GET path` at `addr` (0: no answer).
fn status(addr: std::net::SocketAddr, path: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut head = [0u8; 12];
    if s.read_exact(&mut head).is_err() {
        return 0;
    }
    String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0)
}

/// The image's default command serves the web UI on every address: from the
/// network, the probes' `/healthz` and the scrapers' `/metrics` answer, the
/// pages and `/api/open` do not (401: no `[web] token_file`), the host
/// binary run with the CMD's `--web` address (its port moved). Before, the
/// whole UI answered anyone who reached :8080.
#[test]
fn the_images_default_web_address_serves_probes_but_not_the_ui_to_the_network() {
    let _turn = tests::one_file_at_a_time(file!());
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf();
    let cmd = dockerfile_cmd(&repo.join("deploy/images/correlator.Dockerfile"));
    let web = cmd
        .windows(2)
        .find(|w| w[0] == "--web")
        .map(|w| w[1].clone())
        .expect("--web in CMD");
    let web: std::net::SocketAddr = web.parse().expect("--web address");
    assert!(web.ip().is_unspecified(), "probes reach the pod IP: {web}");
    let Some(ip) = network_address() else {
        assert!(!tests::in_ci(), "no network address under CI");
        eprintln!("skipping: no non-loopback address on this machine");
        return;
    };
    let port = free_port();
    let _corr = KillOnDrop(
        Command::new(tests::bin("faultline-correlator"))
            .args(["serve", "--insecure", "--listen"])
            .arg(format!("127.0.0.1:{}", free_port()))
            .arg("--web")
            .arg(std::net::SocketAddr::new(web.ip(), port).to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve"),
    );
    let at = std::net::SocketAddr::new(ip, port);
    wait_for("the web listener", Duration::from_secs(20), || {
        (status(at, "/healthz") == 200).then(String::new)
    });
    assert_eq!(status(at, "/metrics"), 200);
    for path in ["/", "/api/open", "/api/stream"] {
        assert_eq!(status(at, path), 401, "{path} from the network");
    }
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(status(local, "/api/open"), 200, "loopback needs no token");
}
