//! NFS client mounts from `/proc/<pid>/mountstats`: per mount (the shared
//! target `server:/export` and its mount point) and per RPC procedure, the
//! RPCs completed, retransmissions, major timeouts, bytes and cumulative
//! queue, round-trip and execution times, as window deltas
//! ([`NfsTracker`]). A /proc source, not a probe: the kernel already keeps
//! these counters per mount.
pub mod delta;
pub mod parse;
pub mod section;
#[cfg(agent)]
pub mod source;

use std::path::{Path, PathBuf};

pub use delta::{NfsTracker, WindowCounts};
pub use parse::{parse, Mount, OpStats, Parsed, Xprt};
pub use section::NfsSection;
#[cfg(agent)]
pub use source::NfsSource;

/// Upper bound for the mountstats file (an NFSv4.2 mount writes ~8 KiB;
/// this allows hundreds of mounts and every other filesystem's line).
pub const MOUNTSTATS_MAX: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum NfsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The mountstats path under `proc_root` (`mountstats` as configured).
pub fn mountstats_path(proc_root: &Path, mountstats: &str) -> PathBuf {
    proc_root.join(mountstats.trim_start_matches('/'))
}

/// Reads and parses one mountstats file (bounded read).
pub fn read(path: &Path) -> Result<Parsed, NfsError> {
    let text = crate::bounded_read::read_to_string(path, MOUNTSTATS_MAX).map_err(|source| {
        NfsError::Read {
            path: path.display().to_string(),
            source,
        }
    })?;
    Ok(parse(&text))
}

/// The source's reading side: the configured file, read each window into
/// deltas.
#[derive(Debug)]
pub struct NfsReader {
    path: PathBuf,
    tracker: NfsTracker,
}

impl NfsReader {
    /// Reads `<proc_root>/<section.mountstats>` once, so the first window
    /// has deltas since start (a missing file is read again each window).
    pub fn new(proc_root: &Path, section: &NfsSection) -> Self {
        let mut r = Self {
            path: mountstats_path(proc_root, &section.mountstats),
            tracker: NfsTracker::new(section.max_mounts),
        };
        let _ = r.window();
        r
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One window: the rows of the mounts seen last time and now.
    pub fn window(&mut self) -> Result<(Vec<proto::v1::NfsOp>, WindowCounts), NfsError> {
        let parsed = read(&self.path)?;
        Ok(self.tracker.update(parsed))
    }

    /// The exposition of the latest read.
    pub fn render(&self) -> String {
        self.tracker.render()
    }
}

#[cfg(test)]
mod tests;
