//! The deployment files hold together, judged with the real tools:
//! `kubectl kustomize` builds every kustomization under `deploy/` (the
//! base, the scale-out overlay, every directory they take, and each opt-in
//! component on each of them), and every object of every build validates
//! strictly — the built-in kinds with kubernetes-validate (`--strict`,
//! Kubernetes 1.30 and the current schemas), the ServiceMonitors, the
//! PrometheusRule and the SeccompProfile against the Prometheus Operator's
//! and the Security Profiles Operator's own CRDs (`tests/data/crds`,
//! unknown fields refused). On those builds: every mount the collector's
//! DaemonSet declares is a path the collector's code reads (and none
//! shadows the image's own libraries), both ConfigMaps pass `check-config`,
//! the PrometheusRule carries `deploy/prometheus`'s groups, the rules pass
//! `promtool test rules`, the dashboards are what `deploy/grafana/generate.py`
//! writes. The shipped default is authenticated: the correlator serves TLS
//! with the certificate its init container makes and reviews the
//! collectors' projected tokens; the collectors speak https with that CA
//! and token; nothing runs `--insecure`.
//!
//! What an SRE running kube-prometheus-stack and the GPU Operator expects,
//! one test each: images, the Prometheus release label and Prometheus's
//! namespace set in one place (and overridable from an overlay, as the docs
//! say); scrape jobs `faultline-collector`/`faultline-correlator` through
//! `jobLabel`, no `honorLabels`; seccomp `RuntimeDefault`, the tailored
//! profile an opt-in component shipping the Security Profiles Operator's
//! `SeccompProfile`; NetworkPolicies selecting namespaces by
//! `kubernetes.io/metadata.name`; the `DCGM_FI_*` copies off; OTLP from the
//! node's pods reaches that node's collector; `/dev/infiniband`, the
//! kubelet's pod-resources socket and `/run/nvidia` (HostToContainer) are
//! mounted; every taint tolerated at `system-node-critical`.
//!
//! kubectl is the machine's (its kustomize); kubernetes-validate, PyYAML
//! and jsonschema come from `<target dir>/deploy-venv` (scripts/setup.sh).
//! Without either the tests skip, unless CI is set: then they fail.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Component, Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use collector::config::FileConfig;
use serde_json::{json, Value};

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

/// Whether the real `kubectl` (with its built-in kustomize) runs here.
fn kubectl_present() -> bool {
    let ok = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || !tests::in_ci(),
        "kubectl missing under CI: the deploy tests build every kustomization with `kubectl kustomize`"
    );
    if !ok {
        eprintln!(
            "skipping: no kubectl on this machine (`kubectl kustomize` builds the manifests)"
        );
    }
    ok
}

/// The deploy venv, where both tools are present.
fn tools() -> Option<&'static Path> {
    static TOOLS: OnceLock<Option<PathBuf>> = OnceLock::new();
    TOOLS
        .get_or_init(|| {
            let v = venv()?;
            kubectl_present().then_some(v)
        })
        .as_deref()
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

/// YAML documents as JSON values, through PyYAML.
fn yaml_docs(venv: &Path, file: &Path) -> Vec<Value> {
    let json = run(Command::new(venv.join("bin/python"))
        .args(["-c", "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))"])
        .arg(file));
    serde_json::from_str(&json).expect("JSON")
}

/// One `kubectl kustomize` build: the YAML it printed (kept in the scratch
/// directory) and its objects.
struct Build {
    yaml: PathBuf,
    docs: Vec<Value>,
}

/// `kubectl kustomize dir`, which must succeed without a warning.
fn kustomize(venv: &Path, dir: &Path, name: &str) -> Build {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed:\n{stderr}",
        dir.display()
    );
    assert!(
        stderr.trim().is_empty(),
        "kubectl kustomize {} warned:\n{stderr}",
        dir.display()
    );
    let yaml = scratch(&format!("{name}.yaml"));
    std::fs::write(&yaml, &out.stdout).expect("write");
    let docs = yaml_docs(venv, &yaml);
    Build { yaml, docs }
}

/// The base (`deploy/kubernetes`) as `kubectl kustomize` builds it.
fn base() -> Option<&'static [Value]> {
    static BASE: OnceLock<Option<Build>> = OnceLock::new();
    BASE.get_or_init(|| {
        let v = tools()?;
        Some(kustomize(v, &repo().join("deploy/kubernetes"), "base"))
    })
    .as_ref()
    .map(|b| b.docs.as_slice())
}

/// The scale-out overlay as `kubectl kustomize` builds it.
fn scale_out() -> Option<&'static [Value]> {
    static OVERLAY: OnceLock<Option<Build>> = OnceLock::new();
    OVERLAY
        .get_or_init(|| {
            let v = tools()?;
            Some(kustomize(
                v,
                &repo().join("deploy/kubernetes/scale-out"),
                "scale-out",
            ))
        })
        .as_ref()
        .map(|b| b.docs.as_slice())
}

/// Validates the CRD kinds of a build against the CRDs in tests/data/crds:
/// each served version's openAPIV3Schema, made strict (an object with
/// `properties` admits no other field unless it preserves unknown fields,
/// as kubernetes-validate `--strict` treats the built-in kinds), and the
/// CRD's scope (a cluster-scoped object has no namespace). Arguments: the
/// number of manifest files, those files, the CRD files. Prints
/// `passed<TAB>FILE<TAB>KIND/NAME`, `FAIL<TAB>…: why`, or `nocrd<TAB>…`.
const CRD_VALIDATE: &str = r#"
import json, sys, yaml, jsonschema

def strict(s):
    s = dict(s)
    if "properties" in s:
        s["properties"] = {k: strict(v) for k, v in s["properties"].items()}
        if not s.get("x-kubernetes-preserve-unknown-fields"):
            s.setdefault("additionalProperties", False)
    if isinstance(s.get("items"), dict):
        s["items"] = strict(s["items"])
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = strict(s["additionalProperties"])
    for k in ("allOf", "anyOf", "oneOf"):
        if k in s:
            s[k] = [strict(x) for x in s[k]]
    return s

n = int(sys.argv[1])
manifests, crd_files = sys.argv[2:2 + n], sys.argv[2 + n:]
crds = {}
for f in crd_files:
    for crd in yaml.safe_load_all(open(f)):
        spec = crd["spec"]
        for v in spec["versions"]:
            if v.get("served"):
                key = (spec["group"] + "/" + v["name"], spec["names"]["kind"])
                crds[key] = (strict(v["schema"]["openAPIV3Schema"]), spec["scope"])
failed = False
for m in manifests:
    for d in yaml.safe_load_all(open(m)):
        if not d:
            continue
        what = m + "\t" + d["kind"] + "/" + d["metadata"]["name"]
        if (d["apiVersion"], d["kind"]) not in crds:
            print("nocrd\t" + what)
            continue
        schema, scope = crds[(d["apiVersion"], d["kind"])]
        errors = [e.message + " at " + str(list(e.absolute_path))
                  for e in jsonschema.Draft4Validator(schema).iter_errors(d)]
        if (scope == "Cluster") == ("namespace" in d["metadata"]):
            errors.append("a %s object with metadata.namespace %r" % (scope, d["metadata"].get("namespace")))
        for e in errors:
            failed = True
            print("FAIL\t" + what + ": " + e)
        if not errors:
            print("passed\t" + what)
sys.exit(1 if failed else 0)
"#;

