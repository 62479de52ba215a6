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
//! What a GPU-cluster SRE expects of a node agent, one test each: OTLP from
//! the node's pods reaches that node's collector (a node-local Service),
//! `/dev/infiniband` and the kubelet's pod-resources socket are mounted,
//! `/run/nvidia` propagates the GPU Operator's later driver mount, every
//! taint is tolerated at `system-node-critical`, the ServiceMonitors carry
//! the label kube-prometheus-stack selects by and no `bearerTokenFile`, and
//! the RuntimeClass and the seccomp profile's installation are documented.
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
    assert_eq!(passed, 25, "{report}");
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
        serde_json::json!([
            "BPF",
            "PERFMON",
            "SYS_RESOURCE",
            "DAC_READ_SEARCH",
            "SYS_PTRACE",
            "SYSLOG"
        ])
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
    assert_eq!(mounts.len(), 14, "{mounts:#?}");
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
            "/var/lib/kubelet/pod-resources" => cfg.nvml.pod_resources_socket.starts_with(path),
            // libibverbs opens the uverbs devices there for collector::rdma's
            // async-event listeners.
            "/dev/infiniband" => m["source"] == "hostPath:/dev/infiniband",
            // The kernel log the [kmsg] source reads.
            "/dev/kmsg" => {
                cfg.kmsg.enabled
                    && cfg.kmsg.path == Path::new(path)
                    && m["source"] == "hostPath:/dev/kmsg"
            }
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
        // Only the GPU Operator's driver root needs the host's later mounts.
        let propagation = if path == "/run/nvidia" {
            "HostToContainer"
        } else {
            "None"
        };
        assert_eq!(m["propagation"], propagation, "{path}: {m}");
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

/// The rendered base as JSON (`render.py --json`), or `None` where the
/// deploy venv is missing.
fn rendered() -> Option<Vec<serde_json::Value>> {
    let py = venv()?.join("bin/python");
    let out = run(Command::new(py)
        .arg(repo().join("deploy/kubernetes/render.py"))
        .arg("--json"));
    Some(serde_json::from_str(&out).expect("render.py --json"))
}

fn object<'a>(docs: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} in the base"))
}

fn pod_spec(docs: &[serde_json::Value]) -> &serde_json::Value {
    &object(docs, "DaemonSet", "faultline-collector")["spec"]["template"]["spec"]
}

fn collector_container(docs: &[serde_json::Value]) -> &serde_json::Value {
    pod_spec(docs)["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "collector"))
        .expect("the collector container")
}

/// The collector container's mount at `path` and the pod volume behind it.
fn mount_and_volume<'a>(
    docs: &'a [serde_json::Value],
    path: &str,
) -> (&'a serde_json::Value, &'a serde_json::Value) {
    let m = collector_container(docs)["volumeMounts"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["mountPath"] == path))
        .unwrap_or_else(|| panic!("nothing mounted at {path}"));
    let v = pod_spec(docs)["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == m["name"]))
        .unwrap_or_else(|| panic!("no volume {} for {path}", m["name"]));
    (m, v)
}

fn collector_config(docs: &[serde_json::Value]) -> FileConfig {
    let toml = object(docs, "ConfigMap", "faultline-collector")["data"]["collector.toml"]
        .as_str()
        .expect("collector.toml");
    FileConfig::parse(toml, "ConfigMap faultline-collector").expect("valid config")
}

fn kubernetes_doc() -> String {
    std::fs::read_to_string(repo().join("docs/kubernetes.md")).expect("docs/kubernetes.md")
}

