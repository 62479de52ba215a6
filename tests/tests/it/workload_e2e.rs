//! The workload layer end to end, every part real: a stand-in training loop
//! (`tests/otlp/workload.py loop`, the Python OpenTelemetry SDK) reports its
//! measured step times over OTLP/gRPC to the real collector, which also reads
//! a (fake) InfiniBand sysfs tree and streams windows to the real correlator;
//! a subscriber prints the incidents.
//!
//! - The loop slows by half while the HCA port it runs next to takes errors
//!   at a BER far above the IBTA limit: one `ib_link_degraded` incident whose
//!   evidence carries both the link's BER and the job's step-time regression
//!   and whose affected jobs include the loop's Slurm job.
//! - The loop slows with a healthy fabric: a `job_slowdown` incident with the
//!   cross-layer runbook.
//!
//! A stand-in model server (`workload.py serve`, GenAI latency histograms over
//! OTLP/HTTP) reports to the same collector; its per-model time to first
//! token must be in the windows the collector records.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use tests::{bin, KillOnDrop};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// The venv `scripts/setup.sh` installs the Python OpenTelemetry SDK into;
/// `None` (with a loud message) when it is missing outside CI.
fn python() -> Option<PathBuf> {
    let target = bin("x")
        .parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .expect("target dir");
    let venv = std::env::var_os("FAULTLINE_OTLP_VENV")
        .map_or_else(|| target.join("otlp-venv"), PathBuf::from);
    let py = venv.join("bin/python");
    if py.exists() {
        return Some(py);
    }
    let msg = format!(
        "the workload end-to-end test needs the Python OpenTelemetry SDK in {}: run scripts/setup.sh",
        venv.display()
    );
    if tests::in_ci() {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

struct Run {
    ib: tests::FakeIb,
    record: PathBuf,
    otlp_http: u16,
    slow_file: PathBuf,
    spool: PathBuf,
    sub: mpsc::Receiver<String>,
    col: mpsc::Receiver<String>,
    _procs: Vec<KillOnDrop>,
}

impl Run {
    fn start(tag: &str, py: &PathBuf) -> Self {
        let ib = tests::FakeIb::new(tag);
        for hca in 0..4 {
            ib.active_port(&format!("mlx5_{hca}"), 1);
        }
        let dir = std::env::temp_dir().join(format!("faultline-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let slow_file = dir.join("slow");
        let _ = std::fs::remove_file(&slow_file);
        let spool = dir.join("spool");
        // Thresholds for a short test (the defaults want 20 s of a change).
        let cfg = dir.join("correlator.toml");
        std::fs::write(
            &cfg,
            "[detect.workload]\nmin_persist_s = 3.0\nexplain_grace_s = 3.0\nwarm_observations = 20\n",
        )
        .expect("config");
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let mut procs = Vec::new();
        procs.push(KillOnDrop(
            Command::new(bin("faultline-correlator"))
                .args([
                    "serve",
                    "--insecure",
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--config",
                ])
                .arg(&cfg)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("correlator"),
        ));
        let mut sub = tests::subscriber(&url, &["--json"]);
        let sub_lines = tests::lines_of(&mut sub);
        procs.push(KillOnDrop(sub));
        let otlp = free_port();
        let otlp_http = free_port();
        let record = dir.join("windows.jsonl");
        let _ = std::fs::remove_file(&record);
        let mut col = Command::new(bin("faultline-collector"))
            .args([
                "--window",
                "0.5",
                "--duration",
                "120",
                "--quiet",
                "--no-cuda",
                "--no-verbs",
                "--no-nvml",
                "--no-block",
                "--otlp-grpc-addr",
                &format!("127.0.0.1:{otlp}"),
                "--otlp-http-addr",
                &format!("127.0.0.1:{otlp_http}"),
                "--metrics-addr",
                "127.0.0.1:0",
                "--correlator",
                &url,
            ])
            .arg("--spool-dir")
            .arg(&spool)
            .arg("--sysfs-root")
            .arg(ib.root())
            .arg("--record")
            .arg(&record)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("collector");
        let col_lines = tests::lines_of(&mut col);
        procs.push(KillOnDrop(col));
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("otlp/workload.py");
        let mut lp = Command::new(py)
            .arg(script)
            .args([
                "loop",
                "--protocol",
                "grpc",
                "--endpoint",
                &format!("127.0.0.1:{otlp}"),
                "--job",
                "4711",
                "--rank",
                "0",
                "--step-s",
                "0.1",
                "--slow-file",
            ])
            .arg(&slow_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python loop");
        let loop_lines = tests::lines_of(&mut lp);
        procs.push(KillOnDrop(lp));
        assert_eq!(
            loop_lines.recv_timeout(Duration::from_secs(30)).as_deref(),
            Ok("loop started"),
            "the Python loop did not start"
        );
        Self {
            ib,
            record,
            otlp_http,
            slow_file,
            spool,
            sub: sub_lines,
            col: col_lines,
            _procs: procs,
        }
    }

    /// Waits for the collector's window `n`; returns the window line.
    fn window(&self, n: u64) -> String {
        tests::wait_window(&self.col, n)
    }

    /// Incident updates printed so far.
    fn updates(&self) -> Vec<serde_json::Value> {
        tests::updates(&self.sub)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.spool);
    }
}

#[test]
fn a_slowed_training_loop_joins_the_degrading_link_under_one_incident() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(py) = python() else { return };
    let r = Run::start("wl-link", &py);
    let served = serve_once(&r, &py);
    let mut all = Vec::new();
    let mut sym = 0;
    for w in 1..=80u64 {
        // 8 s healthy (the loop's own history), then the link and the loop
        // degrade together.
        if w == 16 {
            std::fs::write(&r.slow_file, "1.5").expect("slow");
        }
        if w >= 16 {
            sym += 40;
        }
        r.ib.traffic(w, sym);
        r.window(w + 1);
        all.extend(r.updates());
        let joined = all.iter().find(|u| {
            u["kind"] == "ib_link_degraded"
                && tests::json_strs(&u["evidence"])
                    .iter()
                    .any(|e| e.starts_with("explains job 4711 step time +"))
        });
        if let Some(u) = joined {
            let ev = tests::json_strs(&u["evidence"]);
            assert!(ev.iter().any(|e| e.starts_with("BER ")), "{ev:?}");
            assert!(
                tests::json_strs(&u["affected_jobs"]).contains(&"4711".to_string()),
                "{u}"
            );
            assert!(
                u["entity"]
                    .as_str()
                    .is_some_and(|e| e.ends_with("/mlx5_2/1")),
                "{u}"
            );
            let opened: Vec<&serde_json::Value> =
                all.iter().filter(|u| u["state"] == "opened").collect();
            assert_eq!(opened.len(), 1, "one incident for the fault: {opened:#?}");
            assert_eq!(opened[0]["incident_id"], u["incident_id"]);
            // The model server's requests are in the recorded windows, per model.
            let got = recorded_ttft(&r);
            for model in ["llama-3-8b", "mixtral-8x7b"] {
                assert_eq!(
                    got.get(model).copied(),
                    served["models"][model]["ttft_count"].as_u64(),
                    "{model}: {got:?}"
                );
            }
            return;
        }
    }
    panic!("no ib_link_degraded incident carried the job's regression: {all:#?}");
}

/// Runs the stand-in model server once against the collector's OTLP/HTTP
/// port; returns its summary (per model: requests, TTFT sum).
fn serve_once(r: &Run, py: &PathBuf) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("otlp/workload.py");
    let out = Command::new(py)
        .arg(script)
        .args([
            "serve",
            "--protocol",
            "http",
            "--endpoint",
            &format!("http://127.0.0.1:{}/v1/metrics", r.otlp_http),
            "--steps",
            "40",
        ])
        .output()
        .expect("model server");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("summary")
}

/// TTFT requests per model in the collector's recorded windows.
fn recorded_ttft(r: &Run) -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    for l in std::fs::read_to_string(&r.record)
        .unwrap_or_default()
        .lines()
    {
        let Ok(w) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        for s in w["workload"].as_array().into_iter().flatten() {
            if s["signal"] == "ttft_seconds" {
                *m.entry(s["model"].as_str().unwrap_or("").to_string())
                    .or_default() += s["count"].as_u64().unwrap_or(0);
            }
        }
    }
    m
}

#[test]
fn a_slowed_training_loop_on_a_healthy_fabric_is_a_job_slowdown() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(py) = python() else { return };
    let r = Run::start("wl-alone", &py);
    let mut all = Vec::new();
    for w in 1..=80u64 {
        if w == 16 {
            std::fs::write(&r.slow_file, "1.5").expect("slow");
        }
        r.ib.traffic(w, 0);
        r.window(w + 1);
        all.extend(r.updates());
        if let Some(u) = all.iter().find(|u| u["state"] == "opened") {
            assert_eq!(u["kind"], "job_slowdown", "{u}");
            assert_eq!(u["entity"], "4711", "{u}");
            let ev = tests::json_strs(&u["evidence"]);
            assert!(
                ev.iter().any(|e| e.starts_with("job 4711 step time +")),
                "{ev:?}"
            );
            let rb = u["runbook"].as_str().unwrap_or("");
            for layer in ["1 workload", "2 GPU", "3 fabric", "4 storage", "5 external"] {
                assert!(rb.contains(layer), "{layer}: {rb}");
            }
            return;
        }
    }
    panic!("no job_slowdown: {all:#?}");
}
