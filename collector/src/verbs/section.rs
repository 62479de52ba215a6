//! The verbs family's configuration section (`[verbs]`); its
//! `[verbs.provider]` (where a provider's data-path functions are) is
//! `probes::ProviderSection`, which the attach reads. Every key is
//! documented in `docs/config.md`. Each key with a flag is declared once
//! below ([`Key`]: the default and the flags in `main.rs` read it).
use std::path::PathBuf;

use proto::config_key::{Declared, Key};
use serde::{Deserialize, Serialize};

use crate::probes::ProviderSection;

/// `--no-verbs`: the verbs uprobes.
pub const ENABLED: Key<bool> = Key {
    flag: Some("no-verbs"),
    ..Key::new("verbs.enabled", true, "Disable the verbs (RDMA) probes")
};
/// `--verbs-library PATH`; unset: the ld.so cache's.
pub const LIBRARY: Key<&str> = Key {
    flag: Some("verbs-library"),
    shown: "ld.so cache",
    ..Key::new(
        "verbs.library",
        "",
        "libibverbs for the control-path probes",
    )
};
/// `--verbs-provider SPEC`; unset: resolved through a context's ops table.
pub const PROVIDER: Key<&str> = Key {
    flag: Some("verbs-provider"),
    shown: "resolved through the ops table of a context on the first RDMA device",
    ..Key::new(
        "verbs.provider",
        "",
        "Provider data-path functions as `PATH:POLL_CQ:POST_SEND:POST_RECV`, each a symbol or a `0x` file offset",
    )
};
/// Every key declared above (the docs test checks their flags).
pub const DECLARED: [Declared; 3] = [ENABLED.declared(), LIBRARY.declared(), PROVIDER.declared()];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VerbsSection {
    pub enabled: bool,
    pub library: Option<PathBuf>,
    pub provider: Option<ProviderSection>,
}

impl Default for VerbsSection {
    fn default() -> Self {
        Self {
            enabled: ENABLED.default,
            library: None,
            provider: None,
        }
    }
}
