//! The GPU families faultline writes (`faultline_gpu_*`), declared once:
//! name, type, labels and HELP (the dcgm-exporter names: `super::super::dcgm`).
use proto::metric::Family;

// The GPU families' labels: the GPU, then its workload's (optional;
// `WorkloadLabels::pairs`), then the family's own.
const GPU: &[&str] = &[
    "gpu",
    "uuid",
    "pci_bus_id",
    "container",
    "namespace",
    "pod",
    "hpc_job",
    "rank",
];

pub const GPU_WORKLOADS: Family = Family::gauge(
    "faultline_gpu_workloads",
    GPU,
    "Distinct workloads (job/rank/pod) seen using the GPU in the last window; the series' workload labels name the first",
);
pub const GPU_LOST: Family = Family::gauge(
    "faultline_gpu_lost",
    GPU,
    "1 when NVML reports the GPU fell off the bus",
);
pub const GPU_NVLINK_DATA_BYTES: Family = Family::counter(
    "faultline_gpu_nvlink_data_bytes_total",
    GPU,
    "NVLink data transmitted plus received over all links since driver load",
);
pub const GPU_ENGINE_ACTIVE_RATIO: Family = Family::gauge(
    "faultline_gpu_engine_active_ratio",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "engine",
    ],
    "Ratio of the last window the engine was active (NVML GPM, Hopper and later)",
);
pub const GPU_ROW_REMAP_FAILURE: Family = Family::gauge(
    "faultline_gpu_row_remap_failure",
    GPU,
    "1 when a row remapping has failed on the GPU",
);
pub const GPU_ROW_REMAP_PENDING: Family = Family::gauge(
    "faultline_gpu_row_remap_pending",
    GPU,
    "1 when a row remapping waits for the next GPU reset",
);
pub const GPU_THROTTLE_REASON: Family = Family::gauge(
    "faultline_gpu_throttle_reason",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "reason",
    ],
    "1 when this clock event (throttle) reason is active",
);
pub const GPU_XID_EVENTS: Family = Family::counter(
    "faultline_gpu_xid_events_total",
    GPU,
    "XID events of the GPU, all codes (present from the start, at 0)",
);
pub const GPU_XID_ERRORS: Family = Family::counter(
    "faultline_gpu_xid_errors_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "xid",
    ],
    "XID errors reported by NVML events",
);

pub const GPU_POWER_WATTS: Family = Family::gauge("faultline_gpu_power_watts", GPU, "Power draw");
pub const GPU_POWER_LIMIT_WATTS: Family = Family::gauge(
    "faultline_gpu_power_limit_watts",
    GPU,
    "Enforced power limit",
);
pub const GPU_TEMPERATURE_CELSIUS: Family =
    Family::gauge("faultline_gpu_temperature_celsius", GPU, "GPU temperature");
pub const GPU_MEMORY_TEMPERATURE_CELSIUS: Family = Family::gauge(
    "faultline_gpu_memory_temperature_celsius",
    GPU,
    "GPU memory (HBM) temperature",
);
pub const GPU_SM_CLOCK_HERTZ: Family =
    Family::gauge("faultline_gpu_sm_clock_hertz", GPU, "SM clock (hertz)");
