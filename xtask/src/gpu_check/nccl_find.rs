//! Where the node's `libnccl.so.2` and a CUDA runtime are, found without the
//! network: the check's own nvidia-venv (the `nvidia-nccl-cu12` and
//! `nvidia-cuda-runtime-cu12` wheels `scripts/setup.sh` installs), the ld.so
//! cache, the usual library directories, and Python site-packages.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// NCCL's soname, the one library the NCCL part needs.
pub const NCCL_SONAME: &str = "libnccl.so.2";
/// CUDA runtime sonames, the preferred first (NCCL's own major, 12, then
/// the next and the last).
pub const CUDART_SONAMES: [&str; 4] = [
    "libcudart.so.12",
    "libcudart.so.13",
    "libcudart.so.11.0",
    "libcudart.so",
];
/// A wheel's copy of NCCL under a `site-packages` directory.
const WHEEL_NCCL: &str = "nvidia/nccl/lib";
/// A wheel's copy of the CUDA runtime under a `site-packages` directory.
const WHEEL_CUDART: &str = "nvidia/cuda_runtime/lib";

/// Where to look, in order.
#[derive(Clone, Debug, Default)]
pub struct Places {
    /// `site-packages` of the check's own nvidia-venv (first: the wheels
    /// docs/nccl.md documents).
    pub venv: Vec<PathBuf>,
    /// `ldconfig -p`'s output (empty: no ldconfig).
    pub ld_cache: String,
    /// Library directories: `$LD_LIBRARY_PATH`, `$CUDA_HOME`, the CUDA
    /// toolkit's and the distribution's.
    pub dirs: Vec<PathBuf>,
    /// Other Python `site-packages` / `dist-packages` directories.
    pub site_packages: Vec<PathBuf>,
}

/// The libraries the NCCL part runs with.
#[derive(Clone, Debug, PartialEq)]
pub struct Libraries {
    pub nccl: PathBuf,
    pub cudart: PathBuf,
    /// Where each was found, in words.
    pub how: String,
}

/// Paths `ldconfig -p` lists for `soname` (this architecture's entries).
pub fn ld_cache_paths(text: &str, soname: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let (lhs, path) = l.split_once("=>")?;
            let mut words = lhs.split_whitespace();
            (words.next()? == soname).then_some(())?;
            let flags = words.collect::<Vec<_>>().join(" ");
            // `(libc6,x86-64)`; a plain `(libc6)` is a 32-bit library there.
            let ours = if cfg!(target_arch = "aarch64") {
                "AArch64"
            } else {
                "x86-64"
            };
            (flags.is_empty() || flags.contains(ours)).then(|| PathBuf::from(path.trim()))
        })
        .collect()
}

