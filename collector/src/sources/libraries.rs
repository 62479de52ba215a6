//! Library discovery between windows: every `[nccl] rescan_s` one
//! incremental scan of the processes' maps ([`crate::proc_libs`]), through
//! each process's own root, attaches the NCCL and CUDA probes to library
//! files that appeared (a container started after the collector, a new
//! image layer, a new virtual environment) and detaches those no process
//! maps any more. Runs before the `cuda` and `nccl` sources in a window, so
//! a library attached here is read in the same window.
use std::time::{Duration, Instant};

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    proc_libs::LibScan,
    sources::{Ctx, Fact, Source},
};

pub struct LibrarySource {
    scan: LibScan,
    /// The NCCL search (configured libraries and the ld.so cache stay).
    nccl: Option<crate::nccl_lib::Search>,
    cuda: bool,
    every: Duration,
    /// The last scan (`None`: scan in the first window).
    last: Option<Instant>,
}

impl LibrarySource {
    /// `nccl`: rescan for NCCL with this search; `cuda`: for the CUDA
    /// driver; the processes under `proc_root`.
    pub fn new(
        proc_root: std::path::PathBuf,
        nccl: Option<crate::nccl_lib::Search>,
        cuda: bool,
        every: Duration,
    ) -> Self {
        let mut families = Vec::new();
        if nccl.is_some() {
            families.push(crate::nccl_lib::FAMILY);
        }
        if cuda {
            families.push(crate::cuda_lib::FAMILY);
        }
        Self {
            scan: LibScan::new(proc_root, families),
            nccl,
            cuda,
            every,
            last: None,
        }
    }
}

impl Source for LibrarySource {
    fn collect(&mut self, cx: &mut Ctx<'_>, _wire: &mut pb::Window) -> Result<Option<Fact>> {
        if self.last.is_some_and(|t| t.elapsed() < self.every) {
            return Ok(None);
        }
        self.last = Some(Instant::now());
        let t0 = Instant::now();
        let mut found = self.scan.scan().into_iter();
        let root = self.scan.proc_root().to_path_buf();
        if let Some(search) = &self.nccl {
            let mapped = found.next().unwrap_or_default();
            let libs = crate::nccl_lib::discover_with(search, Some(mapped), Some(&root))
                .unwrap_or_default();
            let s = cx.probes.nccl_sync(&libs);
            say(cx, "nccl", &s);
        }
        if self.cuda {
            let mapped = found.next().unwrap_or_default();
            let s = cx.probes.cuda_sync(&mapped, &root);
            say(cx, "cuda", &s);
        }
        metrics::gauge!(crate::metrics_catalog::LIBRARY_SCAN_LAST_SECONDS.name)
            .set(t0.elapsed().as_secs_f64());
        metrics::counter!(crate::metrics_catalog::LIBRARY_SCANS.name).increment(1);
        Ok(None)
    }
}

/// The console lines of one family's sync.
fn say(cx: &mut Ctx<'_>, family: &str, s: &crate::probes::libraries::Synced) {
    let lines = s
        .attached
        .iter()
        .map(|l| ("attached to", l, "found after start"))
        .chain(
            s.detached
                .iter()
                .map(|l| ("detached from", l, "no process maps it")),
        );
    for (what, l, why) in lines {
        cx.console
            .detail(format_args!("{family} probes {what} {l} ({why})"));
    }
}
