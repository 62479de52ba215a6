//! Finding the CUDA driver library to attach the uprobes to.
//!
//! Uprobes attach to a file (its inode), so every process that maps that file
//! later is covered without per-pid work.
use std::{
    fs,
    ops::ControlFlow,
    path::{Path, PathBuf},
    process::Command,
};

pub const SONAME: &str = "libcuda.so.1";

/// Usual install locations of the driver library.
pub const USUAL_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/usr/lib64/libcuda.so.1",
    "/usr/lib/libcuda.so.1",
    "/usr/local/nvidia/lib64/libcuda.so.1",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/run/nvidia/driver/usr/lib64/libcuda.so.1",
    // The host's library directories as the DaemonSet mounts them
    // (deploy/kubernetes/collector/collector.yaml), beside the image's own.
    "/host/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "/host/usr/lib64/libcuda.so.1",
    "/usr/lib/wsl/lib/libcuda.so.1",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CudaLibError {
    #[error("CUDA probes inactive: configured cuda.library {0} does not exist")]
    ConfiguredMissing(PathBuf),
    #[error(
        "CUDA probes inactive: {SONAME} not found (looked in the ld.so cache, the maps of \
         running processes and {}); set cuda.library (--cuda-library) if it is elsewhere",
        .looked.join(", ")
    )]
    NotFound { looked: Vec<String> },
}

/// Where to look; tests point these at fake trees.
#[derive(Clone, Debug)]
pub struct Search {
    pub configured: Option<PathBuf>,
    /// Consult `ldconfig -p`.
    pub ld_cache: bool,
    /// `/proc` to scan for processes that already map the library.
    pub proc_root: Option<PathBuf>,
    pub usual: Vec<PathBuf>,
}

impl Default for Search {
    fn default() -> Self {
        Self {
            configured: None,
            ld_cache: true,
            proc_root: Some(PathBuf::from("/proc")),
            usual: USUAL_PATHS.iter().map(PathBuf::from).collect(),
        }
    }
}

/// Resolves the library path (symlinks followed).
pub fn discover(s: &Search) -> Result<PathBuf, CudaLibError> {
    if let Some(p) = &s.configured {
        return if p.is_file() {
            Ok(fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        } else {
            Err(CudaLibError::ConfiguredMissing(p.clone()))
        };
    }
    let found = s
        .ld_cache
        .then(from_ld_cache)
        .flatten()
        .or_else(|| s.proc_root.as_deref().and_then(from_proc_maps))
        .or_else(|| s.usual.iter().find(|p| p.is_file()).cloned());
    match found {
        // A path through a process's root stays as it is (canonicalizing
        // would resolve the root link against the collector's own tree).
        Some(p) if s.proc_root.as_ref().is_some_and(|r| p.starts_with(r)) => Ok(p),
        Some(p) => Ok(fs::canonicalize(&p).unwrap_or(p)),
        None => Err(CudaLibError::NotFound {
            looked: s.usual.iter().map(|p| p.display().to_string()).collect(),
        }),
    }
}

fn from_ld_cache() -> Option<PathBuf> {
    find_in_ld_cache(SONAME)
}

/// Looks `soname` up in the ld.so cache (`ldconfig -p`).
pub fn find_in_ld_cache(soname: &str) -> Option<PathBuf> {
    let out = Command::new("ldconfig").arg("-p").output().ok()?;
    parse_ld_cache_for(&String::from_utf8_lossy(&out.stdout), soname)
}

/// Directories the dynamic loader searches by default on x86-64 Linux
/// (Debian/Ubuntu multiarch first, then Fedora/RHEL, then the plain ones).
pub const SYSTEM_LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/lib",
];

/// Finds `soname` as programs would bind to it: the ld.so cache, else the
/// loader's default directories (hosts and minimal images without
/// `ldconfig` or its cache).
pub fn find_system_library(soname: &str) -> Option<PathBuf> {
    find_in_ld_cache(soname).or_else(|| find_in_dirs(SYSTEM_LIB_DIRS, soname))
}

