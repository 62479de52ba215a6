//! Where a provider function is: `[verbs.provider]` and the verbs attach's
//! code locations (the families' own sections are `<family>/section.rs`).
//! Built without the `probes` feature (the simulator), this file is all of
//! `crate::probes`, so a configuration file parses the same either way.
//! Every key is documented in `docs/config.md`.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    pub path: PathBuf,
    /// Symbol name or `0x` file offset.
    pub poll_cq: String,
    pub post_send: String,
    pub post_recv: String,
}

/// Where a provider function is: by symbol, or at a file offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeLoc {
    Symbol(String),
    Offset(u64),
}

/// The provider library and its data-path functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderTarget {
    pub path: PathBuf,
    pub poll_cq: CodeLoc,
    pub post_send: CodeLoc,
    pub post_recv: CodeLoc,
}

/// A provider function location that is neither a symbol nor an offset.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocError {
    #[error("empty symbol or offset")]
    Empty,
    #[error("bad offset {text}: {source}")]
    BadOffset {
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
}

/// Parses a symbol-or-offset location.
pub fn parse_loc(v: &str) -> Result<CodeLoc, LocError> {
    if v.is_empty() {
        return Err(LocError::Empty);
    }
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16)
            .map(CodeLoc::Offset)
            .map_err(|source| LocError::BadOffset {
                text: v.to_string(),
                source,
            }),
        None => Ok(CodeLoc::Symbol(v.to_string())),
    }
}

impl ProviderSection {
    pub fn target(&self) -> Result<ProviderTarget, LocError> {
        Ok(ProviderTarget {
            path: self.path.clone(),
            poll_cq: parse_loc(&self.poll_cq)?,
            post_send: parse_loc(&self.post_send)?,
            post_recv: parse_loc(&self.post_recv)?,
        })
    }
}

impl ProviderTarget {
    /// The `[verbs] provider` section that names this target.
    pub fn section(&self) -> ProviderSection {
        let loc = |l: &CodeLoc| match l {
            CodeLoc::Symbol(s) => s.clone(),
            CodeLoc::Offset(o) => format!("0x{o:x}"),
        };
        ProviderSection {
            path: self.path.clone(),
            poll_cq: loc(&self.poll_cq),
            post_send: loc(&self.post_send),
            post_recv: loc(&self.post_recv),
        }
    }
}

/// A `--verbs-provider` value that is not `PATH:POLL_CQ:POST_SEND:POST_RECV`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("expected PATH:POLL_CQ:POST_SEND:POST_RECV")]
    Shape,
    #[error(transparent)]
    Loc(#[from] LocError),
}

impl ProviderTarget {
    /// Parses `PATH:POLL_CQ:POST_SEND:POST_RECV` (the path may hold colons).
    pub fn parse_spec(s: &str) -> Result<Self, SpecError> {
        let parts: Vec<&str> = s.rsplitn(4, ':').collect();
        let [recv, send, poll, path] = parts.as_slice() else {
            return Err(SpecError::Shape);
        };
        Ok(Self {
            path: PathBuf::from(path),
            poll_cq: parse_loc(poll)?,
            post_send: parse_loc(send)?,
            post_recv: parse_loc(recv)?,
        })
    }
}