/// Validates every object of the builds strictly: the built-in kinds with
/// kubernetes-validate (Kubernetes 1.30, the oldest the base supports —
/// bound tokens name their node from 1.30 on — and its current schemas),
/// the CRD kinds against their CRDs. Every object passes exactly one of
/// the two; returns each build's (built-in, CRD) counts. One run of each
/// tool for all builds (each run loads its schemas anew).
fn validate_strictly(venv: &Path, builds: &[&Build]) -> Vec<(usize, usize)> {
    let files: Vec<&Path> = builds.iter().map(|b| b.yaml.as_path()).collect();
    let report = run(Command::new(venv.join("bin/kubernetes-validate"))
        .args(["--strict", "-k", "1.30.0"])
        .args(&files));
    run(Command::new(venv.join("bin/kubernetes-validate"))
        .args(["--strict", "--quiet"])
        .args(&files));
    // "INFO <file> passed for resource <kind>/<name> against version 1.30"
    let mut builtin: BTreeSet<(String, String)> = BTreeSet::new();
    for l in report.lines() {
        if let Some((head, tail)) = l.split_once(" passed for resource ") {
            let file = head.split_once(' ').map_or(head, |(_, f)| f);
            let what = tail.split(' ').next().unwrap_or_default();
            builtin.insert((file.to_string(), what.to_string()));
        }
    }
    let mut crds: Vec<PathBuf> = std::fs::read_dir(repo().join("tests/data/crds"))
        .expect("tests/data/crds")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    crds.sort();
    let checked = run(Command::new(venv.join("bin/python"))
        .args(["-c", CRD_VALIDATE])
        .arg(files.len().to_string())
        .args(&files)
        .args(&crds));
    let mut by_crd: BTreeMap<String, usize> = BTreeMap::new();
    let mut no_crd = BTreeSet::new();
    for l in checked.lines() {
        let mut f = l.split('\t');
        match (f.next(), f.next(), f.next()) {
            (Some("passed"), Some(file), Some(_)) => {
                *by_crd.entry(file.to_string()).or_default() += 1
            }
            (Some("nocrd"), Some(file), Some(what)) => {
                no_crd.insert((file.to_string(), what.to_lowercase()));
            }
            _ => {}
        }
    }
    assert_eq!(
        no_crd, builtin,
        "every object without a CRD here passed kubernetes-validate:\n{report}\n{checked}"
    );
    builds
        .iter()
        .map(|b| {
            let file = b.yaml.display().to_string();
            let n = builtin.iter().filter(|(f, _)| *f == file).count();
            let c = by_crd.get(&file).copied().unwrap_or(0);
            assert_eq!(n + c, b.docs.len(), "{file}: {checked}");
            (n, c)
        })
        .collect()
}

/// Every kustomization file under `deploy/`, by its directory.
fn kustomization_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            kustomization_dirs(&p, out);
        } else if p.file_name().is_some_and(|n| {
            n == "kustomization.yaml" || n == "kustomization.yml" || n == "Kustomization"
        }) {
            out.push(dir.to_path_buf());
        }
    }
}

/// `to` relative to the directory `from` (both absolute, `..` as needed):
/// kustomize refuses absolute paths.
fn relative(from: &Path, to: &Path) -> String {
    let norm = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for c in p.components() {
            match c {
                Component::Normal(s) => v.push(s.to_string_lossy().into()),
                Component::ParentDir => {
                    v.pop();
                }
                _ => {}
            }
        }
        v
    };
    let (f, t) = (norm(from), norm(to));
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts = vec!["..".to_string(); f.len() - common];
    parts.extend(t[common..].iter().cloned());
    parts.join("/")
}

fn short(dir: &Path) -> String {
    dir.strip_prefix(repo())
        .unwrap_or(dir)
        .display()
        .to_string()
}

/// Builds `component` on `root` through an overlay written in the scratch
/// directory, as a site's overlay would take both (`tag` keeps tests
/// running in parallel apart).
fn build_with_component(venv: &Path, root: &Path, component: &Path, tag: &str) -> Build {
    let name = format!(
        "{tag}-{}+{}",
        short(root).replace('/', "-"),
        short(component).replace('/', "-")
    );
    let dir = scratch(&name);
    std::fs::create_dir_all(&dir).expect("overlay dir");
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
            relative(&dir, root),
            relative(&dir, component)
        ),
    )
    .expect("write overlay");
    kustomize(venv, &dir, &name)
}

/// `kubectl kustomize` builds every kustomization under `deploy/`: each
/// Kustomization on its own, each Component that no kustomization here
/// takes (an opt-in one) on every deployable root (a Kustomization no other
/// one takes), where it must change the build. Every object of every build
/// validates strictly (kubernetes-validate for the built-in kinds, the
/// operators' CRDs for theirs), none without a schema.
#[test]
fn every_kustomization_builds_with_real_kustomize_and_validates_strictly() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(venv) = tools() else { return };
    let mut dirs = Vec::new();
    kustomization_dirs(&repo().join("deploy"), &mut dirs);
    // The files as JSON: their kind and what they take.
    let files: Vec<PathBuf> = dirs
        .iter()
        .map(|d| {
            ["kustomization.yaml", "kustomization.yml", "Kustomization"]
                .iter()
                .map(|f| d.join(f))
                .find(|f| f.is_file())
                .expect("kustomization file")
        })
        .collect();
    let kinds: Vec<Value> = files
        .iter()
        .map(|f| yaml_docs(venv, f).pop().expect("one document"))
        .collect();
    let canon = |d: &Path, r: &str| std::fs::canonicalize(d.join(r)).ok();
    let mut taken = BTreeSet::new();
    for (d, k) in dirs.iter().zip(&kinds) {
        for key in ["resources", "components"] {
            for r in k[key].as_array().into_iter().flatten() {
                if let Some(p) = r.as_str().and_then(|r| canon(d, r)) {
                    taken.insert(p);
                }
            }
        }
    }
    let is_component = |k: &Value| k["kind"] == "Component";
    let roots: Vec<&PathBuf> = dirs
        .iter()
        .zip(&kinds)
        .filter(|(d, k)| !is_component(k) && !taken.contains(&canon(d, ".").expect("dir")))
        .map(|(d, _)| d)
        .collect();
    let mut built = Vec::new();
    let mut builds = Vec::new();
    for (d, k) in dirs.iter().zip(&kinds) {
        if !is_component(k) {
            builds.push(kustomize(venv, d, &short(d).replace('/', "-")));
            built.push(short(d));
            continue;
        }
        if taken.contains(&canon(d, ".").expect("dir")) {
            continue; // built with the kustomizations that take it
        }
        for root in &roots {
            let b = build_with_component(venv, root, d, "all");
            let plain = kustomize(
                venv,
                root,
                &format!("{}-plain", short(root).replace('/', "-")),
            );
            assert_ne!(
                b.docs,
                plain.docs,
                "{} changes nothing on {}",
                short(d),
                short(root)
            );
            builds.push(b);
            built.push(format!("{} + {}", short(root), short(d)));
        }
    }
    let counts = validate_strictly(venv, &builds.iter().collect::<Vec<_>>());
    for (name, (builtin, crd)) in built.iter().zip(counts) {
        eprintln!("{name}: {builtin} built-in + {crd} CRD objects");
    }
    for want in [
        "deploy/kubernetes",
        "deploy/kubernetes/collector",
        "deploy/kubernetes/scale-out",
        "deploy/kubernetes + deploy/kubernetes/components/seccomp-localhost",
        "deploy/kubernetes/scale-out + deploy/kubernetes/components/seccomp-localhost",
    ] {
        assert!(
            built.iter().any(|b| b == want),
            "{want} not built: {built:?}"
        );
    }
    let roots: Vec<String> = roots.iter().map(|r| short(r)).collect();
    assert_eq!(roots, ["deploy/kubernetes", "deploy/kubernetes/scale-out"]);
}

