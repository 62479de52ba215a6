//! The tables `faultline-bench discovery` prints.
use super::{attach::Attach, attach::SyncCost, Row, Summary};

fn sync_row(what: &str, c: &SyncCost) {
    println!(
        "| {what} | {:.3} ms ({:.3}–{:.3}) | {:.3} ms |",
        c.cpu_ms.median, c.cpu_ms.min, c.cpu_ms.max, c.wall_ms.median
    );
}

pub fn print(rows: &[Row], at: Option<&Attach>, s: &Summary, period_s: f64) {
    println!();
    println!("| scan | CPU per scan, median (min–max) | mean | wall, median | maps read per scan | CPU / today (paired) | % of a core at {period_s:.0} s |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.1} ms ({:.1}–{:.1}) | {:.1} ms | {:.1} ms | {:.0} | {:.3} | {:.3} % |",
            r.label,
            r.cpu_ms.median,
            r.cpu_ms.min,
            r.cpu_ms.max,
            r.cpu_ms.mean,
            r.wall_ms.median,
            r.maps_read_per_scan,
            r.cpu_over_today,
            r.pct_of_core
        );
    }
    if let Some(a) = at {
        println!();
        println!(
            "probes loaded (NCCL and CUDA discovery on /proc, {} NCCL libraries): {:.2} s wall, \
             {:.2} s CPU; CUDA copies attached by the first rescan: {}",
            a.nccl_libraries_at_load, a.load_wall_s, a.load_cpu_s, a.cuda_extra_after_first_sync
        );
        println!("| sync (real eBPF object) | CPU, median (min–max) | wall, median |");
        println!("|---|---|---|");
        sync_row("nothing changed: discover_with", &a.unchanged_discover);
        sync_row("nothing changed: nccl_sync", &a.unchanged_nccl_sync);
        sync_row("nothing changed: cuda_sync", &a.unchanged_cuda_sync);
        sync_row(
            "new job's libnccl: nccl_sync (attach)",
            &a.new_job_nccl_sync,
        );
        sync_row(
            "new job's libcuda: cuda_sync (attach)",
            &a.new_job_cuda_sync,
        );
        sync_row("job exited: nccl_sync (detach)", &a.exited_nccl_sync);
        sync_row("job exited: cuda_sync (detach)", &a.exited_cuda_sync);
        println!(
            "probes unloaded (every library's uprobes detached) in {:.1} s wall",
            a.unload_wall_s
        );
        if a.unexpected_changes > 0 {
            println!(
                "({} rescans saw other changes than expected)",
                a.unexpected_changes
            );
        }
    }
    println!();
    println!("| per rescan (scan + ld.so cache + sync) | CPU | µs per process | % of a core at {period_s:.0} s | / today |");
    println!("|---|---|---|---|---|");
    println!(
        "| today | {:.1} ms | {:.1} | {:.3} % | 1 |",
        s.today_ms, s.today_us_per_process, s.today_pct_of_core
    );
    println!(
        "| LibScan, processes young (first young_s after they start) | {:.1} ms | {:.1} | {:.3} % | {:.3} |",
        s.young_ms, s.young_us_per_process, s.young_pct_of_core, s.young_over_today
    );
    println!(
        "| **LibScan, steady state** | {:.1} ms | {:.1} | **{:.3} %** (target ≤ {:.0} %: {}) | {:.3} |",
        s.steady_ms,
        s.steady_us_per_process,
        s.steady_pct_of_core,
        s.target_steady_pct_of_core,
        if s.steady_met { "met" } else { "NOT met" },
        s.steady_over_today
    );
}
