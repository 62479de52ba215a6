//! `[nvml]`: GPU sampling through NVML, the dcgm-exporter families, and the
//! kubelet's pod-resources socket. Built without the `nvml` feature (the
//! simulator), this file is all of `crate::nvml`, so a configuration file
//! parses the same either way. Documented in `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NvmlSection {
    pub enabled: bool,
    pub library: Option<PathBuf>,
    /// Also export the GPU fields under dcgm-exporter's names, labels and units.
    pub dcgm_compat: bool,
    /// The kubelet's pod-resources socket: the pod, namespace and container
    /// each GPU is allocated to; empty, or a path that does not exist,
    /// leaves those labels to the processes' cgroups.
    pub pod_resources_socket: PathBuf,
}

/// The kubelet's pod-resources socket.
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

impl Default for NvmlSection {
    fn default() -> Self {
        Self {
            enabled: true,
            library: None,
            dcgm_compat: true,
            pod_resources_socket: DEFAULT_POD_RESOURCES_SOCKET.into(),
        }
    }
}
