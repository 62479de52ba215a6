//! Is there a GPU here: an NVIDIA device node and a driver library that
//! loads.
use std::{
    ffi::{CStr, CString},
    fs,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use super::{report::Halt, Args};

/// Why a driver library could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the path has a NUL byte: {0}")]
    Name(#[from] std::ffi::NulError),
    /// dlopen's own message (a missing file, a missing dependency, the
    /// wrong architecture).
    #[error("{0}")]
    Dlopen(String),
    #[error("it has no cuInit")]
    NoCuInit,
}

/// `Ok(path of the library as loaded)` when this machine has an NVIDIA GPU
/// node under `dev` and `libcuda.so.1` loads; `Halt::NoGpu` otherwise. With
/// `--cuda-library` only that library is tried.
pub fn detect(args: &Args, dev: &Path) -> Result<PathBuf, Halt> {
    let lib = match &args.cuda_library {
        Some(p) => p.clone(),
        None => {
            let nodes = nvidia_nodes(dev);
            if nodes.is_empty() {
                return Err(Halt::NoGpu(format!(
                    "no NVIDIA GPU on this machine (no {}/nvidia<N> device node)",
                    dev.display()
                )));
            }
            println!("gpu-check: device nodes {}", nodes.join(" "));
            PathBuf::from("libcuda.so.1")
        }
    };
    loaded_path(&lib).map_err(|e| {
        Halt::NoGpu(format!(
            "no usable NVIDIA driver: {} is not loadable ({e})",
            lib.display()
        ))
    })
}

/// The `nvidia<N>` entries of `dev` (GPUs; `nvidiactl` and `nvidia-uvm`
/// alone are not a GPU).
pub fn nvidia_nodes(dev: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dev)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| {
            n.strip_prefix("nvidia")
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    v.sort();
    v
}

/// dlopen()s `lib` and returns the file it came from (found through
/// `cuInit`'s address), or why it could not.
fn loaded_path(lib: &Path) -> Result<PathBuf, LoadError> {
    let name = CString::new(lib.as_os_str().as_bytes())?;
    // SAFETY: a NUL-terminated file name; the handle is closed below. No
    // function of the library is called: loading runs only its constructors,
    // as the start of any CUDA program does.
    let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated string valid until
        // the next dl* call on this thread, copied here at once.
        let e = unsafe { libc::dlerror() };
        return Err(LoadError::Dlopen(if e.is_null() {
            "dlopen failed".into()
        } else {
            // SAFETY: see above.
            unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
        }));
    }
    // SAFETY: `h` is a live handle from dlopen; the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(h, c"cuInit".as_ptr()) };
    let mut path = None;
    if !sym.is_null() {
        // SAFETY: Dl_info is plain data; dladdr fills it for an address
        // inside a loaded object (`sym` is one).
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `dli_fname` is NUL-terminated and lives as long
        // as the object stays loaded, and it is copied before dlclose.
        if unsafe { libc::dladdr(sym, &mut info) } != 0 && !info.dli_fname.is_null() {
            let f = unsafe { CStr::from_ptr(info.dli_fname) };
            path = Some(PathBuf::from(std::ffi::OsStr::from_bytes(f.to_bytes())));
        }
    }
    // SAFETY: `h` came from dlopen and is closed once.
    unsafe { libc::dlclose(h) };
    if sym.is_null() {
        return Err(LoadError::NoCuInit);
    }
    Ok(path.unwrap_or_else(|| lib.to_path_buf()))
}
