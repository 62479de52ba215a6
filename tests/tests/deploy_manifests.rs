//! The deployment files hold together: the rendered Kustomize base
//! (`deploy/kubernetes/render.py`) validates against the Kubernetes OpenAPI
//! schemas (kubernetes-validate, strict), every mount the collector's
//! DaemonSet declares is a path the collector's code reads (and none shadows
//! the image's own libraries), its ConfigMap passes the collector's
//! `check-config` and the correlator's passes its own, the PrometheusRule
//! carries `deploy/prometheus`'s groups, the rules pass `promtool test
//! rules`, and the dashboards are what `deploy/grafana/generate.py` writes.
//! The shipped default is authenticated: the correlator serves TLS with the
//! certificate its init container makes and reviews the collectors'
//! projected tokens; the collectors speak https with that CA and token;
//! nothing runs `--insecure`.
//!
//! kubernetes-validate and PyYAML come from `<target dir>/deploy-venv`
//! (scripts/setup.sh); without it the test skips, unless CI is set.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use collector::config::FileConfig;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

fn venv() -> Option<PathBuf> {
    let v = std::env::var_os("FAULTLINE_DEPLOY_VENV").map_or_else(
        || {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("target dir")
                .join("deploy-venv")
        },
        PathBuf::from,
    );
    if v.join("bin/kubernetes-validate").exists() {
        return Some(v);
    }
    assert!(
        !tests::in_ci(),
        "{} missing under CI: scripts/setup.sh installs kubernetes-validate there",
        v.display()
    );
    eprintln!(
        "skipping: {} missing (scripts/setup.sh installs it)",
        v.display()
    );
    None
}

fn run(c: &mut Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{c:?} failed:\n{text}");
    text
}

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-manifests");
    std::fs::create_dir_all(&d).expect("scratch dir");
    d.join(name)
}

