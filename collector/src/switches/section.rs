//! `[switches]`: switch port counters read from the fabric with
//! `perfquery`. Documented in `docs/config.md`. Each key with a bound is
//! declared once below ([`Key`]: the default and `config::validate` read it).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// Seconds between two polls: a second to an hour.
pub const INTERVAL_S: Key<f64> = Key {
    min: Some(1.0),
    max: Some(3600.0),
    ..Key::new("switches.interval_s", 10.0, "Seconds between two polls")
};
/// Seconds one `perfquery` run may take.
pub const TIMEOUT_S: Key<f64> = Key {
    min: Some(0.1),
    max: Some(600.0),
    ..Key::new(
        "switches.timeout_s",
        5.0,
        "Seconds one perfquery run may take",
    )
};
/// Switch ports reported per poll.
pub const MAX_PORTS: Key<usize> = Key {
    min: Some(1),
    ..Key::new("switches.max_ports", 1024, "Switch ports reported per poll")
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 3] = [
    INTERVAL_S.declared(),
    TIMEOUT_S.declared(),
    MAX_PORTS.declared(),
];

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
            interval_s: INTERVAL_S.default,
            timeout_s: TIMEOUT_S.default,
            max_ports: MAX_PORTS.default,
        }
    }
}
