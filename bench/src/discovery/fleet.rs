//! The processes `faultline-bench discovery` scans: `sleep` programs that
//! map a few shared libraries (through `LD_PRELOAD`), half of them in a
//! mount namespace of their own with a private tmpfs holding their own
//! copy of a library (as a container or an Enroot job sees its image), a
//! few mapping the stand-in `libnccl.so.2` and `libcuda.so.1`. Every
//! process started here is killed and reaped when the [`Fleet`] drops,
//! and dies with the benchmark if it crashes (`PR_SET_PDEATHSIG`).
use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _, Result};

/// Ordinary libraries a process may map (the first ones found are used).
const COMMON_LIBS: &[&str] = &[
    "libz.so.1",
    "libm.so.6",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libcrypto.so.3",
    "libssl.so.3",
    "libzstd.so.1",
    "liblzma.so.5",
    "libbz2.so.1.0",
    "libffi.so.8",
    "libexpat.so.1",
    "libuuid.so.1",
];

/// What to start.
#[derive(Clone, Debug)]
pub struct Plan {
    pub procs: usize,
    /// Of `procs`, those in their own mount namespace.
    pub namespaced: usize,
    /// Of `procs`, those mapping the NCCL and CUDA stand-ins (half of them
    /// in namespaces, each with its own copies).
    pub with_nccl: usize,
    /// Ordinary libraries each process maps.
    pub libs: usize,
}

/// One started process (its pid is the `sleep`'s: `unshare` and `sh` exec).
struct Proc {
    child: Child,
    /// A file name its maps shows once its libraries are mapped.
    marker: String,
}

