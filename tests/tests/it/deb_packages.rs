//! The Debian packages (`cargo xtask deb`, cargo-deb) of both binaries:
//! what they hold (`dpkg-deb`: files, control, conffiles, maintainer
//! scripts), and that they install with dpkg and START under a real
//! systemd: a podman container whose PID 1 is systemd, from a Debian
//! bookworm root filesystem made by mmdebstrap (cached under the target
//! directory: ~2 min once, then ~2 s to unpack). The units run with their
//! whole sandbox (the container is privileged, so systemd can set up the
//! namespaces, capabilities and filters the units ask for); the checks are
//! `systemctl is-active`, the correlator's `/healthz` and `/metrics` through
//! curl, the collector's `/healthz` with the missing GPU libraries reported
//! in its journal, not fatal, the users and capabilities the processes run
//! with, JSON logs through `/etc/default/faultline-correlator`, and removal
//! stopping the unit but keeping its conffiles.
//!
//! The packages hold the debug binaries this test run built (`xtask deb
//! --bin-dir`): packaging, not the release build, is under test.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::OnceLock,
    time::{Duration, Instant},
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

fn target() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .to_path_buf()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether `tool ARG` runs; missing: a skip, or a failure under CI.
fn have(tool: &str, arg: &str, why: &str) -> bool {
    let ok = Command::new(tool)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(!tests::in_ci(), "CI=true but {tool} is missing ({why})");
        eprintln!("SKIPPED deb_packages: {tool} missing ({why})");
    }
    ok
}

