//! One window's reading of every GPU: each field through a [`Reader`] that
//! remembers unsupported fields and notices a GPU that fell off the bus.
use std::{collections::BTreeSet, time::SystemTime};

use nvml_wrapper::{
    enum_wrappers::device::{Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor},
    enum_wrappers::nv_link::ErrorCounter,
    error::NvmlError,
    Device,
};

use super::{field_u64, nvlink, remap, GpuEvent, GpuEventKind, GpuSample, NvmlSource};

/// Reads one NVML field of one GPU: a field found unsupported is logged
/// once and not queried again, a lost GPU stops the GPU's remaining reads,
/// other failures are counted.
struct Reader<'a> {
    gpu: u32,
    lost: bool,
    unsupported: &'a mut BTreeSet<(u32, &'static str)>,
}

impl Reader<'_> {
    fn read<T>(
        &mut self,
        field: &'static str,
        f: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if self.lost || self.unsupported.contains(&(self.gpu, field)) {
            return None;
        }
        match f() {
            Ok(v) => Some(v),
            Err(NvmlError::GpuLost) => {
                self.lost = true;
                None
            }
            Err(e @ (NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_))) => {
                self.refuse(field, &e.to_string());
                None
            }
            Err(e) => {
                metrics::counter!(crate::metrics_catalog::NVML_READ_ERRORS.name, "field" => field)
                    .increment(1);
                tracing::debug!(gpu = self.gpu, field, error = %e, "NVML read failed");
                None
            }
        }
    }

    /// Records `field` as unsupported on this GPU (logged once).
    fn refuse(&mut self, field: &'static str, reason: &str) {
        tracing::info!(
            gpu = self.gpu,
            field,
            reason,
            "NVML field unsupported; not queried again"
        );
        metrics::counter!(crate::metrics_catalog::NVML_UNSUPPORTED_FIELDS.name).increment(1);
        self.unsupported.insert((self.gpu, field));
    }
}

impl NvmlSource {
    /// Samples every GPU. A GPU that falls off the bus yields one `Lost`
    /// event (and `lost: true` samples from then on), never an error.
    pub fn sample(&mut self) -> (Vec<GpuSample>, Vec<GpuEvent>) {
        let mut samples = Vec::with_capacity(self.gpus.len());
        let mut events = Vec::new();
        for g in &self.gpus {
            let mut s = GpuSample {
                index: g.index,
                ..GpuSample::default()
            };
            if self.lost.contains(&g.index) {
                s.lost = true;
                samples.push(s);
                continue;
            }
            let Ok(d) = self.nvml.device_by_index(g.index) else {
                samples.push(s);
                continue;
            };
            let mut r = Reader {
                gpu: g.index,
                lost: false,
                unsupported: &mut self.unsupported,
            };
            read_device(&mut r, &d, &mut s);
            read_nvlink(&mut r, &d, &mut self.nvlink_prev, g.index, &mut s);
            read_energy_video_rows(&mut r, &d, &mut s);
            match r.read("gpm", || d.gpm_support()) {
                Some(true) => {
                    s.prof = r
                        .read("gpm_metrics", || self.gpm.window(&self.nvml, &d, g.index))
                        .flatten();
                }
                Some(false) => r.refuse(
                    "gpm",
                    "the GPU has no GPM (before Hopper): no DCGM_FI_PROF_* series",
                ),
                None => {}
            }
            let lost = r.lost;
            if lost {
                self.lost.insert(g.index);
                self.gpm.forget(&self.nvml, g.index);
                self.nvlink_prev.remove(&g.index);
                s = GpuSample {
                    index: g.index,
                    lost: true,
                    ..GpuSample::default()
                };
                tracing::warn!(gpu = g.index, uuid = %g.uuid, "GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)");
                events.push(GpuEvent {
                    index: Some(g.index),
                    uuid: g.uuid.clone(),
                    at: SystemTime::now(),
                    kind: GpuEventKind::Lost,
                });
            }
            samples.push(s);
        }
        (samples, events)
    }
}

