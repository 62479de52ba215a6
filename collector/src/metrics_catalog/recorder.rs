//! The recorder families (`metrics::counter!`/`gauge!`) not yet beside
//! their family's code: the agent's own (spool, windows, probes, HTTP) and
//! some of the families' (library rescans, CUDA launch budget, NVML, OTLP,
//! switches), declared once. A family folder may take its part.
use proto::metric::Family;

pub const NCCL_LIBRARIES_ATTACHED_LATE: Family = Family::counter(
    "faultline_nccl_libraries_attached_late_total",
    &[],
    "NCCL libraries found by a rescan after start (a container, venv or image layer that appeared) and attached",
);
pub const NCCL_LIBRARIES_DETACHED: Family = Family::counter(
    "faultline_nccl_libraries_detached_total",
    &[],
    "NCCL libraries found in processes that no process maps any more, detached",
);
pub const NCCL_LIBRARIES_REFUSED: Family = Family::counter(
    "faultline_nccl_libraries_refused_total",
    &[],
    "NCCL library files found but not attached: the most (64) are attached already",
);
pub const CUDA_LIBRARIES_REFUSED: Family = Family::counter(
    "faultline_cuda_libraries_refused_total",
    &[],
    "CUDA driver copies found after start but not attached: the most (8 beside the first) are attached already",
);
pub const LIBRARY_SCANS: Family = Family::counter(
    "faultline_library_scans_total",
    &[],
    "Library rescans run (nccl.rescan_s): processes' maps through their own roots",
);
pub const LIBRARY_SCAN_LAST_SECONDS: Family = Family::gauge(
    "faultline_library_scan_last_seconds",
    &[],
    "Wall time of the latest library rescan, seconds",
);
pub const LIBRARY_SCAN_UNTRACKED: Family = Family::counter(
    "faultline_library_scan_untracked_total",
    &[],
    "Processes not scanned for libraries: 65,536 are tracked already",
);
pub const NCCL_PRUNED_ENTRIES: Family = Family::counter(
    "faultline_nccl_pruned_entries_total",
    &[],
    "NCCL map entries (and CUDA in-flight call records) of exited processes removed",
);
pub const NCCL_EXITED_RANKS_KEPT: Family = Family::gauge(
    "faultline_nccl_exited_ranks_kept",
    &[],
    "Ranks of exited processes whose NCCL series are kept now (nccl.retain_exited_s)",
);
pub const NCCL_EXITED_RANKS_FOLDED_EARLY: Family = Family::counter(
    "faultline_nccl_exited_ranks_folded_early_total",
    &[],
    "Exited NCCL ranks folded into their job's totals before nccl.retain_exited_s: 4096 were kept",
);
pub const NCCL_JOB_TOTALS_EVICTED: Family = Family::counter(
    "faultline_nccl_job_totals_evicted_total",
    &[],
    "Jobs whose folded NCCL totals were dropped past nccl.max_job_totals (no rank left, least recently folded first)",
);
pub const NCCL_SERIES_COLLISIONS: Family = Family::counter(
    "faultline_nccl_series_collisions_total",
    &[],
    "NCCL rank series left out because their labels would repeat another's (a guard: /metrics never has a series twice)",
);
pub const NCCL_IN_FLIGHT_SCAN_TRUNCATED: Family = Family::counter(
    "faultline_nccl_in_flight_scan_truncated_total",
    &[],
    "Windows whose read of the CUDA probes' in-flight calls (NCCL rows' blocked_call) stopped at 16384 entries",
);
pub const VERBS_PRUNED_ENTRIES: Family = Family::counter(
    "faultline_verbs_pruned_entries_total",
    &[],
    "Verbs map entries of exited processes removed",
);
pub const SPOOL_QUARANTINED: Family = Family::counter(
    "faultline_spool_quarantined_total",
    &["reason"],
    "Spool files that were empty, truncated or undecodable, moved to quarantine/, by reason",
);
pub const RESUME_INCONSISTENT: Family = Family::counter(
    "faultline_resume_inconsistent_total",
    &[],
    "Resume answers claiming windows this collector never produced",
);
pub const EXITED_SERIES_FORGOTTEN: Family = Family::counter(
    "faultline_exited_series_forgotten_total",
    &[],
    "CUDA and verbs series of jobs with no live process forgotten (15 min after their last process exited, or over 4096 such jobs per source)",
);
pub const CUDA_PRUNED_ENTRIES: Family = Family::counter(
    "faultline_cuda_pruned_entries_total",
    &[],
    "CUDA map entries of exited processes removed",
);
pub const CUDA_LAUNCH_ATTACHED_FRACTION: Family = Family::gauge(
    "faultline_cuda_launch_attached_fraction",
    &[],
    "Share of each period the CUDA launch probes are attached (1 = exact counts; below 1 launch counts are scaled estimates: bounded-overhead mode)",
);
pub const CUDA_LAUNCH_ESTIMATE_ERROR_BOUND: Family = Family::gauge(
    "faultline_cuda_launch_estimate_error_bound",
    &[],
    "Estimated relative error of the sampled CUDA launch counts from the per-hit cost's uncertainty (0 while exact)",
);
pub const CUDA_LAUNCH_COUNTS_APPROXIMATE: Family = Family::gauge(
    "faultline_cuda_launch_counts_approximate",
    &[],
    "1 when the sampled CUDA launch counts' estimated error is above 5 % (single-stepped launch entries): the counts are approximate",
);
pub const CUDA_LAUNCH_HIT_COST_SECONDS: Family = Family::gauge(
    "faultline_cuda_launch_hit_cost_seconds",
    &[],
    "CPU cost of one launch-probe hit the overhead budget uses (measured at start or configured)",
);
pub const CUDA_LAUNCH_TOGGLES: Family = Family::counter(
    "faultline_cuda_launch_toggles_total",
    &[],
    "Attaches and detaches of the CUDA launch probes in bounded-overhead mode",
);
pub const RECORD_ERRORS: Family = Family::counter(
    "faultline_record_errors_total",
    &[],
    "Windows that could not be written to the record file (--record)",
);
pub const WINDOWS_DROPPED: Family = Family::counter(
    "faultline_windows_dropped_total",
    &["reason"],
    "Windows lost before the correlator, by reason (spool_full, spool_write, queue_full, refused: refused for good by the correlator, clock_future: held aside as ahead of the correlator's clock and dropped)",
);
pub const WINDOWS_SPOOLED: Family = Family::counter(
    "faultline_windows_spooled_total",
    &[],
    "Windows written to the spool",
);
pub const WINDOWS_SENT: Family = Family::counter(
    "faultline_windows_sent_total",
    &[],
    "Windows confirmed by the correlator",
);
pub const SPOOL_WINDOWS: Family =
    Family::gauge("faultline_spool_windows", &[], "Windows in the spool");
