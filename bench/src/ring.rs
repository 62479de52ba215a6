//! Ring-buffer drain: records per second the collector's ring consumer
//! (AsyncFd + batch drain, one tokio worker) sustains from a synthetic eBPF
//! producer (64 records per `getppid()` on another thread), with the kernel's
//! own count of records written and lost. Target ≥ 2 M records/s, 0
//! unaccounted loss (written = consumed; ring-full losses are counted).
use std::{
    path::Path,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use collector::probes::{BenchProducer, BenchRecord};
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of production.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

pub fn run(a: &Args, out_dir: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (consumed, elapsed, written, lost, malformed) = rt.block_on(async {
        let (producer, mut ring) = BenchProducer::start(std::process::id())?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let secs = a.seconds;
        let t0 = Instant::now();
        let prod = std::thread::spawn(move || {
            while t0.elapsed().as_secs_f64() < secs {
                for _ in 0..64 {
                    // SAFETY: getppid has no preconditions.
                    unsafe { libc::getppid() };
                }
            }
            s2.store(true, Ordering::Relaxed);
        });
        let mut consumed = 0u64;
        let mut batch: Vec<BenchRecord> = Vec::with_capacity(4096);
        while !stop.load(Ordering::Relaxed) {
            if tokio::time::timeout(Duration::from_millis(100), ring.recv_batch(&mut batch))
                .await
                .is_ok()
            {
                consumed += batch.len() as u64;
                batch.clear();
            }
        }
        let _ = prod.join();
        ring.drain_now(&mut batch);
        consumed += batch.len() as u64;
        let elapsed = t0.elapsed().as_secs_f64();
        let (written, lost) = producer.counts()?;
        anyhow::Ok((consumed, elapsed, written, lost, ring.malformed()))
    })?;
    let rate = consumed as f64 / elapsed;
    let unaccounted = written as i64 - consumed as i64;
    println!("ring-buffer drain: synthetic eBPF producer (64 records × getppid), consumer on one tokio worker, {elapsed:.1} s");
    println!("| measure | value | target |");
    println!("|---|---|---|");
    println!("| records consumed per second | {rate:.0} | ≥ 2,000,000 |");
    println!("| written (kernel count) | {written} | |");
    println!("| consumed | {consumed} | |");
    println!("| lost to a full ring (counted) | {lost} | |");
    println!("| unaccounted (written − consumed) | {unaccounted} | 0 |");
    crate::report::write(
        &out_dir.join("ring.json"),
        json!({
            "benchmark": "ring_drain", "seconds": elapsed, "records_per_second": rate, "written": written,
            "consumed": consumed, "lost_ring_full": lost, "unaccounted": unaccounted, "malformed": malformed,
            "target_records_per_second": 2_000_000
        }),
        &crate::report::Failures::default(),
    )
}