/// First `dir/soname` that is a file.
pub fn find_in_dirs(dirs: &[&str], soname: &str) -> Option<PathBuf> {
    dirs.iter()
        .map(|d| Path::new(d).join(soname))
        .find(|p| p.is_file())
}

/// Picks the x86-64 `libcuda.so.1` from `ldconfig -p` output.
pub fn parse_ld_cache(text: &str) -> Option<PathBuf> {
    parse_ld_cache_for(text, SONAME)
}

/// Picks the x86-64 `soname` from `ldconfig -p` output.
pub fn parse_ld_cache_for(text: &str, soname: &str) -> Option<PathBuf> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(&format!("{soname} ")))
        .filter(|l| !l.contains("(libc6)") || l.contains("x86-64"))
        .filter_map(|l| l.split("=>").nth(1))
        .map(|p| PathBuf::from(p.trim()))
        .find(|p| p.is_file())
}

/// Calls `visit` with every file path mapped by the processes under
/// `proc_root` (the first 65,536 entries, each process's `maps` in order)
/// until it breaks; returns what it broke with.
pub fn visit_mapped_files<B>(
    proc_root: &Path,
    mut visit: impl FnMut(&Path) -> ControlFlow<B>,
) -> Option<B> {
    let rd = fs::read_dir(proc_root).ok()?;
    for e in rd.flatten().take(65536) {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(maps) = fs::read_to_string(e.path().join("maps")) else {
            continue;
        };
        for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
            if let ControlFlow::Break(b) = visit(Path::new(path)) {
                return Some(b);
            }
        }
    }
    None
}

/// Whether `path`'s file name starts with `prefix` (`libcuda.so`).
pub fn file_name_starts_with(path: &Path, prefix: &str) -> bool {
    path.file_name()
        .is_some_and(|f| f.to_string_lossy().starts_with(prefix))
}

/// The scanner family for the CUDA driver: mapped `libcuda.so*` files.
pub const FAMILY: crate::proc_libs::Family = crate::proc_libs::Family {
    name: "cuda",
    candidates: candidates_of,
};

fn candidates_of(mapped: &str) -> Vec<String> {
    if file_name_starts_with(Path::new(mapped), "libcuda.so") {
        vec![mapped.to_string()]
    } else {
        Vec::new()
    }
}