fn object<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind}/{name} in the build"))
}

fn pod_spec(docs: &[Value]) -> &Value {
    &object(docs, "DaemonSet", "faultline-collector")["spec"]["template"]["spec"]
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["containers"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn collector_container(docs: &[Value]) -> &Value {
    container(pod_spec(docs), "collector")
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

/// The collector container's mount at `path` and the pod volume behind it.
fn mount_and_volume<'a>(docs: &'a [Value], path: &str) -> (&'a Value, &'a Value) {
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

/// Where a volume comes from: `hostPath:/x`, `projected:<source kinds>`,
/// `configMap`, `emptyDir` or `other`.
fn volume_source(v: &Value) -> String {
    if let Some(p) = v["hostPath"]["path"].as_str() {
        return format!("hostPath:{p}");
    }
    if let Some(sources) = v["projected"]["sources"].as_array() {
        let kinds: Vec<String> = sources
            .iter()
            .filter_map(|s| s.as_object())
            .flat_map(|s| s.keys().cloned())
            .collect();
        return format!("projected:{}", kinds.join(","));
    }
    ["configMap", "emptyDir"]
        .iter()
        .find(|k| v.get(**k).is_some())
        .map_or("other".into(), |k| (*k).to_string())
}

fn collector_toml(docs: &[Value]) -> String {
    object(docs, "ConfigMap", "faultline-collector")["data"]["collector.toml"]
        .as_str()
        .expect("collector.toml")
        .to_string()
}

fn collector_config(docs: &[Value]) -> FileConfig {
    FileConfig::parse(&collector_toml(docs), "ConfigMap faultline-collector").expect("valid config")
}

fn kubernetes_doc() -> String {
    std::fs::read_to_string(repo().join("docs/kubernetes.md")).expect("docs/kubernetes.md")
}

/// On the built base: the collector runs with hostPID, the six capabilities
/// and its node's name; both ConfigMaps pass `check-config`; every mount
/// is a path the code reads (read-only but the spool, `HostToContainer`
/// only on the GPU Operator's driver root, nothing over the image's own
/// libraries); the default is authenticated; the PrometheusRule carries
/// the rules file's groups, which pass promtool; the dashboards are the
/// generator's.
#[test]
fn collector_mounts_are_read_by_the_code_and_both_configs_pass_check_config() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let pod = pod_spec(docs);
    let c = collector_container(docs);
    assert_eq!(pod["hostPID"], true);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        c["securityContext"]["capabilities"]["add"],
        json!([
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
            .is_some_and(|e| e.iter().any(|v| v["name"] == "NODE_NAME")),
        "{c}"
    );

    // The ConfigMaps are valid and are what the mounts serve.
    let cfg = collector_config(docs);
    let conf_file = scratch("collector.toml");
    std::fs::write(&conf_file, collector_toml(docs)).expect("write");
    run(Command::new(tests::bin("faultline-collector"))
        .arg("check-config")
        .arg("--config")
        .arg(&conf_file));
    let corr_file = scratch("correlator.toml");
    std::fs::write(
        &corr_file,
        object(docs, "ConfigMap", "faultline-correlator")["data"]["correlator.toml"]
            .as_str()
            .expect("correlator.toml"),
    )
    .expect("write");
    run(Command::new(tests::bin("faultline-correlator"))
        .arg("check-config")
        .arg(&corr_file));
    let args = strings(&c["args"]);
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
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    assert_eq!(mounts.len(), 14, "{mounts:#?}");
    for m in mounts {
        let path = m["mountPath"].as_str().expect("path");
        let (_, vol) = mount_and_volume(docs, path);
        let source = volume_source(vol);
        let read_by: bool = match path {
            "/sys" => defaults.collector.sysfs_root == Path::new(path),
            "/sys/kernel/btf" => btf_dir == Path::new(path),
            "/sys/kernel/tracing" => collector::tracefs::DEFAULT_ROOT == path,
            "/sys/fs/cgroup" => collector::block::CGROUP_ROOT == path,
            "/host/proc" => cfg.collector.proc_root == Path::new(path),
            "/run/nvidia" | "/host/usr/lib/x86_64-linux-gnu" | "/host/usr/lib64" => {
                lib_search(path)
            }
            "/etc/faultline" => Path::new(&config_arg).starts_with(path) && source == "configMap",
            "/var/lib/faultline" => cfg.stream.spool_dir.starts_with(path),
            "/var/lib/kubelet/pod-resources" => cfg.nvml.pod_resources_socket.starts_with(path),
            // libibverbs opens the uverbs devices there for collector::rdma's
            // async-event listeners.
            "/dev/infiniband" => source == "hostPath:/dev/infiniband",
            // The kernel log the [kmsg] source reads.
            "/dev/kmsg" => {
                cfg.kmsg.enabled
                    && cfg.kmsg.path == Path::new(path)
                    && source == "hostPath:/dev/kmsg"
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
                    && source == "projected:serviceAccountToken,configMap"
            }
            other => panic!("the DaemonSet mounts {other}, which no code reads"),
        };
        assert!(read_by, "{path} is mounted but the code does not read it");
        // Only the spool is written.
        let read_only = m["readOnly"] == true;
        assert_eq!(read_only, path != "/var/lib/faultline", "{path}: {m}");
        // Only the GPU Operator's driver root needs the host's later mounts.
        let propagation = m["mountPropagation"].as_str().unwrap_or("None");
        let want = if path == "/run/nvidia" {
            "HostToContainer"
        } else {
            "None"
        };
        assert_eq!(propagation, want, "{path}: {m}");
        // Nothing over the image's own library directories.
        assert!(
            !collector::cuda_lib::SYSTEM_LIB_DIRS.contains(&path),
            "{path} shadows the image's libraries"
        );
    }
    authenticated_by_default(docs, &cfg);

    // The PrometheusRule is the rules file's groups.
    let venv = tools().expect("tools");
    let rules_file = repo().join("deploy/prometheus/faultline-rules.yaml");
    let rules = yaml_docs(venv, &rules_file).pop().expect("rules");
    let prometheus_rules: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "PrometheusRule")
        .collect();
    assert_eq!(prometheus_rules.len(), 1);
    assert!(
        prometheus_rules[0]["spec"]["groups"] == rules["groups"],
        "the PrometheusRule's groups are not {}",
        rules_file.display()
    );
    // Rules: syntax and unit tests.
    let dir = repo().join("deploy/prometheus");
    run(Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules_file));
    let unit = run(Command::new("promtool")
        .args(["test", "rules", "faultline-rules.test.yaml"])
        .current_dir(&dir));
    assert!(unit.contains("SUCCESS"), "{unit}");

    // The base's PrometheusRule and dashboards are what the generators write.
    run(Command::new("python3")
        .arg(repo().join("deploy/prometheus/generate.py"))
        .arg("--check"));
    run(Command::new("python3")
        .arg(repo().join("deploy/grafana/generate.py"))
        .arg("--check"));
}

/// Every Grafana dashboard of `deploy/grafana` is in the base as a
/// ConfigMap labelled `grafana_dashboard: "1"` (what kube-prometheus-stack's
/// Grafana sidecar loads), its JSON the file's.
#[test]
fn every_dashboard_is_a_configmap_for_grafanas_sidecar() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/grafana"))
        .expect("deploy/grafana")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let maps: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(maps.len(), files.len());
    for f in &files {
        let name = f.file_name().and_then(|n| n.to_str()).expect("name");
        let want: Value =
            serde_json::from_str(&std::fs::read_to_string(f).expect("read")).expect("JSON");
        let found = maps
            .iter()
            .find_map(|m| m["data"][name].as_str())
            .unwrap_or_else(|| panic!("no ConfigMap carries {name}"));
        let got: Value = serde_json::from_str(found).expect("the ConfigMap's JSON");
        assert!(
            got == want,
            "the ConfigMap's {name} is not deploy/grafana's"
        );
    }
    let doc = kubernetes_doc();
    assert!(doc.contains("grafana_dashboard: \"1\"") && doc.contains("searchNamespace"));
}

