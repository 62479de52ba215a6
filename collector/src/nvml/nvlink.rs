//! NVLink: the data-link error counters of every link
//! (`nvmlDeviceGetNvLinkErrorCounter`) and the data throughput counters
//! summed over the links (NVML field values `NVLINK_THROUGHPUT_DATA_TX/RX`
//! with scope "all links", which nvml-wrapper cannot ask for: its field
//! value call leaves the scope id at 0), turned into the bandwidth DCGM
//! reports as `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`.
use nvml_wrapper::{
    enum_wrappers::nv_link::ErrorCounter,
    error::{nvml_sym, nvml_try, NvmlError},
    Device,
};
use nvml_wrapper_sys::bindings::{field_id, nvmlFieldValue_t};

use super::NVLINK_MAX_LINKS;

/// One link's data-link error counters; `None` for a counter the link does
/// not report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvLinkErrors {
    pub link: u32,
    pub replay: Option<u64>,
    pub recovery: Option<u64>,
    pub crc_flit: Option<u64>,
    pub crc_data: Option<u64>,
}

/// Which counter of [`NvLinkErrors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvLinkCounter {
    Replay,
    Recovery,
    CrcFlit,
    CrcData,
}

impl NvLinkCounter {
    pub const ALL: [Self; 4] = [Self::Replay, Self::Recovery, Self::CrcFlit, Self::CrcData];

    pub fn of(self, e: &NvLinkErrors) -> Option<u64> {
        match self {
            Self::Replay => e.replay,
            Self::Recovery => e.recovery,
            Self::CrcFlit => e.crc_flit,
            Self::CrcData => e.crc_data,
        }
    }

    /// The counter summed over the links that report it.
    pub fn total(self, links: &[NvLinkErrors]) -> Option<u64> {
        links
            .iter()
            .filter_map(|e| self.of(e))
            .reduce(u64::saturating_add)
    }
}

/// The error counters of links 0.. up to the first link NVML refuses (no
/// such link); `replay0` is link 0's replay count, already read.
pub fn errors(d: &Device<'_>, replay0: u64) -> Vec<NvLinkErrors> {
    let mut out = Vec::new();
    for link in 0..NVLINK_MAX_LINKS {
        let l = d.link_wrapper_for(link);
        let replay = if link == 0 {
            replay0
        } else {
            match l.error_counter(ErrorCounter::DlReplay) {
                Ok(v) => v,
                // A lost GPU is caught by the next query.
                Err(_) => break,
            }
        };
        out.push(NvLinkErrors {
            link,
            replay: Some(replay),
            recovery: l.error_counter(ErrorCounter::DlRecovery).ok(),
            crc_flit: l.error_counter(ErrorCounter::DlCrcFlit).ok(),
            crc_data: l.error_counter(ErrorCounter::DlCrcData).ok(),
        });
    }
    out
}

/// NVML's scope id for "every link of the GPU".
const ALL_LINKS: u32 = u32::MAX;

/// A reading of the NVLink data counters: transmitted plus received KiB
/// over all links, and NVML's timestamp of the reading (µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataReading {
    pub kib: u64,
    pub at_us: i64,
}

/// Reads the data throughput counters of every link (TX + RX, KiB).
pub fn data(d: &Device<'_>) -> Result<DataReading, NvmlError> {
    let sym = nvml_sym(d.nvml().lib().nvmlDeviceGetFieldValues.as_ref())?;
    // SAFETY: nvmlFieldValue_t is plain C data (integers and a union of
    // numbers); all-zero is a valid value.
    let mut fv: [nvmlFieldValue_t; 2] = unsafe { std::mem::zeroed() };
    fv[0].fieldId = field_id::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
    fv[1].fieldId = field_id::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
    for f in &mut fv {
        f.scopeId = ALL_LINKS;
    }
    // SAFETY: the handle belongs to the loaded library (the device borrows
    // it) and `fv` holds the 2 values the count says.
    nvml_try(unsafe { sym(d.handle(), 2, fv.as_mut_ptr()) })?;
    let mut kib = 0u64;
    let mut at_us = 0i64;
    for f in &fv {
        nvml_try(f.nvmlReturn)?;
        kib = kib.saturating_add(unsigned(f)?);
        at_us = at_us.max(f.timestamp);
    }
    Ok(DataReading { kib, at_us })
}

/// A field value as an unsigned integer, by its value type.
fn unsigned(f: &nvmlFieldValue_t) -> Result<u64, NvmlError> {
    // SAFETY: the union member read is the one `valueType` names.
    unsafe {
        Ok(match f.valueType {
            0 => f.value.dVal.max(0.0) as u64,
            1 => u64::from(f.value.uiVal),
            2 => f.value.ulVal,
            3 => f.value.ullVal,
            4 => f.value.sllVal.max(0) as u64,
            5 => f.value.siVal.max(0) as u64,
            t => return Err(NvmlError::UnexpectedVariant(t)),
        })
    }
}

/// DCGM's NVLink bandwidth between two readings: KiB per second / 1000
/// (DCGM's "MiB/s"), truncated; 0 without a usable earlier reading (the
/// first one, a counter reset, or no time between them), as DCGM reports.
pub fn bandwidth(prev: Option<DataReading>, now: DataReading) -> u64 {
    let Some(p) = prev else { return 0 };
    if now.kib < p.kib || now.at_us <= p.at_us {
        return 0;
    }
    let secs = (now.at_us - p.at_us) as f64 / 1e6;
    ((now.kib - p.kib) as f64 / secs / 1000.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_is_dcgm_s_kib_per_second_over_1000() {
        let a = DataReading {
            kib: 1_000,
            at_us: 1_000_000,
        };
        // 8 000 000 KiB in 0.5 s: 16 000 000 KiB/s → 16 000.
        let b = DataReading {
            kib: 8_001_000,
            at_us: 1_500_000,
        };
        assert_eq!(bandwidth(Some(a), b), 16_000);
        assert_eq!(bandwidth(None, b), 0, "first reading");
        assert_eq!(bandwidth(Some(b), a), 0, "reset or clock step back");
        assert_eq!(bandwidth(Some(a), a), 0, "no time between");
    }

    #[test]
    fn totals_skip_links_without_the_counter() {
        let links = [
            NvLinkErrors {
                link: 0,
                replay: Some(5),
                crc_flit: Some(1),
                ..NvLinkErrors::default()
            },
            NvLinkErrors {
                link: 1,
                replay: Some(10),
                ..NvLinkErrors::default()
            },
        ];
        assert_eq!(NvLinkCounter::Replay.total(&links), Some(15));
        assert_eq!(NvLinkCounter::CrcFlit.total(&links), Some(1));
        assert_eq!(NvLinkCounter::Recovery.total(&links), None);
    }
}
