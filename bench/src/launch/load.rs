//! Background load during a measurement: `--load build` compiles a C file
//! in a loop, two compiles at a time (a parallel build, `make -j2`), for as
//! long as the measurement runs, so every configuration shares the CPUs
//! with a real compiler.
use std::{
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::JoinHandle,
};

use anyhow::{ensure, Context as _, Result};
use serde::Serialize;

/// Background load of a measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Nothing else started by the bench.
    None,
    /// Two `cc -O2` compiles at a time, in a loop.
    Build,
}

impl Load {
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Build => "build",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::None => "no load started by the bench",
            Self::Build => {
                "a parallel build: `cc -O2 -c` of a generated 400-function C file in a loop, 2 jobs"
            }
        }
    }
}

/// Compile jobs at once.
pub const JOBS: usize = 2;

/// A running background load; [`Running::stop`] ends it.
pub struct Running {
    stop: Arc<AtomicBool>,
    jobs: Vec<JoinHandle<Result<u64>>>,
    dir: Option<PathBuf>,
}

/// The C file compiled: enough functions with loops that one `cc -O2`
/// takes a good fraction of a second.
fn source() -> String {
    let mut s = String::from("#include <stddef.h>\n");
    for i in 0..400 {
        s.push_str(&format!(
            "int f{i}(const int *a, size_t n) {{ int s = {i}; for (size_t k = 0; k < n; k++) {{ s += a[k] * {m} ^ (s >> 3); if (s > {i}000) s -= a[k / 2]; }} return s; }}\n",
            m = i % 13 + 3
        ));
    }
    s
}

/// Starts `load` (nothing for [`Load::None`]).
pub fn start(load: Load) -> Result<Running> {
    let stop = Arc::new(AtomicBool::new(false));
    if load == Load::None {
        return Ok(Running {
            stop,
            jobs: Vec::new(),
            dir: None,
        });
    }
    let dir = std::env::temp_dir().join(format!("faultline-bench-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let src = dir.join("load.c");
    std::fs::write(&src, source()).context("writing the load's C file")?;
    // One compile first: the compiler is there and the file builds.
    let ok = Command::new("cc")
        .args(["-O2", "-c", "-o"])
        .arg(dir.join("probe.o"))
        .arg(&src)
        .status()
        .context("running cc (the build load needs a C compiler)")?;
    ensure!(ok.success(), "cc failed on the load's C file: {ok}");
    let mut jobs = Vec::new();
    for j in 0..JOBS {
        let (stop, src, out) = (stop.clone(), src.clone(), dir.join(format!("job{j}.o")));
        jobs.push(std::thread::spawn(move || -> Result<u64> {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let st = Command::new("cc")
                    .args(["-O2", "-c", "-o"])
                    .arg(&out)
                    .arg(&src)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .context("running cc")?;
                ensure!(st.success(), "cc failed: {st}");
                n += 1;
            }
            Ok(n)
        }));
    }
    Ok(Running {
        stop,
        jobs,
        dir: Some(dir),
    })
}

impl Running {
    /// Stops the load (each job finishes its compile) and returns how many
    /// compiles finished.
    pub fn stop(mut self) -> Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let mut n = 0;
        for j in self.jobs.drain(..) {
            n += j
                .join()
                .map_err(|_| anyhow::anyhow!("a load job panicked"))??;
        }
        if let Some(d) = self.dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
        Ok(n)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(d) = self.dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
