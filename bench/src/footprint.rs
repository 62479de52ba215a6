//! Collector footprint: CPU % of one core and RSS of the real collector binary
//! monitoring a host simulated with 8 GPUs (NVML stand-in), 8 HCA ports (fake
//! sysfs), block probes and idle CUDA probes (stand-in libcuda), at the
//! default 1 s window. Target: ≤ 1 % CPU, ≤ 64 MiB RSS.
use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context as _, Result};
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds to measure (after a 3 s warm-up).
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("faultline-collector");
    let ib = tests::FakeIb::new("footprint");
    for p in 0..8 {
        ib.active_port(&format!("mlx5_{p}"), 1);
    }
    let mut child = tests::KillOnDrop(
        Command::new(&bin)
            .args(["--quiet", "--metrics-addr", "127.0.0.1:0", "--no-verbs"])
            .arg("--cuda-library")
            .arg(tests::fake_libcuda())
            .arg("--nvml-library")
            .arg(tests::fake_nvml())
            .arg("--sysfs-root")
            .arg(ib.root())
            .env("FAKE_NVML_GPUS", "8")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?,
    );
    let pid = child.0.id();
    std::thread::sleep(Duration::from_secs(3));
    let c0 = crate::procstat::cpu_seconds(pid).context("collector exited early")?;
    let t0 = std::time::Instant::now();
    let mut rss_max = 0;
    while t0.elapsed().as_secs_f64() < a.seconds {
        std::thread::sleep(Duration::from_millis(500));
        rss_max = rss_max.max(crate::procstat::rss_bytes(pid).unwrap_or(0));
    }
    let c1 = crate::procstat::cpu_seconds(pid).context("collector exited")?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu_pct = 100.0 * (c1 - c0) / wall;
    let _ = child.0.kill();
    println!("collector footprint: 8 GPUs (NVML stand-in), 8 HCA ports (fake sysfs), block + idle CUDA probes, 1 s windows, {wall:.0} s");
    println!("| measure | value | target |");
    println!("|---|---|---|");
    println!("| CPU (% of one core) | {cpu_pct:.2} | ≤ 1 |");
    println!(
        "| peak RSS (MiB) | {:.1} | ≤ 64 |",
        rss_max as f64 / (1 << 20) as f64
    );
    let path = out_dir.join("footprint.json");
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({
            "benchmark": "collector_footprint", "seconds": wall, "cpu_percent_of_one_core": cpu_pct,
            "peak_rss_bytes": rss_max, "targets": {"cpu_percent": 1.0, "rss_mib": 64}
        }))?,
    )?;
    println!("wrote {}", path.display());
    Ok(())
}
