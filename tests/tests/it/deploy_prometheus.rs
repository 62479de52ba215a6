//! A real Prometheus (Debian's, started here on loopback) scrapes a running
//! collector (real probes; NVML, libcuda and InfiniBand stand-ins; a Slurm
//! job file; a CUDA process and an OTLP training loop of job 4711) and the
//! correlator it streams to, and loads `deploy/prometheus`'s rules. Then:
//!
//! * every query of every dashboard in `deploy/grafana` returns data, and
//!   so do the variables' `label_values` and every metric name the rules
//!   use, and every recording rule;
//! * the XID the NVML stand-in injects (12 s in, while Prometheus scrapes)
//!   fires `FaultlineGpuXid`;
//! * every panel of dcgm-exporter's official dashboard, and its variables,
//!   return data (tests/data/dcgm-exporter, GPU 0 of the stand-in has GPM);
//! * the dcgm-exporter compatibility series have dcgm-exporter's names,
//!   types, labels and units for every field of its own default counters
//!   CSV that NVML can supply, next to faultline's own series of the same
//!   samples;
//! * the collector exports `faultline_probe_enabled`, 0 for the probes its
//!   configuration switches off or the kernel does not need, and
//!   `FaultlineProbeDetached`'s expression selects none of them.
//!
//! Without Prometheus or BPF: every alert has a `runbook_url` naming a page
//! of `docs/runbooks/` that exists (per incident kind for the incident
//! alerts), and the rules' `promtool` unit tests pass, among them a
//! disabled probe that does not alert.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tests::{bin, KillOnDrop};

const PROMETHEUS: &str = "/usr/bin/prometheus";
const HOST: &str = "fl-node-1";
/// The second collector's node name (the dcgm-exporter copies off).
const HOST_OFF: &str = "fl-node-2";

const SCENARIO: &str = "\
# t gpu key=value...
0 gpu=0 temp=64 sm_clock=1755 power_mw=312500 mem_used=21474836480 enc_util=7 dec_util=3 remap_cor=2 pcie_tx_kbs=4096
0 gpu=0 gpm=1 gr_active=87 tensor_active=42 dram_active=63 pcie_tx_mibs=1024 pcie_rx_mibs=3
0 gpu=1 temp=58 sm_clock=1980 power_mw=280000 nvlinks=4 nvl_replay=5 nvl_tx_kibps=1000000 nvl_rx_kibps=1000000
1.0 gpu=1 temp=91 sm_clock=1350 throttle=0x40
12 gpu=0 xid=79
";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

fn curl(args: &[&str]) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5"])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

/// An instant query's result vector (empty when the query fails).
fn query(prom: &str, q: &str) -> Vec<serde_json::Value> {
    let Some(body) = curl(&[
        &format!("{prom}/api/v1/query"),
        "--data-urlencode",
        &format!("query={q}"),
    ]) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// `query` until it returns data or `limit` passes.
fn query_until(prom: &str, q: &str, limit: Duration) -> Vec<serde_json::Value> {
    let t = Instant::now();
    loop {
        let r = query(prom, q);
        if !r.is_empty() || t.elapsed() > limit {
            return r;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Every PromQL expression of the dashboards: (dashboard, panel, expr),
/// Grafana's variables replaced by what selects everything.
/// Every dashboard query with its variables set: `$node` to `node` (the
/// value its variable takes), the others to "all".
fn dashboard_queries(node: &str, cluster: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let dir = repo().join("deploy/grafana");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("deploy/grafana")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 4, "fleet, host, job, link: {files:?}");
    let subst = |e: &str| {
        e.replace("$__rate_interval", "15s")
            .replace("$cluster", cluster)
            .replace("$hpc_job", ".+")
            .replace("$node", node)
            .replace("$device", ".+")
            .replace("$port", ".+")
    };
    for f in files {
        let d: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).expect("read")).expect("JSON");
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        // A `cluster` variable whose "All" also matches series without the label.
        let vars = d["templating"]["list"].as_array().expect("templating");
        let cluster = vars
            .iter()
            .find(|v| v["name"] == "cluster")
            .unwrap_or_else(|| panic!("{name}: no cluster variable"));
        assert_eq!(cluster["allValue"], ".*", "{name}: {cluster}");
        assert_eq!(cluster["includeAll"], true, "{name}: {cluster}");
        for p in d["panels"].as_array().expect("panels") {
            for t in p["targets"].as_array().expect("targets") {
                let e = t["expr"].as_str().expect("expr");
                assert!(!e.is_empty());
                // faultline's own families (never only the DCGM_FI_* copies),
                // selected by the scrape job and the cluster.
                assert!(
                    !e.contains("DCGM_FI_") && e.contains("cluster=~\"$cluster\""),
                    "{name} {}: {e}",
                    p["title"]
                );
                assert!(
                    e.contains("job=\"faultline-") || e.contains("job=~\"faultline-"),
                    "{name} {}: {e} selects no scrape job",
                    p["title"]
                );
                out.push((name.clone(), p["title"].to_string(), subst(e)));
            }
        }
        for v in d["templating"]["list"].as_array().expect("templating") {
            let Some(q) = v["query"]["query"].as_str() else {
                continue;
            };
            // label_values(SELECTOR, LABEL) → group by (LABEL) (SELECTOR)
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .expect("label_values(...) variables");
            let (sel, label) = inner.rsplit_once(',').expect("selector, label");
            out.push((
                name.clone(),
                format!("variable {}", v["name"]),
                subst(&format!("group by ({}) ({sel})", label.trim())),
            ));
        }
    }
    out
}

/// Every faultline metric name in the rules' expressions, and the
/// recording rules' names.
fn rule_names() -> (BTreeSet<String>, Vec<String>) {
    let mut names = BTreeSet::new();
    let mut records = Vec::new();
    for r in rules() {
        if r.record {
            records.push(r.name.clone());
        }
        let e = r.expr.as_str();
        let bytes = e.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let rest = &e[i..];
            let starts = (rest.starts_with("faultline_") || rest.starts_with("DCGM_FI_"))
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
            if starts {
                let n: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                i += n.len();
                names.insert(n);
            } else {
                i += 1;
            }
        }
    }
    (names, records)
}

