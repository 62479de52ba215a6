//! NVML enrichment through nvml-wrapper: per-GPU samples every window
//! (power, temperatures, clocks, throttle reasons, utilisation, memory, ECC,
//! PCIe, NVLink errors and bandwidth, energy, GPM profiling metrics), XID and
//! ECC events from NVML's event API in a dedicated blocking thread, and the
//! joins that put GPU state next to the CUDA probe data (device ordinal →
//! UUID; process → GPUs from its maps). The family's source ([`source`]:
//! GPU rows ([`wire`]), lost-GPU and XID events, the GPU families with
//! workload labels, the kubelet's allocations from [`podresources`]), its
//! `/metrics` families (`prom`, `dcgm`) and its `[nvml]` section.
use std::{
    collections::BTreeSet,
    fmt::Write as _,
    path::{Path, PathBuf},
    time::SystemTime,
};

use nvml_wrapper::{error::NvmlError, Nvml};

pub use gpm::GpmMetrics;
pub use nvlink::{NvLinkCounter, NvLinkErrors};

/// Default library name (the system's, through the dynamic loader).
pub const DEFAULT_LIB: &str = "libnvidia-ml.so.1";

#[derive(Debug, thiserror::Error)]
pub enum NvmlSourceError {
    #[error("NVML inactive: cannot load {lib} ({reason}); GPU enrichment off (set nvml.library if the driver is elsewhere)")]
    Load { lib: String, reason: String },
    #[error("NVML inactive: {0}")]
    Query(String),
}

/// Static identity of one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub minor: Option<u32>,
}

/// One window's reading of one GPU; `None` for fields the GPU does not
/// support (logged once) or that failed this time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub lost: bool,
    pub power_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub temp_c: Option<u32>,
    pub memory_temp_c: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub sm_clock_max_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    pub mem_clock_max_mhz: Option<u32>,
    /// Raw clock event (throttle) reasons mask.
    pub throttle: Option<u64>,
    pub util_gpu_pct: Option<u32>,
    pub util_mem_pct: Option<u32>,
    /// Framebuffer memory allocated, without the driver's reserved part
    /// (`nvmlDeviceGetMemoryInfo_v2`'s `used`, as DCGM reports it).
    pub mem_used_bytes: Option<u64>,
    /// Framebuffer memory the driver and firmware reserve.
    pub mem_reserved_bytes: Option<u64>,
    /// Framebuffer memory free: total − reserved − used.
    pub mem_free_bytes: Option<u64>,
    pub mem_total_bytes: Option<u64>,
    pub ecc_sbe_volatile: Option<u64>,
    pub ecc_dbe_volatile: Option<u64>,
    pub pcie_replay: Option<u64>,
    pub pcie_tx_bytes_per_sec: Option<u64>,
    pub pcie_rx_bytes_per_sec: Option<u64>,
    /// NVLink data-link error counters per link; links past the first one
    /// NVML refuses are not queried; empty without NVLink.
    pub nvlink: Vec<NvLinkErrors>,
    /// NVLink data bandwidth over all links as DCGM reports it
    /// (`DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`: KiB/s ÷ 1000, 0 on the first
    /// reading).
    pub nvlink_bandwidth: Option<u64>,
    /// NVLink data transmitted plus received over all links since driver
    /// load, KiB.
    pub nvlink_data_kib: Option<u64>,
    /// GPM profiling metrics since the previous window (GPUs with GPM,
    /// from their second window on).
    pub prof: Option<GpmMetrics>,
    pub energy_mj: Option<u64>,
    pub enc_util_pct: Option<u32>,
    pub dec_util_pct: Option<u32>,
    /// Rows remapped for correctable / uncorrectable errors (Ampere and later).
    pub remapped_rows_corr: Option<u64>,
    pub remapped_rows_unc: Option<u64>,
    /// A row remapping waiting for the next GPU reset.
    pub remap_pending: Option<bool>,
    /// 1 when a row remapping failed in the past.
    pub remap_failure: Option<u64>,
}

/// NVLink links a GPU can have (`NVML_NVLINK_MAX_LINKS`).
pub const NVLINK_MAX_LINKS: u32 = 18;