/// A pod's OTLP export reaches the collector of its own node: the Service
/// `faultline-collector-otlp` has `internalTrafficPolicy: Local`, selects
/// the DaemonSet's pods and targets the collector container's OTLP ports,
/// on which the ConfigMap's receivers listen on every address of the pod
/// (not loopback only); the NetworkPolicy admits those ports from every
/// namespace; docs/kubernetes.md tells an SDK where to send.
#[test]
fn otlp_from_a_pod_reaches_the_collector_on_its_own_node() {
    let Some(docs) = rendered() else { return };
    let svc = object(&docs, "Service", "faultline-collector-otlp");
    assert_eq!(svc["spec"]["internalTrafficPolicy"], "Local", "{svc}");
    assert!(
        svc["spec"].get("clusterIP").is_none(),
        "a ClusterIP Service: {svc}"
    );
    let pod_labels = &object(&docs, "DaemonSet", "faultline-collector")["spec"]["template"]
        ["metadata"]["labels"];
    let selector = svc["spec"]["selector"].as_object().expect("selector");
    assert!(
        !selector.is_empty() && selector.iter().all(|(k, v)| &pod_labels[k] == v),
        "{selector:?} does not select {pod_labels}"
    );
    let ports = collector_container(&docs)["ports"]
        .as_array()
        .expect("container ports");
    let cfg = collector_config(&docs);
    assert!(cfg.otlp.enabled && cfg.otlp.grpc_enabled && cfg.otlp.http_enabled);
    let mut seen = Vec::new();
    for p in svc["spec"]["ports"].as_array().expect("ports") {
        let target = p["targetPort"].as_str().expect("named targetPort");
        let c = ports
            .iter()
            .find(|c| c["name"] == target)
            .unwrap_or_else(|| panic!("no container port {target}"));
        let port = c["containerPort"].as_u64().expect("containerPort");
        assert_eq!(p["port"], port, "{p}");
        let addr = match target {
            "otlp-grpc" => &cfg.otlp.grpc_addr,
            "otlp-http" => &cfg.otlp.http_addr,
            other => panic!("unexpected port {other}"),
        };
        let sock: std::net::SocketAddr = addr.parse().expect("HOST:PORT");
        assert!(
            sock.ip().is_unspecified(),
            "{target} listens on {addr}: loopback is not reachable from pods"
        );
        assert_eq!(u64::from(sock.port()), port, "{target}");
        seen.push(port);
    }
    assert_eq!(seen, [4317, 4318]);
    let np = object(&docs, "NetworkPolicy", "faultline-collector-metrics");
    let admitted = np["spec"]["ingress"]
        .as_array()
        .expect("ingress")
        .iter()
        .find(|r| {
            r["from"] == serde_json::json!([{"namespaceSelector": {}}])
                && r["ports"]
                    == serde_json::json!([{"protocol": "TCP", "port": 4317}, {"protocol": "TCP", "port": 4318}])
        });
    assert!(
        admitted.is_some(),
        "the OTLP ports are admitted from every namespace: {np}"
    );
    let doc = kubernetes_doc();
    for want in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "http://faultline-collector-otlp.faultline.svc:4317",
        "internalTrafficPolicy: Local",
        "status.hostIP",
    ] {
        assert!(doc.contains(want), "docs/kubernetes.md lacks {want:?}");
    }
}

/// The RDMA async-event listeners open `/dev/infiniband/uverbs*`: mounted
/// read-only from the host, created empty on nodes without InfiniBand so
/// the pod still starts there.
#[test]
fn dev_infiniband_is_mounted() {
    let Some(docs) = rendered() else { return };
    let (m, v) = mount_and_volume(&docs, "/dev/infiniband");
    assert_eq!(m["readOnly"], true, "{m}");
    assert_eq!(
        v["hostPath"],
        serde_json::json!({"path": "/dev/infiniband", "type": "DirectoryOrCreate"})
    );
}

/// The GPU Operator's driver container mounts its root under `/run/nvidia`
/// after the collector may have started; only `HostToContainer` carries
/// that mount into the collector.
#[test]
fn run_nvidia_propagates_host_mounts_into_the_container() {
    let Some(docs) = rendered() else { return };
    let (m, v) = mount_and_volume(&docs, "/run/nvidia");
    assert_eq!(m["mountPropagation"], "HostToContainer", "{m}");
    assert_eq!(m["readOnly"], true, "{m}");
    assert_eq!(v["hostPath"]["path"], "/run/nvidia");
}

/// The kubelet's pod-resources socket, where `[nvml] pod_resources_socket`
/// looks for it, names each GPU's Kubernetes container.
#[test]
fn kubelet_pod_resources_socket_is_mounted_where_the_config_reads_it() {
    let Some(docs) = rendered() else { return };
    let (m, v) = mount_and_volume(&docs, "/var/lib/kubelet/pod-resources");
    assert_eq!(v["hostPath"]["path"], "/var/lib/kubelet/pod-resources");
    assert_eq!(
        m["readOnly"], true,
        "connecting to a socket needs no writable mount"
    );
    let cfg = collector_config(&docs);
    assert_eq!(
        cfg.nvml.pod_resources_socket,
        Path::new(collector::config::DEFAULT_POD_RESOURCES_SOCKET)
    );
    assert_eq!(
        cfg.nvml.pod_resources_socket.parent(),
        Some(Path::new("/var/lib/kubelet/pod-resources"))
    );
}

