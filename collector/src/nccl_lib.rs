//! Finding the NCCL libraries to attach the uprobes to.
//!
//! NCCL reaches a node three ways: the system's `libnccl.so.2` (ld.so
//! cache, a CUDA install); for most PyTorch jobs a Python wheel
//! (`nvidia-nccl-cu12`: `site-packages/nvidia/nccl/lib/libnccl.so.2`), one
//! copy per virtual environment; and, where most training runs, inside a
//! container image (an NGC image on Kubernetes, an Enroot/Pyxis squashfs on
//! Slurm) at a path the host does not have. A uprobe covers one file (its
//! inode), so every distinct file found is attached: the configured paths,
//! the ld.so cache, and what running processes map, each resolved through
//! the process's own root ([`crate::proc_libs`]) and keyed by (device,
//! inode), so one image layer shared by many pods is attached once.
use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
};

use crate::proc_libs::{Family, FileKey, LibScan};

pub const SONAME: &str = "libnccl.so.2";

/// Most libraries attached at once (each costs one uprobe per API); more
/// are refused and counted (`faultline_nccl_libraries_refused_total`).
pub const MAX_LIBRARIES: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NcclLibError {
    #[error("NCCL probes inactive: configured nccl.library {0} does not exist")]
    ConfiguredMissing(PathBuf),
    #[error(
        "NCCL probes inactive: {SONAME} not found (looked in the ld.so cache, the maps of running \
         processes through their own roots, containers included, and their Python \
         site-packages); set nccl.library (--nccl-library) to the library your jobs load"
    )]
    NotFound,
}

/// Where to look; tests point these at fake trees.
#[derive(Clone, Debug)]
pub struct Search {
    /// Configured libraries: used alone when set.
    pub configured: Vec<PathBuf>,
    /// Consult `ldconfig -p`.
    pub ld_cache: bool,
    /// `/proc` to scan for processes that map NCCL or a `site-packages` tree.
    pub proc_root: Option<PathBuf>,
}

impl Default for Search {
    fn default() -> Self {
        Self {
            configured: Vec::new(),
            ld_cache: true,
            proc_root: Some(PathBuf::from("/proc")),
        }
    }
}

/// One library file found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// A path that opens it now (the host's, or `/proc/PID/root/…`).
    pub path: PathBuf,
    pub key: FileKey,
    /// How to name it: the host path, or `PATH in pid N's root`.
    pub shown: String,
    /// Configured or from the ld.so cache: attached for good; the others are
    /// detached once no process maps them.
    pub pinned: bool,
    /// `path` is the host's own (not through a process's root).
    pub on_host: bool,
}

impl Found {
    /// A host file (configured, ld.so cache): canonical path, pinned.
    pub fn host(p: &Path, pinned: bool) -> Option<Self> {
        let path = canonical(p);
        Some(Self {
            key: FileKey::of(&path)?,
            shown: path.display().to_string(),
            path,
            pinned,
            on_host: true,
        })
    }

    /// What a scan found in processes.
    pub fn mapped(proc_root: &Path, key: FileKey, m: &crate::proc_libs::Mapped) -> Self {
        let path = m.path(proc_root);
        let shown = if m.on_host {
            m.inner.display().to_string()
        } else {
            format!("{} in pid {}'s root", m.inner.display(), m.pid)
        };
        Self {
            path,
            key,
            shown,
            pinned: false,
            on_host: m.on_host,
        }
    }
}

/// The scanner family for NCCL: mapped `libnccl.so*` files, and the wheel
/// copy beside any `site-packages` a process maps a file from.
pub const FAMILY: Family = Family {
    name: "nccl",
    candidates: candidates_of,
};

fn candidates_of(mapped: &str) -> Vec<String> {
    let mut out = Vec::new();
    if crate::cuda_lib::file_name_starts_with(Path::new(mapped), "libnccl.so") {
        out.push(mapped.to_string());
    }
    if let Some(site) = site_packages_of(mapped) {
        out.push(wheel_copy(&site).display().to_string());
    }
    out
}

/// The distinct NCCL libraries to attach, at most [`MAX_LIBRARIES`]: a
/// one-shot scan (see [`discover_with`] for the incremental one).
pub fn discover(s: &Search) -> Result<Vec<Found>, NcclLibError> {
    let mapped = s
        .proc_root
        .as_ref()
        .map(|p| LibScan::new(p.clone(), vec![FAMILY]).scan().remove(0));
    discover_with(s, mapped, s.proc_root.as_deref())
}

