//! The collector's `/metrics` on a live run (real probes, CUDA, verbs, NVML
//! and InfiniBand stand-ins with extended, legacy and driver counters), and
//! the `/metrics` of the correlator it streams to, pass `promtool check
//! metrics` (Debian's prometheus package; every family has HELP and TYPE,
//! names, units and labels are well-formed) with no finding but dcgm-exporter's
//! own on its `DCGM_FI_*` names; no family carries Prometheus's `job` or
//! `instance` label (the workload's job is `hpc_job`); both serve
//! `faultline_build_info` and the standard `process_*` families. `--quiet`
//! prints one summary line per window and no per-device, kernel or port
//! lines (it printed them all before). `--no-ib-export` leaves the
//! InfiniBand families off `/metrics` while the ports still reach the
//! correlator.
use std::{
    io::Write as _,
    process::{Command, Stdio},
    sync::mpsc::Receiver,
    time::Duration,
};

/// The first line that `pred` accepts within 20 s (every line read is kept in `seen`).
fn wait_for(
    rx: &Receiver<String>,
    seen: &mut Vec<String>,
    pred: impl Fn(&str) -> bool,
    what: &str,
) -> String {
    loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => {
                seen.push(l.clone());
                if pred(&l) {
                    return l;
                }
            }
            Err(e) => panic!("collector never printed {what}: {e}; saw {seen:#?}"),
        }
    }
}

fn fake_ib() -> tests::FakeIb {
    let ib = tests::FakeIb::new("promtool");
    ib.active_port("mlx5_0", 1);
    ib.device_file("mlx5_0", "fw_ver", "20.31.1014");
    ib.device_file("mlx5_0", "board_id", "MT_0000000223");
    ib.device_file("mlx5_0", "hca_type", "MT4123");
    ib.counter("mlx5_0", 1, "port_rcv_packets", 6_825_908_347);
    ib.hw_counter("mlx5_0", 1, "lifespan", 10);
    ib.hw_counter("mlx5_0", 1, "out_of_sequence", 3);
    ib.hw_counter("mlx5_0", 1, "vendor_specific \"x\"", 1);
    ib.active_port("mlx4_0", 1);
    ib.write("mlx4_0", 1, "counters_ext/port_rcv_data_64", "12345678901");
    ib
}

/// A running `--quiet` collector with its console lines, the lines read so
/// far and its metrics address (its first window closed).
struct Live {
    child: tests::KillOnDrop,
    rx: Receiver<String>,
    seen: Vec<String>,
    addr: String,
}