/// The shipped default authenticates: TLS with the certificate the init
/// container makes (its `--server-name` is the name the collectors dial),
/// tokens reviewed by the API server for the audience the collectors'
/// projected tokens carry, and no `--insecure` anywhere.
fn authenticated_by_default(docs: &[Value], cfg: &FileConfig) {
    let pod = &object(docs, "Deployment", "faultline-correlator")["spec"]["template"]["spec"];
    let corr = strings(&pod["containers"][0]["args"]);
    let flag =
        |args: &[String], name: &str| args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone());
    assert!(!corr.iter().any(|a| a == "--insecure"), "{corr:?}");
    assert!(corr.iter().any(|a| a == "--token-review"), "{corr:?}");
    let init = strings(&pod["initContainers"][0]["args"]);
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
        pod["automountServiceAccountToken"], true,
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
    let audiences: Vec<&Value> = pod_spec(docs)["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .filter_map(|v| v["projected"]["sources"].as_array())
        .flatten()
        .map(|s| &s["serviceAccountToken"]["audience"])
        .filter(|a| !a.is_null())
        .collect();
    assert_eq!(
        audiences,
        [&json!(audience)],
        "the collectors' projected token is for the correlator's audience"
    );
    assert!(cfg.stream.tls_ca.is_some() && cfg.stream.token_file.is_some());
}

/// A pod's OTLP export reaches the collector of its own node: the Service
/// `faultline-collector-otlp` has `internalTrafficPolicy: Local`, selects
/// the DaemonSet's pods and targets the collector container's OTLP ports,
/// on which the ConfigMap's receivers listen on every address of the pod
/// (not loopback only); the NetworkPolicy admits those ports from every
/// namespace; docs/kubernetes.md tells an SDK where to send.
#[test]
fn otlp_from_a_pod_reaches_the_collector_on_its_own_node() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let svc = object(docs, "Service", "faultline-collector-otlp");
    assert_eq!(svc["spec"]["internalTrafficPolicy"], "Local", "{svc}");
    assert!(
        svc["spec"].get("clusterIP").is_none(),
        "a ClusterIP Service: {svc}"
    );
    let pod_labels =
        &object(docs, "DaemonSet", "faultline-collector")["spec"]["template"]["metadata"]["labels"];
    let selector = svc["spec"]["selector"].as_object().expect("selector");
    assert!(
        !selector.is_empty() && selector.iter().all(|(k, v)| &pod_labels[k] == v),
        "{selector:?} does not select {pod_labels}"
    );
    let ports = collector_container(docs)["ports"]
        .as_array()
        .expect("container ports");
    let cfg = collector_config(docs);
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
    let np = object(docs, "NetworkPolicy", "faultline-collector-metrics");
    let admitted = np["spec"]["ingress"]
        .as_array()
        .expect("ingress")
        .iter()
        .find(|r| {
            r["from"] == json!([{"namespaceSelector": {}}])
                && r["ports"]
                    == json!([{"protocol": "TCP", "port": 4317}, {"protocol": "TCP", "port": 4318}])
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
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let (m, v) = mount_and_volume(docs, "/dev/infiniband");
    assert_eq!(m["readOnly"], true, "{m}");
    assert_eq!(
        v["hostPath"],
        json!({"path": "/dev/infiniband", "type": "DirectoryOrCreate"})
    );
}

/// The GPU Operator's driver container mounts its root under `/run/nvidia`
/// after the collector may have started; only `HostToContainer` carries
/// that mount into the collector.
#[test]
fn run_nvidia_propagates_host_mounts_into_the_container() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let (m, v) = mount_and_volume(docs, "/run/nvidia");
    assert_eq!(m["mountPropagation"], "HostToContainer", "{m}");
    assert_eq!(m["readOnly"], true, "{m}");
    assert_eq!(v["hostPath"]["path"], "/run/nvidia");
}

