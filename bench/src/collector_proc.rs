//! The real `faultline-collector` binary as a benchmark runs it: started,
//! ready once it printed its addresses, its windows counted from its console
//! lines (printed even with `--quiet`), its `/metrics` scraped, and its
//! stderr kept for the error when it fails.
use std::{
    io::{BufRead as _, Read as _},
    net::SocketAddr,
    path::Path,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context as _, Result};

/// The collector binary next to this one.
pub fn binary() -> Result<std::path::PathBuf> {
    let bin = std::env::current_exe()?.with_file_name("faultline-collector");
    anyhow::ensure!(
        bin.exists(),
        "{} not built (cargo build --release -p collector, or cargo xtask bench)",
        bin.display()
    );
    Ok(bin)
}

/// A running collector.
pub struct Collector {
    child: ::tests::KillOnDrop,
    pub pid: u32,
    pub metrics: SocketAddr,
    pub grpc: Option<SocketAddr>,
    pub http: Option<SocketAddr>,
    /// `window N:` lines printed so far.
    windows: Arc<AtomicU64>,
    stderr: Option<JoinHandle<String>>,
    name: String,
}

impl Collector {
    /// Starts `cmd` (the collector with `--metrics-addr 127.0.0.1:0`) and
    /// waits until it printed its metrics address and, with `otlp`, both
    /// OTLP receivers' addresses.
    pub fn start(mut cmd: Command, otlp: bool) -> Result<Self> {
        let name = Path::new(cmd.get_program())
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let out = child.stdout.take().context("stdout")?;
        let mut err = child.stderr.take().context("stderr")?;
        let pid = child.id();
        let windows = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel::<String>();
        let w = windows.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if line.starts_with("window ") {
                    w.fetch_add(1, Ordering::Relaxed);
                } else {
                    // Nobody listens after start: the lines are dropped.
                    let _ = tx.send(line);
                }
            }
        });
        // The first 64 KiB of stderr, until the process closes it.
        let stderr = std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                if kept.len() < 64 << 10 {
                    kept.extend_from_slice(&buf[..n]);
                }
            }
            String::from_utf8_lossy(&kept).into_owned()
        });
        let mut c = Self {
            child: ::tests::KillOnDrop(child),
            pid,
            metrics: SocketAddr::from(([127, 0, 0, 1], 0)),
            grpc: None,
            http: None,
            windows,
            stderr: Some(stderr),
            name,
        };
        let deadline = Instant::now() + crate::wait::READY;
        let (mut metrics, mut grpc, mut http) = (None, None, None);
        let addr = |s: &str| s.trim().trim_end_matches("/v1/metrics").parse().ok();
        while metrics.is_none() || (otlp && (grpc.is_none() || http.is_none())) {
            let line = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) => l,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(c.fail(&format!(
                        "no addresses printed within {:?}",
                        crate::wait::READY
                    )))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(c.fail("exited")),
            };
            if let Some(m) = line.strip_prefix("metrics on http://") {
                metrics = m.trim().trim_end_matches("/metrics").parse().ok();
            } else if let Some(a) = line.strip_prefix("otlp: grpc receiver on ") {
                grpc = addr(a);
            } else if let Some(a) = line.strip_prefix("otlp: http receiver on ") {
                http = addr(a);
            } else if line.contains("receiver not running") {
                return Err(c.fail(&line));
            }
        }
        c.metrics = metrics.context("metrics address")?;
        (c.grpc, c.http) = (grpc, http);
        Ok(c)
    }

    /// Stops the collector and returns an error saying `what` went wrong,
    /// with what it printed on stderr.
    pub fn fail(&mut self, what: &str) -> anyhow::Error {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        // The pipe is closed now: the reader thread ends.
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        anyhow!("{} ({what}); its stderr:\n{}", self.name, err.trim_end())
    }

    /// Windows the collector reported so far.
    pub fn windows(&self) -> u64 {
        self.windows.load(Ordering::Relaxed)
    }

    /// Waits until the collector reported `n` windows (the first one closes
    /// a window after start: its work from then on is the steady state).
    pub fn wait_windows(&mut self, n: u64) -> Result<()> {
        // A 1 s window, however loaded the machine: far more than enough.
        let timeout = crate::wait::READY + Duration::from_secs(n);
        let r = crate::wait::until(&format!("window {n}"), timeout, || {
            if let Some(s) = self.child.0.try_wait()? {
                anyhow::bail!("exited: {s}");
            }
            let w = self.windows();
            Ok((w < n).then(|| format!("{w} windows so far")))
        });
        r.map_err(|e| self.fail(&format!("{e:#}")))
    }

    /// The text of the collector's `/metrics`.
    pub fn scrape(&self) -> Result<String> {
        let addr = self.metrics;
        ::tests::metrics::scrape(&addr.to_string())
            .with_context(|| format!("scraping http://{addr}/metrics"))
    }

    /// CPU seconds the collector used so far.
    pub fn cpu_seconds(&self) -> Result<f64> {
        crate::procstat::cpu_seconds(self.pid).with_context(|| format!("{} exited", self.name))
    }
}

/// Samples of metric `name` in a Prometheus text exposition.
pub fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = f64> + 'a {
    text.lines()
        .filter(move |l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
}

#[cfg(test)]
mod tests {
    #[test]
    fn samples_are_those_of_the_named_family_only() {
        let text = "# HELP faultline_job_step_seconds x\n\
            faultline_job_step_seconds{hpc_job=\"1\",rank=\"0\"} 0.5\n\
            faultline_job_step_seconds{hpc_job=\"1\",rank=\"1\"} 0.75\n\
            faultline_job_step_seconds_max{hpc_job=\"1\",rank=\"1\"} 9\n\
            faultline_otlp_accepted_points_total 16\n";
        let v: Vec<f64> = super::samples(text, "faultline_job_step_seconds").collect();
        assert_eq!(v, [0.5, 0.75]);
        let v: f64 = super::samples(text, "faultline_otlp_accepted_points_total").sum();
        assert_eq!(v, 16.0);
    }
}
