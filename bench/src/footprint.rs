//! Collector footprint: CPU % of one core and RSS of the real collector binary
//! monitoring a host simulated with 8 GPUs (NVML stand-in), 8 HCA ports (fake
//! sysfs), block probes and idle CUDA probes (stand-in libcuda), at the
//! default 1 s window. Target: ≤ 1 % CPU, ≤ 64 MiB RSS.
use std::{path::Path, process::Command, time::Duration};

use anyhow::Result;
use serde_json::json;

use crate::{collector_proc::Collector, report::Failures};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds to measure (after the warm-up windows).
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Windows the collector closes before the measurement starts.
    #[arg(long, default_value_t = 2)]
    warmup_windows: u64,
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let bin = crate::collector_proc::binary()?;
    let ib = tests::FakeIb::new("footprint");
    for p in 0..8 {
        ib.active_port(&format!("mlx5_{p}"), 1);
    }
    let mut cmd = Command::new(&bin);
    cmd.args(["--quiet", "--metrics-addr", "127.0.0.1:0", "--no-verbs"])
        .arg("--cuda-library")
        .arg(tests::fake_libcuda())
        .arg("--nvml-library")
        .arg(tests::fake_nvml())
        .arg("--sysfs-root")
        .arg(ib.root())
        .env("FAKE_NVML_GPUS", "8");
    let mut c = Collector::start(cmd, false)?;
    // Start-up (probe loading, NVML and sysfs discovery) is over once the
    // second window closed: measured from there.
    c.wait_windows(a.warmup_windows.max(1))?;
    let w0 = c.windows();
    let c0 = c.cpu_seconds()?;
    let t0 = std::time::Instant::now();
    let mut rss_max = 0;
    while t0.elapsed().as_secs_f64() < a.seconds {
        std::thread::sleep(Duration::from_millis(500));
        rss_max = rss_max.max(crate::procstat::rss_bytes(c.pid).unwrap_or(0));
    }
    let c1 = c.cpu_seconds()?;
    let wall = t0.elapsed().as_secs_f64();
    let windows = c.windows() - w0;
    let cpu_pct = 100.0 * (c1 - c0) / wall;
    let load = crate::procstat::load_average();
    println!("collector footprint: 8 GPUs (NVML stand-in), 8 HCA ports (fake sysfs), block + idle CUDA probes, 1 s windows, {wall:.0} s ({windows} windows), load average {load}");
    println!("| measure | value | target |");
    println!("|---|---|---|");
    println!("| CPU (% of one core) | {cpu_pct:.2} | ≤ 1 |");
    println!(
        "| peak RSS (MiB) | {:.1} | ≤ 64 |",
        rss_max as f64 / (1 << 20) as f64
    );
    let mut failures = Failures::default();
    if windows == 0 {
        failures.add(
            "windows",
            &anyhow::anyhow!("the collector closed no window while measured"),
        );
    }
    crate::report::write(
        &out_dir.join("footprint.json"),
        json!({
            "benchmark": "collector_footprint", "seconds": wall, "windows": windows,
            "load_average_at_start": load, "cpu_percent_of_one_core": cpu_pct,
            "peak_rss_bytes": rss_max, "targets": {"cpu_percent": 1.0, "rss_mib": 64}
        }),
        &failures,
    )?;
    failures.into_result()
}