/// The started processes and their scratch directory.
pub struct Fleet {
    procs: Vec<Proc>,
    dir: PathBuf,
    sleep: PathBuf,
    libs: Vec<PathBuf>,
    /// Seconds it took to start them all and see their libraries mapped.
    pub start_s: f64,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for p in &mut self.procs {
            let _ = p.child.kill();
        }
        for p in &mut self.procs {
            let _ = p.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The mount point (empty on the host) where a namespace's tmpfs goes.
fn mount_point(dir: &Path) -> PathBuf {
    dir.join("job-image")
}

impl Fleet {
    /// Starts `plan`'s processes and waits until each maps its libraries.
    pub fn start(plan: &Plan) -> Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("faultline-bench-discovery-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(mount_point(&dir))
            .with_context(|| format!("creating {}", dir.display()))?;
        let dirs = collector::cuda_lib::SYSTEM_LIB_DIRS;
        let libs: Vec<PathBuf> = COMMON_LIBS
            .iter()
            .filter_map(|l| collector::cuda_lib::find_in_dirs(dirs, l))
            .take(plan.libs.max(1))
            .collect();
        if libs.is_empty() {
            bail!("none of {COMMON_LIBS:?} in {dirs:?}");
        }
        let sleep = ["/usr/bin/sleep", "/bin/sleep"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .context("no sleep program in /usr/bin or /bin")?;
        // What /proc/PID/exe shows once it runs.
        let sleep = std::fs::canonicalize(&sleep).unwrap_or(sleep);
        for s in [tests::fake_nccl(), tests::fake_libcuda()] {
            if !s.is_file() {
                bail!("stand-in {} missing (built by tests/build.rs)", s.display());
            }
        }
        let t0 = Instant::now();
        let mut fleet = Self {
            procs: Vec::with_capacity(plan.procs),
            dir,
            sleep,
            libs,
            start_s: 0.0,
        };
        for i in 0..plan.procs {
            let ns = i < plan.namespaced;
            // The NCCL ranks: the first of each half.
            let nccl = if ns {
                i < plan.with_nccl / 2
            } else {
                i - plan.namespaced < plan.with_nccl - plan.with_nccl / 2
            };
            let p = if ns {
                fleet.spawn_namespaced(nccl)?
            } else {
                fleet.spawn_host(nccl)?
            };
            fleet.procs.push(p);
        }
        fleet.wait_mapped(0, Duration::from_secs(180))?;
        fleet.start_s = t0.elapsed().as_secs_f64();
        Ok(fleet)
    }

    /// Starts one more process in a namespace of its own with fresh copies
    /// of the NCCL and CUDA stand-ins (new files: new inodes); returns its
    /// pid once it maps them.
    pub fn add_job(&mut self) -> Result<u32> {
        let p = self.spawn_namespaced(true)?;
        let pid = p.child.id();
        self.procs.push(p);
        self.wait_mapped(self.procs.len() - 1, Duration::from_secs(30))?;
        Ok(pid)
    }

    /// Ends the process `pid` started here (killed and reaped).
    pub fn end(&mut self, pid: u32) {
        if let Some(i) = self.procs.iter().position(|p| p.child.id() == pid) {
            let mut p = self.procs.swap_remove(i);
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    /// The scratch directory (every namespace's libraries are under it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }

    /// The ordinary libraries the processes map.
    pub fn libs(&self) -> &[PathBuf] {
        &self.libs
    }

    /// Mean lines of the started processes' maps (a sample of 100).
    pub fn mean_maps_lines(&self) -> f64 {
        let step = (self.procs.len() / 100).max(1);
        let n: Vec<usize> = self
            .procs
            .iter()
            .step_by(step)
            .filter_map(|p| std::fs::read_to_string(format!("/proc/{}/maps", p.child.id())).ok())
            .map(|m| m.lines().count())
            .collect();
        n.iter().sum::<usize>() as f64 / n.len().max(1) as f64
    }

    fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
        unsafe {
            c.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        c
    }

    fn spawn_host(&self, nccl: bool) -> Result<Proc> {
        let mut preload = self.libs.clone();
        if nccl {
            preload.push(tests::fake_libcuda());
            preload.push(tests::fake_nccl());
        }
        let marker = file_name(preload.last())?;
        let child = self
            .command(&self.sleep)
            .arg("infinity")
            .env("LD_PRELOAD", join(&preload))
            .spawn()
            .with_context(|| format!("starting {}", self.sleep.display()))?;
        Ok(Proc { child, marker })
    }

    /// `unshare --mount` with a private tmpfs at the mount point holding a
    /// copy of the first library (and of the stand-ins for an NCCL rank).
    fn spawn_namespaced(&self, nccl: bool) -> Result<Proc> {
        let mp = mount_point(&self.dir);
        let mut copies = vec![self.libs[0].clone()];
        if nccl {
            copies.push(tests::fake_libcuda());
            copies.push(tests::fake_nccl());
        }
        let inside: Vec<PathBuf> = copies
            .iter()
            .map(|c| mp.join(c.file_name().unwrap_or_default()))
            .collect();
        let mut preload = inside.clone();
        preload.extend(self.libs[1..].iter().cloned());
        let marker = file_name(self.libs.last())?;
        let script = format!(
            "mount -t tmpfs -o size=16m faultline-job {mp} && cp {copies} {mp}/ && \
             LD_PRELOAD={preload} exec {sleep} infinity",
            mp = mp.display(),
            copies = copies
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            preload = join(&preload),
            sleep = self.sleep.display(),
        );
        let child = self
            .command(Path::new("unshare"))
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .spawn()
            .context("starting unshare --mount")?;
        Ok(Proc { child, marker })
    }

    /// Waits until every process from index `from` maps its marker.
    fn wait_mapped(&mut self, from: usize, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let mut pending: Vec<usize> = (from..self.procs.len()).collect();
        while !pending.is_empty() {
            let mut still = Vec::new();
            for i in pending {
                let p = &mut self.procs[i];
                if let Ok(Some(st)) = p.child.try_wait() {
                    bail!(
                        "process {i} exited before mapping its libraries ({st}; its stderr above)"
                    );
                }
                let maps = std::fs::read_to_string(format!("/proc/{}/maps", p.child.id()))
                    .unwrap_or_default();
                let exec = std::fs::read_link(format!("/proc/{}/exe", p.child.id()))
                    .is_ok_and(|e| e == self.sleep);
                if !(exec && maps.contains(&p.marker)) {
                    still.push(i);
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} of {} processes did not map their libraries within {} s",
                    pending.len(),
                    self.procs.len() - from,
                    limit.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

fn file_name(p: Option<&PathBuf>) -> Result<String> {
    p.and_then(|p| p.file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .context("a library path without a file name")
}

fn join(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}
