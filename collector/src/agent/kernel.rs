//! The probes' in-kernel counters (`STATS`) as Prometheus counters.
use collector_common::stat;
use proto::metric::Family;

use crate::metrics_catalog::*;

/// (family, `probe` label, `STATS` slot) for every slot except the
/// ring-drain benchmark's, which the production object does not count.
pub const KERNEL_COUNTERS: &[(&Family, &str, u32)] = &[
    (&PROBE_KERNEL_EVENTS, "exec", stat::EXEC_EVENTS),
    (&RING_LOST, "exec", stat::EXEC_RING_FULL),
    (&PROBE_KERNEL_EVENTS, "block_issued", stat::BLOCK_ISSUED),
    (&PROBE_KERNEL_EVENTS, "block", stat::BLOCK_COMPLETED),
    (&RING_LOST, "block_sampled", stat::BLOCK_RING_FULL),
    (&BLOCK_UNMATCHED, "block", stat::BLOCK_UNMATCHED),
    (&BLOCK_PARTIAL_COMPLETIONS, "block", stat::BLOCK_PARTIAL),
    (&BLOCK_UNTIMED, "block", stat::BLOCK_UNTIMED),
    (
        &PROBE_MAP_FULL,
        "block_inflight",
        stat::BLOCK_START_MAP_FULL,
    ),
    (&PROBE_MAP_FULL, "block_agg", stat::BLOCK_AGG_MAP_FULL),
    (&PROBE_KERNEL_EVENTS, "cuda", stat::CUDA_CALLS),
    (&PROBE_KERNEL_EVENTS, "cuda_events", stat::CUDA_EVENTS),
    (&PROBE_KERNEL_EVENTS, "cuda_names", stat::CUDA_NAMES),
    (&RING_LOST, "cuda", stat::CUDA_RING_FULL),
    (&PROBE_RATE_LIMITED, "cuda", stat::CUDA_EVENTS_RATE_LIMITED),
    (&PROBE_MAP_FULL, "cuda_agg", stat::CUDA_AGG_MAP_FULL),
    (&CUDA_UNMATCHED_RETURNS, "cuda", stat::CUDA_UNMATCHED_RETURN),
    (&PROBE_KERNEL_EVENTS, "verbs", stat::VERBS_WC),
    (
        &VERBS_COMPLETIONS_UNDECODED,
        "verbs",
        stat::VERBS_WC_UNDECODED,
    ),
    (&PROBE_MAP_FULL, "verbs", stat::VERBS_MAP_FULL),
    (&PROBE_KERNEL_EVENTS, "nccl", stat::NCCL_CALLS),
    (&PROBE_MAP_FULL, "nccl", stat::NCCL_MAP_FULL),
    (&NCCL_UNMATCHED_RETURNS, "nccl", stat::NCCL_UNMATCHED_RETURN),
];

/// Slots only the ring-drain benchmark's programs count.
pub const BENCH_ONLY: &[u32] = &[stat::BENCH_EVENTS, stat::BENCH_RING_FULL];

/// In-kernel drop and event counters as Prometheus counters (absolute values).
pub fn export(k: &[u64; stat::COUNT as usize]) {
    for &(family, probe, slot) in KERNEL_COUNTERS {
        metrics::counter!(family.name, "probe" => probe).absolute(k[slot as usize]);
    }
}

/// The kernel's skipped runs per program (absolute values; programs that
/// never missed are left out, so healthy hosts export no series).
pub fn export_misses(misses: &[(String, u64)]) {
    for (program, n) in misses.iter().filter(|m| m.1 > 0) {
        metrics::counter!(PROBE_RECURSION_MISSES.name, "program" => program.clone()).absolute(*n);
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
        let mut series: Vec<(&str, &str)> =
            KERNEL_COUNTERS.iter().map(|c| (c.0.name, c.1)).collect();
        series.sort_unstable();
        series.dedup();
        assert_eq!(series.len(), KERNEL_COUNTERS.len());
    }
}
