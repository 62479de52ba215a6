//! Finding the NCCL libraries to attach the uprobes to.
//!
//! NCCL reaches a node two ways: the system's `libnccl.so.2` (ld.so cache,
//! a CUDA install) and, for most PyTorch jobs, a Python wheel
//! (`nvidia-nccl-cu12`: `site-packages/nvidia/nccl/lib/libnccl.so.2`), one
//! copy per virtual environment. A uprobe covers one file (its inode), so
//! every distinct copy found is attached: the configured paths, the ld.so
//! cache, the copies running processes map, and the wheel copy beside every
//! `site-packages` a running process maps something from.
use std::{
    collections::BTreeSet,
    fs,
    ops::ControlFlow,
    path::{Path, PathBuf},
};

pub const SONAME: &str = "libnccl.so.2";

/// Most libraries attached (each costs one uprobe per API).
pub const MAX_LIBRARIES: usize = 8;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NcclLibError {
    #[error("NCCL probes inactive: configured nccl.library {0} does not exist")]
    ConfiguredMissing(PathBuf),
    #[error(
        "NCCL probes inactive: {SONAME} not found (looked in the ld.so cache, the maps of running \
         processes and their Python site-packages); set nccl.library (--nccl-library) to the \
         library your jobs load"
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

/// The distinct NCCL libraries to attach (canonical paths), at most
/// [`MAX_LIBRARIES`].
pub fn discover(s: &Search) -> Result<Vec<PathBuf>, NcclLibError> {
    if !s.configured.is_empty() {
        let mut out = Vec::new();
        for p in &s.configured {
            if !p.is_file() {
                return Err(NcclLibError::ConfiguredMissing(p.clone()));
            }
            out.push(canonical(p));
        }
        out.dedup();
        return Ok(out);
    }
    let mut found = BTreeSet::new();
    if s.ld_cache {
        if let Some(p) = crate::cuda_lib::find_in_ld_cache(SONAME) {
            found.insert(canonical(&p));
        }
    }
    if let Some(proc_root) = &s.proc_root {
        for p in from_proc_maps(proc_root) {
            found.insert(canonical(&p));
        }
    }
    if found.is_empty() {
        return Err(NcclLibError::NotFound);
    }
    Ok(found.into_iter().take(MAX_LIBRARIES).collect())
}

fn canonical(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The wheel's copy under a `site-packages` (or `dist-packages`) directory.
pub fn wheel_copy(site_packages: &Path) -> PathBuf {
    site_packages.join("nvidia/nccl/lib").join(SONAME)
}

/// NCCL libraries that running processes map, and the wheel copies beside
/// the `site-packages` trees they map files from (bounded scan).
pub fn from_proc_maps(proc_root: &Path) -> Vec<PathBuf> {
    let mut out = BTreeSet::new();
    crate::cuda_lib::visit_mapped_files(proc_root, |p| {
        if crate::cuda_lib::file_name_starts_with(p, "libnccl.so") && p.is_file() {
            out.insert(p.to_path_buf());
        }
        if let Some(site) = p.to_str().and_then(site_packages_of) {
            let w = wheel_copy(&site);
            if w.is_file() {
                out.insert(w);
            }
        }
        if out.len() >= MAX_LIBRARIES {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    out.into_iter().collect()
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
        let s = Search {
            configured: vec![],
            ld_cache: false,
            proc_root: Some(d.join("proc")),
        };
        let got = discover(&s).unwrap();
        assert_eq!(got, vec![canonical(&sys), canonical(&lib)]);
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
        assert_eq!(discover(&s).unwrap(), vec![canonical(&lib)]);
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
