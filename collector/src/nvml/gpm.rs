//! NVML's GPU performance monitoring (GPM, Hopper and later): one sample per
//! GPU each window, and the metrics between it and the previous window's,
//! as the profiling fields dcgm-exporter ships by default
//! (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, `_PIPE_TENSOR_ACTIVE`, `_DRAM_ACTIVE`,
//! `_PCIE_TX_BYTES`, `_PCIE_RX_BYTES`) with DCGM's conversions: NVML's
//! percentages become ratios, its MiB/s become bytes/s. GPUs without GPM
//! have none of them.
use std::collections::{BTreeMap, BTreeSet};

use nvml_wrapper::{
    enums::gpm::GpmMetricId, error::NvmlError, gpm::gpm_metrics_get, Device, GpmSample, Nvml,
};
use nvml_wrapper_sys::bindings::nvmlGpmSample_t;

/// One window's profiling metrics of a GPU; `None` for a metric NVML
/// refused.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpmMetrics {
    /// Ratio of time the graphics engine was active (0..1).
    pub gr_engine_active: Option<f64>,
    /// Ratio of cycles any tensor pipe was active (0..1).
    pub tensor_active: Option<f64>,
    /// Ratio of cycles the memory interface was active (0..1).
    pub dram_active: Option<f64>,
    /// PCIe bytes per second sent / received, headers included.
    pub pcie_tx_bytes_per_sec: Option<u64>,
    pub pcie_rx_bytes_per_sec: Option<u64>,
}

/// The metrics asked for, in [`GpmMetrics`]' order.
const METRICS: [GpmMetricId; 5] = [
    GpmMetricId::GraphicsUtil,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
];

/// A GPM sample kept between windows. A [`GpmSample`] borrows the [`Nvml`]
/// it came from, which lives next to this state in the sampler, so the
/// sample is kept as its raw handle and rebuilt (to be compared and freed)
/// with the same library.
struct Handle(nvmlGpmSample_t);

// SAFETY: a GPM sample is a heap buffer of the NVML library, usable from
// any thread (nvml-wrapper's `GpmSample` is `Send` too); only one owner
// touches it at a time.
unsafe impl Send for Handle {}

/// The previous sample of every GPU with GPM.
#[derive(Default)]
pub struct GpmState {
    prev: BTreeMap<u32, Handle>,
    /// (GPU, metric) NVML refused, logged once.
    refused: BTreeSet<(u32, usize)>,
}

impl GpmState {
    /// Takes this window's sample of GPU `gpu` and returns the metrics
    /// since the previous one (`None` on the GPU's first window).
    pub fn window(
        &mut self,
        nvml: &Nvml,
        d: &Device<'_>,
        gpu: u32,
    ) -> Result<Option<GpmMetrics>, NvmlError> {
        let now = d.gpm_sample()?;
        let Some(Handle(h)) = self.prev.remove(&gpu) else {
            self.prev.insert(gpu, Handle(now.into_handle()));
            return Ok(None);
        };
        // SAFETY: `h` came from `into_handle` of a sample of this library
        // and was removed from `prev`, so this is its only owner; dropping
        // `before` frees it.
        let before = unsafe { GpmSample::from_handle(nvml, h) };
        let results = gpm_metrics_get(nvml, &before, &now, &METRICS);
        drop(before);
        self.prev.insert(gpu, Handle(now.into_handle()));
        let results = results?;
        let mut v = [None::<f64>; 5];
        for (i, r) in results.into_iter().enumerate().take(v.len()) {
            match r {
                Ok(m) if m.value.is_finite() => v[i] = Some(m.value.max(0.0)),
                Ok(_) => {}
                Err(e) => {
                    if self.refused.insert((gpu, i)) {
                        tracing::info!(gpu, metric = ?METRICS[i], reason = %e, "NVML GPM metric unavailable; its DCGM_FI_PROF series is left out");
                    }
                }
            }
        }
        let ratio = |p: Option<f64>| p.map(|p| p / 100.0);
        let bytes = |mib: Option<f64>| mib.map(|m| (m * 1024.0 * 1024.0) as u64);
        Ok(Some(GpmMetrics {
            gr_engine_active: ratio(v[0]),
            tensor_active: ratio(v[1]),
            dram_active: ratio(v[2]),
            pcie_tx_bytes_per_sec: bytes(v[3]),
            pcie_rx_bytes_per_sec: bytes(v[4]),
        }))
    }

    /// Frees GPU `gpu`'s kept sample (the GPU was lost).
    pub fn forget(&mut self, nvml: &Nvml, gpu: u32) {
        if let Some(Handle(h)) = self.prev.remove(&gpu) {
            // SAFETY: as in `window`: the only owner, from this library.
            drop(unsafe { GpmSample::from_handle(nvml, h) });
        }
    }

    /// Frees every kept sample (before the library is shut down).
    pub fn free_all(&mut self, nvml: &Nvml) {
        for (_, Handle(h)) in std::mem::take(&mut self.prev) {
            // SAFETY: as in `window`: the only owner, from this library.
            drop(unsafe { GpmSample::from_handle(nvml, h) });
        }
    }
}