#[test]
fn rendered_manifests_validate_and_every_collector_mount_is_read_by_the_code() {
    let Some(venv) = venv() else { return };
    let py = venv.join("bin/python");
    let render = repo().join("deploy/kubernetes/render.py");

    // Schema validation of everything but the Prometheus Operator's CRDs.
    let rendered = scratch("rendered.yaml");
    std::fs::write(&rendered, run(Command::new(&py).arg(&render))).expect("write");
    let report = run(Command::new(venv.join("bin/kubernetes-validate"))
        .args(["--strict", "-k", "1.29.0"])
        .arg(&rendered));
    let passed = report
        .lines()
        .filter(|l| l.contains(" passed for "))
        .count();
    let unvalidated: Vec<&str> = report
        .lines()
        .filter(|l| !l.contains(" passed for "))
        .collect();
    assert_eq!(passed, 21, "{report}");
    assert!(
        unvalidated
            .iter()
            .all(|l| l.contains("api version monitoring.coreos.com/v1")),
        "only the ServiceMonitor/PrometheusRule CRDs lack a schema: {unvalidated:#?}"
    );
    // The current schema version too.
    run(Command::new(venv.join("bin/kubernetes-validate"))
        .args(["--strict", "--quiet"])
        .arg(&rendered));

    let facts: serde_json::Value =
        serde_json::from_str(&run(Command::new(&py).arg(&render).arg("--facts")))
            .expect("facts are JSON");
    let c = &facts["collector"];
    assert_eq!(facts["prometheus_rule_matches"], true);
    assert_eq!(c["hostPID"], true);
    assert_eq!(c["capabilities"]["drop"], serde_json::json!(["ALL"]), "{c}");
    assert_eq!(
        c["capabilities"]["add"],
        serde_json::json!(["BPF", "PERFMON", "SYS_RESOURCE", "DAC_READ_SEARCH"])
    );
    assert!(
        c["env"]
            .as_array()
            .is_some_and(|e| e.iter().any(|v| v == "NODE_NAME")),
        "{c}"
    );

    // The ConfigMap's collector.toml is valid and is what the mounts serve.
    let toml = c["config"].as_str().expect("collector.toml");
    let cfg = FileConfig::parse(toml, "ConfigMap faultline-collector").expect("valid config");
    let conf_file = scratch("collector.toml");
    std::fs::write(&conf_file, toml).expect("write");
    run(Command::new(tests::bin("faultline-collector"))
        .arg("check-config")
        .arg("--config")
        .arg(&conf_file));
    let corr_file = scratch("correlator.toml");
    std::fs::write(
        &corr_file,
        facts["correlator"]["config"].as_str().expect("toml"),
    )
    .expect("write");
    run(Command::new(tests::bin("faultline-correlator"))
        .arg("check-config")
        .arg(&corr_file));
    let args: Vec<String> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let config_arg = args
        .windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| w[1].clone())
        .expect("--config in the args");

    // Where the code reads each mount.
    let defaults = FileConfig::default();
    let btf_dir = Path::new(collector::privilege::BTF_VMLINUX)
        .parent()
        .expect("btf dir")
        .to_path_buf();
    let lib_search = |dir: &str| {
        let under = |p: &&str| Path::new(p).starts_with(dir);
        collector::cuda_lib::USUAL_PATHS.iter().any(&under)
            && collector::nvml::USUAL_PATHS.iter().any(&under)
    };
    let mounts = c["mounts"].as_array().expect("mounts");
    assert_eq!(mounts.len(), 11, "{mounts:#?}");
    for m in mounts {
        let path = m["path"].as_str().expect("path");
        let read_by: bool = match path {
            "/sys" => defaults.collector.sysfs_root == Path::new(path),
            "/sys/kernel/btf" => btf_dir == Path::new(path),
            "/sys/kernel/tracing" => collector::tracefs::DEFAULT_ROOT == path,
            "/sys/fs/cgroup" => collector::storage::CGROUP_ROOT == path,
            "/host/proc" => cfg.collector.proc_root == Path::new(path),
            "/run/nvidia" | "/host/usr/lib/x86_64-linux-gnu" | "/host/usr/lib64" => {
                lib_search(path)
            }
            "/etc/faultline" => Path::new(&config_arg).starts_with(path),
            "/var/lib/faultline" => cfg.stream.spool_dir.starts_with(path),
            "/var/run/secrets/faultline" => {
                cfg.stream
                    .tls_ca
                    .as_deref()
                    .is_some_and(|p| p.starts_with(path))
                    && cfg
                        .stream
                        .token_file
                        .as_deref()
                        .is_some_and(|p| p.starts_with(path))
                    && m["source"] == "projected:serviceAccountToken,configMap"
            }
            other => panic!("the DaemonSet mounts {other}, which no code reads"),
        };
        assert!(read_by, "{path} is mounted but the code does not read it");
        // Only the spool is written.
        assert_eq!(m["readOnly"], path != "/var/lib/faultline", "{path}: {m}");
        // Nothing over the image's own library directories.
        assert!(
            !collector::cuda_lib::SYSTEM_LIB_DIRS.contains(&path),
            "{path} shadows the image's libraries"
        );
    }
    authenticated_by_default(&facts, &cfg);

    // Rules: syntax and unit tests.
    let rules = repo().join("deploy/prometheus");
    run(Command::new("promtool")
        .args(["check", "rules"])
        .arg(rules.join("faultline-rules.yaml")));
    let unit = run(Command::new("promtool")
        .args(["test", "rules", "faultline-rules.test.yaml"])
        .current_dir(&rules));
    assert!(unit.contains("SUCCESS"), "{unit}");

    // Dashboards are what the generator writes.
    run(Command::new("python3")
        .arg(repo().join("deploy/grafana/generate.py"))
        .arg("--check"));
}