/// The libraries of `s` plus those a scan found in processes (`mapped`).
pub fn discover_with(
    s: &Search,
    mapped: Option<BTreeMap<FileKey, crate::proc_libs::Mapped>>,
    proc_root: Option<&Path>,
) -> Result<Vec<Found>, NcclLibError> {
    if !s.configured.is_empty() {
        let mut out: Vec<Found> = Vec::new();
        for p in &s.configured {
            let f =
                Found::host(p, true).ok_or_else(|| NcclLibError::ConfiguredMissing(p.clone()))?;
            if !out.iter().any(|o| o.key == f.key) {
                out.push(f);
            }
        }
        return Ok(out);
    }
    let mut found: BTreeMap<FileKey, Found> = BTreeMap::new();
    if s.ld_cache {
        if let Some(f) =
            crate::cuda_lib::find_in_ld_cache(SONAME).and_then(|p| Found::host(&p, true))
        {
            found.insert(f.key, f);
        }
    }
    if let (Some(mapped), Some(root)) = (mapped, proc_root) {
        for (k, m) in &mapped {
            found
                .entry(*k)
                .or_insert_with(|| Found::mapped(root, *k, m));
        }
    }
    if found.is_empty() {
        return Err(NcclLibError::NotFound);
    }
    Ok(found.into_values().take(MAX_LIBRARIES).collect())
}

fn canonical(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The wheel's copy under a `site-packages` (or `dist-packages`) directory.
pub fn wheel_copy(site_packages: &Path) -> PathBuf {
    site_packages.join("nvidia/nccl/lib").join(SONAME)
}

/// `…/site-packages` (or `dist-packages`) of a mapped file's path.
fn site_packages_of(path: &str) -> Option<PathBuf> {
    ["/site-packages/", "/dist-packages/"].iter().find_map(|m| {
        path.find(m)
            .map(|i| PathBuf::from(&path[..i + m.len() - 1]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("faultline-nccllib-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn finds_the_wheel_copy_beside_a_mapped_site_packages_file() {
        let d = tmp("wheel");
        let site = d.join("venv/lib/python3.11/site-packages");
        let lib = wheel_copy(&site);
        fs::create_dir_all(lib.parent().unwrap()).unwrap();
        fs::write(&lib, b"x").unwrap();
        // A Python process maps torch (not NCCL yet): the wheel copy is found.
        let p = d.join("proc/4242");
        fs::create_dir_all(&p).unwrap();
        fs::write(
            p.join("maps"),
            format!(
                "7f00-7f10 r-xp 00000000 08:01 1 {}/torch/lib/libtorch.so\n",
                site.display()
            ),
        )
        .unwrap();
        // Another process maps a system copy directly.
        let sys = d.join("usr/lib/libnccl.so.2.21.5");
        fs::create_dir_all(sys.parent().unwrap()).unwrap();
        fs::write(&sys, b"x").unwrap();
        let q = d.join("proc/77");
        fs::create_dir_all(&q).unwrap();
        fs::write(
            q.join("maps"),
            format!("7f00-7f10 r-xp 0 08:01 2 {}\n", sys.display()),
        )
        .unwrap();
        fs::create_dir_all(d.join("proc/self")).unwrap();
        for pid in ["4242", "77"] {
            let p = d.join("proc").join(pid);
            fs::write(
                p.join("stat"),
                format!("{pid} (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"),
            )
            .unwrap();
            std::os::unix::fs::symlink("/", p.join("root")).unwrap();
        }
        let s = Search {
            configured: vec![],
            ld_cache: false,
            proc_root: Some(d.join("proc")),
        };
        let got = discover(&s).unwrap();
        let mut paths: Vec<PathBuf> = got.iter().map(|f| f.path.clone()).collect();
        paths.sort();
        let mut want = vec![canonical(&sys), canonical(&lib)];
        want.sort();
        assert_eq!(paths, want);
        assert!(
            got.iter().all(|f| !f.pinned),
            "found in processes: detachable"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn configured_paths_win_and_a_missing_one_is_an_error() {
        let d = tmp("cfg");
        let lib = d.join("libnccl.so.2");
        fs::write(&lib, b"x").unwrap();
        let s = Search {
            configured: vec![lib.clone()],
            ld_cache: false,
            proc_root: None,
        };
        let got = discover(&s).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].path.clone(), got[0].pinned),
            (canonical(&lib), true)
        );
        let s = Search {
            configured: vec![d.join("nope.so")],
            ..s
        };
        let e = discover(&s).unwrap_err().to_string();
        assert!(e.contains("nope.so does not exist"), "{e}");
        let s = Search {
            configured: vec![],
            ld_cache: false,
            proc_root: Some(d.join("noproc")),
        };
        let e = discover(&s).unwrap_err().to_string();
        assert!(e.contains("set nccl.library"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn site_packages_is_cut_at_the_marker() {
        assert_eq!(
            site_packages_of("/v/lib/python3.11/site-packages/torch/lib/x.so"),
            Some(PathBuf::from("/v/lib/python3.11/site-packages"))
        );
        assert_eq!(
            site_packages_of("/usr/lib/python3/dist-packages/a.so"),
            Some(PathBuf::from("/usr/lib/python3/dist-packages"))
        );
        assert_eq!(site_packages_of("/usr/lib/libc.so.6"), None);
    }
}