pub const SPOOL_BYTES: Family = Family::gauge("faultline_spool_bytes", &[], "Bytes in the spool");
pub const SPOOL_MAX_BYTES: Family = Family::gauge(
    "faultline_spool_max_bytes",
    &[],
    "The spool's bound in bytes ([stream] spool_max_bytes); past it the oldest windows are dropped",
);
pub const SPOOL_HELD_WINDOWS: Family = Family::gauge(
    "faultline_spool_held_windows",
    &[],
    "Spooled windows held aside: refused as ahead of the correlator's clock, retried on a backoff",
);
pub const SPOOL_HELD_RETRIES: Family = Family::counter(
    "faultline_spool_held_retries_total",
    &[],
    "Retries of held-aside windows (one call each)",
);
pub const CORRELATOR_CONNECTED: Family = Family::gauge(
    "faultline_correlator_connected",
    &[],
    "1 while a stream to the correlator is open",
);
pub const SYSFS_READ_ERRORS: Family = Family::counter(
    "faultline_sysfs_read_errors_total",
    &["file"],
    "sysfs files that could not be read or parsed, by file",
);
pub const SWITCH_POLLS: Family = Family::counter(
    "faultline_switch_polls_total",
    &["result"],
    "perfquery runs of the [switches] source, by result (ok, failed: exit status, not found or timed out)",
);
pub const SWITCH_PORTS: Family = Family::gauge(
    "faultline_switch_ports",
    &[],
    "Switch ports in the latest [switches] poll",
);
pub const SWITCH_PORTS_DROPPED: Family = Family::counter(
    "faultline_switch_ports_dropped_total",
    &[],
    "Switch ports past switches.max_ports, not polled (per poll)",
);
pub const SWITCH_MALFORMED_LINES: Family = Family::counter(
    "faultline_switch_malformed_lines_total",
    &[],
    "perfquery output lines without their Name:....value form, skipped",
);
pub const RDMA_ASYNC_EVENTS: Family = Family::counter(
    "faultline_rdma_async_events_total",
    &["device", "event"],
    "RDMA asynchronous events, by device and event",
);
pub const GPU_XID_UNPLACED: Family = Family::counter(
    "faultline_gpu_xid_unplaced_total",
    &[],
    "XID events from a GPU NVML could not place (no index): reported against the node",
);
pub const NVML_EVENT_REGISTRATION_FAILURES: Family = Family::counter(
    "faultline_nvml_event_registration_failures_total",
    &[],
    "GPUs whose NVML event registration failed: no XID events from them",
);
pub const NVML_READ_ERRORS: Family = Family::counter(
    "faultline_nvml_read_errors_total",
    &["field"],
    "NVML reads that failed for reasons other than an unsupported field, by field",
);
pub const NVML_UNSUPPORTED_FIELDS: Family = Family::counter(
    "faultline_nvml_unsupported_fields_total",
    &[],
    "NVML fields found unsupported (each logged once)",
);
pub const POD_RESOURCES_GPUS: Family = Family::gauge(
    "faultline_pod_resources_gpus",
    &[],
    "NVIDIA devices the kubelet's last pod-resources answer allocates to containers",
);
pub const POD_RESOURCES_ERRORS: Family = Family::counter(
    "faultline_pod_resources_errors_total",
    &[],
    "kubelet pod-resources asks that failed (connect or List)",
);
pub const IB_OPTIONAL_FILES_MISSING: Family = Family::counter(
    "faultline_ib_optional_files_missing_total",
    &["file"],
    "InfiniBand ports found without an optional attribute (lid, link_layer, phys_state, rate), each port once, by file",
);
pub const METRICS_GZIP_ERRORS: Family = Family::counter(
    "faultline_metrics_gzip_errors_total",
    &[],
    "/metrics responses that could not be gzip-compressed and went out uncompressed",
);
pub const PROBE_ATTACHED: Family = Family::gauge(
    "faultline_probe_attached",
    &["probe"],
    "1 when the probe (tracepoint program or CUDA symbol) is attached",
);
pub const PROBE_ENABLED: Family = Family::gauge(
    "faultline_probe_enabled",
    &["probe"],
    "1 when the collector means to attach the probe; 0 when it is disabled by configuration or not needed on this kernel",
);
pub const PROBE_EVENTS: Family = Family::counter(
    "faultline_probe_events_total",
    &["probe"],
    "Ring events received by userspace, by probe",
);
pub const RING_MALFORMED: Family = Family::counter(
    "faultline_ring_malformed_total",
    &["probe"],
    "Ring items userspace could not decode, by probe",
);
pub const OTLP_ACCEPTED_POINTS: Family = Family::counter(
    "faultline_otlp_accepted_points_total",
    &["transport"],
    "OTLP data points of known metric names aggregated, by transport",
);
pub const OTLP_IGNORED_POINTS: Family = Family::counter(
    "faultline_otlp_ignored_points_total",
    &["transport"],
    "OTLP data points of metric names that map to no signal, by transport",
);
pub const OTLP_DROPPED: Family = Family::counter(
    "faultline_otlp_dropped_total",
    &["reason"],
    "OTLP data points dropped by a bound or as invalid, by reason",
);
pub const OTLP_REJECTED_REQUESTS: Family = Family::counter(
    "faultline_otlp_rejected_requests_total",
    &["transport", "reason"],
    "OTLP requests refused, by transport and reason",
);
pub const OTLP_REQUESTS: Family = Family::counter(
    "faultline_otlp_requests_total",
    &["transport", "encoding", "compression"],
    "OTLP export requests decoded, by transport, encoding (protobuf, json) and compression (none, gzip)",
);
pub const JOB_STEP_SERIES_DROPPED: Family = Family::counter(
    "faultline_job_step_series_dropped_total",
    &[],
    "OTLP step-time rows of a new job and rank left out: 1024 step series are kept already",
);