pub const GPU_SM_CLOCK_MAX_HERTZ: Family = Family::gauge(
    "faultline_gpu_sm_clock_max_hertz",
    GPU,
    "Maximum SM clock (hertz)",
);
pub const GPU_MEMORY_CLOCK_HERTZ: Family = Family::gauge(
    "faultline_gpu_memory_clock_hertz",
    GPU,
    "Memory clock (hertz)",
);
pub const GPU_MEMORY_CLOCK_MAX_HERTZ: Family = Family::gauge(
    "faultline_gpu_memory_clock_max_hertz",
    GPU,
    "Maximum memory clock (hertz)",
);
pub const GPU_UTILIZATION_RATIO: Family = Family::gauge(
    "faultline_gpu_utilization_ratio",
    GPU,
    "Ratio of the sample period a kernel was running on the GPU (0-1)",
);
pub const GPU_MEMORY_UTILIZATION_RATIO: Family = Family::gauge(
    "faultline_gpu_memory_utilization_ratio",
    GPU,
    "Ratio of the sample period device memory was read or written (0-1)",
);
pub const GPU_MEMORY_USED_BYTES: Family = Family::gauge(
    "faultline_gpu_memory_used_bytes",
    GPU,
    "Framebuffer memory allocated, without the driver's reserved memory",
);
pub const GPU_MEMORY_RESERVED_BYTES: Family = Family::gauge(
    "faultline_gpu_memory_reserved_bytes",
    GPU,
    "Framebuffer memory reserved by the driver and firmware",
);
pub const GPU_MEMORY_TOTAL_BYTES: Family = Family::gauge(
    "faultline_gpu_memory_total_bytes",
    GPU,
    "Framebuffer memory total",
);
pub const GPU_ECC_SBE_VOLATILE: Family = Family::counter(
    "faultline_gpu_ecc_sbe_volatile_total",
    GPU,
    "Volatile single-bit (corrected) ECC errors",
);
pub const GPU_ECC_DBE_VOLATILE: Family = Family::counter(
    "faultline_gpu_ecc_dbe_volatile_total",
    GPU,
    "Volatile double-bit (uncorrected) ECC errors",
);
pub const GPU_PCIE_REPLAY: Family = Family::counter(
    "faultline_gpu_pcie_replay_total",
    GPU,
    "PCIe replay counter",
);
pub const GPU_PCIE_TX_BYTES_PER_SECOND: Family = Family::gauge(
    "faultline_gpu_pcie_tx_bytes_per_second",
    GPU,
    "PCIe transmit throughput",
);
pub const GPU_PCIE_RX_BYTES_PER_SECOND: Family = Family::gauge(
    "faultline_gpu_pcie_rx_bytes_per_second",
    GPU,
    "PCIe receive throughput",
);
pub const GPU_ENERGY_JOULES: Family = Family::counter(
    "faultline_gpu_energy_joules_total",
    GPU,
    "Energy consumed since driver load",
);
pub const GPU_NVLINK_REPLAY_ERRORS: Family = Family::counter(
    "faultline_gpu_nvlink_replay_errors_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "link",
    ],
    "NVLink data-link replay errors, per link",
);
pub const GPU_NVLINK_RECOVERY_ERRORS: Family = Family::counter(
    "faultline_gpu_nvlink_recovery_errors_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "link",
    ],
    "NVLink data-link recovery errors, per link",
);
pub const GPU_NVLINK_CRC_FLIT_ERRORS: Family = Family::counter(
    "faultline_gpu_nvlink_crc_flit_errors_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "link",
    ],
    "NVLink flow-control (flit) CRC errors, per link",
);
pub const GPU_NVLINK_CRC_DATA_ERRORS: Family = Family::counter(
    "faultline_gpu_nvlink_crc_data_errors_total",
    &[
        "gpu",
        "uuid",
        "pci_bus_id",
        "container",
        "namespace",
        "pod",
        "hpc_job",
        "rank",
        "link",
    ],
    "NVLink data CRC errors, per link",
);
pub const GPU_REMAPPED_ROWS_CORRECTABLE: Family = Family::counter(
    "faultline_gpu_remapped_rows_correctable_total",
    GPU,
    "Rows remapped for correctable ECC errors",
);
pub const GPU_REMAPPED_ROWS_UNCORRECTABLE: Family = Family::counter(
    "faultline_gpu_remapped_rows_uncorrectable_total",
    GPU,
    "Rows remapped for uncorrectable ECC errors",
);
pub const GPU_ENCODER_UTILIZATION_RATIO: Family = Family::gauge(
    "faultline_gpu_encoder_utilization_ratio",
    GPU,
    "Video encoder utilisation (0-1)",
);
pub const GPU_DECODER_UTILIZATION_RATIO: Family = Family::gauge(
    "faultline_gpu_decoder_utilization_ratio",
    GPU,
    "Video decoder utilisation (0-1)",
);

// The job families the GPU source writes beside the GPU series
// (`nvml/source.rs`, from the job files and the CUDA processes).

pub const JOB_HCA_INFO: Family = Family::gauge(
    "faultline_job_hca_info",
    &["hpc_job", "device"],
    "1 for each HCA a job uses (job files, NCCL_IB_HCA of its processes)",
);
pub const JOB_FILES_UNREAD: Family = Family::gauge(
    "faultline_job_files_unread",
    &[],
    "Job files in job_dir that could not be read or named no job, dcgm-exporter mapping files in hpc_job_mapping_dir that could not be read, and files of either over its 1024-file bound",
);

/// The families above, for `crate::agent::describe::all`.
pub const FAMILIES: &[&Family] = &[
    &JOB_HCA_INFO,
    &JOB_FILES_UNREAD,
    &GPU_WORKLOADS,
    &GPU_LOST,
    &GPU_NVLINK_DATA_BYTES,
    &GPU_ENGINE_ACTIVE_RATIO,
    &GPU_ROW_REMAP_FAILURE,
    &GPU_ROW_REMAP_PENDING,
    &GPU_THROTTLE_REASON,
    &GPU_XID_EVENTS,
    &GPU_XID_ERRORS,
    &GPU_POWER_WATTS,
    &GPU_POWER_LIMIT_WATTS,
    &GPU_TEMPERATURE_CELSIUS,
    &GPU_MEMORY_TEMPERATURE_CELSIUS,
    &GPU_SM_CLOCK_HERTZ,
    &GPU_SM_CLOCK_MAX_HERTZ,
    &GPU_MEMORY_CLOCK_HERTZ,
    &GPU_MEMORY_CLOCK_MAX_HERTZ,
    &GPU_UTILIZATION_RATIO,
    &GPU_MEMORY_UTILIZATION_RATIO,
    &GPU_MEMORY_USED_BYTES,
    &GPU_MEMORY_RESERVED_BYTES,
    &GPU_MEMORY_TOTAL_BYTES,
    &GPU_ECC_SBE_VOLATILE,
    &GPU_ECC_DBE_VOLATILE,
    &GPU_PCIE_REPLAY,
    &GPU_PCIE_TX_BYTES_PER_SECOND,
    &GPU_PCIE_RX_BYTES_PER_SECOND,
    &GPU_ENERGY_JOULES,
    &GPU_NVLINK_REPLAY_ERRORS,
    &GPU_NVLINK_RECOVERY_ERRORS,
    &GPU_NVLINK_CRC_FLIT_ERRORS,
    &GPU_NVLINK_CRC_DATA_ERRORS,
    &GPU_REMAPPED_ROWS_CORRECTABLE,
    &GPU_REMAPPED_ROWS_UNCORRECTABLE,
    &GPU_ENCODER_UTILIZATION_RATIO,
    &GPU_DECODER_UTILIZATION_RATIO,
];
