//! Libraries the uprobes are attached to, keyed by file identity: held
//! open while attached (a library found through a process's root, inside a
//! container, stays reachable after that process exits, as
//! `/proc/self/fd/N`), and detached once no process maps it any more.
use std::{
    collections::BTreeMap,
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use aya::{
    programs::{uprobe::UProbeLinkId, UProbe},
    Ebpf,
};

use crate::proc_libs::FileKey;

/// One attached library.
#[derive(Debug)]
pub struct AttachedLib {
    /// How it was found: the host path, or `PATH in pid N's root`.
    pub shown: String,
    /// The path it was found at (the host's, or through a process's root).
    pub found_at: PathBuf,
    /// The path the probes attach by: the host's, or `/proc/self/fd/N` of
    /// [`Self::file`].
    pub attach_path: PathBuf,
    /// Held open for a library reached through a process's root.
    file: Option<File>,
    /// (program, link) of every attached probe.
    pub links: Vec<(&'static str, UProbeLinkId)>,
    /// Configured or from the ld.so cache: never detached.
    pub pinned: bool,
}

/// Why a library could not be held for attaching.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error("opening {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is no longer the file found ({key}): replaced or its process exited", .path.display())]
    Changed { path: PathBuf, key: FileKey },
}

impl AttachedLib {
    /// Prepares `path` (file `key`) for attaching: a host path is used as it
    /// is; a path through a process's root is opened and attached through
    /// the open file, after checking it is still the same file.
    pub fn hold(
        path: &Path,
        key: FileKey,
        shown: String,
        pinned: bool,
        on_host: bool,
    ) -> Result<Self, HoldError> {
        let (attach_path, file) = if on_host {
            (path.to_path_buf(), None)
        } else {
            let f = File::open(path).map_err(|source| HoldError::Open {
                path: path.to_path_buf(),
                source,
            })?;
            let via = PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()));
            if FileKey::of(&via) != Some(key) {
                return Err(HoldError::Changed {
                    path: path.to_path_buf(),
                    key,
                });
            }
            (via, Some(f))
        };
        Ok(Self {
            shown,
            found_at: path.to_path_buf(),
            attach_path,
            file,
            links: Vec::new(),
            pinned,
        })
    }
}

/// Detaches every probe of `lib`. The kernel's unregistering waits for an
/// RCU grace period per link, so the links are closed on a thread of their
/// own; the file is closed after them.
pub fn detach(ebpf: &mut Ebpf, lib: AttachedLib) {
    let mut taken = Vec::new();
    for (prog, id) in lib.links {
        let p: Option<&mut UProbe> = ebpf.program_mut(prog).and_then(|p| p.try_into().ok());
        match p.map(|p| p.take_link(id)) {
            Some(Ok(l)) => taken.push(l),
            Some(Err(e)) => tracing::warn!(program = prog, error = %e, "detaching a uprobe"),
            None => tracing::warn!(program = prog, "detaching: program missing"),
        }
    }
    let file = lib.file;
    std::thread::spawn(move || {
        drop(taken);
        drop(file);
    });
}

/// What one library sync changed: the libraries attached and detached (as
/// shown), and those refused for want of room.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Synced {
    pub attached: Vec<String>,
    pub detached: Vec<String>,
    pub refused: usize,
}

/// Takes out of `attached` every library not pinned whose key is not in
/// `live` (no process maps it any more), for the caller to detach.
pub fn take_unmapped(
    attached: &mut BTreeMap<FileKey, AttachedLib>,
    live: &std::collections::BTreeSet<FileKey>,
) -> Vec<AttachedLib> {
    let gone: Vec<FileKey> = attached
        .iter()
        .filter(|(k, l)| !l.pinned && !live.contains(k))
        .map(|(k, _)| *k)
        .collect();
    gone.into_iter()
        .filter_map(|k| attached.remove(&k))
        .collect()
}

impl super::Probes {
    /// Uprobe links on the NCCL and CUDA libraries (each costs the kernel a
    /// grace period to remove).
    pub fn uprobe_links(&self) -> usize {
        self.nccl_libraries
            .values()
            .chain(self.cuda_extra.values())
            .chain(self.cuda_primary.as_ref().map(|(_, l)| l))
            .map(|l| l.links.len())
            .sum::<usize>()
            + self.launch.lock().map_or(0, |d| d.attached_links())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_through_a_root_is_held_and_checked() {
        let d = std::env::temp_dir().join(format!("faultline-hold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("libnccl.so.2");
        std::fs::write(&p, b"x").unwrap();
        let key = FileKey::of(&p).unwrap();
        let h = AttachedLib::hold(&p, key, "x".into(), false, false).unwrap();
        assert!(h.attach_path.starts_with("/proc/self/fd"));
        // Replaced by a new file (a new image layer): another inode.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"y").unwrap();
        let e = AttachedLib::hold(&p, key, "x".into(), false, false).unwrap_err();
        assert!(e.to_string().contains("no longer the file found"), "{e}");
        // The held file still opens as the old one.
        assert_eq!(FileKey::of(&h.attach_path), Some(key));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