/// Metric names the rules read that only a sharded correlator (`serve
/// --nats`) exports; `tests/tests/it/scale_out.rs`
/// (`a_standby_serves_health_and_metrics_then_its_web_ui_once_active`)
/// scrapes them from real shard processes.
const SCALE_OUT_ONLY: [&str; 1] = ["faultline_correlator_shard_active"];

/// One collector of the live test: started, its metrics address, its
/// console lines, its OTLP port.
struct Collector {
    child: KillOnDrop,
    metrics_addr: String,
    lines: std::sync::mpsc::Receiver<String>,
    otlp: u16,
}

/// Starts a collector on the stand-ins as `hostname`, streaming to the
/// correlator at `grpc`, with the dcgm-exporter copies on or off; returns
/// once its first window has closed (its probes are attached).
fn start_collector(
    dir: &Path,
    hostname: &str,
    dcgm_compat: bool,
    grpc: u16,
    ib: &Path,
) -> Collector {
    let otlp = free_port();
    let mut cmd = Command::new(bin("faultline-collector"));
    cmd.args([
        "--quiet",
        "--window",
        "0.5",
        "--duration",
        "120",
        "--no-verbs",
    ])
    .args(["--metrics-addr", "127.0.0.1:0", "--hostname", hostname])
    .args([
        "--otlp-grpc-addr",
        &format!("127.0.0.1:{otlp}"),
        "--no-otlp-http",
    ])
    .args(["--correlator", &format!("http://127.0.0.1:{grpc}")])
    .arg("--spool-dir")
    .arg(dir.join(format!("spool-{hostname}")))
    .arg("--job-dir")
    .arg(dir.join("jobs"))
    .arg("--cuda-library")
    .arg(tests::fake_libcuda())
    .arg("--nvml-library")
    .arg(tests::fake_nvml())
    .arg("--sysfs-root")
    .arg(ib)
    .env("FAKE_NVML_GPUS", "2")
    .env("FAKE_NVML_SCENARIO", dir.join("nvml-scenario.txt"))
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if !dcgm_compat {
        cmd.arg("--no-dcgm-compat");
    }
    let mut child = KillOnDrop(cmd.spawn().expect("start the collector"));
    let lines = tests::lines_of(&mut child.0);
    let metrics_addr = loop {
        let l = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the collector prints its metrics address");
        if let Some(a) = l.strip_prefix("metrics on http://") {
            break a.trim_end_matches("/metrics").to_string();
        }
    };
    Collector {
        child,
        metrics_addr,
        lines,
        otlp,
    }
}

/// A Prometheus on loopback scraping one collector (job
/// faultline-collector) and the correlator (job faultline-correlator)
/// every second, with the rules evaluated every second. Plain static
/// targets: `instance` is Prometheus's own host:port, no relabelling, no
/// honor_labels (faultline's families carry no `job` of their own); with
/// `cluster`, every series carries that `cluster` label (as a global view
/// such as Thanos adds it).
fn start_prometheus(
    dir: &Path,
    name: &str,
    collector: &str,
    correlator: &str,
    cluster: Option<&str>,
) -> (KillOnDrop, String) {
    let port = free_port();
    let labels = cluster.map_or(String::new(), |c| format!("    labels: {{cluster: {c}}}\n"));
    let conf = dir.join(format!("prometheus-{name}.yml"));
    std::fs::write(
        &conf,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: ['{rules}']\n\
             scrape_configs:\n\
             - job_name: faultline-collector\n  static_configs:\n  - targets: ['{collector}']\n{labels}\
             - job_name: faultline-correlator\n  static_configs:\n  - targets: ['{correlator}']\n{labels}",
            rules = repo()
                .join("deploy/prometheus/faultline-rules.yaml")
                .display()
        ),
    )
    .expect("prometheus.yml");
    let child = KillOnDrop(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join(format!("tsdb-{name}")).display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start Prometheus"),
    );
    (child, format!("http://127.0.0.1:{port}"))
}

/// The dashboards' queries that return nothing from `prom`, whose one
/// collector target is `metrics_addr` (the value `$node` offers), with
/// `$cluster` set to "All" (`.*`) or to the one value its variable offers.
fn empty_dashboard_queries(
    prom: &str,
    metrics_addr: &str,
    what: &str,
    cluster: Option<&str>,
) -> Vec<String> {
    let offered = query(
        prom,
        "group by (cluster) (up{job=~\"faultline-collector|faultline-correlator\"})",
    );
    assert_eq!(offered.len(), 1, "{what}: {offered:?}");
    assert_eq!(offered[0]["metric"]["cluster"].as_str(), cluster, "{what}");
    let nodes = query_until(
        prom,
        "group by (instance) (faultline_probe_attached)",
        Duration::from_secs(5),
    );
    assert_eq!(nodes.len(), 1, "{what}: {nodes:?}");
    let node = nodes[0]["metric"]["instance"].as_str().unwrap_or_default();
    assert_eq!(
        node, metrics_addr,
        "{what}: Prometheus's own instance label"
    );
    let queries = dashboard_queries(&node.replace('.', "\\\\."), cluster.unwrap_or(".*"));
    assert!(queries.len() >= 50, "{} queries", queries.len());
    queries
        .iter()
        .filter(|(_, _, q)| query_until(prom, q, Duration::from_secs(5)).is_empty())
        .map(|(dash, panel, q)| format!("{what}: {dash} {panel}: {q}"))
        .collect()
}

