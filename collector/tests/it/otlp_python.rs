//! End to end with the real Python OpenTelemetry SDK (`tests/otlp/workload.py`,
//! installed by `scripts/setup.sh` into `<target dir>/otlp-venv`, and its
//! OTLP/JSON exporter, `opentelemetry-exporter-otlp-json-http`, into
//! `<target dir>/otlp-json-venv`: it pins other versions of shared packages):
//! a training loop and a GenAI model server export to the receiver while the
//! test takes windows as the collector's window loop does; the windows must
//! add up to what the script says it recorded. Over gRPC and HTTP/protobuf,
//! plain and with `OTEL_EXPORTER_OTLP_COMPRESSION=gzip`, and over HTTP/JSON
//! plain and gzip; the receiver's request counters show each request's
//! encoding and compression.
//!
//! Without a venv its tests skip with a message, unless `CI` is set: then
//! they fail. `FAULTLINE_OTLP_VENV` and `FAULTLINE_OTLP_JSON_VENV` point at
//! other venvs.
#![cfg(feature = "otlp")]

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use collector::otlp::{self, OtlpSection, Receiver};
use otlp_counters as counters;
use proto::v1::{StepTime, WorkloadSample};

use crate::otlp_counters;

fn python() -> Option<PathBuf> {
    venv_python(
        "FAULTLINE_OTLP_VENV",
        "otlp-venv",
        "the Python OpenTelemetry SDK",
    )
}

fn json_python() -> Option<PathBuf> {
    venv_python(
        "FAULTLINE_OTLP_JSON_VENV",
        "otlp-json-venv",
        "the Python OpenTelemetry SDK's OTLP/JSON exporter",
    )
}

