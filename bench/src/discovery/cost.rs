//! What one discovery pass costs (the calling thread's CPU time, wall
//! time, and the CPU of the child processes it ran), and the rescan the
//! collector ran before `LibScan` (kept here as it was, to measure it
//! beside the new one).
use std::{
    collections::BTreeSet,
    ops::ControlFlow,
    path::{Path, PathBuf},
    time::Instant,
};

/// One measured pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    /// The calling thread's CPU time (user + system), s.
    pub cpu_s: f64,
    pub wall_s: f64,
    /// CPU of child processes it waited for (`ldconfig -p`), s.
    pub children_s: f64,
}

impl Cost {
    /// Everything it cost in CPU, s.
    pub fn total_cpu_s(&self) -> f64 {
        self.cpu_s + self.children_s
    }
}

fn timespec_s(ts: &libc::timespec) -> f64 {
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CPU time of the calling thread, s.
pub fn thread_cpu_s() -> f64 {
    // SAFETY: a zeroed timespec is a valid out-parameter.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    timespec_s(&ts)
}

/// CPU time of this process's reaped children, s.
fn children_cpu_s() -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time of the whole process (every thread), s.
pub fn process_cpu_s() -> f64 {
    // SAFETY: a zeroed timespec is a valid out-parameter.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    timespec_s(&ts)
}

/// Runs `f` and measures it.
pub fn measured<T>(f: impl FnOnce() -> T) -> (T, Cost) {
    let (c0, k0, t0) = (thread_cpu_s(), children_cpu_s(), Instant::now());
    let v = f();
    let cost = Cost {
        wall_s: t0.elapsed().as_secs_f64(),
        cpu_s: thread_cpu_s() - c0,
        children_s: children_cpu_s() - k0,
    };
    (v, cost)
}

/// Most NCCL libraries the old discovery collected before it stopped.
const OLD_MAX_LIBRARIES: usize = 8;

/// The collector's NCCL rescan before `LibScan` (commit f46b817's
/// `nccl_lib::from_proc_maps`, minus the ld.so cache, measured apart):
/// every process's `maps` read in full at every rescan through
/// [`collector::cuda_lib::visit_mapped_files`], each mapped `libnccl.so*`
/// and the wheel copy beside each `site-packages` checked in the
/// collector's own mount namespace, stopping at 8 libraries.
pub fn old_rescan(proc_root: &Path) -> Vec<PathBuf> {
    let mut out = BTreeSet::new();
    collector::cuda_lib::visit_mapped_files(proc_root, |p| {
        if collector::cuda_lib::file_name_starts_with(p, "libnccl.so") && p.is_file() {
            out.insert(p.to_path_buf());
        }
        if let Some(site) = p.to_str().and_then(site_packages_of) {
            let w = collector::nccl_lib::wheel_copy(&site);
            if w.is_file() {
                out.insert(w);
            }
        }
        if out.len() >= OLD_MAX_LIBRARIES {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    out.into_iter()
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `…/site-packages` (or `dist-packages`) of a mapped file's path.
fn site_packages_of(path: &str) -> Option<PathBuf> {
    ["/site-packages/", "/dist-packages/"].iter().find_map(|m| {
        path.find(m)
            .map(|i| PathBuf::from(&path[..i + m.len() - 1]))
    })
}

/// Process directories under `proc_root` now.
pub fn pids(proc_root: &Path) -> usize {
    std::fs::read_dir(proc_root).map_or(0, |rd| {
        rd.flatten()
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_packages_is_cut_at_the_marker() {
        assert_eq!(
            site_packages_of("/v/lib/python3.11/site-packages/torch/lib/x.so"),
            Some(PathBuf::from("/v/lib/python3.11/site-packages"))
        );
        assert_eq!(site_packages_of("/usr/lib/libc.so.6"), None);
    }

    #[test]
    fn measured_counts_this_threads_cpu() {
        let ((), c) = measured(|| {
            let t = Instant::now();
            while t.elapsed().as_millis() < 20 {
                std::hint::black_box(0u64);
            }
        });
        assert!(c.cpu_s > 0.01 && c.wall_s >= 0.02, "{c:?}");
    }
}