#[test]
fn prometheus_scrapes_collector_and_correlator_and_every_dashboard_and_rule_query_has_data() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("deploy_prometheus") {
        return;
    }
    if !Path::new(PROMETHEUS).exists() {
        assert!(
            !tests::in_ci(),
            "{PROMETHEUS} missing under CI: scripts/setup.sh installs Debian's prometheus"
        );
        eprintln!("skipping: {PROMETHEUS} missing (scripts/setup.sh)");
        return;
    }
    let py = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target dir")
        .join("otlp-venv/bin/python");
    if !py.exists() {
        assert!(
            !tests::in_ci(),
            "{} missing under CI: scripts/setup.sh",
            py.display()
        );
        eprintln!("skipping: {} missing (scripts/setup.sh)", py.display());
        return;
    }
    let started = Instant::now();
    let dir = tests::fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-prometheus"));

    // A node: two GPUs, two HCAs, a Slurm job owning both GPUs and mlx5_0.
    let ib = tests::FakeIb::new("deploy-prom");
    ib.active_port("mlx5_0", 1);
    ib.active_port("mlx5_1", 1);
    let jobs = dir.join("jobs");
    std::fs::create_dir_all(&jobs).expect("job dir");
    std::fs::write(
        jobs.join("4711"),
        "job=4711\nuser=alice\ngpus=0,1\nhcas=mlx5_0\n",
    )
    .expect("job file");
    std::fs::write(dir.join("nvml-scenario.txt"), SCENARIO).expect("scenario");

    let grpc = free_port();
    let web = free_port();
    // Alertmanager at a port nobody listens on, re-sent every second: the
    // correlator's posts of the XID's incident fail, each counted in
    // faultline_alerts_failed_total (FaultlineAlertmanagerPushFailing).
    let corr_toml = dir.join("correlator.toml");
    std::fs::write(
        &corr_toml,
        format!(
            "[alertmanager]\nurl = \"http://127.0.0.1:{}\"\nresend_s = 1\n",
            free_port()
        ),
    )
    .expect("correlator.toml");
    let _corr = KillOnDrop(
        Command::new(bin("faultline-correlator"))
            .args(["serve", "--insecure", "--listen"])
            .arg(format!("127.0.0.1:{grpc}"))
            .arg("--web")
            .arg(format!("127.0.0.1:{web}"))
            .arg("--config")
            .arg(&corr_toml)
            // With a history, as deployed: its error counter is exported.
            .arg("--history")
            .arg(dir.join("history.db"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the correlator"),
    );
    // Two collectors on the same stand-ins, one with the dcgm-exporter
    // copies (the default) and one without (the Kubernetes config), each
    // scraped by its own Prometheus beside the correlator.
    let on = start_collector(&dir, HOST, true, grpc, ib.root());
    let off = start_collector(&dir, HOST_OFF, false, grpc, ib.root());
    for c in [&on, &off] {
        while !c
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("collector windows")
            .starts_with("window 1:")
        {}
    }
    // Job 4711's rank 0: a CUDA process that stays alive (both collectors'
    // probes see it), and an OTLP training loop to each collector.
    let mut cuda = KillOnDrop(
        Command::new(tests::cuda_workload())
            .arg(tests::fake_libcuda())
            .args(["device:0", "func:gemm", "launch:50:2,1,1:64,1,1:0", "wait"])
            .env("SLURM_JOB_ID", "4711")
            .env("RANK", "0")
            .env("NCCL_IB_HCA", "mlx5_0")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("CUDA workload"),
    );
    let mut loops = Vec::new();
    for c in [&on, &off] {
        let mut train = KillOnDrop(
            Command::new(&py)
                .arg(repo().join("tests/otlp/workload.py"))
                .args(["loop", "--protocol", "grpc", "--endpoint"])
                .arg(format!("127.0.0.1:{}", c.otlp))
                .args(["--job", "4711", "--rank", "0", "--step-s", "0.1"])
                .arg("--slow-file")
                .arg(dir.join("slow"))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("OTLP training loop"),
        );
        let train_lines = tests::lines_of(&mut train.0);
        assert_eq!(
            train_lines.recv_timeout(Duration::from_secs(30)).as_deref(),
            Ok("loop started")
        );
        loops.push(train);
    }
    // Block I/O the probes see.
    let f = dir.join("io.bin");
    for _ in 0..20 {
        std::fs::write(&f, vec![7u8; 1 << 16]).expect("write");
        std::fs::File::open(&f)
            .and_then(|h| h.sync_all())
            .expect("fsync");
    }

    let correlator = format!("127.0.0.1:{web}");
    // The copies-off Prometheus labels its series cluster="east"; the
    // other has no `cluster` at all.
    let (_prom_on, prom) = start_prometheus(&dir, "on", &on.metrics_addr, &correlator, None);
    let (_prom_off, prom_off) =
        start_prometheus(&dir, "off", &off.metrics_addr, &correlator, Some("east"));
    for p in [&prom, &prom_off] {
        let up = query_until(p, "count(up == 1) == 2", Duration::from_secs(30));
        assert_eq!(up.len(), 1, "both targets of {p} up within 30 s");
    }
    // 10 s of scrapes: the 15 s rate windows have their samples.
    std::thread::sleep(Duration::from_secs(10));

    // The copies really are off on the one and on on the other; faultline's
    // own series carry the workload's job as hpc_job, never as `job`.
    assert!(
        query(&prom_off, "count({__name__=~\"DCGM_FI_.+\"})").is_empty(),
        "dcgm_compat off still exports DCGM_FI_*"
    );
    assert_eq!(query(&prom, "count({__name__=~\"DCGM_FI_.+\"})").len(), 1);
    for p in [&prom, &prom_off] {
        let wrong = query(p, "count by (job) ({__name__=~\"faultline_.+\"})");
        let jobs: BTreeSet<&str> = wrong
            .iter()
            .filter_map(|s| s["metric"]["job"].as_str())
            .collect();
        assert_eq!(
            jobs,
            BTreeSet::from(["faultline-collector", "faultline-correlator"]),
            "{p}: only the scrape jobs in `job`"
        );
        assert!(
            query(p, "count({exported_job!=\"\"})").is_empty(),
            "{p}: a family carries its own `job` label"
        );
        assert_eq!(
            query(
                p,
                "count by (hpc_job) (faultline_gpu_power_watts{hpc_job=\"4711\"})"
            )
            .len(),
            1,
            "{p}: job 4711's GPUs by hpc_job"
        );
    }

    // Every dashboard query, with the copies on and with them off.
    let mut empty = empty_dashboard_queries(
        &prom,
        &on.metrics_addr,
        "dcgm_compat on, no cluster label",
        None,
    );
    empty.extend(empty_dashboard_queries(
        &prom_off,
        &off.metrics_addr,
        "dcgm_compat off, cluster east",
        Some("east"),
    ));
    // dcgm-exporter's own dashboard (copies on): 8 of 8 panels, and its variables.
    let (panels, vars) = tests::dcgm_exporter::dashboard();
    assert_eq!(panels.len(), 8, "{panels:?}");
    for p in &panels {
        for e in &p.exprs {
            let q = tests::dcgm_exporter::all_values(e);
            if query_until(&prom, &q, Duration::from_secs(5)).is_empty() {
                empty.push(format!("dcgm-exporter dashboard {}: {q}", p.title));
            }
        }
    }
    for (name, q) in &vars {
        let (metric, label) = tests::dcgm_exporter::label_values(q).expect("label_values");
        let q = format!("group by ({label}) ({metric})");
        if query_until(&prom, &q, Duration::from_secs(5)).is_empty() {
            empty.push(format!("dcgm-exporter dashboard variable {name}: {q}"));
        }
    }
    assert!(
        empty.is_empty(),
        "dashboard queries without data: {empty:#?}"
    );

    // The rules: every metric name they use exists (with the copies off:
    // they read faultline's own families), every recording rule has data.
    let (names, records) = rule_names();
    assert!(names.len() >= 20, "{names:?}");
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !SCALE_OUT_ONLY.contains(&n.as_str()))
        .filter(|n| {
            let q = format!("group({{__name__=\"{n}\"}})");
            query_until(&prom_off, &q, Duration::from_secs(5)).is_empty()
        })
        .collect();
    assert!(missing.is_empty(), "rule metrics not exported: {missing:?}");
    let no_data: Vec<&String> = records
        .iter()
        .filter(|r| query_until(&prom_off, r, Duration::from_secs(5)).is_empty())
        .collect();
    assert!(
        no_data.is_empty(),
        "recording rules without data: {no_data:?}"
    );
    // The meta-alerts on the live targets: every target up, so none but
    // FaultlineAlertmanagerPushFailing, which the correlator's real failed
    // posts (to a closed port) make pending: its expression sees them.
    let failing = query_until(
        &prom_off,
        "ALERTS{alertname=\"FaultlineAlertmanagerPushFailing\",alertstate=\"pending\"}",
        Duration::from_secs(20),
    );
    assert_eq!(failing.len(), 1, "{failing:#?}");
    assert_eq!(failing[0]["metric"]["instance"], correlator.as_str());
    let meta = query(
        &prom_off,
        &format!(
            "ALERTS{{alertname=~\"{}\",alertname!=\"FaultlineAlertmanagerPushFailing\"}}",
            META.join("|")
        ),
    );
    assert!(meta.is_empty(), "{meta:#?}");

    // The injected XID fires its alert.
    let t = Instant::now();
    let firing = loop {
        let a = query(
            &prom,
            "ALERTS{alertname=\"FaultlineGpuXid\",alertstate=\"firing\"}",
        );
        if !a.is_empty() || t.elapsed() > Duration::from_secs(20) {
            break a;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(firing.len(), 1, "{firing:?}");
    let m = &firing[0]["metric"];
    assert_eq!(m["gpu"].as_str(), Some("0"));
    assert_eq!(m["instance"], on.metrics_addr.as_str());
    let code = query(&prom, "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\"}");
    assert_eq!(code.len(), 1, "{code:?}");
    assert_eq!(code[0]["value"][1], "79");

    // dcgm-exporter compatibility, from the collector's own /metrics.
    let metrics_addr = &on.metrics_addr;
    let text = curl(&[&format!("http://{metrics_addr}/metrics")]).expect("scrape");
    // --no-verbs switches verbs off; the exec tracepoint is attached.
    let has = |l: &str| text.lines().any(|t| t == l);
    assert!(has("faultline_probe_enabled{probe=\"verbs\"} 0"), "{text}");
    assert!(
        has("faultline_probe_enabled{probe=\"sched_process_exec\"} 1"),
        "{text}"
    );
    // Every probe not attached on this node is one the collector does not
    // mean to attach (on a 6.x kernel: block_rq_issue and block_io_done,
    // which the newer block tracepoints replace), so FaultlineProbeDetached's
    // expression selects nothing, where the old `faultline_probe_attached
    // == 0` selected each of them.
    let detached: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("faultline_probe_attached{") && l.ends_with(" 0"))
        .filter_map(|l| l.split('"').nth(1))
        .collect();
    for p in &detached {
        assert!(
            has(&format!("faultline_probe_enabled{{probe=\"{p}\"}} 0")),
            "{p} is detached but enabled:\n{text}"
        );
    }
    let expr = rule_expr("FaultlineProbeDetached");
    assert!(expr.contains("faultline_probe_enabled"), "{expr}");
    assert_eq!(
        query_until(
            &prom,
            "faultline_probe_attached == 0",
            Duration::from_secs(5)
        )
        .len(),
        detached.len()
    );
    let firing = query(&prom, &expr);
    assert!(firing.is_empty(), "{expr}: {firing:?}");
    eprintln!("probes not attached on purpose: {detached:?}; FaultlineProbeDetached selects none");
    dcgm_families_match(&text);
    // The copies-off collector's own families match the copies-on one's
    // (the same stand-ins).
    let text_off = curl(&[&format!("http://{}/metrics", off.metrics_addr)]).expect("scrape");
    assert!(!text_off.contains("DCGM_FI_"), "{text_off}");
    for gpu in ["0", "1"] {
        assert_eq!(
            value_of(&text, "faultline_gpu_power_watts", gpu),
            value_of(&text_off, "faultline_gpu_power_watts", gpu)
        );
    }
    let _ = cuda.0.stdin.take();
    let _ = cuda.0.wait();
    // Both collectors killed at once, then reaped (each takes seconds to
    // tear its probes down).
    let (mut a, mut b) = (on.child, off.child);
    let _ = (a.0.kill(), b.0.kill());
    drop((a, b, loops));
    eprintln!("deploy_prometheus live test: {:?}", started.elapsed());
}

/// The labels of a sample line, in order.
fn labels_of(line: &str) -> Vec<(String, String)> {
    let Some(inner) = line.split_once('{').and_then(|(_, r)| r.rsplit_once('}')) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut rest = inner.0;
    while let Some((k, r)) = rest.split_once("=\"") {
        let mut v = String::new();
        let mut chars = r.char_indices();
        let mut end = r.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        v.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => v.push(c),
            }
        }
        out.push((k.trim_start_matches(',').to_string(), v));
        rest = &r[end..];
    }
    out
}