/// Starts the collector on the CUDA and verbs stand-ins and `ib`'s sysfs
/// tree, with `extra` arguments and `envs`.
fn start_collector(
    window: &str,
    ib: &tests::FakeIb,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> Live {
    let mut child = tests::KillOnDrop(
        Command::new(tests::bin("faultline-collector"))
            .args(["--quiet", "--window", window, "--duration", "60"])
            .args(["--metrics-addr", "127.0.0.1:0", "--no-otlp"])
            // The verbs probes on the stand-in libibverbs + provider.
            .arg("--verbs-library")
            .arg(tests::fake_verbs())
            .arg("--verbs-provider")
            .arg(format!(
                "{}:fakeprov_poll_cq:fakeprov_post_send:fakeprov_post_recv",
                tests::fake_verbs().display()
            ))
            .arg("--cuda-library")
            .arg(tests::fake_libcuda())
            .arg("--sysfs-root")
            .arg(ib.root())
            .args(extra)
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the collector"),
    );
    let rx = tests::lines_of(&mut child.0);
    let mut seen = Vec::new();
    let addr = wait_for(
        &rx,
        &mut seen,
        |l| l.starts_with("metrics on http://"),
        "the metrics address",
    )
    .trim_start_matches("metrics on http://")
    .trim_end_matches("/metrics")
    .to_string();
    wait_for(
        &rx,
        &mut seen,
        |l| l.starts_with("window 1:"),
        "the first window",
    );
    Live {
        child,
        rx,
        seen,
        addr,
    }
}

#[test]
fn metrics_pass_promtool_and_quiet_prints_no_per_entity_lines() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("collector_metrics") {
        return;
    }
    if !have_promtool() {
        return;
    }
    let ib = fake_ib();
    let nvml = tests::fake_nvml();
    // A real Lustre client's OSC/MDC files (lustre_exporter's fixture).
    let lustre = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/lustre_exporter/proc/fs/lustre");
    // The switches of a real `ibnetdiscover --ports` output, polled through
    // a stand-in perfquery that prints infiniband_exporter's real output
    // for the GUIDs it has (ib-i1l2s01 has none: a failed poll).
    let fabric = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/infiniband_exporter");
    let perfquery = ib.root().join("perfquery");
    std::fs::write(
        &perfquery,
        format!(
            "#!/bin/sh\nf={}/perfquery/$4.out\n[ -f \"$f\" ] || {{ echo \"no GUID $4\" >&2; exit 1; }}\ncat \"$f\"\n",
            fabric.display()
        ),
    )
    .expect("write the stand-in perfquery");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&perfquery, std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let config = ib.root().join("collector.toml");
    std::fs::write(
        &config,
        format!(
            "[lustre]\nroots = [{:?}]\n\n[switches]\nenabled = true\ntopology = {:?}\nperfquery = {:?}\ninterval_s = 1\n",
            lustre.display().to_string(),
            fabric.join("ibnetdiscover/test.out").display().to_string(),
            perfquery.display().to_string(),
        ),
    )
    .expect("write the config");
    // The correlator it streams to, with history (its families too).
    let (port, mport) = (tests::stream::free_port(), tests::stream::free_port());
    let _correlator = tests::KillOnDrop(tests::stream::correlator_with(
        port,
        &ib.root().join("ingest.jsonl"),
        &[
            "--metrics-addr",
            &format!("127.0.0.1:{mport}"),
            "--history",
            ib.root().join("history.db").to_str().expect("utf-8 path"),
        ],
    ));
    let correlator = format!("http://127.0.0.1:{port}");
    let spool = ib.root().join("spool");
    let args = [
        "--nvml-library",
        nvml.to_str().expect("utf-8 path"),
        "--config",
        config.to_str().expect("utf-8 path"),
        "--correlator",
        &correlator,
        "--spool-dir",
        spool.to_str().expect("utf-8 path"),
    ];
    let Live {
        child: _child,
        rx,
        mut seen,
        addr,
    } = start_collector("0.3", &ib, &args, &[("FAKE_NVML_GPUS", "2")]);
    // Things a verbose console prints a line for: a CUDA process, a port
    // going down with errors.
    let out = Command::new(tests::cuda_workload())
        .arg(tests::fake_libcuda())
        .args(["device:1", "func:gemm_quiet", "launch:5:2,1,1:64,1,1:0"])
        .output()
        .expect("workload");
    assert!(out.status.success());
    // A verbs process that stays alive until the scrape (the series of
    // exited processes are pruned).
    let mut verbs = tests::KillOnDrop(
        Command::new(tests::verbs_workload())
            .arg(tests::fake_verbs())
            .args([
                "qp:77",
                "send:3:4:2:100",
                "wc:0:40:4096",
                "wc:5:2:0",
                "poll:16",
            ])
            .arg("wait")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("verbs workload"),
    );
    let verbs_rx = tests::lines_of(&mut verbs.0);
    let mut verbs_seen = Vec::new();
    wait_for(
        &verbs_rx,
        &mut verbs_seen,
        |l| l == "waiting",
        "verbs work done",
    );
    ib.counter("mlx5_0", 1, "symbol_error", 9);
    ib.write("mlx5_0", 1, "state", "1: DOWN");
    let mut windows = 0;
    while windows < 4 {
        let l = wait_for(&rx, &mut seen, |_| true, "a line");
        windows += usize::from(l.starts_with("window "));
    }
    // Every poll: two switches answer, one fails; ib-i1l1s01's uplink port
    // 1 is the one row (ports 10 and 11 are not in its output).
    let text = scrape_until(&addr, "a switch poll", |t| {
        value(t, "faultline_switch_polls_total{result=\"ok\"}").is_some_and(|v| v >= 2.0)
    });
    assert!(text.contains("faultline_switch_ports 1\n"), "{text}");
    assert!(
        value(&text, "faultline_switch_polls_total{result=\"failed\"}").is_some_and(|v| v >= 1.0),
        "{text}"
    );
    assert!(
        text.contains("faultline_infiniband_state_id{device=\"mlx5_0\",port=\"1\"} 1"),
        "{text}"
    );
    assert!(text.contains("faultline_cuda_"), "{text}");
    assert!(
        text.contains("# TYPE faultline_verbs_completions_total counter\n"),
        "{text}"
    );
    // The GPU families come from the same text writer as the others.
    assert!(
        text.contains(
            "# TYPE faultline_gpu_power_watts gauge\nfaultline_gpu_power_watts{gpu=\"0\",uuid=\""
        ),
        "{text}"
    );
    assert!(
        text.contains("faultline_gpu_throttle_reason{gpu=\"1\","),
        "{text}"
    );
    // The fixture's seven OSTs and one MDT, with their import state.
    assert!(text.contains("faultline_lustre_targets 8\n"), "{text}");
    assert!(
        text.contains("faultline_lustre_rpc_operations_total{fsname=\"lustrefs\",target=\"lustrefs-OST0000\",mountpoint=\"lustrefs-ffff88105db50000\",op=\"ost_write\"} 18210286\n"),
        "{text}"
    );
    // dcgm-exporter's own names (`[nvml] dcgm_compat`) draw promtool's
    // style lints — uppercase label names (`UUID`, `modelName`), counters
    // without `_total`, `COUNTER` in `DCGM_FI_DEV_PCIE_REPLAY_COUNTER` —
    // exactly as dcgm-exporter's output does; nothing else may be reported.
    assert!(
        text.contains("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"),
        "{text}"
    );
    let unexpected: Vec<String> = promtool_findings(&text)
        .into_iter()
        .filter(|l| {
            !(l.starts_with("DCGM_FI_")
                && (l.ends_with("label names should be written in 'snake_case' not 'camelCase'")
                    || l.ends_with("counter metrics should have \"_total\" suffix")
                    || l.ends_with("metric name should not include type 'counter'")))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "promtool check metrics, unexpected findings: {unexpected:#?}\n---\n{text}"
    );
    // Base units on the GPU families: the stand-in's clocks in hertz,
    // utilisation as a ratio.
    for s in tests::metrics::samples(&text) {
        if s.name.ends_with("_clock_hertz") {
            assert!(
                s.value >= 1e8 && s.value % 1e6 == 0.0,
                "{} {}",
                s.name,
                s.value
            );
        }
        if s.name.starts_with("faultline_gpu_") && s.name.ends_with("_ratio") {
            assert!((0.0..=1.0).contains(&s.value), "{} {}", s.name, s.value);
        }
    }
    assert!(text.contains("faultline_gpu_sm_clock_hertz{"), "{text}");
    assert!(text.contains("faultline_gpu_utilization_ratio{"), "{text}");
    assert_no_reserved_labels(&text);
    assert_self_telemetry(&text, "collector");
    // The correlator's page, once the collector's windows have reached it.
    let maddr = format!("127.0.0.1:{mport}");
    let ctext = scrape_until(&maddr, "windows at the correlator", |t| {
        value(t, "faultline_correlator_windows_total").is_some_and(|v| v >= 2.0)
    });
    let findings = promtool_findings(&ctext);
    assert!(
        findings.is_empty(),
        "promtool check metrics on the correlator: {findings:#?}\n---\n{ctext}"
    );
    assert_no_reserved_labels(&ctext);
    assert_self_telemetry(&ctext, "correlator");
    let detail: Vec<&String> = seen.iter().filter(|l| l.starts_with("  ")).collect();
    assert!(
        detail.is_empty(),
        "--quiet printed per-entity lines: {detail:#?}"
    );
}

fn scrape(addr: &str) -> String {
    let out = Command::new("curl")
        .args(["-sf", &format!("http://{addr}/metrics")])
        .output()
        .expect("curl");
    assert!(out.status.success(), "scrape of {addr} failed");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    // No series twice on the whole page (NCCL's included).
    tests::metrics::assert_unique_series(&text);
    text
}

/// The value of the sample line starting with `series` (name and labels).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Whether promtool runs here; outside CI a missing one skips the test with
/// a message, in CI it fails it.
fn have_promtool() -> bool {
    if Command::new("promtool").arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        !tests::in_ci(),
        "promtool missing: scripts/setup.sh installs Debian's prometheus package"
    );
    eprintln!("skipping: promtool not installed (scripts/setup.sh)");
    false
}

