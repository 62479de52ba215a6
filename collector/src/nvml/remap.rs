//! Row remapping (`nvmlDeviceGetRemappedRows`, Ampere and later): rows
//! remapped for correctable and uncorrectable ECC errors, a remapping
//! pending until the next GPU reset, and a remapping that failed.
//! nvml-wrapper 0.13 does not wrap this call, so it goes through the raw
//! binding of the library nvml-wrapper loaded.
use nvml_wrapper::{
    error::{nvml_sym, nvml_try, NvmlError},
    Device,
};

/// One reading of a GPU's row remapper.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemappedRows {
    pub corr: u64,
    pub unc: u64,
    pub pending: bool,
    pub failure: bool,
}

/// Reads the row remapper of `d`.
pub fn read(d: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let sym = nvml_sym(d.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the handle belongs to the loaded library (the device borrows
    // it) and each pointer is to a live `c_uint` the call writes once.
    nvml_try(unsafe { sym(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure) })?;
    Ok(RemappedRows {
        corr: u64::from(corr),
        unc: u64::from(unc),
        pending: pending != 0,
        failure: failure != 0,
    })
}