/// The shipped default authenticates: TLS with the certificate the init
/// container makes (its `--server-name` is the name the collectors dial),
/// tokens reviewed by the API server for the audience the collectors'
/// projected tokens carry, and no `--insecure` anywhere.
fn authenticated_by_default(facts: &serde_json::Value, cfg: &FileConfig) {
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .expect("array")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect()
    };
    let corr = strings(&facts["correlator"]["args"]);
    let flag =
        |args: &[String], name: &str| args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone());
    assert!(!corr.iter().any(|a| a == "--insecure"), "{corr:?}");
    assert!(corr.iter().any(|a| a == "--token-review"), "{corr:?}");
    let init = facts["correlator"]["init_args"]
        .as_array()
        .and_then(|a| a.first())
        .map(strings)
        .expect("an init container");
    assert_eq!(
        init.first().map(String::as_str),
        Some("kube-tls"),
        "{init:?}"
    );
    let dir = flag(&init, "--dir").expect("--dir");
    for f in ["--tls-cert", "--tls-key"] {
        let p = flag(&corr, f).unwrap_or_else(|| panic!("{f} in {corr:?}"));
        assert!(
            Path::new(&p).starts_with(&dir),
            "{f} {p} is not the init container's {dir}"
        );
    }
    assert_eq!(
        facts["correlator"]["automount_token"], true,
        "TokenReview needs its token"
    );
    let endpoint = cfg.stream.endpoint.as_deref().expect("endpoint");
    assert_eq!(endpoint, "https://faultline-correlator.faultline.svc:50051");
    let host = endpoint
        .trim_start_matches("https://")
        .split(':')
        .next()
        .expect("host");
    assert!(
        init.windows(2)
            .any(|w| w[0] == "--server-name" && w[1] == host),
        "the server certificate names {host}: {init:?}"
    );
    let audience = flag(&corr, "--token-audience").unwrap_or_else(|| "faultline-correlator".into());
    assert_eq!(
        facts["collector"]["token_audiences"],
        serde_json::json!([audience]),
        "the collectors' projected token is for the correlator's audience"
    );
    assert!(cfg.stream.tls_ca.is_some() && cfg.stream.token_file.is_some());
}

/// `deploy/install.sh` into a staging root: the binary, the unit (flags from
/// `$ARGS` of its EnvironmentFile, stdout not in the journal), a default
/// config that passes `check-config`; a re-run keeps an edited config.
#[test]
fn install_script_puts_unit_config_and_environment_file_in_place() {
    let root = scratch("install-root");
    let _ = std::fs::remove_dir_all(&root);
    let bin_dir = tests::bin("faultline-collector")
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let install = || {
        run(Command::new("sh")
            .arg(repo().join("deploy/install.sh"))
            .arg(&bin_dir)
            .env("DESTDIR", &root))
    };
    install();
    assert!(root.join("usr/local/bin/faultline-collector").is_file());
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/faultline-collector.service"))
        .expect("unit installed");
    for want in [
        "EnvironmentFile=-/etc/default/faultline-collector",
        "ExecStart=/usr/local/bin/faultline-collector --config /etc/faultline/collector.toml --quiet $ARGS",
        "StandardOutput=null",
        "StandardError=journal",
    ] {
        assert!(unit.lines().any(|l| l == want), "unit lacks {want:?}");
    }
    let conf = root.join("etc/faultline/collector.toml");
    let checked = run(Command::new(tests::bin("faultline-collector"))
        .arg("check-config")
        .arg("--config")
        .arg(&conf));
    assert!(checked.contains("dcgm_compat = true"), "{checked}");
    assert_eq!(
        FileConfig::load(&conf).expect("config"),
        FileConfig {
            collector: collector::config::CollectorSection {
                quiet: true,
                ..FileConfig::default().collector
            },
            ..FileConfig::default()
        },
        "the installed config is the documented defaults (quiet on)"
    );
    let args = run(Command::new("sh").arg("-c").arg(format!(
        ". {}; printf '[%s]' \"$ARGS\"",
        root.join("etc/default/faultline-collector").display()
    )));
    assert_eq!(args, "[]");
    // An upgrade keeps the site's settings.
    std::fs::write(&conf, "[collector]\nwindow_secs = 5.0\n").expect("edit");
    install();
    assert_eq!(
        std::fs::read_to_string(&conf).expect("config"),
        "[collector]\nwindow_secs = 5.0\n"
    );
}
