//! The verbs family's configuration section (`[verbs]`); its
//! `[verbs.provider]` (where a provider's data-path functions are) is
//! `probes::ProviderSection`, which the attach reads. Every key is
//! documented in `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::probes::ProviderSection;

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
            enabled: true,
            library: None,
            provider: None,
        }
    }
}
