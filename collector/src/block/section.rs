//! The block family's configuration section (`[block]`); every key is
//! documented in `docs/config.md`.
use serde::{Deserialize, Serialize};

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
            enabled: true,
            sample_every: 0,
            btf: true,
        }
    }
}