/// `promtool check metrics`'s findings on `text`, one per line (none: the
/// text passes).
fn promtool_findings(text: &str) -> Vec<String> {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let check = promtool.wait_with_output().expect("promtool runs");
    let out = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    let findings: Vec<String> = out
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert!(
        check.status.success() || !findings.is_empty(),
        "promtool failed without saying why: {}",
        check.status
    );
    findings
}

/// No series carries `job` or `instance`: Prometheus's labels (the scrape
/// job and target), which a series of its own would clash with.
fn assert_no_reserved_labels(text: &str) {
    let bad: Vec<String> = tests::metrics::samples(text)
        .filter(|s| {
            s.labels
                .iter()
                .any(|(k, _)| *k == "job" || *k == "instance")
        })
        .map(|s| format!("{} {:?}", s.name, s.labels))
        .collect();
    assert!(bad.is_empty(), "series with job or instance: {bad:#?}");
}

/// `faultline_build_info{version,revision,rustc} 1` and the standard
/// `process_*` families, with real values.
fn assert_self_telemetry(text: &str, who: &str) {
    let info: Vec<_> = tests::metrics::samples(text)
        .filter(|s| s.name == "faultline_build_info")
        .collect();
    assert_eq!(info.len(), 1, "{who}: one faultline_build_info\n{text}");
    let label = |k: &str| {
        info[0]
            .labels
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(label("version"), env!("CARGO_PKG_VERSION"), "{who}");
    // This checkout is a git repository: the revision is its commit.
    let rev = label("revision");
    assert!(
        rev.len() == 12 && rev.bytes().all(|b| b.is_ascii_hexdigit()),
        "{who}: revision {rev:?}"
    );
    assert!(
        label("rustc").starts_with("1."),
        "{who}: rustc {:?}",
        label("rustc")
    );
    assert_eq!(info[0].value, 1.0);
    let v = |n: &str| value(text, n).unwrap_or_else(|| panic!("{who}: no {n}\n{text}"));
    assert!(
        text.contains("# TYPE process_cpu_seconds_total counter\n"),
        "{who}"
    );
    assert!(v("process_cpu_seconds_total") >= 0.0);
    // A live process: tens of MiB resident, more virtual, some descriptors.
    assert!(v("process_resident_memory_bytes") > 1e6, "{who}");
    assert!(
        v("process_virtual_memory_bytes") >= v("process_resident_memory_bytes"),
        "{who}"
    );
    assert!(v("process_open_fds") >= 3.0, "{who}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let start = v("process_start_time_seconds");
    assert!(
        start <= now && start > now - 600.0,
        "{who}: started at {start}, now {now}"
    );
}

/// Scrapes every 100 ms until `pred` holds on the page (within 20 s).
fn scrape_until(addr: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(addr);
        if pred(&text) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never saw {what} on /metrics:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A job's CUDA and verbs counters are sums over its processes read from the
/// kernel maps, whose entries are pruned when a process exits. The exited
/// process's last counts stay in the series: the counters never go
/// backwards (Prometheus would read a reset and count the value again).
#[test]
fn a_jobs_counters_survive_its_process_exiting() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("collector_metrics") {
        return;
    }
    let ib = fake_ib();
    let Live {
        child: _child,
        rx,
        mut seen,
        addr,
    } = start_collector("0.2", &ib, &["--no-nvml"], &[]);

    let slurm = [("SLURM_JOB_ID", "4711"), ("SLURM_PROCID", "3")];
    let mut cuda = tests::KillOnDrop(
        Command::new(tests::cuda_workload())
            .arg(tests::fake_libcuda())
            .args(["device:1", "func:gemm", "launch:7:2,1,1:64,1,1:0", "wait"])
            .envs(slurm)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("cuda workload"),
    );
    let mut verbs = tests::KillOnDrop(
        Command::new(tests::verbs_workload())
            .arg(tests::fake_verbs())
            .args(["qp:78", "send:3:4:2:100", "wc:0:40:4096", "poll:16", "wait"])
            .envs(slurm)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("verbs workload"),
    );
    let launches = r#"faultline_cuda_kernel_launches_total{hpc_job="4711",rank="3",gpu="1"}"#;
    let wcs =
        r#"faultline_verbs_completions_total{hpc_job="4711",rank="3",status="IBV_WC_SUCCESS"}"#;
    let posted =
        r#"faultline_verbs_posted_work_requests_total{hpc_job="4711",rank="3",dir="send"}"#;
    scrape_until(&addr, "both processes' counts under their job", |t| {
        value(t, launches) == Some(7.0)
            && value(t, wcs) == Some(40.0)
            && value(t, posted) == Some(12.0)
    });
    // Both exit (a line on stdin ends the CUDA one's wait, EOF the verbs
    // one's); their map entries are pruned.
    cuda.0
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("wake the cuda workload");
    drop(verbs.0.stdin.take());
    assert!(cuda.0.wait().expect("cuda workload").success());
    assert!(verbs.0.wait().expect("verbs workload").success());
    let pruned = |t: &str, fam: &str| value(t, fam).unwrap_or(0.0) > 0.0;
    let text = scrape_until(&addr, "both processes' map entries pruned", |t| {
        pruned(t, "faultline_cuda_pruned_entries_total")
            && pruned(t, "faultline_verbs_pruned_entries_total")
    });
    assert_eq!(value(&text, launches), Some(7.0), "{text}");
    assert_eq!(value(&text, wcs), Some(40.0), "{text}");
    assert_eq!(value(&text, posted), Some(12.0), "{text}");
    // And in later windows too.
    let n = seen.len();
    let mut windows = 0;
    while windows < 3 {
        let l = wait_for(&rx, &mut seen, |_| true, "a line");
        windows += usize::from(l.starts_with("window "));
    }
    assert!(seen.len() > n);
    let text = scrape(&addr);
    assert_eq!(value(&text, launches), Some(7.0), "{text}");
    assert_eq!(value(&text, wcs), Some(40.0), "{text}");
    // Without the dcgm-exporter copies, promtool finds nothing at all on the
    // page of a collector with per-job series.
    assert_no_reserved_labels(&text);
    if have_promtool() {
        let findings = promtool_findings(&text);
        assert!(findings.is_empty(), "promtool: {findings:#?}\n---\n{text}");
    }
}

/// `--no-ib-export` (`[ib] export = false`, for nodes where node_exporter's
/// infiniband collector runs): no `faultline_infiniband_*` family on
/// `/metrics`, while the ports are still read and streamed to the
/// correlator (its ingest log has them, with their counters).
#[test]
fn ib_export_off_keeps_ports_off_metrics_but_streams_them() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("collector_metrics") {
        return;
    }
    let ib = fake_ib();
    let port = tests::stream::free_port();
    let record = ib.root().join("ingest.jsonl");
    let _correlator = tests::KillOnDrop(tests::stream::correlator(port, &record));
    let mut child = tests::KillOnDrop(
        tests::streaming_collector(
            "0.2",
            &format!("http://127.0.0.1:{port}"),
            &ib.root().join("spool"),
            ib.root(),
        )
        .arg("--no-ib-export")
        .spawn()
        .expect("start the collector"),
    );
    let rx = tests::lines_of(&mut child.0);
    let mut seen = Vec::new();
    let addr = wait_for(
        &rx,
        &mut seen,
        |l| l.starts_with("metrics on http://"),
        "the metrics address",
    )
    .trim_start_matches("metrics on http://")
    .trim_end_matches("/metrics")
    .to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(&record)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .flat_map(|w| w["ib_ports"].as_array().cloned().unwrap_or_default())
            .collect();
        if rows.len() >= 4 {
            break rows;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no InfiniBand ports reached the correlator: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let devices: std::collections::BTreeSet<&str> =
        rows.iter().filter_map(|r| r["hca"].as_str()).collect();
    assert!(
        devices.contains("mlx5_0") && devices.contains("mlx4_0"),
        "{rows:?}"
    );
    let text = scrape(&addr);
    assert!(text.contains("faultline_windows_sent_total"), "{text}");
    let ib_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("faultline_infiniband_"))
        .collect();
    assert!(
        ib_lines.is_empty(),
        "exported with --no-ib-export: {ib_lines:#?}"
    );
}
