//! The block family's configuration section (`[block]`); every key is
//! documented in `docs/config.md`. Each key with a flag is declared once
//! below ([`Key`]: the default and the flag in `main.rs` read it).
use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

/// `--no-block`: the block-layer probes.
pub const ENABLED: Key<bool> = Key {
    flag: Some("no-block"),
    ..Key::new("block.enabled", true, "Disable the block I/O probes")
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 1] = [ENABLED.declared()];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BlockSection {
    pub enabled: bool,
    /// One sampled per-request event every N completions per CPU (0 = off).
    pub sample_every: u32,
    /// BTF-enabled raw tracepoints keyed by the request pointer when the
    /// kernel has BTF; false forces the classic tracepoints.
    pub btf: bool,
}

impl Default for BlockSection {
    fn default() -> Self {
        Self {
            enabled: ENABLED.default,
            sample_every: 0,
            btf: true,
        }
    }
}