fn venv_python(var: &str, dir: &str, what: &str) -> Option<PathBuf> {
    let venv = std::env::var_os(var).map_or_else(
        || {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .parent()
                .expect("target dir")
                .join(dir)
        },
        PathBuf::from,
    );
    let py = venv.join("bin/python");
    if py.exists() {
        return Some(py);
    }
    let msg = format!(
        "the OTLP end-to-end test needs {what} in {}: run scripts/setup.sh (as root) with the same CARGO_TARGET_DIR",
        venv.display()
    );
    let ci = std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"));
    if ci {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

/// Runs the script against the receiver (with `env` set), taking a window
/// every 100 ms while it runs (if `windows`) and once after it exited;
/// returns its summary and every window's steps and workload.
async fn run(
    rx: &Receiver,
    py: &PathBuf,
    args: &[&str],
    env: &[(&str, &str)],
    windows: bool,
) -> (serde_json::Value, Vec<StepTime>, Vec<WorkloadSample>, usize) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/otlp/workload.py");
    let child = Command::new(py)
        .arg(script)
        .args(args)
        // Only what the test asks for (not the developer's shell).
        .env_remove("OTEL_EXPORTER_OTLP_COMPRESSION")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the Python workload");
    let mut done = tokio::task::spawn_blocking(move || child.wait_with_output());
    let (mut steps, mut work, mut nonempty) = (Vec::new(), Vec::new(), 0);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let out = loop {
        tokio::select! {
            r = &mut done => break r.expect("join").expect("waiting for the workload"),
            _ = tick.tick(), if windows => {
                let (s, w) = rx.shared.take_window(|_| None);
                nonempty += usize::from(!s.is_empty());
                steps.extend(s);
                work.extend(w);
            }
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "workload.py {args:?} failed: {stderr}"
    );
    // Every export succeeded: the SDK logs failures on stderr.
    assert!(!stderr.contains("Failed to export"), "{stderr}");
    let (s, w) = rx.shared.take_window(|_| None);
    nonempty += usize::from(!s.is_empty());
    steps.extend(s);
    work.extend(w);
    let summary = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("summary: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    (summary, steps, work, nonempty)
}

fn near(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

fn receiver() -> OtlpSection {
    OtlpSection {
        grpc_addr: "127.0.0.1:0".into(),
        http_addr: "127.0.0.1:0".into(),
        ..OtlpSection::default()
    }
}

/// The training loop (cumulative histograms, windows taken while it runs)
/// over `protocol` to `endpoint`: the windows add up to what it recorded.
async fn train(rx: &Receiver, py: &PathBuf, protocol: &str, endpoint: &str, env: &[(&str, &str)]) {
    let args = ["train", "--protocol", protocol, "--endpoint", endpoint];
    let (sum, steps, work, nonempty) = run(rx, py, &args, env, true).await;
    assert!(
        nonempty >= 2,
        "steps spread over several windows: {steps:?}"
    );
    assert!(
        steps.iter().all(|s| s.job == "4242" && s.rank == 3),
        "{steps:?}"
    );
    let count: u32 = steps.iter().map(|s| s.count).sum();
    assert_eq!(
        u64::from(count),
        sum["count"].as_u64().expect("a summary count")
    );
    let mean = steps
        .iter()
        .map(|s| s.seconds * f64::from(s.count))
        .sum::<f64>()
        / f64::from(count);
    assert!(
        near(mean, sum["mean"].as_f64().expect("a summary value"), 1e-9),
        "{mean} vs {sum}"
    );
    let max = steps.iter().map(|s| s.max_seconds).fold(0.0, f64::max);
    assert!(
        near(max, sum["max"].as_f64().expect("a summary value"), 1e-9),
        "{max} vs {sum}"
    );
    // Checkpoints: 1500 ms → 1.5 s each.
    let ck: Vec<_> = work
        .iter()
        .filter(|w| w.signal == "checkpoint_seconds")
        .collect();
    assert!(ck.iter().all(|w| w.job == "4242" && w.rank == 3), "{ck:?}");
    assert!(ck
        .iter()
        .all(|w| w.pid as u64 == sum["pid"].as_u64().expect("a summary count")));
    let n: u64 = ck.iter().map(|w| w.count).sum();
    assert_eq!(n, sum["checkpoints"].as_u64().expect("a summary count"));
    assert!(near(
        ck.iter().map(|w| w.sum).sum::<f64>(),
        1.5 * n as f64,
        1e-9
    ));
}

/// The model server (delta histograms, TTFT exponential) over `protocol`,
/// one window at the end: per model, what it recorded.
async fn serve(rx: &Receiver, py: &PathBuf, protocol: &str, endpoint: &str, env: &[(&str, &str)]) {
    let args = [
        "serve",
        "--protocol",
        protocol,
        "--endpoint",
        endpoint,
        "--steps",
        "60",
    ];
    let (sum, _, work, _) = run(rx, py, &args, env, false).await;
    for (model, m) in sum["models"].as_object().expect("the summary models") {
        let get = |signal: &str| {
            let v: Vec<_> = work
                .iter()
                .filter(|w| w.signal == signal && &w.model == model)
                .collect();
            assert_eq!(v.len(), 1, "{signal} {model}: {work:?}");
            v[0].clone()
        };
        let ttft = get("ttft_seconds");
        assert_eq!(
            (ttft.job.as_str(), ttft.rank, ttft.provider.as_str()),
            ("faultline-e2e-serve", -1, "vllm")
        );
        assert_eq!(
            ttft.count,
            m["ttft_count"].as_u64().expect("a summary count")
        );
        assert!(
            near(
                ttft.sum,
                m["ttft_sum"].as_f64().expect("a summary value"),
                1e-9
            ),
            "{ttft:?}"
        );
        // Exponential buckets: the median within a few per cent.
        assert!(
            near(
                ttft.p50,
                m["ttft_p50"].as_f64().expect("a summary value"),
                0.05
            ),
            "{ttft:?} {m}"
        );
        let req = get("request_seconds");
        assert!(
            near(
                req.sum,
                m["request_sum"].as_f64().expect("a summary value"),
                1e-9
            ),
            "{req:?}"
        );
        assert!(req.p50 > 0.0 && req.p99 >= req.p50, "{req:?}");
        let tok = get("tokens");
        assert!(
            near(
                tok.sum,
                m["tokens"].as_f64().expect("a summary value"),
                1e-12
            ),
            "{tok:?}"
        );
    }
}

/// Requests of `transport` since `before`, by (encoding, compression), and
/// the refused ones.
fn requests(before: &str, transport: &str) -> (Vec<(&'static str, &'static str, u64)>, u64) {
    let mut by = Vec::new();
    for e in ["protobuf", "json"] {
        for c in ["none", "gzip"] {
            let n = counters::since(
                before,
                "faultline_otlp_requests_total",
                &[
                    ("transport", transport),
                    ("encoding", e),
                    ("compression", c),
                ],
            );
            if n > 0 {
                by.push((e, c, n));
            }
        }
    }
    let refused = counters::since(
        before,
        "faultline_otlp_rejected_requests_total",
        &[("transport", transport)],
    );
    (by, refused)
}

/// Every request of the run since `before` was of `encoding` and
/// `compression` over `transport`, none refused.
fn only(before: &str, transport: &str, encoding: &str, compression: &str) {
    let (by, refused) = requests(before, transport);
    assert_eq!(refused, 0, "{transport}: requests refused");
    assert!(
        by.len() == 1 && by[0].0 == encoding && by[0].1 == compression && by[0].2 > 0,
        "{transport}: want only {encoding}/{compression}: {by:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_training_loop_and_model_server_over_grpc_and_http() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(py) = python() else { return };
    let _serial = counters::serial().await;
    let rx = otlp::start(&receiver()).await;
    let grpc = rx.grpc.clone().unwrap().unwrap().to_string();
    let http = format!("http://{}/v1/metrics", rx.http.clone().unwrap().unwrap());

    let before = counters::snapshot();
    train(&rx, &py, "grpc", &grpc, &[]).await;
    only(&before, "grpc", "protobuf", "none");
    let before = counters::snapshot();
    serve(&rx, &py, "http", &http, &[]).await;
    only(&before, "http", "protobuf", "none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_with_gzip_over_grpc_and_http() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(py) = python() else { return };
    let _serial = counters::serial().await;
    let rx = otlp::start(&receiver()).await;
    let grpc = rx.grpc.clone().unwrap().unwrap().to_string();
    let http = format!("http://{}/v1/metrics", rx.http.clone().unwrap().unwrap());
    let gzip = [("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")];

    let before = counters::snapshot();
    train(&rx, &py, "grpc", &grpc, &gzip).await;
    only(&before, "grpc", "protobuf", "gzip");
    let before = counters::snapshot();
    serve(&rx, &py, "http", &http, &gzip).await;
    only(&before, "http", "protobuf", "gzip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_http_json_plain_and_gzip() {
    let _turn = tests::one_file_at_a_time(file!());
    let Some(py) = json_python() else { return };
    let _serial = counters::serial().await;
    let rx = otlp::start(&receiver()).await;
    let http = format!("http://{}/v1/metrics", rx.http.clone().unwrap().unwrap());

    let before = counters::snapshot();
    train(&rx, &py, "http-json", &http, &[]).await;
    only(&before, "http", "json", "none");
    let before = counters::snapshot();
    serve(
        &rx,
        &py,
        "http-json",
        &http,
        &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
    )
    .await;
    only(&before, "http", "json", "gzip");
}