/// Power, temperatures, clocks, throttle reasons, utilisation, memory, ECC, PCIe.
fn read_device(r: &mut Reader<'_>, d: &Device<'_>, s: &mut GpuSample) {
    s.power_w = r
        .read("power", || d.power_usage())
        .map(|mw| f64::from(mw) / 1000.0);
    s.power_limit_w = r
        .read("power_limit", || d.enforced_power_limit())
        .map(|mw| f64::from(mw) / 1000.0);
    s.temp_c = r.read("temperature", || d.temperature(TemperatureSensor::Gpu));
    // NVML_FI_DEV_MEMORY_TEMP = 82 (HBM temperature).
    s.memory_temp_c = r
        .read("memory_temperature", || field_u64(d, 82))
        .map(|v| v as u32);
    s.sm_clock_mhz = r.read("sm_clock", || d.clock_info(Clock::SM));
    s.sm_clock_max_mhz = r.read("sm_clock_max", || d.max_clock_info(Clock::SM));
    s.mem_clock_mhz = r.read("mem_clock", || d.clock_info(Clock::Memory));
    s.mem_clock_max_mhz = r.read("mem_clock_max", || d.max_clock_info(Clock::Memory));
    s.throttle = r.read("throttle_reasons", || {
        d.current_throttle_reasons().map(|r| r.bits())
    });
    if let Some(u) = r.read("utilization", || d.utilization_rates()) {
        s.util_gpu_pct = Some(u.gpu);
        s.util_mem_pct = Some(u.memory);
    }
    if let Some(m) = r.read("memory", || d.memory_info()) {
        s.mem_total_bytes = Some(m.total);
        s.mem_used_bytes = Some(m.used);
        s.mem_reserved_bytes = Some(m.reserved);
        s.mem_free_bytes = Some(m.free);
    }
    s.ecc_sbe_volatile = r.read("ecc_sbe", || {
        d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
    });
    s.ecc_dbe_volatile = r.read("ecc_dbe", || {
        d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
    });
    s.pcie_replay = r
        .read("pcie_replay", || d.pcie_replay_counter())
        .map(u64::from);
    s.pcie_tx_bytes_per_sec = r
        .read("pcie_tx", || d.pcie_throughput(PcieUtilCounter::Send))
        .map(|k| u64::from(k) * 1024);
    s.pcie_rx_bytes_per_sec = r
        .read("pcie_rx", || d.pcie_throughput(PcieUtilCounter::Receive))
        .map(|k| u64::from(k) * 1024);
}

/// NVLink error counters and, from the previous reading, the bandwidth.
fn read_nvlink(
    r: &mut Reader<'_>,
    d: &Device<'_>,
    prev: &mut std::collections::BTreeMap<u32, nvlink::DataReading>,
    index: u32,
    s: &mut GpuSample,
) {
    if let Some(l0) = r.read("nvlink_errors", || {
        d.link_wrapper_for(0).error_counter(ErrorCounter::DlReplay)
    }) {
        s.nvlink = nvlink::errors(d, l0);
        if let Some(now) = r.read("nvlink_bandwidth", || nvlink::data(d)) {
            let prev = prev.insert(index, now);
            s.nvlink_bandwidth = Some(nvlink::bandwidth(prev, now));
            s.nvlink_data_kib = Some(now.kib);
        }
    }
}

/// Energy, video engines and row remapping.
fn read_energy_video_rows(r: &mut Reader<'_>, d: &Device<'_>, s: &mut GpuSample) {
    s.energy_mj = r.read("energy", || d.total_energy_consumption());
    s.enc_util_pct = r
        .read("encoder_utilization", || d.encoder_utilization())
        .map(|u| u.utilization);
    s.dec_util_pct = r
        .read("decoder_utilization", || d.decoder_utilization())
        .map(|u| u.utilization);
    // nvmlDeviceGetRemappedRows (Ampere and later).
    if let Some(rows) = r.read("remapped_rows", || remap::read(d)) {
        s.remapped_rows_corr = Some(rows.corr);
        s.remapped_rows_unc = Some(rows.unc);
        s.remap_pending = Some(rows.pending);
        s.remap_failure = Some(u64::from(rows.failure));
    }
}
