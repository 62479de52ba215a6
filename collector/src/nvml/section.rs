//! `[nvml]`: GPU sampling through NVML, the dcgm-exporter families, and the
//! kubelet's pod-resources socket. Built without the `nvml` feature (the
//! simulator), this file is all of `crate::nvml`, so a configuration file
//! parses the same either way. Documented in `docs/config.md`. Each key
//! with a flag is declared once below ([`Key`]: the default and the flags
//! in `main.rs` read it).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// `--no-nvml`: NVML sampling.
pub const ENABLED: Key<bool> = Key {
    flag: Some("no-nvml"),
    ..Key::new("nvml.enabled", true, "Disable NVML sampling")
};
/// `--nvml-library PATH`; unset: the system's.
pub const LIBRARY: Key<&str> = Key {
    flag: Some("nvml-library"),
    shown: "the system's",
    ..Key::new("nvml.library", "", "Path of libnvidia-ml.so.1")
};
/// `--no-dcgm-compat`: the `DCGM_FI_DEV_*` families.
pub const DCGM_COMPAT: Key<bool> = Key {
    flag: Some("no-dcgm-compat"),
    ..Key::new(
        "nvml.dcgm_compat",
        true,
        "Do not export the dcgm-exporter compatibility families (DCGM_FI_DEV_*)",
    )
};
/// `--pod-resources-socket PATH`: the kubelet's pod-resources socket.
pub const POD_RESOURCES_SOCKET: Key<&str> = Key {
    flag: Some("pod-resources-socket"),
    ..Key::new(
        "nvml.pod_resources_socket",
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        "The kubelet's pod-resources socket, for the GPU series' pod, namespace and container labels; \"\" turns it off",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 4] = [
    ENABLED.declared(),
    LIBRARY.declared(),
    DCGM_COMPAT.declared(),
    POD_RESOURCES_SOCKET.declared(),
];

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
pub const DEFAULT_POD_RESOURCES_SOCKET: &str = POD_RESOURCES_SOCKET.default;

impl Default for NvmlSection {
    fn default() -> Self {
        Self {
            enabled: ENABLED.default,
            library: None,
            dcgm_compat: DCGM_COMPAT.default,
            pod_resources_socket: DEFAULT_POD_RESOURCES_SOCKET.into(),
        }
    }
}