/// The base sets no RuntimeClass (clusters name theirs differently, and
/// where the NVIDIA runtime is the default none is needed); both the
/// manifest and docs/kubernetes.md say when and how to set one.
#[test]
fn runtime_class_is_documented() {
    let Some(docs) = rendered() else { return };
    assert!(pod_spec(&docs).get("runtimeClassName").is_none());
    let manifest =
        std::fs::read_to_string(repo().join("deploy/kubernetes/collector/collector.yaml"))
            .expect("read");
    assert!(manifest.contains("# runtimeClassName: nvidia"));
    let doc = kubernetes_doc();
    assert!(
        doc.contains("runtimeClassName: nvidia") && doc.contains("RuntimeClass"),
        "docs/kubernetes.md documents runtimeClassName"
    );
}

/// A node agent tolerates every taint and runs at `system-node-critical`;
/// a ResourceQuota admits that class in the namespace where the API server
/// limits it to kube-system by default.
#[test]
fn every_taint_is_tolerated_at_system_node_critical_priority() {
    let Some(docs) = rendered() else { return };
    let pod = pod_spec(&docs);
    assert_eq!(
        pod["tolerations"],
        serde_json::json!([{"operator": "Exists"}])
    );
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert!(
        !docs.iter().any(|d| d["kind"] == "PriorityClass"),
        "no own PriorityClass"
    );
    let quota = object(&docs, "ResourceQuota", "faultline-node-critical");
    assert_eq!(quota["metadata"]["namespace"], "faultline");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"],
        serde_json::json!([{"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}])
    );
}

/// kube-prometheus-stack's Prometheus selects ServiceMonitors and
/// PrometheusRules by `release: <Helm release>`: every one carries it (the
/// docs say how to change it). No endpoint uses `bearerTokenFile`; the
/// collectors' is authorised by a token Secret of a ServiceAccount bound to
/// the ClusterRole kube-rbac-proxy checks.
#[test]
fn service_monitors_are_selected_by_kube_prometheus_stack_without_bearer_token_file() {
    let Some(docs) = rendered() else { return };
    let monitors: Vec<&serde_json::Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceMonitor" || d["kind"] == "PrometheusRule")
        .collect();
    assert_eq!(monitors.len(), 3);
    for m in &monitors {
        assert_eq!(
            m["metadata"]["labels"]["release"], "kube-prometheus-stack",
            "{}",
            m["metadata"]
        );
        for e in m["spec"]["endpoints"].as_array().into_iter().flatten() {
            assert!(e.get("bearerTokenFile").is_none(), "{e}");
        }
    }
    let sm = object(&docs, "ServiceMonitor", "faultline-collector");
    let auth = &sm["spec"]["endpoints"][0]["authorization"];
    assert_eq!(auth["type"], "Bearer", "{sm}");
    let secret_name = auth["credentials"]["name"].as_str().expect("secret name");
    assert_eq!(auth["credentials"]["key"], "token");
    let secret = object(&docs, "Secret", secret_name);
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(secret["metadata"]["namespace"], sm["metadata"]["namespace"]);
    let sa = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        .as_str()
        .expect("the Secret names its ServiceAccount");
    object(&docs, "ServiceAccount", sa);
    let bound = docs.iter().any(|d| {
        d["kind"] == "ClusterRoleBinding"
            && d["roleRef"]["name"] == "faultline-metrics-reader"
            && d["subjects"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["kind"] == "ServiceAccount" && s["name"] == sa)
            })
    });
    assert!(bound, "{sa} is bound to faultline-metrics-reader");
    let doc = kubernetes_doc();
    assert!(
        doc.contains("release: kube-prometheus-stack") && doc.contains("serviceMonitorSelector")
    );
}

/// The collector's Localhost seccomp profile is the file in deploy/seccomp,
/// and docs/kubernetes.md says where on each node it goes (the kubelet's
/// seccomp root joined with the manifest's `localhostProfile`) and how.
#[test]
fn seccomp_profile_installation_is_documented() {
    let Some(docs) = rendered() else { return };
    let profile = &collector_container(&docs)["securityContext"]["seccompProfile"];
    assert_eq!(profile["type"], "Localhost");
    let local = profile["localhostProfile"]
        .as_str()
        .expect("localhostProfile");
    assert_eq!(
        &pod_spec(&docs)["securityContext"]["seccompProfile"],
        profile
    );
    let file = Path::new(local).file_name().expect("file name");
    assert!(
        repo().join("deploy/seccomp").join(file).is_file(),
        "{local}"
    );
    let doc = kubernetes_doc();
    let target = format!("/var/lib/kubelet/seccomp/{local}");
    assert!(doc.contains(&target), "docs/kubernetes.md names {target}");
    assert!(
        doc.contains("### Installing the seccomp profile"),
        "docs/kubernetes.md has an installation section"
    );
}

