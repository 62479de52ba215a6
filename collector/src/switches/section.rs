//! `[switches]`: switch port counters read from the fabric with
//! `perfquery`. Documented in `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Switch port counters (`[switches]`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchesSection {
    /// Off by default: one collector per fabric (or per part of it) reads
    /// the switches, on a host with an HCA on that fabric and
    /// infiniband-diags installed.
    pub enabled: bool,
    /// The fabric as `ibnetdiscover > FILE` or `ibnetdiscover --ports >
    /// FILE` saved it (the same file as the correlator's `--topology`):
    /// which switches to query, by GUID, and their cabled ports.
    pub topology: PathBuf,
    /// The `perfquery` program (infiniband-diags), run as `perfquery -l -x
    /// -G <guid> <port,port,…>` once per switch and poll.
    pub perfquery: PathBuf,
    /// Seconds between two polls of every switch (each poll's counters go
    /// out with the next window).
    pub interval_s: f64,
    /// Seconds one `perfquery` run may take before it is killed (that
    /// switch's poll is counted as failed).
    pub timeout_s: f64,
    /// Switch ports reported per poll (in switch name, port order); more
    /// are counted in `faultline_switch_ports_dropped_total`. The
    /// correlator judges at most `limits.max_entities_per_window` rows of a
    /// window (1024 by default): split a larger fabric between collectors.
    pub max_ports: usize,
}

impl Default for SwitchesSection {
    fn default() -> Self {
        Self {
            enabled: false,
            topology: PathBuf::from("/etc/faultline/fabric.topo"),
            perfquery: PathBuf::from("perfquery"),
            interval_s: 10.0,
            timeout_s: 5.0,
            max_ports: 1024,
        }
    }
}