/// The two packages, made once per run: (collector, correlator).
fn debs() -> Option<&'static (PathBuf, PathBuf)> {
    static DEBS: OnceLock<Option<(PathBuf, PathBuf)>> = OnceLock::new();
    DEBS.get_or_init(|| {
        let cargo_deb = Command::new("cargo")
            .args(["deb", "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !cargo_deb {
            assert!(
                !tests::in_ci(),
                "CI=true but cargo-deb is missing (cargo install cargo-deb --locked)"
            );
            eprintln!("SKIPPED deb_packages: cargo-deb missing (cargo install cargo-deb --locked)");
            return None;
        }
        if !have("dpkg-deb", "--version", "Debian's dpkg") {
            return None;
        }
        let xtask = tests::bin("xtask");
        assert!(
            xtask.is_file(),
            "{} is missing: build it first (`cargo build --bins`; `cargo xtask test` does)",
            xtask.display()
        );
        // One directory, emptied each run (no package piles up per run).
        let out = target().join("deb-test/debs");
        let _ = std::fs::remove_dir_all(&out);
        let t = Instant::now();
        let made = Command::new(&xtask)
            .arg("deb")
            .arg("--bin-dir")
            .arg(tests::bin("faultline-collector").parent().expect("bin dir"))
            .arg("--out")
            .arg(&out)
            .arg("--fast")
            .current_dir(repo())
            .output()
            .expect("xtask deb");
        assert!(made.status.success(), "xtask deb: {}", text(&made));
        eprintln!("packages made in {:.1} s", t.elapsed().as_secs_f64());
        let lines: Vec<PathBuf> = String::from_utf8_lossy(&made.stdout)
            .lines()
            .map(PathBuf::from)
            .collect();
        let find = |name: &str| {
            lines
                .iter()
                .find(|p| {
                    p.file_name()
                        .is_some_and(|f| f.to_string_lossy().starts_with(&format!("{name}_")))
                })
                .cloned()
                .unwrap_or_else(|| panic!("no {name} package in {lines:?}"))
        };
        Some((find("faultline-collector"), find("faultline-correlator")))
    })
    .as_ref()
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let o = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .expect("dpkg-deb");
    assert!(o.status.success(), "dpkg-deb {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// One file of a package's data.
fn packaged_file(deb: &Path, path: &str, dir: &Path) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -xOf - '.{path}'",
            deb.display()
        ))
        .current_dir(dir)
        .output()
        .expect("tar");
    assert!(o.status.success(), "{path}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn packages_hold_binaries_units_conffiles_and_scripts() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some((collector, correlator)) = debs() else {
        return;
    };
    let scratch = target().join(format!("deb-test/inspect-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch");
    for (deb, name, conf, depends) in [
        (
            collector,
            "faultline-collector",
            "collector.toml",
            &["libc6"][..],
        ),
        (
            correlator,
            "faultline-correlator",
            "correlator.toml",
            &["libc6", "libsqlite3-0", "passwd"][..],
        ),
    ] {
        let files = dpkg_deb(&["--contents"], deb);
        for want in [
            format!("./usr/bin/{name}"),
            format!("./usr/lib/systemd/system/{name}.service"),
            format!("./etc/faultline/{conf}"),
            format!("./etc/default/{name}"),
            format!("./usr/share/doc/{name}/copyright"),
            format!("./usr/share/doc/{name}/README.md"),
        ] {
            assert!(
                files.lines().any(|l| l.ends_with(&want)),
                "{name} lacks {want}:\n{files}"
            );
        }
        assert_eq!(
            dpkg_deb(&["--field"], deb).lines().next(),
            Some(format!("Package: {name}").as_str())
        );
        let deps = dpkg_deb(&["--field"], deb);
        let deps = deps
            .lines()
            .find_map(|l| l.strip_prefix("Depends: "))
            .unwrap_or_else(|| panic!("{name}: no Depends in {deps}"));
        for d in depends {
            assert!(
                deps.split(", ").any(|x| x.starts_with(d)),
                "{name} Depends: {deps}"
            );
        }
        let ctl = scratch.join(name);
        let _ = std::fs::remove_dir_all(&ctl);
        let o = Command::new("dpkg-deb")
            .arg("--control")
            .arg(deb)
            .arg(&ctl)
            .output()
            .expect("dpkg-deb --control");
        assert!(o.status.success(), "{}", text(&o));
        let conffiles = std::fs::read_to_string(ctl.join("conffiles")).expect("conffiles");
        assert_eq!(
            conffiles.lines().collect::<Vec<_>>(),
            [
                format!("/etc/faultline/{conf}"),
                format!("/etc/default/{name}")
            ],
            "{name}: the config files are conffiles (kept on upgrade)"
        );
        let postinst = std::fs::read_to_string(ctl.join("postinst")).expect("postinst");
        assert!(
            postinst.contains(&format!("deb-systemd-helper enable {name}.service"))
                && postinst.contains(&format!("deb-systemd-invoke $_dh_action {name}.service")),
            "{name}: postinst enables and starts the unit:\n{postinst}"
        );
        let prerm = std::fs::read_to_string(ctl.join("prerm")).expect("prerm");
        assert!(
            prerm.contains(&format!("deb-systemd-invoke stop {name}.service")),
            "{prerm}"
        );
        if name == "faultline-correlator" {
            assert!(postinst.contains("useradd --system"), "{postinst}");
        }
        // The unit and the config are the repository's, byte for byte.
        assert_eq!(
            packaged_file(
                deb,
                &format!("/usr/lib/systemd/system/{name}.service"),
                &scratch
            ),
            std::fs::read_to_string(repo().join(format!("deploy/{name}.service"))).expect("unit")
        );
        let packaged_conf = scratch.join(conf);
        std::fs::write(
            &packaged_conf,
            packaged_file(deb, &format!("/etc/faultline/{conf}"), &scratch),
        )
        .expect("write");
        let checked = Command::new(tests::bin(name))
            .arg("check-config")
            .arg(&packaged_conf)
            .output()
            .expect("check-config");
        assert!(
            checked.status.success(),
            "{name} check-config: {}",
            text(&checked)
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// The Debian root filesystem with systemd (tar), made once and cached.
fn systemd_rootfs() -> PathBuf {
    const PACKAGES: &str = "systemd,systemd-sysv,libsqlite3-0,curl,ca-certificates";
    let dir = target().join("deb-test");
    std::fs::create_dir_all(&dir).expect("dir");
    // The file name changes with the package list (a new list, a new base).
    let key = PACKAGES.replace(',', "+");
    let base = dir.join(format!("bookworm-{key}.tar"));
    if base.is_file() {
        return base;
    }
    eprintln!("making the Debian root filesystem with systemd (mmdebstrap, ~2 min once)");
    let part = dir.join(format!("base.{}.part", std::process::id()));
    let o = Command::new("mmdebstrap")
        .args(["--quiet", "--format=tar", "--variant=minbase"])
        .arg(format!("--include={PACKAGES}"))
        .args([
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "bookworm",
        ])
        .arg(&part)
        .output()
        .expect("mmdebstrap");
    assert!(o.status.success(), "mmdebstrap: {}", text(&o));
    std::fs::rename(&part, &base).expect("rename");
    base
}

/// A systemd container, removed (with its root) on drop.
struct Machine {
    name: String,
    root: PathBuf,
}

impl Machine {
    fn sh(&self, script: &str) -> Output {
        Command::new("podman")
            .args(["exec", &self.name, "sh", "-c", script])
            .output()
            .expect("podman exec")
    }

    /// `script`'s output once it succeeds and `ok` accepts it, within `limit`.
    fn until(&self, script: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let o = self.sh(script);
            let t = text(&o);
            if o.status.success() && ok(&t) {
                return t;
            }
            if start.elapsed() > limit {
                let journal = self.sh("journalctl --no-pager -n 60");
                panic!("{script}: {t}\n--- journal:\n{}", text(&journal));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "5", &self.name])
            .output();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[test]
fn packages_install_and_start_under_systemd() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    let Some((collector, correlator)) = debs() else {
        return;
    };
    if !have("mmdebstrap", "--version", "scripts/setup.sh")
        || !have("podman", "--version", "scripts/setup.sh")
    {
        return;
    }
    let t = Instant::now();
    let base = systemd_rootfs();
    let root = target().join(format!("deb-test/root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("root/debs")).expect("root");
    let o = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-xf")
        .arg(&base)
        .output()
        .expect("tar");
    assert!(o.status.success(), "{}", text(&o));
    std::fs::copy(
        repo().join("deploy/install.sh"),
        root.join("root/install.sh"),
    )
    .expect("copy");
    for deb in [collector, correlator] {
        std::fs::copy(
            deb,
            root.join("root/debs").join(deb.file_name().expect("name")),
        )
        .expect("copy");
    }
    let m = Machine {
        name: format!("faultline-deb-{}", std::process::id()),
        root: root.clone(),
    };
    let started = Command::new("podman")
        .args(["--runtime", "runc", "run", "-d", "--name", &m.name])
        .args(["--privileged", "--systemd=always", "--network=none"])
        .args([
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=4096:4096",
        ])
        .arg("--rootfs")
        .arg(&root)
        .arg("/sbin/init")
        .output()
        .expect("podman run");
    if !started.status.success() {
        assert!(
            !tests::in_ci(),
            "podman must run a systemd container in CI: {}",
            text(&started)
        );
        eprintln!(
            "SKIPPED deb_packages: podman cannot run containers here: {}",
            text(&started)
        );
        return;
    }
    m.until(
        "systemctl is-system-running",
        Duration::from_secs(20),
        |s| s.trim() == "running" || s.trim() == "degraded",
    );
    let boot = t.elapsed();

    // Installed by deploy/install.sh, which uses dpkg where there is one:
    // each postinst enables and starts its unit.
    let installed = m.sh(
        "DEB_DIR=/root/debs FAULTLINE_PACKAGES='faultline-collector faultline-correlator' \
         sh /root/install.sh",
    );
    assert!(
        installed.status.success(),
        "install.sh: {}",
        text(&installed)
    );
    assert!(
        text(&installed).contains("Setting up faultline-correlator"),
        "{}",
        text(&installed)
    );
    for unit in ["faultline-collector", "faultline-correlator"] {
        m.until(
            &format!("systemctl is-active {unit}"),
            Duration::from_secs(15),
            |s| s.trim() == "active",
        );
        let enabled = m.sh(&format!("systemctl is-enabled {unit}"));
        assert_eq!(text(&enabled).trim(), "enabled", "{unit}");
    }
    // The correlator's web endpoint (the packaged [web] listen) answers.
    m.until(
        "curl -fsS -m 2 http://127.0.0.1:8080/healthz",
        Duration::from_secs(10),
        |s| s.trim() == "ok",
    );
    let metrics = m.until(
        "curl -fsS -m 2 http://127.0.0.1:8080/metrics",
        Duration::from_secs(5),
        |s| s.contains("# TYPE faultline_"),
    );
    assert!(
        metrics.lines().any(|l| l.starts_with("faultline_")),
        "{metrics}"
    );
    // The collector: up, with the missing GPU libraries a status line.
    m.until(
        "curl -fsS -m 2 http://127.0.0.1:9477/healthz",
        Duration::from_secs(15),
        |s| s.trim() == "ok",
    );
    m.until(
        "journalctl --no-pager -o cat -u faultline-collector",
        Duration::from_secs(5),
        |s| s.contains("libcuda.so.1 not found"),
    );
    // Who they run as: the correlator as `faultline` with no capabilities,
    // the collector as root bounded to its six.
    let status = |unit: &str| {
        let o = m.sh(&format!(
            "cat /proc/$(systemctl show -p MainPID --value {unit})/status"
        ));
        assert!(o.status.success(), "{}", text(&o));
        let s = text(&o);
        let field = |k: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
                .unwrap_or_default()
        };
        (field("Uid:"), field("CapEff:"))
    };
    let uid = text(&m.sh("id -u faultline")).trim().to_string();
    assert_eq!(
        status("faultline-correlator"),
        (uid, "0000000000000000".into())
    );
    let (col_uid, col_caps) = status("faultline-collector");
    assert_eq!(col_uid, "0");
    // CAP_DAC_READ_SEARCH 2, CAP_SYS_PTRACE 19, CAP_SYS_RESOURCE 24,
    // CAP_SYSLOG 34, CAP_PERFMON 38, CAP_BPF 39.
    // (As many of them as this machine grants: a sandbox may lack some.)
    let bounding = text(&m.sh("grep CapBnd /proc/1/status"));
    let bounding = bounding
        .split_whitespace()
        .nth(1)
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .expect("CapBnd of PID 1");
    let want: u64 = [2, 19, 24, 34, 38, 39]
        .iter()
        .map(|b| 1u64 << b)
        .sum::<u64>()
        & bounding;
    assert_eq!(
        u64::from_str_radix(&col_caps, 16).ok(),
        Some(want),
        "{col_caps}"
    );
    let owner = m
        .sh("stat -c %U:%a /var/lib/faultline-correlator /var/lib/faultline-correlator/history.db");
    assert_eq!(
        text(&owner).split_whitespace().collect::<Vec<_>>(),
        ["faultline:700", "faultline:600"]
    );

    // JSON logs through the environment file the unit reads.
    let restarted = m.sh(
        "echo FAULTLINE_LOG_FORMAT=json >> /etc/default/faultline-correlator \
         && systemctl restart faultline-correlator",
    );
    assert!(restarted.status.success(), "{}", text(&restarted));
    let logs = m.until(
        "journalctl --no-pager -o cat -u faultline-correlator -n 3",
        Duration::from_secs(10),
        |s| s.lines().last().is_some_and(|l| l.starts_with('{')),
    );
    let last: serde_json::Value =
        serde_json::from_str(logs.lines().last().expect("line")).expect("a JSON log line");
    assert!(
        last["level"].is_string() && last["fields"]["message"].is_string(),
        "{last}"
    );

    // Both stayed up: no restart (on failure) since they started.
    for unit in ["faultline-collector", "faultline-correlator"] {
        let s = text(&m.sh(&format!(
            "systemctl show -p NRestarts -p ActiveState {unit}"
        )));
        assert!(
            s.contains("NRestarts=0") && s.contains("ActiveState=active"),
            "{unit}: {s}"
        );
    }
    // An upgrade (the package installed again) keeps an edited conffile
    // and restarts the unit.
    let upgraded = m.sh("echo '# site edit' >> /etc/faultline/collector.toml \
         && dpkg -i /root/debs/faultline-collector_*.deb \
         && tail -n 1 /etc/faultline/collector.toml");
    assert!(upgraded.status.success(), "{}", text(&upgraded));
    assert!(
        text(&upgraded).trim_end().ends_with("# site edit"),
        "{}",
        text(&upgraded)
    );
    m.until(
        "systemctl is-active faultline-collector",
        Duration::from_secs(15),
        |s| s.trim() == "active",
    );
    // Removal stops the unit and keeps the site's configuration.
    let removed = m.sh("dpkg -r faultline-correlator");
    assert!(removed.status.success(), "{}", text(&removed));
    let state = m.sh("systemctl is-active faultline-correlator");
    assert_ne!(text(&state).trim(), "active");
    assert!(m
        .sh("test -f /etc/faultline/correlator.toml")
        .status
        .success());
    eprintln!(
        "systemd container up in {:.1} s; install, start, checks in {:.1} s more",
        boot.as_secs_f64(),
        (t.elapsed() - boot).as_secs_f64()
    );
}