/// The base's web UI answers its own Service's names (every form a client
/// in the cluster may dial; any other `Host` is refused as DNS rebinding)
/// and the pod IP the kubelet probes send; the probes and the scrape use the
/// paths that stay open without the viewer token; the UI is on the port
/// the probes and the Service name.
#[test]
fn web_ui_answers_its_service_names_and_probes_use_open_paths() {
    let Some(docs) = rendered() else { return };
    let cm = object(&docs, "ConfigMap", "faultline-correlator");
    let toml = cm["data"]["correlator.toml"]
        .as_str()
        .expect("correlator.toml");
    let cfg = correlator::config::parse_file(toml, "ConfigMap faultline-correlator")
        .expect("valid correlator config");
    let svc = object(&docs, "Service", "faultline-correlator");
    let (name, ns) = (
        svc["metadata"]["name"].as_str().expect("name"),
        svc["metadata"]["namespace"].as_str().expect("namespace"),
    );
    for host in [
        name.to_string(),
        format!("{name}.{ns}"),
        format!("{name}.{ns}.svc"),
        format!("{name}.{ns}.svc.cluster.local"),
    ] {
        assert!(
            cfg.web.allowed_hosts.contains(&host),
            "[web] allowed_hosts lacks {host}: {:?}",
            cfg.web.allowed_hosts
        );
    }
    let listen = cfg.web.listen.expect("[web] listen");
    assert!(listen.ip().is_unspecified(), "probes come to the pod IP");
    let deploy = object(&docs, "Deployment", "faultline-correlator");
    let c = &deploy["spec"]["template"]["spec"]["containers"][0];
    let http = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "http")
        .expect("an http port");
    assert_eq!(http["containerPort"], u64::from(listen.port()));
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz", "{probe}");
    }
    // A viewer token file, if the base names one, is mounted.
    if let Some(t) = &cfg.web.token_file {
        let mounted = c["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .filter_map(|m| m["mountPath"].as_str())
            .any(|m| t.starts_with(m));
        assert!(mounted, "[web] token_file {} is not mounted", t.display());
    }
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

/// The scale-out overlay (`deploy/kubernetes/scale-out`, docs/scale-out.md)
/// holds together: its manifests validate; the collectors' ConfigMap is the
/// base's with only `[stream]` changed, to NATS with 4 hash buckets; the
/// shard Deployments consume exactly those buckets, each through its own
/// durable consumer, with an active and a standby replica; every flag
/// they pass is one `serve` takes; NATS runs as many servers as the stream
/// replicas they ask for.
#[test]
fn scale_out_overlay_shards_cover_every_bucket_of_the_collectors() {
    let Some(venv) = venv() else { return };
    let dir = repo().join("deploy/kubernetes/scale-out");
    let kust = std::fs::read_to_string(dir.join("kustomization.yaml")).expect("kustomization");
    let files: Vec<PathBuf> = [
        "nats.yaml",
        "correlator-shards.yaml",
        "collector-config.yaml",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(kust.contains(name), "{name} not in the kustomization");
    }
    let report = run(Command::new(venv.join("bin/kubernetes-validate"))
        .args(["--strict", "-k", "1.29.0"])
        .args(&files));
    let passed = report
        .lines()
        .filter(|l| l.contains(" passed for "))
        .count();
    assert_eq!(passed, 4 + 6 + 1, "{report}");
    let docs: Vec<serde_json::Value> = serde_json::from_str(&run(Command::new(venv.join("bin/python"))
        .args(["-c", "import json, sys, yaml; print(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d]))"])
        .args(&files)))
    .expect("JSON");

    // The collectors: the base's config but for [stream].
    let toml = |d: &serde_json::Value| {
        d["data"]["collector.toml"]
            .as_str()
            .expect("toml")
            .to_string()
    };
    let overlay = toml(object(&docs, "ConfigMap", "faultline-collector"));
    let base = rendered()
        .map(|b| toml(object(&b, "ConfigMap", "faultline-collector")))
        .expect("base");
    let without_stream = |t: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut skip = false;
        for l in t.lines() {
            if l.starts_with('[') {
                skip = l == "[stream]";
            }
            if !skip {
                out.push(l.to_string());
            }
        }
        out
    };
    assert_eq!(without_stream(&overlay), without_stream(&base));
    let cfg = FileConfig::parse(&overlay, "scale-out ConfigMap").expect("valid collector config");
    assert_eq!(
        cfg.stream.endpoint.as_deref(),
        Some("nats://faultline-nats.faultline.svc:4222")
    );
    let buckets: std::collections::BTreeSet<String> = (0..cfg.stream.nats_buckets)
        .map(|b| format!("h{b:02x}"))
        .collect();
    // Every bucket is a host's: a few hundred host names reach them all.
    let hashed: std::collections::BTreeSet<String> = (0..400)
        .map(|i| vocab::nats::host_shard(&format!("gpu-node-{i:04}"), cfg.stream.nats_buckets))
        .collect();
    assert_eq!(hashed, buckets);

    // The shards.
    let help = run(Command::new(tests::bin("faultline-correlator")).args(["serve", "--help"]));
    let mut shards = std::collections::BTreeSet::new();
    let mut consumers = std::collections::BTreeSet::new();
    let mut replicas = 0;
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        assert_eq!(d["spec"]["replicas"], 2, "an active and a standby: {d}");
        let args: Vec<&str> = d["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            assert!(
                help.split(|c: char| c.is_whitespace() || c == ',')
                    .any(|w| w == *flag),
                "serve has no {flag}"
            );
        }
        let after = |f: &str| {
            args.iter()
                .position(|a| *a == f)
                .and_then(|i| args.get(i + 1))
                .copied()
        };
        assert_eq!(
            after("--nats"),
            Some("nats://faultline-nats.faultline.svc:4222")
        );
        for s in after("--nats-shards").expect("--nats-shards").split(',') {
            assert!(shards.insert(s.to_string()), "shard {s} consumed twice");
        }
        assert!(consumers.insert(
            after("--nats-consumer")
                .expect("--nats-consumer")
                .to_string()
        ));
        replicas = after("--nats-replicas")
            .and_then(|r| r.parse().ok())
            .expect("--nats-replicas");
        assert_eq!(
            after("--nats-max-bytes").and_then(|b| b.parse::<i64>().ok()),
            Some(cfg.stream.nats_max_bytes),
            "whichever side creates the stream bounds it alike"
        );
    }
    // The bound fits the servers' store (max_file_store: 50G).
    let conf = object(&docs, "ConfigMap", "faultline-nats")["data"]["nats.conf"]
        .as_str()
        .expect("nats.conf");
    assert!(conf.contains("max_file_store: 50G"), "{conf}");
    assert!(cfg.stream.nats_max_bytes > 0 && cfg.stream.nats_max_bytes < 50 << 30);
    assert_eq!(
        shards, buckets,
        "the shards consume exactly the collectors' buckets"
    );
    assert_eq!(cfg.stream.nats_replicas, replicas);
    let nats = object(&docs, "StatefulSet", "faultline-nats");
    assert_eq!(nats["spec"]["replicas"].as_u64(), Some(replicas as u64));
}