/// The first of `names` that is a file in `dir`.
fn in_dir(dir: &Path, names: &[&str]) -> Option<PathBuf> {
    names.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// Where NCCL is, and where a CUDA runtime is (see [`find_cudart`]); `Err`
/// says what is missing and where it looked.
pub fn find(places: &Places) -> Result<Libraries, String> {
    let Some((nccl, nccl_how)) = find_nccl(places) else {
        return Err(format!(
            "no {NCCL_SONAME} on this node (looked in {})",
            places.describe()
        ));
    };
    with_cudart(places, nccl, nccl_how)
}

/// `nccl` (found `nccl_how`) with the CUDA runtime [`find_cudart`] finds.
pub fn with_cudart(places: &Places, nccl: PathBuf, nccl_how: &str) -> Result<Libraries, String> {
    let Some((cudart, cudart_how)) = find_cudart(places, &nccl) else {
        return Err(format!(
            "{NCCL_SONAME} at {} but no CUDA runtime ({}) to drive it (looked in {})",
            nccl.display(),
            CUDART_SONAMES.join(", "),
            places.describe()
        ));
    };
    Ok(Libraries {
        how: format!("NCCL from {nccl_how}; CUDA runtime from {cudart_how}"),
        nccl,
        cudart,
    })
}

/// The first `libnccl.so.2`: the check's nvidia-venv, the ld.so cache, the
/// library directories, other site-packages; with where it was found.
pub fn find_nccl(places: &Places) -> Option<(PathBuf, &'static str)> {
    let nccl_in_sp = |sp: &PathBuf| in_dir(&sp.join(WHEEL_NCCL), &[NCCL_SONAME]);
    places
        .venv
        .iter()
        .find_map(|sp| {
            nccl_in_sp(sp).map(|p| (p, "the check's nvidia-venv (nvidia-nccl-cu12 wheel)"))
        })
        .or_else(|| {
            ld_cache_paths(&places.ld_cache, NCCL_SONAME)
                .into_iter()
                .find(|p| p.is_file())
                .map(|p| (p, "the ld.so cache"))
        })
        .or_else(|| {
            places
                .dirs
                .iter()
                .find_map(|d| in_dir(d, &[NCCL_SONAME]))
                .map(|p| (p, "a library directory"))
        })
        .or_else(|| {
            places
                .site_packages
                .iter()
                .find_map(nccl_in_sp)
                .map(|p| (p, "Python site-packages (nvidia-nccl wheel)"))
        })
}

/// A CUDA runtime for `nccl`: the runtime wheel beside a wheel's NCCL
/// (`<sp>/nvidia/cuda_runtime/lib`), then the check's nvidia-venv, the
/// ld.so cache, the library directories, other site-packages.
pub fn find_cudart(places: &Places, nccl: &Path) -> Option<(PathBuf, &'static str)> {
    let beside = nccl
        .ends_with(Path::new(WHEEL_NCCL).join(NCCL_SONAME))
        .then(|| nccl.ancestors().nth(3))
        .flatten()
        .and_then(|nv| in_dir(&nv.join("cuda_runtime/lib"), &CUDART_SONAMES));
    beside
        .map(|p| (p, "beside it (nvidia-cuda-runtime wheel)"))
        .or_else(|| {
            places
                .venv
                .iter()
                .find_map(|sp| in_dir(&sp.join(WHEEL_CUDART), &CUDART_SONAMES))
                .map(|p| (p, "the check's nvidia-venv"))
        })
        .or_else(|| {
            CUDART_SONAMES.iter().find_map(|s| {
                ld_cache_paths(&places.ld_cache, s)
                    .into_iter()
                    .find(|p| p.is_file())
                    .map(|p| (p, "the ld.so cache"))
            })
        })
        .or_else(|| {
            places
                .dirs
                .iter()
                .find_map(|d| in_dir(d, &CUDART_SONAMES))
                .map(|p| (p, "a library directory"))
        })
        .or_else(|| {
            places
                .site_packages
                .iter()
                .find_map(|sp| in_dir(&sp.join(WHEEL_CUDART), &CUDART_SONAMES))
                .map(|p| (p, "Python site-packages"))
        })
}

impl Places {
    /// The places, in words (for a skip's reason).
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if !self.venv.is_empty() {
            v.push("the check's nvidia-venv".to_string());
        }
        v.push(if self.ld_cache.trim().is_empty() {
            "the ld.so cache (no ldconfig)".to_string()
        } else {
            "the ld.so cache".to_string()
        });
        v.push(format!(
            "{} library directories ({})",
            self.dirs.len(),
            join_paths(&self.dirs)
        ));
        v.push(format!(
            "{} Python site-packages ({})",
            self.site_packages.len(),
            join_paths(&self.site_packages)
        ));
        v.join(", ")
    }

    /// This node's places: `venv_python`'s and `python`'s site-packages,
    /// the ld.so cache, `$LD_LIBRARY_PATH`, `$CUDA_HOME`, `$CONDA_PREFIX`
    /// and the usual directories (those that exist).
    pub fn of_this_node(venv_python: &Path, python: &Path) -> Self {
        let venv = python_site_packages(venv_python);
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("LD_LIBRARY_PATH") {
            dirs.extend(std::env::split_paths(&p).filter(|d| !d.as_os_str().is_empty()));
        }
        for var in ["CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX"] {
            if let Some(h) = std::env::var_os(var) {
                let h = PathBuf::from(h);
                dirs.extend([h.join("lib64"), h.join("lib")]);
            }
        }
        dirs.extend(
            [
                "/usr/local/cuda/lib64",
                "/usr/local/cuda/targets/x86_64-linux/lib",
                "/usr/lib/x86_64-linux-gnu",
                "/usr/lib64",
                "/usr/lib",
                "/usr/local/lib",
                "/usr/local/nccl/lib",
                "/opt/nccl/lib",
            ]
            .map(PathBuf::from),
        );
        dirs.extend(glob_dirs(Path::new("/usr/local"), "cuda-", "lib64"));
        let mut site_packages = python_site_packages(python);
        for base in ["/usr/lib", "/usr/local/lib", "/usr/lib64"] {
            for sub in ["site-packages", "dist-packages"] {
                site_packages.extend(glob_dirs(Path::new(base), "python3", sub));
            }
        }
        site_packages.push(PathBuf::from("/usr/lib/python3/dist-packages"));
        if let Some(home) = std::env::var_os("HOME") {
            site_packages.extend(glob_dirs(
                &PathBuf::from(home).join(".local/lib"),
                "python3",
                "site-packages",
            ));
        }
        let exists = |v: Vec<PathBuf>| dedup(v.into_iter().filter(|d| d.is_dir()).collect());
        Self {
            venv: exists(venv),
            ld_cache: ld_cache(),
            dirs: exists(dirs),
            site_packages: exists(site_packages),
        }
    }
}

fn join_paths(v: &[PathBuf]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn dedup(v: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in v {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// `<base>/<prefix>*/<sub>` for each entry of `base` whose name starts with `prefix`.
fn glob_dirs(base: &Path, prefix: &str, sub: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path().join(sub))
        .collect();
    v.sort();
    v
}

/// `ldconfig -p` (it reads the cache file; no network), empty when absent.
fn ld_cache() -> String {
    for ldconfig in ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"] {
        let out = Command::new(ldconfig)
            .arg("-p")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        if let Ok(o) = out {
            if o.status.success() {
                return String::from_utf8_lossy(&o.stdout).into_owned();
            }
        }
    }
    String::new()
}

/// The `site-packages` / `dist-packages` entries of a Python's `sys.path`
/// (none when it does not run). Falls back to `<venv>/lib/python*/site-packages`
/// beside `bin/python`.
fn python_site_packages(python: &Path) -> Vec<PathBuf> {
    let out = Command::new(python)
        .args(["-c", "import sys\nfor p in sys.path: print(p)"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let mut v: Vec<PathBuf> = match out {
        Ok(o) if o.status.success() => site_dirs(&String::from_utf8_lossy(&o.stdout)),
        _ => Vec::new(),
    };
    if let Some(venv) = python.parent().and_then(Path::parent) {
        v.extend(glob_dirs(&venv.join("lib"), "python", "site-packages"));
    }
    dedup(v)
}

/// The lines of a `sys.path` listing that name package directories.
pub fn site_dirs(text: &str) -> Vec<PathBuf> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.ends_with("site-packages") || l.ends_with("dist-packages"))
        .map(PathBuf::from)
        .collect()
}