/// Where GPU drivers put `libnvidia-ml.so.1` besides the loader's search
/// path: the GPU Operator's containerised driver (`/run/nvidia/driver`),
/// the host's library directories mounted under `/host` in the collector's
/// pod, and the NVIDIA container toolkit's directory.
pub const USUAL_PATHS: &[&str] = &[
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1",
    "/host/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/host/usr/lib64/libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
];

/// Named clock event (throttle) reasons, in NVML's bit order.
pub const THROTTLE_FLAGS: &[(u64, &str)] = &[
    (0x1, "idle"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
];

/// Names of the reasons set in `mask`.
pub fn throttle_names(mask: u64) -> Vec<&'static str> {
    THROTTLE_FLAGS
        .iter()
        .filter(|(b, _)| mask & b != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// Short meaning of common XID codes (NVIDIA's XID catalogue).
pub fn xid_meaning(code: u64) -> &'static str {
    match code {
        13 => "graphics engine exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "preemptive cleanup after a previous error",
        48 => "double-bit ECC error",
        61 | 62 => "internal micro-controller halt",
        63 => "ECC page retirement or row remapping recorded",
        64 => "ECC page retirement or row remapping failed",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        119 | 120 => "GSP error or timeout",
        _ => "see NVIDIA's XID catalogue",
    }
}

/// A discrete GPU event for the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuEventKind {
    Xid {
        code: u64,
        meaning: &'static str,
    },
    DoubleBitEcc,
    SingleBitEcc,
    /// The GPU fell off the bus (`NVML_ERROR_GPU_IS_LOST`).
    Lost,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuEvent {
    /// The GPU's index; `None` when NVML could not place the event's device.
    pub index: Option<u32>,
    pub uuid: String,
    pub at: SystemTime,
    pub kind: GpuEventKind,
}

/// The per-window sampler.
pub struct NvmlSource {
    nvml: Nvml,
    lib: PathBuf,
    gpus: Vec<GpuInfo>,
    /// (gpu, field) found unsupported: not queried again.
    unsupported: BTreeSet<(u32, &'static str)>,
    lost: BTreeSet<u32>,
    /// Newest per-process utilisation timestamp seen per GPU (µs).
    util_seen: std::collections::BTreeMap<u32, u64>,
    driver_version: String,
    /// The previous NVLink data reading per GPU, for the bandwidth.
    nvlink_prev: std::collections::BTreeMap<u32, nvlink::DataReading>,
    /// The previous GPM sample per GPU.
    gpm: gpm::GpmState,
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        // The kept GPM samples go back to the library before it shuts down.
        self.gpm.free_all(&self.nvml);
    }
}

fn load(lib: &Path) -> Result<Nvml, NvmlSourceError> {
    Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .map_err(|e| NvmlSourceError::Load {
            lib: lib.display().to_string(),
            reason: e.to_string(),
        })
}

impl NvmlSource {
    /// Loads NVML from `lib` (default: the system library, else the first of
    /// [`USUAL_PATHS`] that exists) and reads the GPUs' identities.
    pub fn open(lib: Option<&Path>) -> Result<Self, NvmlSourceError> {
        let (lib, nvml) = match lib {
            Some(l) => (l.to_path_buf(), load(l)?),
            None => {
                let first = load(Path::new(DEFAULT_LIB));
                match first {
                    Ok(n) => (PathBuf::from(DEFAULT_LIB), n),
                    Err(e) => {
                        let Some(p) = USUAL_PATHS.iter().map(Path::new).find(|p| p.is_file())
                        else {
                            return Err(e);
                        };
                        (p.to_path_buf(), load(p)?)
                    }
                }
            }
        };
        let driver_version = nvml.sys_driver_version().unwrap_or_default();
        let n = nvml
            .device_count()
            .map_err(|e| NvmlSourceError::Query(format!("device count: {e}")))?;
        let mut gpus = Vec::new();
        for index in 0..n {
            let Ok(d) = nvml.device_by_index(index) else {
                continue;
            };
            gpus.push(GpuInfo {
                index,
                uuid: d.uuid().unwrap_or_else(|_| format!("unknown-{index}")),
                name: d.name().unwrap_or_default(),
                pci_bus_id: d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
                minor: d.minor_number().ok(),
            });
        }
        Ok(Self {
            nvml,
            lib,
            gpus,
            unsupported: BTreeSet::new(),
            lost: BTreeSet::new(),
            util_seen: std::collections::BTreeMap::new(),
            driver_version,
            nvlink_prev: std::collections::BTreeMap::new(),
            gpm: gpm::GpmState::default(),
        })
    }

    /// The driver's version (`nvmlSystemGetDriverVersion`), empty when unknown.
    pub fn driver_version(&self) -> &str {
        &self.driver_version
    }

    pub fn gpus(&self) -> &[GpuInfo] {
        &self.gpus
    }

    pub fn library(&self) -> &Path {
        &self.lib
    }

    /// Fields recorded as unsupported, per GPU.
    pub fn unsupported(&self) -> &BTreeSet<(u32, &'static str)> {
        &self.unsupported
    }
}

impl NvmlSource {
    /// The compute processes on GPU `index` with their used memory and,
    /// where the driver reports per-process utilisation
    /// (`nvmlDeviceGetProcessUtilization`), their SM utilisation since the
    /// previous call. Unsupported queries are asked once and then skipped.
    pub fn processes(&mut self, index: u32) -> Vec<crate::usage::GpuProc> {
        if self.lost.contains(&index) {
            return Vec::new();
        }
        let Ok(d) = self.nvml.device_by_index(index) else {
            return Vec::new();
        };
        let mut out: Vec<crate::usage::GpuProc> = Vec::new();
        if !self.unsupported.contains(&(index, "processes")) {
            match d.running_compute_processes() {
                Ok(ps) => {
                    for p in ps {
                        let mem = match p.used_gpu_memory {
                            nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => Some(b),
                            nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
                        };
                        out.push(crate::usage::GpuProc {
                            pid: p.pid,
                            sm_pct: None,
                            mem_bytes: mem,
                        });
                    }
                }
                Err(e @ (NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_))) => {
                    tracing::info!(gpu = index, reason = %e, "NVML process list unsupported; not queried again");
                    self.unsupported.insert((index, "processes"));
                }
                Err(e) => {
                    metrics::counter!(crate::metrics_catalog::NVML_READ_ERRORS.name, "field" => "processes")
                        .increment(1);
                    tracing::debug!(gpu = index, error = %e, "NVML process list failed");
                }
            }
        }
        if !self.unsupported.contains(&(index, "process_utilization")) {
            let since = self.util_seen.get(&index).copied().unwrap_or(0);
            match d.process_utilization_stats(since) {
                Ok(samples) => {
                    let mut newest = since;
                    for smp in samples {
                        newest = newest.max(smp.timestamp);
                        match out.iter_mut().find(|p| p.pid == smp.pid) {
                            Some(p) => p.sm_pct = Some(smp.sm_util),
                            None => out.push(crate::usage::GpuProc {
                                pid: smp.pid,
                                sm_pct: Some(smp.sm_util),
                                mem_bytes: None,
                            }),
                        }
                    }
                    self.util_seen.insert(index, newest);
                }
                // No process had a sample since the last call.
                Err(NvmlError::NotFound) => {}
                Err(e @ (NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_))) => {
                    tracing::info!(gpu = index, reason = %e, "NVML per-process utilisation unsupported; GPU time split by CUDA launches");
                    self.unsupported.insert((index, "process_utilization"));
                }
                Err(e) => {
                    metrics::counter!(crate::metrics_catalog::NVML_READ_ERRORS.name, "field" => "process_utilization")
                        .increment(1);
                    tracing::debug!(gpu = index, error = %e, "NVML per-process utilisation failed");
                }
            }
        }
        // Processes with a context but no sample had no utilisation.
        if out.iter().any(|p| p.sm_pct.is_some()) {
            for p in &mut out {
                p.sm_pct.get_or_insert(0);
            }
        }
        out
    }
}