/// `kubectl kustomize` (the real tool, where this machine has it) builds
/// the base and the scale-out overlay: the base into what `render.py`
/// renders (the same objects), the overlay into the shared collector
/// DaemonSet with its ConfigMap on NATS, the NATS StatefulSet and the four
/// shard Deployments, and not the base's single correlator. (The overlay
/// once named `../collector.yaml`, which kustomize refuses: no file above
/// the kustomization naming it; `render.py` had hidden that.)
#[test]
fn real_kustomize_builds_the_base_and_the_scale_out_overlay() {
    let Some(venv) = venv() else { return };
    if Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("skipping: no kubectl on this machine");
        return;
    }
    let build = |dir: &str| -> Vec<serde_json::Value> {
        let yaml = run(Command::new("kubectl")
            .arg("kustomize")
            .arg(repo().join(dir)));
        let path = scratch(&format!("{}.yaml", dir.replace('/', "-")));
        std::fs::write(&path, yaml).expect("write");
        let json = run(Command::new(venv.join("bin/python"))
            .args(["-c", "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))"])
            .arg(&path));
        serde_json::from_str(&json).expect("JSON")
    };
    let names = |docs: &[serde_json::Value]| -> std::collections::BTreeSet<(String, String)> {
        docs.iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap_or("").to_string(),
                    d["metadata"]["name"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    };
    let base = build("deploy/kubernetes");
    let rendered = rendered().expect("render.py");
    assert_eq!(names(&base), names(&rendered), "kustomize and render.py");

    let overlay = build("deploy/kubernetes/scale-out");
    let have = names(&overlay);
    for (kind, name) in [
        ("Namespace", "faultline"),
        ("DaemonSet", "faultline-collector"),
        ("StatefulSet", "faultline-nats"),
        ("Deployment", "faultline-correlator-h00"),
        ("Deployment", "faultline-correlator-h03"),
    ] {
        assert!(
            have.contains(&(kind.into(), name.into())),
            "{kind}/{name}: {have:?}"
        );
    }
    assert!(
        !have.contains(&("Deployment".into(), "faultline-correlator".into())),
        "the base's single correlator"
    );
    let toml = object(&overlay, "ConfigMap", "faultline-collector")["data"]["collector.toml"]
        .as_str()
        .expect("collector.toml")
        .to_string();
    assert!(
        toml.contains("endpoint = \"nats://faultline-nats.faultline.svc:4222\""),
        "{toml}"
    );
    overlay_authenticates_to_nats(&overlay, &toml);
}

