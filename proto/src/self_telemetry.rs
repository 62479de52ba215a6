//! Both binaries' own telemetry: `faultline_build_info` and the standard
//! `process_*` families (CPU seconds, resident and virtual memory, file
//! descriptors, threads, start time), read from `/proc/self` every second
//! by `metrics-process`.
use std::{sync::Once, time::Duration};

static STARTED: Once = Once::new();

/// The running build, as `faultline_build_info`'s labels.
#[derive(Clone, Copy, Debug)]
pub struct Build {
    /// The crate version (`CARGO_PKG_VERSION`).
    pub version: &'static str,
    /// The git commit (`FAULTLINE_REVISION` from the build script).
    pub revision: &'static str,
    /// The compiler's version (`FAULTLINE_RUSTC`).
    pub rustc: &'static str,
}

/// Describes and sets `faultline_build_info`, and starts the thread that
/// refreshes the `process_*` families (once per process; later calls do
/// nothing). Call it after the metrics recorder is installed.
pub fn start(build: Build) {
    STARTED.call_once(|| {
        let info = crate::metric::shared::BUILD_INFO;
        info.describe();
        metrics::gauge!(
            info.name,
            "version" => build.version,
            "revision" => build.revision,
            "rustc" => build.rustc,
        )
        .set(1.0);
        let process = metrics_process::Collector::default();
        process.describe();
        process.collect();
        let spawned = std::thread::Builder::new()
            .name("process-metrics".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_secs(1));
                process.collect();
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "process_* metrics not refreshed: no thread for them");
        }
    });
}