/// One NVML field value as an unsigned integer.
fn field_u64(d: &nvml_wrapper::Device<'_>, id: u32) -> Result<u64, NvmlError> {
    use nvml_wrapper::enums::device::SampleValue;
    let v = d.field_values_for(&[nvml_wrapper::structs::device::FieldId(id)])?;
    match v.into_iter().next() {
        Some(Ok(sample)) => match sample.value? {
            SampleValue::U32(t) => Ok(u64::from(t)),
            SampleValue::U64(t) => Ok(t),
            SampleValue::I64(t) => Ok(t.max(0) as u64),
            SampleValue::F64(t) => Ok(t.max(0.0) as u64),
        },
        Some(Err(e)) => Err(e),
        None => Err(NvmlError::NotSupported),
    }
}

/// The GPU state joined onto CUDA data for a CUDA device ordinal (CUDA
/// ordinals follow NVML indices unless `CUDA_VISIBLE_DEVICES` remaps them).
pub fn describe_gpu(device: i32, gpus: &[GpuInfo], samples: &[GpuSample]) -> Option<String> {
    let idx = u32::try_from(device).ok()?;
    let g = gpus.iter().find(|g| g.index == idx)?;
    let mut out = format!("uuid={}", g.uuid);
    if let Some(s) = samples.iter().find(|s| s.index == idx) {
        if s.lost {
            out.push_str(" LOST");
            return Some(out);
        }
        if let Some(t) = s.temp_c {
            let _ = write!(out, " temp={t}C");
        }
        if let Some(p) = s.power_w {
            let _ = write!(out, " power={p:.0}W");
        }
        if let (Some(c), Some(m)) = (s.sm_clock_mhz, s.sm_clock_max_mhz) {
            let _ = write!(out, " sm_clock={c}/{m}MHz");
        }
        if let Some(mask) = s.throttle {
            let names: Vec<&str> = throttle_names(mask)
                .into_iter()
                .filter(|n| *n != "idle")
                .collect();
            if !names.is_empty() {
                let _ = write!(out, " throttle={}", names.join(","));
            }
        }
    }
    Some(out)
}