/// The scale-out overlay's NATS credentials (docs/scale-out.md, trust):
/// NATS with TLS and the generated `auth.conf`; each shard mounts its own
/// seed only; each collector gets its node's seed through an init
/// container into a memory-backed emptyDir, and its own container never
/// mounts the Secret holding every node's seed.
fn overlay_authenticates_to_nats(overlay: &[serde_json::Value], toml: &str) {
    let nats = object(overlay, "StatefulSet", "faultline-nats");
    let conf = object(overlay, "ConfigMap", "faultline-nats")["data"]["nats.conf"]
        .as_str()
        .expect("nats.conf");
    assert!(
        conf.contains("include auth.conf") && conf.contains("tls {"),
        "{conf}"
    );
    assert!(!conf.contains("no_auth_user"), "{conf}");
    let vols = nats["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(
        vols.contains("faultline-nats-auth") && vols.contains("faultline-nats-tls"),
        "{vols}"
    );

    for d in overlay.iter().filter(|d| d["kind"] == "Deployment") {
        let shard = d["metadata"]["labels"]["faultline.io/shard"]
            .as_str()
            .expect("shard");
        let spec = &d["spec"]["template"]["spec"];
        let args = spec["containers"][0]["args"].to_string();
        let seed = format!("correlator-{shard}.nk");
        assert!(
            args.contains(&format!("\"/var/run/faultline-nats/{seed}\""))
                && args.contains("--nats-ca"),
            "{args}"
        );
        let vols = spec["volumes"].to_string();
        assert!(
            vols.contains("faultline-nats-correlators") && vols.contains(&seed),
            "{vols}"
        );
        assert_eq!(
            vols.matches("correlator-h0").count(),
            2,
            "only its own seed: {vols}"
        );
    }

    let ds = object(overlay, "DaemonSet", "faultline-collector");
    let spec = &ds["spec"]["template"]["spec"];
    let all_seeds = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["secret"]["secretName"] == "faultline-nats-collectors")
        .expect("the collectors' Secret");
    let all_name = all_seeds["name"].as_str().expect("name");
    let init = spec["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .find(|c| c["name"] == "nats-seed")
        .expect("the seed's init container");
    assert!(init["volumeMounts"].to_string().contains(all_name));
    assert!(init["command"].to_string().contains("$NODE_NAME.nk"));
    let seed = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "nats-seed")
        .expect("the seed's emptyDir");
    assert_eq!(seed["emptyDir"]["medium"], "Memory");
    for c in spec["containers"].as_array().expect("containers") {
        assert!(
            !c["volumeMounts"]
                .to_string()
                .contains(&format!("\"{all_name}\"")),
            "{} mounts every node's seed",
            c["name"]
        );
    }
    let collector = spec["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .find(|c| c["name"] == "collector")
        .expect("collector");
    let mounts = collector["volumeMounts"].to_string();
    assert!(mounts.contains("/var/run/faultline-nats/seed"), "{mounts}");
    assert!(
        toml.contains("nats_nkey_file = \"/var/run/faultline-nats/seed/host.nk\"")
            && toml.contains("nats_ca = \"/var/run/faultline-nats/ca/ca.crt\""),
        "{toml}"
    );
}
