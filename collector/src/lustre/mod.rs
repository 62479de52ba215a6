//! Lustre clients from the kernel module's per-target files: for every OSC
//! (an OST) and MDC (an MDT) device of a mounted file system, the RPCs
//! completed per RPC type with their summed time (`stats`), and the
//! import's state, server NID, timeouts and connection attempts
//! (`import`), as window deltas ([`LustreTracker`]). Rows go on the wire as
//! `NfsOp` rows with `fstype = "lustre"`: the target (`lustrefs-OST0003`)
//! is the shared storage element the correlator judges across hosts, as an
//! NFS export is. A file source, not a probe: the module already keeps
//! these counters per target.
pub mod delta;
pub mod parse;
pub mod section;
#[cfg(agent)]
pub mod source;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

pub use delta::{LustreTracker, Target, WindowCounts};
pub use section::LustreSection;
#[cfg(agent)]
pub use source::LustreSource;

/// Upper bound for one `stats` or `import` file (an OSC writes ~2 KiB).
pub const FILE_MAX: u64 = 256 << 10;
/// Upper bound for the mount table.
pub const MOUNTS_MAX: u64 = 16 << 20;

/// The device classes read, as the module names their directories.
const CLASSES: [&str; 2] = ["osc", "mdc"];

/// The source's reading side: the configured roots, read each window into
/// deltas.
#[derive(Debug)]
pub struct LustreReader {
    roots: Vec<PathBuf>,
    mounts: PathBuf,
    max_targets: usize,
    tracker: LustreTracker,
}

impl LustreReader {
    /// Reads the targets once, so the first window has deltas since start.
    pub fn new(proc_root: &Path, section: &LustreSection) -> Self {
        let mut r = Self {
            roots: section.roots.clone(),
            mounts: proc_root.join(section.mounts.trim_start_matches('/')),
            max_targets: section.max_targets,
            tracker: LustreTracker::new(),
        };
        let _ = r.window();
        r
    }

    /// The client devices under the roots, by name (class, device), at most
    /// `max_targets` (the rest counted).
    fn devices(&mut self) -> Vec<(&'static str, String)> {
        let mut found = BTreeMap::new();
        for root in &self.roots {
            for class in CLASSES {
                let Ok(dir) = std::fs::read_dir(root.join(class)) else {
                    continue;
                };
                for e in dir.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if parse::device_name(&name).is_some() {
                        found.insert(name, class);
                    }
                }
            }
        }
        let over = found.len().saturating_sub(self.max_targets);
        if over > 0 {
            self.tracker.dropped_total += over as u64;
        }
        found
            .into_iter()
            .take(self.max_targets)
            .map(|(name, class)| (class, name))
            .collect()
    }

    /// A device's file from the first root that has it.
    fn file(&self, class: &str, device: &str, file: &str) -> Option<String> {
        self.roots.iter().find_map(|root| {
            let p = root.join(class).join(device).join(file);
            crate::bounded_read::read_to_string(&p, FILE_MAX).ok()
        })
    }

    /// Reads every target now.
    pub fn read(&mut self) -> Vec<Target> {
        let mps = crate::bounded_read::read_to_string(&self.mounts, MOUNTS_MAX)
            .map(|t| parse::mounts(&t))
            .unwrap_or_default();
        let mut out = Vec::new();
        for (class, device) in self.devices() {
            let Some((fsname, target, instance)) = parse::device_name(&device) else {
                continue;
            };
            let Some(stats) = self.file(class, &device, "stats") else {
                continue;
            };
            out.push(Target {
                fsname: fsname.to_string(),
                target: target.to_string(),
                mountpoint: mps
                    .get(fsname)
                    .cloned()
                    .unwrap_or_else(|| format!("{fsname}-{instance}")),
                stats: parse::stats(&stats),
                import: self
                    .file(class, &device, "import")
                    .map(|t| parse::import(&t)),
                device,
            });
        }
        out
    }

    /// One window: the rows of the targets seen last time and now.
    pub fn window(&mut self) -> (Vec<proto::v1::NfsOp>, WindowCounts) {
        let read = self.read();
        self.tracker.update(read)
    }

    /// The exposition of the latest read.
    pub fn render(&self) -> String {
        self.tracker.render()
    }
}

#[cfg(test)]
mod tests;