fn value_of(text: &str, name: &str, gpu: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels_of(l).iter().any(|(k, v)| k == "gpu" && v == gpu))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} for GPU {gpu}:\n{text}"))
}

fn dcgm_families_match(text: &str) {
    use tests::dcgm_exporter as de;
    for c in de::default_counters() {
        let (name, kind) = (c.name.as_str(), c.kind.as_str());
        if kind == "label" || de::NOT_FROM_NVML.iter().any(|(n, _)| *n == name) {
            continue;
        }
        assert!(
            text.contains(&format!("\n# TYPE {name} {kind}\n")),
            "{name} is not a {kind}:\n{text}"
        );
        let samples: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .collect();
        // GPM on GPU 0 only, NVLink on GPU 1 only; the rest on both.
        let gpus = if name.starts_with("DCGM_FI_PROF_") {
            &["0"][..]
        } else if name.contains("NVLINK") {
            &["1"][..]
        } else {
            &["0", "1"][..]
        };
        assert_eq!(samples.len(), gpus.len(), "{name}: {samples:?}");
        for s in samples {
            let l = labels_of(s);
            let keys: Vec<&str> = l.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(&keys[..de::DEVICE_LABELS.len()], de::DEVICE_LABELS, "{s}");
            let get = |k: &str| l.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            assert_eq!(get("Hostname"), Some(HOST), "{s}");
            assert_eq!(get("modelName"), Some("Fake H100 80GB HBM3"), "{s}");
            assert_eq!(get("DCGM_FI_DRIVER_VERSION"), Some("550.54.15"), "{s}");
            assert!(
                get("device").is_some_and(|d| d == format!("nvidia{}", get("gpu").unwrap_or("?"))),
                "{s}"
            );
            assert!(get("UUID").is_some_and(|u| u.starts_with("GPU-")), "{s}");
            assert!(get("gpu").is_some_and(|g| gpus.contains(&g)), "{s}");
            // The job file gives both GPUs to Slurm job 4711.
            assert_eq!(get("hpc_job"), Some("4711"), "{s}");
            assert!(get("pid").is_none(), "{s}");
        }
    }
    // Units: dcgm-exporter's beside faultline's base units, same sample.
    for gpu in ["0", "1"] {
        let v = |n: &str| value_of(text, n, gpu);
        assert_eq!(v("DCGM_FI_DEV_POWER_USAGE"), v("faultline_gpu_power_watts"));
        assert_eq!(
            v("DCGM_FI_DEV_SM_CLOCK") * 1e6,
            v("faultline_gpu_sm_clock_hertz")
        );
        assert_eq!(
            v("DCGM_FI_DEV_GPU_TEMP"),
            v("faultline_gpu_temperature_celsius")
        );
        assert_eq!(
            v("DCGM_FI_DEV_FB_USED"),
            (v("faultline_gpu_memory_used_bytes") / 1_048_576.0).floor()
        );
        assert_eq!(
            v("DCGM_FI_DEV_FB_USED") + v("DCGM_FI_DEV_FB_FREE") + v("DCGM_FI_DEV_FB_RESERVED"),
            81920.0,
            "80 GiB in MiB"
        );
        assert_eq!(
            v("DCGM_FI_DEV_FB_RESERVED"),
            512.0,
            "the stand-in's default"
        );
        assert_eq!(
            v("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
            (v("faultline_gpu_energy_joules_total") * 1000.0).round(),
            "mJ"
        );
    }
    let v = |n: &str, g: &str| value_of(text, n, g);
    assert_eq!(v("DCGM_FI_DEV_POWER_USAGE", "0"), 312.5);
    assert_eq!(v("DCGM_FI_DEV_FB_USED", "0"), 20480.0);
    assert_eq!(v("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "0"), 4096.0, "KB");
    assert_eq!(v("DCGM_FI_DEV_ENC_UTIL", "0"), 7.0);
    assert_eq!(v("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "0"), 2.0);
    assert_eq!(v("DCGM_FI_DEV_XID_ERRORS", "0"), 79.0, "the last XID");
    assert_eq!(v("DCGM_FI_DEV_XID_ERRORS", "1"), 0.0);
    assert_eq!(v("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0"), 0.42, "a ratio");
    assert_eq!(v("DCGM_FI_PROF_PCIE_TX_BYTES", "0"), 1024.0 * 1048576.0);
    // 4 links × 2 000 000 KiB/s, ÷ 1000 as DCGM reports it.
    let bw = v("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "1");
    assert!((7999.0..=8000.0).contains(&bw), "{bw}");
    assert_eq!(v("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "1"), 64.0);
    // NVLink: 4 links of GPU 1 with 5, 10, 15, 20 replays.
    assert_eq!(v("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "1"), 50.0);
    let links = text
        .lines()
        .filter(|l| l.starts_with("faultline_gpu_nvlink_replay_errors_total{"))
        .count();
    assert_eq!(links, 4, "{text}");
    // The CUDA process of job 4711 on GPU 0 names its rank there.
    let g0 = text
        .lines()
        .find(|l| l.starts_with("faultline_gpu_power_watts{gpu=\"0\""))
        .expect("GPU 0 power");
    let l = labels_of(g0);
    assert!(
        l.contains(&("hpc_job".into(), "4711".into()))
            && l.contains(&("rank".into(), "0".into()))
            && !l.iter().any(|(k, _)| k == "job"),
        "{g0}"
    );
}

/// The expression of alert `name` in the rules file.
fn rule_expr(name: &str) -> String {
    alerts()
        .into_iter()
        .find(|r| r.name == name)
        .map(|r| r.expr)
        .unwrap_or_else(|| panic!("no alert {name}"))
}

/// The runbook base every `runbook_url` of the rules file starts with
/// (`deploy/prometheus/generate.py` replaces it with a site's).
const RUNBOOK_BASE: &str = "https://faultline.io/docs/runbooks";

/// One rule of the rules file.
#[derive(Debug, Default)]
struct Rule {
    name: String,
    record: bool,
    expr: String,
    runbook: Option<String>,
    has_for: bool,
    /// A `# No for: <why>` comment right above the rule.
    no_for_reason: bool,
}

/// Every rule of the rules file (alerts and records), read the way it is
/// written: one `key: value` per line, `expr: |-` blocks joined.
fn rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(repo().join("deploy/prometheus/faultline-rules.yaml"))
        .expect("rules");
    let unquote = |v: &str| v.trim().trim_matches('"').to_string();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out: Vec<Rule> = Vec::new();
    let mut comments: Vec<String> = Vec::new();
    let mut block: Option<usize> = None;
    for line in text.lines() {
        let l = line.trim();
        if let (Some(key_indent), Some(r)) = (block, out.last_mut()) {
            if !l.is_empty() && indent(line) > key_indent {
                r.expr.push(' ');
                r.expr.push_str(l);
                continue;
            }
            block = None;
        }
        if let Some(c) = l.strip_prefix('#') {
            comments.push(c.trim().to_string());
            continue;
        }
        let started = [("- alert: ", false), ("- record: ", true)]
            .iter()
            .find_map(|(p, record)| Some((l.strip_prefix(p)?, *record)));
        if let Some((name, record)) = started {
            out.push(Rule {
                name: name.trim().to_string(),
                record,
                no_for_reason: comments.iter().any(|c| c.starts_with("No for: ")),
                ..Rule::default()
            });
        } else if l.starts_with("- name: ") {
            out.push(Rule::default());
        } else if let Some(r) = out.last_mut() {
            if l == "expr: |-" || l == "expr: |" {
                block = Some(indent(line));
            } else if let Some(e) = l.strip_prefix("expr: ") {
                r.expr = e.to_string();
            } else if let Some(u) = l.strip_prefix("runbook_url: ") {
                r.runbook = Some(unquote(u));
            } else if l.starts_with("for: ") {
                r.has_for = true;
            }
        }
        comments.clear();
    }
    out.retain(|r| !r.name.is_empty());
    out
}

fn alerts() -> Vec<Rule> {
    rules().into_iter().filter(|r| !r.record).collect()
}

/// Every alert carries a `runbook_url`, an absolute URL under the one
/// runbook base, naming a page of `docs/runbooks/` that exists and says
/// what the alert means, what to check first and which commands to run.
/// The incident alerts' URL names the page of the firing kind: each kind
/// the alert's matcher admits has one, and the two alerts together cover
/// every incident kind.
#[test]
fn every_alert_has_a_runbook_page() {
    let _turn = tests::one_file_at_a_time(file!());
    let alerts = alerts();
    assert_eq!(alerts.len(), 22, "{alerts:?}");
    let kinds: Vec<&str> = vocab::IncidentKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    let mut covered = BTreeSet::new();
    let mut pages = BTreeSet::new();
    for Rule {
        name,
        expr,
        runbook,
        ..
    } in &alerts
    {
        let url = runbook
            .as_deref()
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let path = url
            .strip_prefix(RUNBOOK_BASE)
            .and_then(|p| p.strip_prefix('/'))
            .filter(|p| p.ends_with(".md"))
            .unwrap_or_else(|| panic!("{name}: {url} is not a page under {RUNBOOK_BASE}/"));
        let page = format!("docs/runbooks/{path}");
        let expanded: Vec<String> = if page.contains("{{ $labels.kind }}") {
            // kind=~"a|b" or kind!~"a|b" in the expression.
            let (negated, alts) = ["kind=~\"", "kind!~\""]
                .iter()
                .find_map(|m| {
                    let at = expr.find(m)? + m.len();
                    let end = expr[at..].find('"')? + at;
                    Some((m.starts_with("kind!"), &expr[at..end]))
                })
                // No kind matcher (the alerts that route on severity):
                // every kind.
                .unwrap_or((true, ""));
            let re = regex::Regex::new(&format!("^(?:{alts})$")).expect("kind regex");
            let fired: Vec<&str> = kinds
                .iter()
                .copied()
                .filter(|k| re.is_match(k) != negated)
                .collect();
            assert!(!fired.is_empty(), "{name} fires for no known kind");
            covered.extend(fired.iter().copied());
            fired
                .iter()
                .map(|k| page.replace("{{ $labels.kind }}", k))
                .collect()
        } else {
            assert!(page.ends_with(&format!("/{name}.md")), "{name}: {url}");
            vec![page]
        };
        for page in expanded {
            let text = std::fs::read_to_string(repo().join(&page))
                .unwrap_or_else(|e| panic!("{name}: {page}: {e}"));
            for section in ["## What it means", "## First checks", "## Commands"] {
                assert!(text.contains(section), "{page} lacks {section:?}");
            }
            pages.insert(page);
        }
    }
    assert_eq!(
        covered.len(),
        kinds.len(),
        "incident kinds without an alert: {:?}",
        kinds
            .iter()
            .filter(|k| !covered.contains(*k))
            .collect::<Vec<_>>()
    );
    assert_eq!(pages.len(), 20 + kinds.len());
    // The index links every page.
    let index = std::fs::read_to_string(repo().join("docs/runbooks/README.md")).expect("index");
    for page in &pages {
        let rel = page.trim_start_matches("docs/runbooks/");
        assert!(
            index.contains(&format!("]({rel})")),
            "docs/runbooks/README.md lacks {rel}"
        );
    }
}

/// The meta-alerts: faultline watching itself.
const META: [&str; 9] = [
    "FaultlineCorrelatorDown",
    "FaultlineCorrelatorAbsent",
    "FaultlineCorrelatorShardDown",
    "FaultlineCorrelatorShardLeaderless",
    "FaultlineCollectorsMissing",
    "FaultlineCollectorDown",
    "FaultlineAlertmanagerPushFailing",
    "FaultlineHistoryWriteErrors",
    "FaultlineSpoolFilling",
];

/// Selectors and `for:`. Every alert either waits with `for:` or says
/// why not in a `# No for:` comment above it (it counts events, or reads
/// a latched state); no alert on a scrape's `up` or a self-metric goes
/// without `for:`. Every selector of a faultline family names the scrape
/// job (`job="faultline-collector"` / `"faultline-correlator"`), and no
/// expression uses `job` for the workload (that is `hpc_job`).
#[test]
fn every_alert_waits_or_says_why_and_selects_the_scrape_job() {
    let _turn = tests::one_file_at_a_time(file!());
    let rules = rules();
    let alerts: Vec<&Rule> = rules.iter().filter(|r| !r.record).collect();
    let without: Vec<&str> = alerts
        .iter()
        .filter(|r| !r.has_for)
        .map(|r| r.name.as_str())
        .collect();
    for r in &alerts {
        assert!(
            r.has_for || r.no_for_reason,
            "{}: no `for:` and no `# No for:` comment saying why",
            r.name
        );
        assert!(!(r.has_for && r.no_for_reason), "{}: both", r.name);
    }
    for m in META {
        let r = alerts
            .iter()
            .find(|r| r.name == m)
            .unwrap_or_else(|| panic!("no meta-alert {m}"));
        assert!(r.has_for, "{m} fires on one failed scrape or post");
    }
    assert_eq!(
        without,
        [
            "FaultlineIncidentCritical",
            "FaultlineIncident",
            "FaultlineWindowsDropped",
            "FaultlineGpuLost",
            "FaultlineGpuXid",
            "FaultlineGpuUncorrectableEcc",
            "FaultlineGpuRowRemapFailure",
            "FaultlineInfinibandLinkDowned",
        ]
    );
    let selector =
        regex::Regex::new(r"\b((?:faultline|DCGM_FI)_[a-z0-9_A-Z]+)(\{[^}]*\})?").expect("regex");
    let by_job = regex::Regex::new(r"by \([^)]*\bjob\b").expect("regex");
    for r in &rules {
        for c in selector.captures_iter(&r.expr) {
            let sel = c.get(2).map_or("", |m| m.as_str());
            let want = if c[1].starts_with("faultline_correlator_")
                || c[1].starts_with("faultline_alerts_")
                || c[1].starts_with("faultline_history_")
            {
                "job=\"faultline-correlator\""
            } else {
                "job=\"faultline-collector\""
            };
            assert!(
                sel.contains(want),
                "{}: {} selects no {want}",
                r.name,
                &c[0]
            );
        }
        assert!(
            !by_job.is_match(&r.expr),
            "{}: aggregates by the scrape job as if it were the workload's",
            r.name
        );
    }
}

/// `promtool test rules`: every alert's unit tests, among them probes
/// switched off by configuration (`faultline_probe_enabled` 0) that do not
/// fire `FaultlineProbeDetached` while a configured, detached one does,
/// and each meta-alert both firing and quiet.
#[test]
fn rule_unit_tests_pass_and_each_meta_alert_fires_and_stays_quiet() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = repo().join("deploy/prometheus");
    let tests_yaml =
        std::fs::read_to_string(dir.join("faultline-rules.test.yaml")).expect("rule tests");
    assert!(tests_yaml.contains(
        "'faultline_probe_enabled{job=\"faultline-collector\",instance=\"n1\",probe=\"block_rq_issue\"}'"
    ));
    // alertname → (cases expecting it to fire, cases expecting silence).
    let mut cases: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    let mut current = None;
    for l in tests_yaml.lines().map(str::trim) {
        if let Some(a) = l.strip_prefix("alertname: ") {
            current = Some(a);
        } else if let (Some(a), Some(rest)) = (current, l.strip_prefix("exp_alerts:")) {
            let e = cases.entry(a).or_default();
            if rest.trim() == "[]" {
                e.1 += 1;
            } else {
                e.0 += 1;
            }
            current = None;
        }
    }
    for m in META {
        let (fires, quiet) = cases.get(m).copied().unwrap_or_default();
        assert!(
            fires >= 1 && quiet >= 1,
            "{m}: {fires} firing, {quiet} quiet cases"
        );
    }
    let Some(text) = promtool(&["test", "rules", "faultline-rules.test.yaml"], &dir) else {
        return;
    };
    assert!(text.contains("SUCCESS"), "{text}");
}

/// `promtool ARGS` in `dir`: its output, or `None` (skipped) where promtool
/// is missing outside CI. A failing run fails the test.
fn promtool(args: &[&str], dir: &Path) -> Option<String> {
    let out = match Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(!tests::in_ci(), "promtool missing under CI: {e}");
            eprintln!("skipping: promtool: {e} (scripts/setup.sh installs it)");
            return None;
        }
    };
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {args:?}: {text}");
    Some(text)
}

/// `python3 ARGS` from the repository root: stdout; a failing run fails.
fn python(args: &[&str]) -> String {
    let out = Command::new("python3")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "python3 {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The generated files are what their generators write from the one
/// source each: the PrometheusRule from the rules file, the dashboards'
/// JSON and their ConfigMaps from `deploy/grafana/generate.py`. Then, with
/// the real tools: the PrometheusRule's groups pass the same `promtool`
/// unit tests as the rules file; a site's copy written with
/// `--runbook-base` passes `promtool check rules` with every `runbook_url`
/// under that base; `kubectl kustomize deploy/kubernetes/dashboards` builds
/// one ConfigMap per dashboard, labelled for Grafana's sidecar, whose JSON
/// is the dashboard's.
#[test]
fn generated_rules_and_dashboards_are_in_sync_and_load() {
    let _turn = tests::one_file_at_a_time(file!());
    python(&["deploy/prometheus/generate.py", "--check"]);
    python(&["deploy/grafana/generate.py", "--check"]);

    let dir = tests::fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-rules-sync"));
    // The PrometheusRule's spec, de-indented, is a rule file.
    let k8s =
        std::fs::read_to_string(repo().join("deploy/kubernetes/monitoring/prometheus-rule.yaml"))
            .expect("prometheus-rule.yaml");
    assert!(k8s.contains("\nkind: PrometheusRule\n"), "{k8s}");
    let spec = k8s.split_once("\nspec:\n").expect("spec").1;
    let groups: String = spec
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    std::fs::write(dir.join("faultline-rules.yaml"), groups).expect("write");
    std::fs::copy(
        repo().join("deploy/prometheus/faultline-rules.test.yaml"),
        dir.join("faultline-rules.test.yaml"),
    )
    .expect("copy");
    let base = "https://git.example.org/hpc/faultline/-/blob/v1/docs/runbooks";
    let site = python(&["deploy/prometheus/generate.py", "--runbook-base", base]);
    std::fs::write(dir.join("site.yaml"), &site).expect("write");
    let urls: Vec<&str> = site
        .lines()
        .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
        .collect();
    assert_eq!(urls.len(), alerts().len());
    for u in &urls {
        assert!(u.starts_with(&format!("\"{base}/")), "{u}");
    }
    if let Some(t) = promtool(&["test", "rules", "faultline-rules.test.yaml"], &dir) {
        assert!(t.contains("SUCCESS"), "{t}");
        promtool(&["check", "rules", "site.yaml"], &dir);
    }

    // The dashboards' ConfigMaps, through the real kustomize.
    let out = match Command::new("kubectl")
        .args(["kustomize"])
        .arg(repo().join("deploy/kubernetes/dashboards"))
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(!tests::in_ci(), "kubectl missing under CI: {e}");
            eprintln!("skipping: kubectl: {e} (scripts/setup.sh installs it)");
            return;
        }
    };
    let yaml = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<&str> = yaml.split("\n---\n").collect();
    let mut seen = BTreeSet::new();
    for d in &docs {
        assert!(d.contains("kind: ConfigMap"), "{d}");
        assert!(d.contains("    grafana_dashboard: \"1\"\n"), "{d}");
        // data:\n  <name>.json: |\n    <json, indented 4>
        let (key, body) = d
            .split_once("\ndata:\n  ")
            .and_then(|(_, r)| r.split_once(": |\n"))
            .expect("data.<name>.json block");
        let json: String = body
            .lines()
            .take_while(|l| l.starts_with("    ") || l.is_empty())
            .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
            .collect();
        let got: serde_json::Value = serde_json::from_str(&json).expect("dashboard JSON");
        let want: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(repo().join("deploy/grafana").join(key)).expect(key),
        )
        .expect("JSON");
        assert_eq!(got, want, "{key}");
        seen.insert(key.to_string());
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
}
