//! HELP for every family the `metrics` recorder writes (the recorder
//! prints none without it, and `promtool check metrics` fails). The
//! text-writer families (`prom_text`) carry their own.

/// (family, is a gauge, help).
const FAMILIES: &[(&str, bool, &str)] = &[
    (
        "faultline_nccl_libraries_attached_late_total",
        false,
        "NCCL libraries found by a rescan after start (a container, venv or image layer that appeared) and attached",
    ),
    (
        "faultline_nccl_libraries_detached_total",
        false,
        "NCCL libraries found in processes that no process maps any more, detached",
    ),
    (
        "faultline_nccl_libraries_refused_total",
        false,
        "NCCL library files found but not attached: the most (64) are attached already",
    ),
    (
        "faultline_cuda_libraries_refused_total",
        false,
        "CUDA driver copies found after start but not attached: the most (8 beside the first) are attached already",
    ),
    (
        "faultline_library_scans_total",
        false,
        "Library rescans run (nccl.rescan_s): processes' maps through their own roots",
    ),
    (
        "faultline_library_scan_last_seconds",
        true,
        "Wall time of the latest library rescan, seconds",
    ),
    (
        "faultline_library_scan_untracked_total",
        false,
        "Processes not scanned for libraries: 65,536 are tracked already",
    ),
    (
        "faultline_connections_refused_total",
        false,
        "Connections closed at accept: a listener's connection cap or per-peer limit reached with every connection busy (listener, reason)",
    ),
    (
        "faultline_connections_closed_total",
        false,
        "Connections a listener closed: slow handshake, head or body, idle, displaced at a cap, client not reading (listener, reason)",
    ),
    (
        "faultline_nccl_pruned_entries_total",
        false,
        "NCCL map entries (and CUDA in-flight call records) of exited processes removed",
    ),
    (
        "faultline_nccl_exited_ranks_kept",
        true,
        "Ranks of exited processes whose NCCL series are kept now (nccl.retain_exited_s)",
    ),
    (
        "faultline_nccl_exited_ranks_folded_early_total",
        false,
        "Exited NCCL ranks folded into their job's totals before nccl.retain_exited_s: 4096 were kept",
    ),
    (
        "faultline_nccl_job_totals_evicted_total",
        false,
        "Jobs whose folded NCCL totals were dropped past nccl.max_job_totals (no rank left, least recently folded first)",
    ),
    (
        "faultline_nccl_series_collisions_total",
        false,
        "NCCL rank series left out because their labels would repeat another's (a guard: /metrics never has a series twice)",
    ),
    (
        "faultline_nccl_in_flight_scan_truncated_total",
        false,
        "Windows whose read of the CUDA probes' in-flight calls (NCCL rows' blocked_call) stopped at 16384 entries",
    ),
    (
        "faultline_verbs_pruned_entries_total",
        false,
        "Verbs map entries of exited processes removed",
    ),
    (
        "faultline_spool_quarantined_total",
        false,
        "Spool files that were empty, truncated or undecodable, moved to quarantine/, by reason",
    ),
    (
        "faultline_resume_inconsistent_total",
        false,
        "Resume answers claiming windows this collector never produced",
    ),
    (
        "faultline_exited_series_forgotten_total",
        false,
        "CUDA and verbs series of jobs with no live process forgotten (15 min after their last process exited, or over 4096 such jobs per source)",
    ),
    (
        "faultline_cuda_pruned_entries_total",
        false,
        "CUDA map entries of exited processes removed",
    ),
    (
        "faultline_cuda_launch_attached_fraction",
        true,
        "Share of each period the CUDA launch probes are attached (1 = exact counts; below 1 launch counts are scaled estimates: bounded-overhead mode)",
    ),
    (
        "faultline_cuda_launch_estimate_error_bound",
        true,
        "Estimated relative error of the sampled CUDA launch counts from the per-hit cost's uncertainty (0 while exact)",
    ),
    (
        "faultline_cuda_launch_counts_approximate",
        true,
        "1 when the sampled CUDA launch counts' estimated error is above 5 % (single-stepped launch entries): the counts are approximate",
    ),
    (
        "faultline_cuda_launch_hit_cost_seconds",
        true,
        "CPU cost of one launch-probe hit the overhead budget uses (measured at start or configured)",
    ),
    (
        "faultline_cuda_launch_toggles_total",
        false,
        "Attaches and detaches of the CUDA launch probes in bounded-overhead mode",
    ),
    (
        "faultline_record_errors_total",
        false,
        "Windows that could not be written to the record file (--record)",
    ),
    (
        "faultline_windows_dropped_total",
        false,
        "Windows lost before the correlator, by reason (spool_full, spool_write, queue_full, refused: refused for good by the correlator, clock_future: held aside as ahead of the correlator's clock and dropped)",
    ),
    (
        "faultline_windows_spooled_total",
        false,
        "Windows written to the spool",
    ),
    (
        "faultline_windows_sent_total",
        false,
        "Windows confirmed by the correlator",
    ),
    ("faultline_spool_windows", true, "Windows in the spool"),
    ("faultline_spool_bytes", true, "Bytes in the spool"),
    (
        "faultline_spool_max_bytes",
        true,
        "The spool's bound in bytes ([stream] spool_max_bytes); past it the oldest windows are dropped",
    ),
    (
        "faultline_spool_held_windows",
        true,
        "Spooled windows held aside: refused as ahead of the correlator's clock, retried on a backoff",
    ),
    (
        "faultline_spool_held_retries_total",
        false,
        "Retries of held-aside windows (one call each)",
    ),
    (
        "faultline_correlator_connected",
        true,
        "1 while a stream to the correlator is open",
    ),
    (
        "faultline_sysfs_read_errors_total",
        false,
        "sysfs files that could not be read or parsed, by file",
    ),
    (
        "faultline_switch_polls_total",
        false,
        "perfquery runs of the [switches] source, by result (ok, failed: exit status, not found or timed out)",
    ),
    (
        "faultline_switch_ports",
        true,
        "Switch ports in the latest [switches] poll",
    ),
    (
        "faultline_switch_ports_dropped_total",
        false,
        "Switch ports past switches.max_ports, not polled (per poll)",
    ),
    (
        "faultline_switch_malformed_lines_total",
        false,
        "perfquery output lines without their Name:....value form, skipped",
    ),
    (
        "faultline_rdma_async_events_total",
        false,
        "RDMA asynchronous events, by device and event",
    ),
    (
        "faultline_gpu_xid_unplaced_total",
        false,
        "XID events from a GPU NVML could not place (no index): reported against the node",
    ),
    (
        "faultline_nvml_event_registration_failures_total",
        false,
        "GPUs whose NVML event registration failed: no XID events from them",
    ),
    (
        "faultline_nvml_read_errors_total",
        false,
        "NVML reads that failed for reasons other than an unsupported field, by field",
    ),
    (
        "faultline_nvml_unsupported_fields_total",
        false,
        "NVML fields found unsupported (each logged once)",
    ),
    (
        "faultline_pod_resources_gpus",
        true,
        "NVIDIA devices the kubelet's last pod-resources answer allocates to containers",
    ),
    (
        "faultline_pod_resources_errors_total",
        false,
        "kubelet pod-resources asks that failed (connect or List)",
    ),
    (
        "faultline_ib_optional_files_missing_total",
        false,
        "InfiniBand ports found without an optional attribute (lid, link_layer, phys_state, rate), each port once, by file",
    ),
    (
        "faultline_metrics_gzip_errors_total",
        false,
        "/metrics responses that could not be gzip-compressed and went out uncompressed",
    ),
    (
        "faultline_probe_attached",
        true,
        "1 when the probe (tracepoint program or CUDA symbol) is attached",
    ),
    (
        "faultline_probe_enabled",
        true,
        "1 when the collector means to attach the probe; 0 when it is disabled by configuration or not needed on this kernel",
    ),
    (
        "faultline_probe_events_total",
        false,
        "Ring events received by userspace, by probe",
    ),
    (
        "faultline_ring_malformed_total",
        false,
        "Ring items userspace could not decode, by probe",
    ),
    (
        "faultline_otlp_accepted_points_total",
        false,
        "OTLP data points of known metric names aggregated, by transport",
    ),
    (
        "faultline_otlp_ignored_points_total",
        false,
        "OTLP data points of metric names that map to no signal, by transport",
    ),
    (
        "faultline_otlp_dropped_total",
        false,
        "OTLP data points dropped by a bound or as invalid, by reason",
    ),
    (
        "faultline_otlp_rejected_requests_total",
        false,
        "OTLP requests refused, by transport and reason",
    ),
    (
        "faultline_otlp_requests_total",
        false,
        "OTLP export requests decoded, by transport, encoding (protobuf, json) and compression (none, gzip)",
    ),
];

/// Registers the HELP of every recorder family.
pub fn describe() {
    for &(name, gauge, help) in FAMILIES {
        if gauge {
            metrics::describe_gauge!(name, help);
        } else {
            metrics::describe_counter!(name, help);
        }
    }
    super::kernel::describe();
    // Drop counters exist at zero from the start, so an alert on their
    // increase (deploy/prometheus) has a series to compare against.
    for reason in [
        "spool_full",
        "spool_write",
        "queue_full",
        "refused",
        "clock_future",
    ] {
        metrics::counter!("faultline_windows_dropped_total", "reason" => reason).increment(0);
    }
}