/// The families above, for the catalog.
pub const RECORDER_FAMILIES: &[&Family] = &[
    &NCCL_LIBRARIES_ATTACHED_LATE,
    &NCCL_LIBRARIES_DETACHED,
    &NCCL_LIBRARIES_REFUSED,
    &CUDA_LIBRARIES_REFUSED,
    &LIBRARY_SCANS,
    &LIBRARY_SCAN_LAST_SECONDS,
    &LIBRARY_SCAN_UNTRACKED,
    &NCCL_PRUNED_ENTRIES,
    &NCCL_EXITED_RANKS_KEPT,
    &NCCL_EXITED_RANKS_FOLDED_EARLY,
    &NCCL_JOB_TOTALS_EVICTED,
    &NCCL_SERIES_COLLISIONS,
    &NCCL_IN_FLIGHT_SCAN_TRUNCATED,
    &VERBS_PRUNED_ENTRIES,
    &SPOOL_QUARANTINED,
    &RESUME_INCONSISTENT,
    &EXITED_SERIES_FORGOTTEN,
    &CUDA_PRUNED_ENTRIES,
    &CUDA_LAUNCH_ATTACHED_FRACTION,
    &CUDA_LAUNCH_ESTIMATE_ERROR_BOUND,
    &CUDA_LAUNCH_COUNTS_APPROXIMATE,
    &CUDA_LAUNCH_HIT_COST_SECONDS,
    &CUDA_LAUNCH_TOGGLES,
    &RECORD_ERRORS,
    &WINDOWS_DROPPED,
    &WINDOWS_SPOOLED,
    &WINDOWS_SENT,
    &SPOOL_WINDOWS,
    &SPOOL_BYTES,
    &SPOOL_MAX_BYTES,
    &SPOOL_HELD_WINDOWS,
    &SPOOL_HELD_RETRIES,
    &CORRELATOR_CONNECTED,
    &SYSFS_READ_ERRORS,
    &SWITCH_POLLS,
    &SWITCH_PORTS,
    &SWITCH_PORTS_DROPPED,
    &SWITCH_MALFORMED_LINES,
    &RDMA_ASYNC_EVENTS,
    &GPU_XID_UNPLACED,
    &NVML_EVENT_REGISTRATION_FAILURES,
    &NVML_READ_ERRORS,
    &NVML_UNSUPPORTED_FIELDS,
    &POD_RESOURCES_GPUS,
    &POD_RESOURCES_ERRORS,
    &IB_OPTIONAL_FILES_MISSING,
    &METRICS_GZIP_ERRORS,
    &PROBE_ATTACHED,
    &PROBE_ENABLED,
    &PROBE_EVENTS,
    &RING_MALFORMED,
    &OTLP_ACCEPTED_POINTS,
    &OTLP_IGNORED_POINTS,
    &OTLP_DROPPED,
    &OTLP_REJECTED_REQUESTS,
    &OTLP_REQUESTS,
    &JOB_STEP_SERIES_DROPPED,
];
