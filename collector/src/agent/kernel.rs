//! The probes' in-kernel counters (`STATS`) as Prometheus counters.
use collector_common::stat;

/// (metric, `probe` label, `STATS` slot) for every slot except the
/// ring-drain benchmark's, which the production object does not count.
pub const KERNEL_COUNTERS: &[(&str, &str, u32)] = &[
    (
        "faultline_probe_kernel_events_total",
        "exec",
        stat::EXEC_EVENTS,
    ),
    ("faultline_ring_lost_total", "exec", stat::EXEC_RING_FULL),
    (
        "faultline_probe_kernel_events_total",
        "block_issued",
        stat::BLOCK_ISSUED,
    ),
    (
        "faultline_probe_kernel_events_total",
        "block",
        stat::BLOCK_COMPLETED,
    ),
    (
        "faultline_ring_lost_total",
        "block_sampled",
        stat::BLOCK_RING_FULL,
    ),
    (
        "faultline_block_unmatched_total",
        "block",
        stat::BLOCK_UNMATCHED,
    ),
    (
        "faultline_block_partial_completions_total",
        "block",
        stat::BLOCK_PARTIAL,
    ),
    (
        "faultline_block_untimed_total",
        "block",
        stat::BLOCK_UNTIMED,
    ),
    (
        "faultline_probe_map_full_total",
        "block_inflight",
        stat::BLOCK_START_MAP_FULL,
    ),
    (
        "faultline_probe_map_full_total",
        "block_agg",
        stat::BLOCK_AGG_MAP_FULL,
    ),
    (
        "faultline_probe_kernel_events_total",
        "cuda",
        stat::CUDA_CALLS,
    ),
    (
        "faultline_probe_kernel_events_total",
        "cuda_events",
        stat::CUDA_EVENTS,
    ),
    (
        "faultline_probe_kernel_events_total",
        "cuda_names",
        stat::CUDA_NAMES,
    ),
    ("faultline_ring_lost_total", "cuda", stat::CUDA_RING_FULL),
    (
        "faultline_probe_rate_limited_total",
        "cuda",
        stat::CUDA_EVENTS_RATE_LIMITED,
    ),
    (
        "faultline_probe_map_full_total",
        "cuda_agg",
        stat::CUDA_AGG_MAP_FULL,
    ),
    (
        "faultline_cuda_unmatched_returns_total",
        "cuda",
        stat::CUDA_UNMATCHED_RETURN,
    ),
    (
        "faultline_probe_kernel_events_total",
        "verbs",
        stat::VERBS_WC,
    ),
    (
        "faultline_verbs_completions_undecoded_total",
        "verbs",
        stat::VERBS_WC_UNDECODED,
    ),
    (
        "faultline_probe_map_full_total",
        "verbs",
        stat::VERBS_MAP_FULL,
    ),
    (
        "faultline_probe_kernel_events_total",
        "nccl",
        stat::NCCL_CALLS,
    ),
    (
        "faultline_probe_map_full_total",
        "nccl",
        stat::NCCL_MAP_FULL,
    ),
    (
        "faultline_nccl_unmatched_returns_total",
        "nccl",
        stat::NCCL_UNMATCHED_RETURN,
    ),
];

/// Slots only the ring-drain benchmark's programs count.
pub const BENCH_ONLY: &[u32] = &[stat::BENCH_EVENTS, stat::BENCH_RING_FULL];

/// HELP for the families above.
pub fn describe() {
    use metrics::describe_counter as d;
    d!("faultline_probe_kernel_events_total", "Events counted in the kernel per probe (exec events, block issues and completions, CUDA calls other than launches, events and names, verbs completions)");
    d!(
        "faultline_ring_lost_total",
        "Events dropped in the kernel because a ring was full"
    );
    d!("faultline_block_unmatched_total", "Block completions without a start record (started before attach, or the in-flight map was full)");
    d!(
        "faultline_block_partial_completions_total",
        "Partial completions of timed block requests"
    );
    d!("faultline_block_untimed_total", "Block requests counted without a latency: the kernel did not time them (queue/iostats off) before the probes switched to their own start clock");
    d!(
        "faultline_probe_map_full_total",
        "Updates lost because an aggregation map was full"
    );
    d!(
        "faultline_probe_rate_limited_total",
        "Per-event stream records dropped by the rate limit"
    );
    d!(
        "faultline_nccl_unmatched_returns_total",
        "NCCL communicator-creation returns without an entry record (that communicator is not known)"
    );
    d!(
        "faultline_cuda_unmatched_returns_total",
        "CUDA return probes without an entry record"
    );
    d!("faultline_probe_recursion_misses_total", "Program runs the kernel skipped because the program was already running on that CPU (an interrupt hit its hook): those events are lost");
    d!(
        "faultline_verbs_completions_undecoded_total",
        "Work completions returned beyond the per-poll decode bound: counted, not decoded"
    );
}

/// In-kernel drop and event counters as Prometheus counters (absolute values).
pub fn export(k: &[u64; stat::COUNT as usize]) {
    for &(name, probe, slot) in KERNEL_COUNTERS {
        metrics::counter!(name, "probe" => probe).absolute(k[slot as usize]);
    }
}

/// The kernel's skipped runs per program (absolute values; programs that
/// never missed are left out, so healthy hosts export no series).
pub fn export_misses(misses: &[(String, u64)]) {
    for (program, n) in misses.iter().filter(|m| m.1 > 0) {
        metrics::counter!("faultline_probe_recursion_misses_total", "program" => program.clone())
            .absolute(*n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every drop and event the kernel counts is exported (VERBS_WC_UNDECODED
    /// and others were not), each once.
    #[test]
    fn every_kernel_counter_is_exported_once() {
        let mut slots: Vec<u32> = KERNEL_COUNTERS.iter().map(|c| c.2).collect();
        slots.extend_from_slice(BENCH_ONLY);
        slots.sort_unstable();
        assert_eq!(slots, (0..stat::COUNT).collect::<Vec<_>>());
        let mut series: Vec<(&str, &str)> = KERNEL_COUNTERS.iter().map(|c| (c.0, c.1)).collect();
        series.sort_unstable();
        series.dedup();
        assert_eq!(series.len(), KERNEL_COUNTERS.len());
    }
}
