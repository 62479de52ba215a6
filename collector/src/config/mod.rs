//! The collector's configuration file (TOML) and its resolution with
//! command-line flags: defaults → file → flags. Unknown keys are rejected with
//! their name and line. Every key is documented in `docs/config.md`.
//!
//! Each section's type lives in the module it configures (`[ib]` in
//! [`crate::ib`], `[otlp]` in [`crate::otlp`], the probe families in
//! [`crate::probes`], ...); this module assembles them into the file and
//! checks what their types cannot ([`validate`]). None of those modules
//! imports this one.
pub mod collector;
pub mod error;
mod validate;
mod values;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use self::collector::{CollectorSection, DEFAULT_JOB_DIR};
pub use crate::{
    block::BlockSection,
    cuda::CudaSection,
    ib::IbSection,
    kmsg::KmsgSection,
    lustre::LustreSection,
    nccl::NcclSection,
    nfs::NfsSection,
    nvml::{NvmlSection, DEFAULT_POD_RESOURCES_SOCKET},
    otlp::OtlpSection,
    probes::{parse_loc, ProviderSection},
    stream::{check_endpoint, StreamSection},
    switches::SwitchesSection,
    usage::UsageSection,
    verbs::VerbsSection,
};
pub use error::{ConfigError, SecondsError};
pub use values::{
    duration_arg, parse_listen_addr, seconds, DURATION_MAX_SECS, WINDOW_MAX_SECS, WINDOW_MIN_SECS,
};

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub collector: CollectorSection,
    pub block: BlockSection,
    pub cuda: CudaSection,
    pub nccl: NcclSection,
    pub verbs: VerbsSection,
    pub nvml: NvmlSection,
    pub ib: IbSection,
    pub stream: StreamSection,
    pub otlp: OtlpSection,
    pub usage: UsageSection,
    pub nfs: NfsSection,
    pub lustre: LustreSection,
    pub switches: SwitchesSection,
    pub kmsg: KmsgSection,
}

impl FileConfig {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = crate::bounded_read::read_to_string(path, crate::bounded_read::CONFIG_MAX)
            .map_err(|e| ConfigError::Read {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        // Never the file's text (toml's `Display` quotes the offending
        // line: a `--config` aimed at `/proc/self/environ` would print it).
        let cfg: Self = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map_or((0, 0), |s| proto::parse_error::position(text, s.start));
            ConfigError::Parse {
                path: origin.to_string(),
                line,
                column,
                message: without_text(e),
            }
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The effective configuration as TOML (for `check-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }
}

/// The parser's message and the key it was at (`in \`detect.nccl.max_ranks\``),
/// without the file's line that toml's `Display` quotes given the input.
fn without_text(mut e: toml::de::Error) -> String {
    e.set_input(None);
    proto::parse_error::redact(&e.to_string())
}

#[cfg(test)]
mod doc_check;
#[cfg(test)]
mod tests;