/// First mapped `libcuda.so*` of any process, resolved through the
/// process's own root (a container's driver library, bind-mounted by the
/// NVIDIA container toolkit at a path the host may not have): a path that
/// opens it now.
pub fn from_proc_maps(proc_root: &Path) -> Option<PathBuf> {
    let mut scan = crate::proc_libs::LibScan::new(proc_root, vec![FAMILY]);
    let found = scan.scan().remove(0);
    // The most-mapped copy: the driver every container shares.
    let (_, m) = found
        .iter()
        .max_by_key(|(k, m)| (m.pids, std::cmp::Reverse(**k)))?;
    Some(m.path(proc_root))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("faultline-cudalib-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn system_library_falls_back_to_the_first_directory_holding_it() {
        let a = tmp("dir-a");
        let b = tmp("dir-b");
        fs::write(b.join("libibverbs.so.1"), b"x").unwrap();
        let dirs = [a.to_str().unwrap(), b.to_str().unwrap()];
        assert_eq!(
            find_in_dirs(&dirs, "libibverbs.so.1"),
            Some(b.join("libibverbs.so.1"))
        );
        fs::write(a.join("libibverbs.so.1"), b"x").unwrap();
        assert_eq!(
            find_in_dirs(&dirs, "libibverbs.so.1"),
            Some(a.join("libibverbs.so.1"))
        );
        assert_eq!(find_in_dirs(&dirs, "libnothing.so.9"), None);
    }

    #[test]
    fn configured_path_wins_and_a_missing_one_is_an_error() {
        let d = tmp("cfg");
        let lib = d.join("libcuda.so.1");
        fs::write(&lib, b"x").unwrap();
        let s = Search {
            configured: Some(lib.clone()),
            ld_cache: false,
            proc_root: None,
            usual: vec![],
        };
        assert_eq!(discover(&s).unwrap(), fs::canonicalize(&lib).unwrap());
        let s = Search {
            configured: Some(d.join("nope.so")),
            ..s
        };
        let e = discover(&s).unwrap_err();
        assert!(e.to_string().contains("nope.so does not exist"), "{e}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn not_found_names_where_it_looked() {
        let d = tmp("none");
        let s = Search {
            configured: None,
            ld_cache: false,
            proc_root: Some(d.clone()),
            usual: vec![d.join("a/libcuda.so.1"), d.join("b/libcuda.so.1")],
        };
        let e = discover(&s).unwrap_err().to_string();
        assert!(
            e.starts_with("CUDA probes inactive: libcuda.so.1 not found (looked in"),
            "{e}"
        );
        assert!(
            e.contains("a/libcuda.so.1") && e.contains("b/libcuda.so.1"),
            "{e}"
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn finds_the_library_in_a_fake_proc_maps_and_usual_paths() {
        let d = tmp("maps");
        let lib = d.join("driver/libcuda.so.550.54");
        fs::create_dir_all(lib.parent().unwrap()).unwrap();
        fs::write(&lib, b"x").unwrap();
        let p = d.join("proc/4242");
        fs::create_dir_all(&p).unwrap();
        fs::write(
            p.join("maps"),
            format!("7f00-7f10 r-xp 00000000 08:01 123 {}\n", lib.display()),
        )
        .unwrap();
        fs::write(
            p.join("stat"),
            "4242 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/", p.join("root")).unwrap();
        fs::create_dir_all(d.join("proc/self")).unwrap();
        assert_eq!(from_proc_maps(&d.join("proc")), Some(lib.clone()));
        // Inside a container only (its root is elsewhere): through its root.
        let c = d.join("proc/4243");
        fs::create_dir_all(&c).unwrap();
        fs::write(
            c.join("maps"),
            "7f00-7f10 r-xp 0 08:01 9 /usr/lib64/libcuda.so.1\n",
        )
        .unwrap();
        fs::write(
            c.join("stat"),
            "4243 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n",
        )
        .unwrap();
        let croot = d.join("ctr");
        fs::create_dir_all(croot.join("usr/lib64")).unwrap();
        fs::write(croot.join("usr/lib64/libcuda.so.1"), b"y").unwrap();
        std::os::unix::fs::symlink(&croot, c.join("root")).unwrap();
        fs::remove_dir_all(&p).unwrap();
        assert_eq!(
            from_proc_maps(&d.join("proc")),
            Some(d.join("proc/4243/root/usr/lib64/libcuda.so.1"))
        );
        let s = Search {
            configured: None,
            ld_cache: false,
            proc_root: None,
            usual: vec![d.join("x"), lib.clone()],
        };
        assert_eq!(discover(&s).unwrap(), fs::canonicalize(&lib).unwrap());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn ld_cache_parsing() {
        let d = tmp("ld");
        let lib = d.join("libcuda.so.1");
        fs::write(&lib, b"x").unwrap();
        let text = format!(
            "3 libs found in cache `/etc/ld.so.cache'\n\
             \tlibcudart.so.12 (libc6,x86-64) => /nonexistent/libcudart.so.12\n\
             \tlibcuda.so.1 (libc6,x86-64) => {}\n",
            lib.display()
        );
        assert_eq!(parse_ld_cache(&text), Some(lib));
        assert_eq!(
            parse_ld_cache("libcudart.so.1 (libc6,x86-64) => /x\n"),
            None
        );
        fs::remove_dir_all(&d).unwrap();
    }
}