pub mod dcgm;
mod events;
mod export;
mod gpm;
mod nvlink;
pub mod podresources;
pub mod prom;
mod remap;
mod sample;
mod section;
#[cfg(agent)]
mod source;
pub mod wire;

pub use events::{spawn_event_listener, EventListener};
pub use export::Export;
pub use prom::{render_prometheus, render_with};
pub use section::{
    NvmlSection, DCGM_COMPAT, DECLARED, DEFAULT_POD_RESOURCES_SOCKET, ENABLED, LIBRARY,
    POD_RESOURCES_SOCKET,
};
#[cfg(agent)]
pub use source::{GpuFacts, GpuLabelConfig, GpuSource};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_flags_decode() {
        assert_eq!(
            throttle_names(0x44),
            ["sw_power_cap", "hw_thermal_slowdown"]
        );
        assert_eq!(throttle_names(0), Vec::<&str>::new());
        assert_eq!(
            throttle_names(0x1 | 0x80),
            ["idle", "hw_power_brake_slowdown"]
        );
        assert_eq!(xid_meaning(79), "GPU has fallen off the bus");
    }

    #[test]
    fn pid_gpu_set_from_maps() {
        let d = std::env::temp_dir().join(format!("faultline-nvmaps-{}", std::process::id()));
        std::fs::create_dir_all(d.join("77")).unwrap();
        std::fs::write(
            d.join("77/maps"),
            "7f00-7f10 rw-s 00000000 00:05 1 /dev/nvidia3\n7f10-7f20 rw-s 0 00:05 2 /dev/nvidiactl\n7f20-7f30 rw-s 0 00:05 3 /dev/nvidia5\n7f30-7f40 rw-s 0 00:05 3 /dev/nvidia3\n",
        )
        .unwrap();
        assert_eq!(crate::workload::gpus_of_pid(&d, 77), BTreeSet::from([3, 5]));
        assert!(crate::workload::gpus_of_pid(&d, 78).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_library_is_one_line() {
        let Err(e) = NvmlSource::open(Some(Path::new("/nonexistent/libnvidia-ml.so.1"))) else {
            panic!("loaded a nonexistent NVML")
        };
        let e = e.to_string();
        assert!(
            e.starts_with("NVML inactive: cannot load /nonexistent/libnvidia-ml.so.1"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
