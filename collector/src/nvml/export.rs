//! What the GPU exposition ([`super::prom`], and [`super::dcgm`] in
//! compatibility mode) is labelled with besides the samples: one type both
//! writers read, so neither imports the other's.
use std::collections::BTreeMap;

use crate::workload::WorkloadLabels;

/// What the GPU exposition needs besides the samples.
#[derive(Clone, Copy, Debug)]
pub struct Export<'a> {
    /// The node's name (dcgm-exporter's `Hostname` label).
    pub hostname: &'a str,
    /// The driver version (dcgm-exporter's `DCGM_FI_DRIVER_VERSION` label).
    pub driver_version: &'a str,
    /// Also write the dcgm-exporter families (`[nvml] dcgm_compat`).
    pub dcgm_compat: bool,
    /// Workload labels and the number of distinct workloads, per GPU index.
    pub workloads: &'a BTreeMap<u32, (WorkloadLabels, usize)>,
    /// The last XID per GPU index (dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS`).
    pub last_xid: &'a BTreeMap<u32, u64>,
}

static NO_WORKLOADS: BTreeMap<u32, (WorkloadLabels, usize)> = BTreeMap::new();
static NO_XIDS: BTreeMap<u32, u64> = BTreeMap::new();

impl Default for Export<'_> {
    fn default() -> Self {
        Self {
            hostname: "",
            driver_version: "",
            dcgm_compat: false,
            workloads: &NO_WORKLOADS,
            last_xid: &NO_XIDS,
        }
    }
}
