//! Correlator ingest with mTLS against plaintext, side by side in one run:
//! N collectors, each with its own connection (and, with mTLS, its own host
//! certificate from `faultline-correlator certs`), stream W windows of ~200
//! samples each to a fresh `faultline-correlator serve` process; rounds
//! alternate plaintext / mTLS. Reported per mode: connect time (handshakes),
//! streaming wall time, windows/s, correlator CPU per window; the ratio is
//! mTLS windows/s over plaintext windows/s (medians over the rounds).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result};
use proto::{client_tls::ClientAuth, v1::ingest_client::IngestClient};
use serde_json::json;

use crate::ingest::{window, SAMPLES_PER_WINDOW};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Collectors (one connection each).
    #[arg(long, default_value_t = 64)]
    collectors: usize,
    /// Windows per collector per round.
    #[arg(long, default_value_t = 300)]
    windows: u64,
    /// Rounds per mode (alternating).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Plaintext,
    Mtls,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plaintext => "plaintext (--insecure)",
            Mode::Mtls => "mTLS (rustls, ECDSA P-256)",
        }
    }
}

struct Round {
    connect_s: f64,
    wall_s: f64,
    cpu_s: f64,
}

fn host(node: usize) -> String {
    format!("n{node:04}")
}

fn serve(bin: &Path, pki: &Path, mode: Mode) -> Result<(tests::KillOnDrop, u16)> {
    let port = crate::wait::free_port()?;
    let mut c = Command::new(bin);
    c.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--max-windows-per-sec",
        "0",
    ]);
    match mode {
        Mode::Plaintext => {
            c.arg("--insecure");
        }
        Mode::Mtls => {
            c.arg("--tls-cert")
                .arg(pki.join("server.pem"))
                .arg("--tls-key")
                .arg(pki.join("server.key"))
                .arg("--client-ca")
                .arg(pki.join("ca.pem"));
        }
    }
    let child = c
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut k = tests::KillOnDrop(child);
    crate::wait::port(&mut k.0, port, "the correlator")?;
    Ok((k, port))
}

fn auth(pki: &Path, mode: Mode, node: usize) -> ClientAuth {
    match mode {
        Mode::Plaintext => ClientAuth::default(),
        Mode::Mtls => ClientAuth {
            tls_ca: Some(pki.join("ca.pem")),
            tls_cert: Some(pki.join(format!("{}.pem", host(node)))),
            tls_key: Some(pki.join(format!("{}.key", host(node)))),
            token_file: None,
        },
    }
}

fn round(
    rt: &tokio::runtime::Runtime,
    bin: &Path,
    pki: &Path,
    mode: Mode,
    a: &Args,
) -> Result<Round> {
    let (child, port) = serve(bin, pki, mode)?;
    let pid = child.0.id();
    let scheme = if mode == Mode::Mtls { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{port}");
    let windows = a.windows;
    rt.block_on(async {
        let c0 = crate::procstat::cpu_seconds(pid).unwrap_or(0.0);
        let t0 = Instant::now();
        let mut clients = Vec::with_capacity(a.collectors);
        for node in 0..a.collectors {
            let (ep, token) = auth(pki, mode, node).endpoint(&url)?;
            let chan = ep.connect().await.context("connect")?;
            clients.push(IngestClient::with_interceptor(chan, token));
        }
        let connect_s = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut tasks = Vec::new();
        for (node, mut c) in clients.into_iter().enumerate() {
            let ws: Vec<_> = (1..=windows).map(|s| window(node, s)).collect();
            tasks.push(tokio::spawn(async move {
                c.stream(tokio_stream::iter(ws)).await
            }));
        }
        for t in tasks {
            let s = t.await??.into_inner();
            anyhow::ensure!(
                s.accepted == windows,
                "only {} of {windows} windows accepted",
                s.accepted
            );
        }
        let wall_s = t1.elapsed().as_secs_f64();
        let cpu_s = crate::procstat::cpu_seconds(pid).unwrap_or(0.0) - c0;
        drop(child);
        anyhow::Ok(Round {
            connect_s,
            wall_s,
            cpu_s,
        })
    })
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let bin = std::env::current_exe()?.with_file_name("faultline-correlator");
    let pki: PathBuf =
        std::env::temp_dir().join(format!("faultline-bench-pki-{}", std::process::id()));
    let mut c = Command::new(&bin);
    c.args(["certs", "--out"]).arg(&pki);
    for n in 0..a.collectors {
        c.args(["--host", &host(n)]);
    }
    let out = c.output().context("faultline-correlator certs")?;
    anyhow::ensure!(out.status.success(), "certs failed: {out:?}");

    let mut plain = Vec::new();
    let mut tls = Vec::new();
    for _ in 0..a.rounds {
        plain.push(round(&rt, &bin, &pki, Mode::Plaintext, a)?);
        tls.push(round(&rt, &bin, &pki, Mode::Mtls, a)?);
    }
    let _ = std::fs::remove_dir_all(&pki);
    let total = a.collectors as u64 * a.windows;
    let summarize = |rs: &[Round]| {
        let wps: Vec<f64> = rs.iter().map(|r| total as f64 / r.wall_s).collect();
        let cpu: Vec<f64> = rs.iter().map(|r| r.cpu_s * 1e6 / total as f64).collect();
        let conn: Vec<f64> = rs.iter().map(|r| r.connect_s).collect();
        (
            crate::median(&conn),
            crate::median(&wps),
            crate::median(&cpu),
            wps,
        )
    };
    let (pc, pw, pcpu, pall) = summarize(&plain);
    let (tc, tw, tcpu, tall) = summarize(&tls);
    println!(
        "correlator ingest, mTLS vs plaintext, alternating rounds in one run: {} collectors × {} windows ({SAMPLES_PER_WINDOW} samples each), {} rounds per mode",
        a.collectors, a.windows, a.rounds
    );
    println!("| mode | connect s (all collectors) | windows/s (median) | samples/s | correlator CPU µs/window | windows/s per round |");
    println!("|---|---|---|---|---|---|");
    for (m, c, w, cpu, all) in [
        (Mode::Plaintext, pc, pw, pcpu, &pall),
        (Mode::Mtls, tc, tw, tcpu, &tall),
    ] {
        println!(
            "| {} | {c:.3} | {w:.0} | {:.0} | {cpu:.0} | {} |",
            m.name(),
            w * SAMPLES_PER_WINDOW as f64,
            all.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let ratio = tw / pw;
    println!(
        "mTLS / plaintext throughput: {ratio:.2} (target ≥ 0.80); CPU per window {:.2}×",
        tcpu / pcpu
    );
    crate::report::write(
        &out_dir.join("ingest_tls.json"),
        json!({
            "benchmark": "correlator_ingest_mtls_vs_plaintext",
            "collectors": a.collectors, "windows_per_collector": a.windows, "rounds": a.rounds,
            "samples_per_window": SAMPLES_PER_WINDOW,
            "plaintext": {"connect_seconds": pc, "windows_per_second": pw, "cpu_us_per_window": pcpu, "rounds_windows_per_second": pall},
            "mtls": {"connect_seconds": tc, "windows_per_second": tw, "cpu_us_per_window": tcpu, "rounds_windows_per_second": tall},
            "throughput_ratio": ratio, "cpu_ratio": tcpu / pcpu, "target_ratio": 0.8,
            "note": "one connection per collector in both modes; each mTLS collector presents its own host certificate; correlator CPU from /proc includes the handshakes",
        }),
        &crate::report::Failures::default(),
    )
}