/// The kubelet's pod-resources socket, where `[nvml] pod_resources_socket`
/// looks for it, names each GPU's Kubernetes container.
#[test]
fn kubelet_pod_resources_socket_is_mounted_where_the_config_reads_it() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let (m, v) = mount_and_volume(docs, "/var/lib/kubelet/pod-resources");
    assert_eq!(v["hostPath"]["path"], "/var/lib/kubelet/pod-resources");
    assert_eq!(
        m["readOnly"], true,
        "connecting to a socket needs no writable mount"
    );
    let cfg = collector_config(docs);
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
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    assert!(pod_spec(docs).get("runtimeClassName").is_none());
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
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let pod = pod_spec(docs);
    assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
    assert_eq!(pod["priorityClassName"], "system-node-critical");
    assert!(
        !docs.iter().any(|d| d["kind"] == "PriorityClass"),
        "no own PriorityClass"
    );
    let quota = object(docs, "ResourceQuota", "faultline-node-critical");
    assert_eq!(quota["metadata"]["namespace"], "faultline");
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"],
        json!([{"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}])
    );
}

/// The base's web UI answers its own Service's names (every form a client
/// in the cluster may dial; any other `Host` is refused as DNS rebinding)
/// and the pod IP the kubelet probes send; the probes and the scrape use the
/// paths that stay open without the viewer token; the UI is on the port
/// the probes and the Service name.
#[test]
fn web_ui_answers_its_service_names_and_probes_use_open_paths() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(docs) = base() else { return };
    let cm = object(docs, "ConfigMap", "faultline-correlator");
    let toml = cm["data"]["correlator.toml"]
        .as_str()
        .expect("correlator.toml");
    let cfg = correlator::config::parse_file(toml, "ConfigMap faultline-correlator")
        .expect("valid correlator config");
    let svc = object(docs, "Service", "faultline-correlator");
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
    let deploy = object(docs, "Deployment", "faultline-correlator");
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

/// `deploy/install.sh` into a staging root: the binary, the unit (flags from
/// `$ARGS` of its EnvironmentFile, stdout not in the journal), a default
/// config that passes `check-config`; a re-run keeps an edited config.
#[test]
fn install_script_puts_unit_config_and_environment_file_in_place() {
    let _turn = tests::one_file_at_a_time(file!());
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

/// The ServiceMonitors (of the base and of the scale-out overlay) name the
/// scrape jobs the rules and dashboards select by: `jobLabel` takes `job` from each selected Service's label,
/// `faultline-collector` and `faultline-correlator`; no endpoint honours
/// the target's labels (faultline's series carry no `job` of their own) or
/// reads a `bearerTokenFile`; the collectors' scrape is authorised by a
/// token Secret of a ServiceAccount bound to the ClusterRole
/// kube-rbac-proxy checks; every `job="…"` selector in the PrometheusRule
/// names one of the two jobs.
#[test]
fn service_monitors_name_the_scrape_jobs_without_honor_labels() {
    let _turn = tests::one_file_at_a_time(file!());
    let (Some(base_docs), Some(overlay)) = (base(), scale_out()) else {
        return;
    };
    scrape_jobs_of(base_docs);
    scrape_jobs_of(overlay);
}

/// The checks of `service_monitors_name_the_scrape_jobs_without_honor_labels`
/// on one build.
fn scrape_jobs_of(docs: &[Value]) {
    let monitors: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "ServiceMonitor")
        .collect();
    assert_eq!(monitors.len(), 2);
    // The collector's series name the workload's pod, namespace and
    // container: its scrape drops the target labels of those names, or
    // Prometheus would rename the series' own to exported_*.
    let collector = monitors
        .iter()
        .find(|m| m["metadata"]["name"] == "faultline-collector")
        .expect("the collector's ServiceMonitor");
    let drops: Vec<String> = collector["spec"]["endpoints"][0]["relabelings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["action"] == "labeldrop")
        .filter_map(|r| r["regex"].as_str().map(String::from))
        .collect();
    for label in ["namespace", "pod", "container"] {
        assert!(
            drops.iter().any(|re| re.split('|').any(|alt| alt == label)),
            "the collector's scrape keeps the target label {label}: {drops:?}"
        );
    }
    let mut jobs = BTreeSet::new();
    for m in &monitors {
        let spec = &m["spec"];
        let label = spec["jobLabel"].as_str().expect("jobLabel");
        let namespaces = strings(&spec["namespaceSelector"]["matchNames"]);
        let selector = spec["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        let services: Vec<&Value> = docs
            .iter()
            .filter(|d| {
                d["kind"] == "Service"
                    && namespaces
                        .iter()
                        .any(|n| d["metadata"]["namespace"] == n.as_str())
                    && selector
                        .iter()
                        .all(|(k, v)| &d["metadata"]["labels"][k] == v)
            })
            .collect();
        assert!(
            !services.is_empty(),
            "{} selects no Service",
            m["metadata"]["name"]
        );
        for s in &services {
            let job = s["metadata"]["labels"][label]
                .as_str()
                .unwrap_or_else(|| panic!("Service {} lacks {label}", s["metadata"]["name"]));
            jobs.insert(job.to_string());
        }
        for e in spec["endpoints"].as_array().expect("endpoints") {
            assert!(
                e.get("honorLabels").is_none_or(|h| h == false),
                "honorLabels: {e}"
            );
            assert!(e.get("bearerTokenFile").is_none(), "{e}");
            let port = e["port"].as_str().expect("a named port");
            assert!(
                services.iter().any(|s| s["spec"]["ports"]
                    .as_array()
                    .is_some_and(|ps| ps.iter().any(|p| p["name"] == port))),
                "no selected Service has port {port}"
            );
        }
    }
    assert_eq!(
        jobs,
        BTreeSet::from([
            "faultline-collector".to_string(),
            "faultline-correlator".to_string()
        ])
    );

    let sm = object(docs, "ServiceMonitor", "faultline-collector");
    let auth = &sm["spec"]["endpoints"][0]["authorization"];
    assert_eq!(auth["type"], "Bearer", "{sm}");
    let secret_name = auth["credentials"]["name"].as_str().expect("secret name");
    assert_eq!(auth["credentials"]["key"], "token");
    let secret = object(docs, "Secret", secret_name);
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(secret["metadata"]["namespace"], sm["metadata"]["namespace"]);
    let sa = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
        .as_str()
        .expect("the Secret names its ServiceAccount");
    object(docs, "ServiceAccount", sa);
    let bound = docs.iter().any(|d| {
        d["kind"] == "ClusterRoleBinding"
            && d["roleRef"]["name"] == "faultline-metrics-reader"
            && d["subjects"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["kind"] == "ServiceAccount" && s["name"] == sa)
            })
    });
    assert!(bound, "{sa} is bound to faultline-metrics-reader");

    // The rules select the scrape by these jobs only.
    let job_matcher = regex::Regex::new(r#"\bjob\s*=\s*"([^"]*)""#).expect("regex");
    let rules = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("PrometheusRule");
    for g in rules["spec"]["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            let expr = r["expr"].as_str().unwrap_or_default();
            for c in job_matcher.captures_iter(expr) {
                assert!(
                    jobs.contains(&c[1]),
                    "{} selects job {:?}: {expr}",
                    r,
                    &c[1]
                );
            }
        }
    }
}

/// The Component every deployable root takes (deploy/kubernetes/settings),
/// as JSON.
fn settings(venv: &Path) -> Value {
    yaml_docs(
        venv,
        &repo().join("deploy/kubernetes/settings/kustomization.yaml"),
    )
    .pop()
    .expect("settings")
}

/// Every container and init container image of a build.
fn images(docs: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for d in docs {
        let pod = &d["spec"]["template"]["spec"];
        for key in ["containers", "initContainers"] {
            for c in pod[key].as_array().into_iter().flatten() {
                out.push(c["image"].as_str().expect("image").to_string());
            }
        }
    }
    out
}

/// The namespace each NetworkPolicy admits scrapers from (its first
/// ingress rule, which the settings patch), by policy name.
fn scraper_namespaces(docs: &[Value]) -> BTreeMap<String, Value> {
    docs.iter()
        .filter(|d| d["kind"] == "NetworkPolicy")
        .filter_map(|d| {
            let ns = &d["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]
                ["kubernetes.io/metadata.name"];
            (!ns.is_null()).then(|| {
                (
                    d["metadata"]["name"].as_str().unwrap_or("").to_string(),
                    ns.clone(),
                )
            })
        })
        .collect()
}

/// Images (registry, name, tag), the Prometheus release label and
/// Prometheus's namespace are set in one place, the settings component,
/// for the base and the overlay alike: every image of both builds is one
/// the settings name, fully qualified, tagged, never `latest` (faultline's
/// own tagged with this release); the manifests name images only by the
/// settings' logical names and carry no `release` label; every
/// ServiceMonitor and PrometheusRule carries the settings' release label.
/// The site overlay docs/kubernetes.md shows overrides all three.
#[test]
fn images_release_label_and_scrapers_namespace_are_set_in_one_place() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(venv) = tools() else { return };
    let (Some(base_docs), Some(overlay)) = (base(), scale_out()) else {
        return;
    };
    let s = settings(venv);
    let mut logical = BTreeMap::new();
    for i in s["images"].as_array().expect("images") {
        let name = i["name"].as_str().expect("name").to_string();
        let full = format!(
            "{}:{}",
            i["newName"].as_str().expect("newName"),
            i["newTag"].as_str().expect("newTag")
        );
        logical.insert(name, full);
    }
    let release = s["labels"][0]["pairs"]["release"]
        .as_str()
        .expect("release");
    assert_eq!(release, "kube-prometheus-stack");
    for docs in [base_docs, overlay] {
        for image in images(docs) {
            assert!(
                logical.values().any(|f| *f == image),
                "{image} is not set by the settings"
            );
            let (name, tag) = image.rsplit_once(':').expect("a tag");
            assert!(
                name.split('/')
                    .next()
                    .is_some_and(|host| host.contains('.')),
                "{image} names no registry"
            );
            assert_ne!(tag, "latest", "{image}");
            if name.contains("/faultline/") {
                assert_eq!(
                    tag,
                    env!("CARGO_PKG_VERSION"),
                    "{image}: this release's tag"
                );
            }
        }
        for d in docs
            .iter()
            .filter(|d| d["kind"] == "ServiceMonitor" || d["kind"] == "PrometheusRule")
        {
            assert_eq!(
                d["metadata"]["labels"]["release"], release,
                "{}",
                d["metadata"]
            );
        }
        for (policy, ns) in scraper_namespaces(docs) {
            assert_eq!(ns, "monitoring", "{policy}");
        }
    }
    let base_images = images(base_docs);
    let overlay_images = images(overlay);
    for own in ["faultline-collector", "faultline-correlator"] {
        let full = &logical[own];
        assert!(
            base_images.contains(full) && overlay_images.contains(full),
            "{full}"
        );
    }

    // The manifests themselves: logical image names only, no release label.
    let mut files = Vec::new();
    yaml_files(&repo().join("deploy/kubernetes"), &mut files);
    for f in &files {
        if f.starts_with(repo().join("deploy/kubernetes/settings")) {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("read");
        for l in text
            .lines()
            .map(str::trim_start)
            .filter(|l| !l.starts_with('#'))
        {
            if let Some(image) = l
                .strip_prefix("image:")
                .or_else(|| l.strip_prefix("- image:"))
            {
                let image = image.trim();
                assert!(
                    logical.contains_key(image),
                    "{}: image {image} bypasses the settings",
                    f.display()
                );
            }
            assert!(
                !l.contains("release:"),
                "{}: a release label outside the settings: {l}",
                f.display()
            );
        }
    }
    let doc = kubernetes_doc();
    assert!(
        doc.contains("release: kube-prometheus-stack")
            && doc.contains("serviceMonitorSelector")
            && doc.contains("## Site settings"),
        "docs/kubernetes.md explains the release label and the settings"
    );
    site_overlay_from_the_docs_overrides_the_settings(venv, base_docs);
}

/// Every YAML file under `dir`.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir)
        .expect("read_dir")
        .filter_map(Result::ok)
    {
        let p = e.path();
        if p.is_dir() {
            yaml_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
}

/// The site overlay of docs/kubernetes.md ("Site settings"), built on this
/// base: its registry, release label and Prometheus namespace replace the
/// settings' on every object, and nothing else changes.
fn site_overlay_from_the_docs_overrides_the_settings(venv: &Path, base_docs: &[Value]) {
    let doc = kubernetes_doc();
    let start = doc
        .find("```yaml\n# my-site/kustomization.yaml\n")
        .expect("docs/kubernetes.md shows a site overlay")
        + "```yaml\n".len();
    let snippet = &doc[start..start + doc[start..].find("```").expect("end of block")];
    let dir = scratch("my-site");
    std::fs::create_dir_all(&dir).expect("dir");
    let base_path = relative(&dir, &repo().join("deploy/kubernetes"));
    assert!(
        snippet.contains("  - ../faultline/deploy/kubernetes"),
        "{snippet}"
    );
    std::fs::write(
        dir.join("kustomization.yaml"),
        snippet.replace(
            "  - ../faultline/deploy/kubernetes",
            &format!("  - {base_path}"),
        ),
    )
    .expect("write");
    let site = kustomize(venv, &dir, "my-site").docs;
    assert_eq!(site.len(), base_docs.len());
    for image in images(&site) {
        if image.contains("/faultline/") {
            assert!(
                image.starts_with("registry.example.com/faultline/"),
                "{image}"
            );
        }
    }
    for d in site
        .iter()
        .filter(|d| d["kind"] == "ServiceMonitor" || d["kind"] == "PrometheusRule")
    {
        assert_eq!(
            d["metadata"]["labels"]["release"], "prometheus",
            "{}",
            d["metadata"]
        );
    }
    let namespaces = scraper_namespaces(&site);
    assert_eq!(namespaces.len(), 2, "{namespaces:?}");
    assert!(
        namespaces.values().all(|n| n == "prometheus"),
        "{namespaces:?}"
    );
    // Nothing else: the base's objects with those three put back.
    let undo = |d: &Value| -> Value {
        let text = d
            .to_string()
            .replace("registry.example.com/faultline/", "ghcr.io/faultline/")
            .replace(
                "\"release\":\"prometheus\"",
                "\"release\":\"kube-prometheus-stack\"",
            )
            .replace(
                "\"kubernetes.io/metadata.name\":\"prometheus\"",
                "\"kubernetes.io/metadata.name\":\"monitoring\"",
            );
        serde_json::from_str(&text).expect("JSON")
    };
    for (a, b) in site.iter().zip(base_docs) {
        assert_eq!(&undo(a), b);
    }
}

/// Seccomp: every pod and container of both builds runs under the
/// runtime's default filter (RuntimeDefault), so no node needs a file first.
/// The tailored allowlist is the opt-in component
/// `components/seccomp-localhost`: it ships the Security Profiles
/// Operator's SeccompProfile — cluster-scoped, the JSON profile's action,
/// architectures and system calls — and points the collector's pod and
/// container at the file the operator writes for it
/// (`operator/<name>.json` under the kubelet's seccomp root), the proxy
/// staying on RuntimeDefault; nothing else changes. docs/kubernetes.md
/// documents both.
#[test]
fn seccomp_is_runtime_default_and_the_tailored_profile_an_opt_in_operator_component() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(venv) = tools() else { return };
    let (Some(base_docs), Some(overlay)) = (base(), scale_out()) else {
        return;
    };
    let runtime_default = json!({"type": "RuntimeDefault"});
    for docs in [base_docs, overlay] {
        for d in docs
            .iter()
            .filter(|d| d["spec"]["template"]["spec"].is_object())
        {
            let pod = &d["spec"]["template"]["spec"];
            assert_eq!(
                pod["securityContext"]["seccompProfile"], runtime_default,
                "{}",
                d["metadata"]["name"]
            );
            for key in ["containers", "initContainers"] {
                for c in pod[key].as_array().into_iter().flatten() {
                    let p = &c["securityContext"]["seccompProfile"];
                    assert!(p.is_null() || *p == runtime_default, "{}: {p}", c["name"]);
                }
            }
        }
        assert!(!Value::Array(docs.to_vec())
            .to_string()
            .contains("Localhost"));
    }
    let component = repo().join("deploy/kubernetes/components/seccomp-localhost");
    let with = build_with_component(
        venv,
        &repo().join("deploy/kubernetes"),
        &component,
        "seccomp",
    )
    .docs;
    let sp = object(&with, "SeccompProfile", "faultline-collector");
    assert!(
        sp["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("security-profiles-operator.x-k8s.io/")),
        "{sp}"
    );
    assert!(
        sp["metadata"].get("namespace").is_none(),
        "cluster-scoped: {sp}"
    );
    let json_profile: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/seccomp/faultline-collector.json"))
            .expect("profile"),
    )
    .expect("JSON");
    for key in ["defaultAction", "architectures", "syscalls"] {
        assert_eq!(
            sp["spec"][key], json_profile[key],
            "{key}: run deploy/seccomp/generate.py --spo-only"
        );
    }
    // The operator's spec has no defaultErrnoRet: SCMP_ACT_ERRNO's own is EPERM.
    assert_eq!(json_profile["defaultErrnoRet"], libc::EPERM);
    let local = format!(
        "operator/{}.json",
        sp["metadata"]["name"].as_str().expect("name")
    );
    let localhost = json!({"type": "Localhost", "localhostProfile": local});
    let pod = pod_spec(&with);
    assert_eq!(pod["securityContext"]["seccompProfile"], localhost);
    assert_eq!(
        container(pod, "collector")["securityContext"]["seccompProfile"],
        localhost
    );
    assert_eq!(
        container(pod, "metrics-proxy")["securityContext"]["seccompProfile"],
        runtime_default
    );
    // Nothing else changes.
    let rest: Vec<&Value> = with
        .iter()
        .filter(|d| d["kind"] != "SeccompProfile" && d["kind"] != "DaemonSet")
        .collect();
    let base_rest: Vec<&Value> = base_docs
        .iter()
        .filter(|d| d["kind"] != "DaemonSet")
        .collect();
    assert_eq!(rest, base_rest);

    let doc = kubernetes_doc();
    for want in [
        "seccompProfile: {type: RuntimeDefault}",
        "components/seccomp-localhost",
        "Security Profiles Operator",
        &format!("localhostProfile: {local}"),
        &format!("/var/lib/kubelet/seccomp/{local}"),
        "### The tailored seccomp profile",
    ] {
        assert!(doc.contains(want), "docs/kubernetes.md lacks {want:?}");
    }
}

/// NetworkPolicies select namespaces only by the name label the API server
/// sets on every namespace (`kubernetes.io/metadata.name`), never by a
/// label a site must add; the scrapers' namespace reaches the collectors'
/// proxy (9443) and the correlator's /metrics (8080).
#[test]
fn network_policies_select_namespaces_by_their_name() {
    let _turn = tests::one_file_at_a_time(file!());
    let (Some(base_docs), Some(overlay)) = (base(), scale_out()) else {
        return;
    };
    for docs in [base_docs, overlay] {
        for np in docs.iter().filter(|d| d["kind"] == "NetworkPolicy") {
            for rule in np["spec"]["ingress"].as_array().into_iter().flatten() {
                for from in rule["from"].as_array().into_iter().flatten() {
                    let Some(sel) = from.get("namespaceSelector") else {
                        continue;
                    };
                    let ok = *sel == json!({})
                        || (sel.as_object().is_some_and(|o| o.len() == 1)
                            && sel["matchLabels"].as_object().is_some_and(|m| {
                                m.len() == 1 && m.contains_key("kubernetes.io/metadata.name")
                            }));
                    assert!(ok, "{}: {sel}", np["metadata"]["name"]);
                }
            }
        }
    }
    let scrapers = |name: &str| -> (Value, Value) {
        let rule = &object(base_docs, "NetworkPolicy", name)["spec"]["ingress"][0];
        (
            rule["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                .clone(),
            rule["ports"][0]["port"].clone(),
        )
    };
    assert_eq!(
        scrapers("faultline-collector-metrics"),
        (json!("monitoring"), json!(9443))
    );
    assert_eq!(
        scrapers("faultline-correlator"),
        (json!("monitoring"), json!(8080))
    );
    assert!(kubernetes_doc().contains("kubernetes.io/metadata.name"));
}

/// The GPU Operator runs dcgm-exporter on every GPU node: both collector
/// ConfigMaps (base and scale-out) leave the `DCGM_FI_*` copies off, and
/// docs/kubernetes.md says when to turn them on.
#[test]
fn dcgm_copies_are_off_in_both_collector_configs() {
    let _turn = tests::one_file_at_a_time(file!());
    let (Some(base_docs), Some(overlay)) = (base(), scale_out()) else {
        return;
    };
    for docs in [base_docs, overlay] {
        assert!(!collector_config(docs).nvml.dcgm_compat);
        assert!(collector_toml(docs).contains("\ndcgm_compat = false\n"));
    }
    let doc = kubernetes_doc();
    assert!(doc.contains("dcgm_compat = true") && doc.contains("dcgm-exporter"));
}

/// The scale-out overlay (`deploy/kubernetes/scale-out`, docs/scale-out.md),
/// as `kubectl kustomize` builds it, holds together: the shared collector
/// DaemonSet with its ConfigMap on NATS — the base's config but for
/// `[stream]`, 4 hash buckets — the NATS StatefulSet and the shard
/// Deployments, not the base's single correlator; the shards consume
/// exactly the collectors' buckets, each through its own durable consumer,
/// with an active and a standby replica; every flag they pass is one
/// `serve` takes; NATS runs as many servers as the stream replicas they
/// ask for. (The overlay once named `../collector.yaml`, which kustomize
/// refuses — no file above the kustomization naming it — and an imitation
/// of kustomize had hidden that.)
#[test]
fn scale_out_overlay_shards_cover_every_bucket_of_the_collectors() {
    let _turn = tests::one_file_at_a_time(file!());
    let (Some(base_docs), Some(docs)) = (base(), scale_out()) else {
        return;
    };
    let have: BTreeSet<(String, String)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or("").to_string(),
                d["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
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

    // The collectors: the base's config but for [stream].
    let overlay = collector_toml(docs);
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
    assert_eq!(
        without_stream(&overlay),
        without_stream(&collector_toml(base_docs))
    );
    // The DaemonSet is the base's, plus the NATS credentials.
    let (b, o) = (pod_spec(base_docs), pod_spec(docs));
    assert_eq!(b["securityContext"], o["securityContext"]);
    assert_eq!(
        container(b, "collector")["image"],
        container(o, "collector")["image"]
    );
    let cfg = FileConfig::parse(&overlay, "scale-out ConfigMap").expect("valid collector config");
    assert_eq!(
        cfg.stream.endpoint.as_deref(),
        Some("nats://faultline-nats.faultline.svc:4222")
    );
    let buckets: BTreeSet<String> = (0..cfg.stream.nats_buckets)
        .map(|b| format!("h{b:02x}"))
        .collect();
    // Every bucket is a host's: a few hundred host names reach them all.
    let hashed: BTreeSet<String> = (0..400)
        .map(|i| vocab::nats::host_shard(&format!("gpu-node-{i:04}"), cfg.stream.nats_buckets))
        .collect();
    assert_eq!(hashed, buckets);

    // The shards.
    let help = run(Command::new(tests::bin("faultline-correlator")).args(["serve", "--help"]));
    let mut shards = BTreeSet::new();
    let mut consumers = BTreeSet::new();
    let mut replicas = 0;
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        assert_eq!(d["spec"]["replicas"], 2, "an active and a standby: {d}");
        let args = strings(&d["spec"]["template"]["spec"]["containers"][0]["args"]);
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            assert!(
                help.split(|c: char| c.is_whitespace() || c == ',')
                    .any(|w| w == flag),
                "serve has no {flag}"
            );
        }
        let after = |f: &str| {
            args.iter()
                .position(|a| a == f)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        assert_eq!(
            after("--nats").as_deref(),
            Some("nats://faultline-nats.faultline.svc:4222")
        );
        for s in after("--nats-shards").expect("--nats-shards").split(',') {
            assert!(shards.insert(s.to_string()), "shard {s} consumed twice");
        }
        assert!(consumers.insert(after("--nats-consumer").expect("--nats-consumer")));
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
    let conf = object(docs, "ConfigMap", "faultline-nats")["data"]["nats.conf"]
        .as_str()
        .expect("nats.conf");
    assert!(conf.contains("max_file_store: 50G"), "{conf}");
    assert!(cfg.stream.nats_max_bytes > 0 && cfg.stream.nats_max_bytes < 50 << 30);
    assert_eq!(
        shards, buckets,
        "the shards consume exactly the collectors' buckets"
    );
    assert_eq!(cfg.stream.nats_replicas, replicas);
    let nats = object(docs, "StatefulSet", "faultline-nats");
    assert_eq!(nats["spec"]["replicas"].as_u64(), Some(replicas as u64));
    overlay_authenticates_to_nats(docs, &overlay);
}

/// The scale-out overlay's NATS credentials (docs/scale-out.md, trust):
/// NATS with TLS and the generated `auth.conf`; each shard mounts its own
/// seed only; each collector gets its node's seed through an init
/// container into a memory-backed emptyDir, and its own container never
/// mounts the Secret holding every node's seed.
fn overlay_authenticates_to_nats(overlay: &[Value], toml: &str) {
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

/// The scale-out overlay ships the base's monitoring (`../monitoring`,
/// `../dashboards`): the scraper's identity, the collector's
/// ServiceMonitor, the PrometheusRule (the rules file's groups) and every
/// dashboard ConfigMap, each the base's object. The correlator's
/// ServiceMonitor is the base's but for its relabelings, which only label
/// (`shard`, `instance`) and drop no target: a shard's standby serves
/// `/healthz` and `/metrics` while it waits for the lease, so it is ready,
/// listed by the Service and scraped `up == 1` (tests/tests/it/scale_out.rs
/// checks what it serves). The rule for a shard without an available
/// process (FaultlineCorrelatorShardDown) names every shard Deployment and
/// not the base's correlator; each shard rolls over keeping both processes
/// ready (one new pod surged in, none unavailable), which a standby's
/// readiness makes possible.
#[test]
fn scale_out_overlay_ships_the_bases_monitoring_and_scrapes_both_shard_processes() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(venv) = tools() else { return };
    let (Some(base_docs), Some(docs)) = (base(), scale_out()) else {
        return;
    };
    for (kind, name) in [
        ("ServiceAccount", "faultline-metrics-scraper"),
        ("Secret", "faultline-metrics-scraper-token"),
        ("ClusterRoleBinding", "faultline-metrics-scraper"),
        ("ServiceMonitor", "faultline-collector"),
        ("PrometheusRule", "faultline"),
    ] {
        assert_eq!(
            object(docs, kind, name),
            object(base_docs, kind, name),
            "{kind}/{name} is not the base's"
        );
    }
    let rules_file = repo().join("deploy/prometheus/faultline-rules.yaml");
    let rules = yaml_docs(venv, &rules_file).pop().expect("rules");
    assert!(
        object(docs, "PrometheusRule", "faultline")["spec"]["groups"] == rules["groups"],
        "the overlay's PrometheusRule is not {}",
        rules_file.display()
    );
    let dashboards = |d: &[Value]| -> Vec<Value> {
        d.iter()
            .filter(|d| {
                d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1"
            })
            .cloned()
            .collect()
    };
    let maps = dashboards(docs);
    assert!(maps.len() >= 4, "{} dashboard ConfigMaps", maps.len());
    assert_eq!(maps, dashboards(base_docs));

    // The correlator's scrape: the base's, narrowed.
    let sm = object(docs, "ServiceMonitor", "faultline-correlator");
    let endpoints = sm["spec"]["endpoints"].as_array().expect("endpoints");
    assert_eq!(endpoints.len(), 1, "{sm}");
    let relabelings = endpoints[0]["relabelings"]
        .as_array()
        .expect("the shards' scrape relabels");
    let mut without = sm.clone();
    without["spec"]["endpoints"][0]
        .as_object_mut()
        .expect("endpoint")
        .remove("relabelings");
    assert_eq!(
        &without,
        object(base_docs, "ServiceMonitor", "faultline-correlator")
    );
    for r in relabelings {
        let action = r["action"].as_str().unwrap_or("replace");
        assert!(
            !["keep", "drop", "keepequal", "dropequal"].contains(&action),
            "a standby is ready and scraped: no target is dropped ({r})"
        );
    }

    // The readiness the rollout relies on: every shard process is ready
    // once it serves /healthz on the Service's port (a standby too), and
    // is never restarted for waiting.
    let service = object(docs, "Service", "faultline-correlator");
    let port = endpoints[0]["port"].as_str().expect("port");
    let svc_port = service["spec"]["ports"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == port))
        .expect("the Service has the scraped port");
    assert_ne!(service["spec"]["publishNotReadyAddresses"], true);
    let selector = service["spec"]["selector"].as_object().expect("selector");
    let shard_label = relabelings
        .iter()
        .find(|r| r["targetLabel"] == "shard")
        .expect("a shard label");
    let pod_label = strings(&shard_label["sourceLabels"]);
    let shard_rule = rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .find(|r| r["alert"] == "FaultlineCorrelatorShardDown")
        .expect("FaultlineCorrelatorShardDown");
    let expr = shard_rule["expr"].as_str().expect("expr");
    let names = regex::Regex::new(r#"deployment=~"([^"]*)""#)
        .expect("regex")
        .captures(expr)
        .expect("the rule selects Deployments by name")[1]
        .to_string();
    let names = regex::Regex::new(&format!("^(?:{names})$")).expect("deployment regex");
    assert!(
        !names.is_match("faultline-correlator"),
        "the base's correlator"
    );
    let mut shards = 0;
    for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
        let name = d["metadata"]["name"].as_str().expect("name");
        assert!(names.is_match(name), "{expr} misses {name}");
        assert_eq!(d["spec"]["replicas"], 2, "{name}: an active and a standby");
        let rolling = &d["spec"]["strategy"]["rollingUpdate"];
        assert_eq!(
            (&rolling["maxSurge"], &rolling["maxUnavailable"]),
            (&Value::from(1), &Value::from(0)),
            "{name}: a rollout keeps both processes ready, one new pod at a time"
        );
        let template = &d["spec"]["template"];
        let labels = &template["metadata"]["labels"];
        assert!(
            selector.iter().all(|(k, v)| &labels[k] == v),
            "the Service does not select {name}'s pods"
        );
        let shard = labels["faultline.io/shard"].as_str().expect("shard label");
        assert!(name.ends_with(shard), "{name}: {shard}");
        assert_eq!(
            pod_label,
            ["__meta_kubernetes_pod_label_faultline_io_shard"],
            "Prometheus's name of the pods' faultline.io/shard label"
        );
        let c = container(&template["spec"], "correlator");
        let probe = &c["readinessProbe"]["httpGet"];
        assert_eq!(probe["path"], "/healthz", "{name}");
        assert_eq!(probe["port"], svc_port["targetPort"], "{name}");
        assert!(
            c["ports"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == svc_port["targetPort"])),
            "{name}"
        );
        assert!(
            c.get("livenessProbe").is_none(),
            "{name}: a waiting standby is restarted"
        );
        shards += 1;
    }
    assert_eq!(shards, 4);
}
