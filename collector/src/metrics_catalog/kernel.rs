//! The probes' in-kernel counters (`STATS` slots, exported by
//! `agent::kernel`), declared once.
use proto::metric::Family;

pub const PROBE_KERNEL_EVENTS: Family = Family::counter(
    "faultline_probe_kernel_events_total",
    &["probe"],
    "Events counted in the kernel per probe (exec events, block issues and completions, CUDA calls other than launches, events and names, verbs completions)",
);
pub const RING_LOST: Family = Family::counter(
    "faultline_ring_lost_total",
    &["probe"],
    "Events dropped in the kernel because a ring was full",
);
pub const BLOCK_UNMATCHED: Family = Family::counter(
    "faultline_block_unmatched_total",
    &["probe"],
    "Block completions without a start record (started before attach, or the in-flight map was full)",
);
pub const BLOCK_PARTIAL_COMPLETIONS: Family = Family::counter(
    "faultline_block_partial_completions_total",
    &["probe"],
    "Partial completions of timed block requests",
);
pub const BLOCK_UNTIMED: Family = Family::counter(
    "faultline_block_untimed_total",
    &["probe"],
    "Block requests counted without a latency: the kernel did not time them (queue/iostats off) before the probes switched to their own start clock",
);
pub const PROBE_MAP_FULL: Family = Family::counter(
    "faultline_probe_map_full_total",
    &["probe"],
    "Updates lost because an aggregation map was full",
);
pub const PROBE_RATE_LIMITED: Family = Family::counter(
    "faultline_probe_rate_limited_total",
    &["probe"],
    "Per-event stream records dropped by the rate limit",
);
pub const NCCL_UNMATCHED_RETURNS: Family = Family::counter(
    "faultline_nccl_unmatched_returns_total",
    &["probe"],
    "NCCL communicator-creation returns without an entry record (that communicator is not known)",
);
pub const CUDA_UNMATCHED_RETURNS: Family = Family::counter(
    "faultline_cuda_unmatched_returns_total",
    &["probe"],
    "CUDA return probes without an entry record",
);
pub const PROBE_RECURSION_MISSES: Family = Family::counter(
    "faultline_probe_recursion_misses_total",
    &["program"],
    "Program runs the kernel skipped because the program was already running on that CPU (an interrupt hit its hook): those events are lost",
);
pub const VERBS_COMPLETIONS_UNDECODED: Family = Family::counter(
    "faultline_verbs_completions_undecoded_total",
    &["probe"],
    "Work completions returned beyond the per-poll decode bound: counted, not decoded",
);

/// The families above, for the catalog.
pub const KERNEL_FAMILIES: &[&Family] = &[
    &PROBE_KERNEL_EVENTS,
    &RING_LOST,
    &BLOCK_UNMATCHED,
    &BLOCK_PARTIAL_COMPLETIONS,
    &BLOCK_UNTIMED,
    &PROBE_MAP_FULL,
    &PROBE_RATE_LIMITED,
    &NCCL_UNMATCHED_RETURNS,
    &CUDA_UNMATCHED_RETURNS,
    &PROBE_RECURSION_MISSES,
    &VERBS_COMPLETIONS_UNDECODED,
];
