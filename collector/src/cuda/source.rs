//! CUDA driver-API probes: launches and calls per process → rows, console
//! lines attributed to their process and GPU, metrics by job and rank; the
//! aggregates of processes that exited are removed from the maps.
use anyhow::Result;
use proto::v1 as pb;

use crate::{
    cuda::{self, CudaSeries, CudaSnapshot},
    nvml,
    sources::{retired::Retired, Ctx, CudaPids, Fact, Facts, Source},
};

pub struct CudaSource {
    prev: CudaSnapshot,
    /// This window's console lines (text with its process, CUDA device),
    /// printed in the derive phase with their GPU's state.
    lines: Vec<(String, i32)>,
    /// Last counts of processes that exited (see [`super::retired`]).
    retired: CudaSeries,
    retired_pairs: Retired,
}

impl CudaSource {
    pub fn new(prev: CudaSnapshot) -> Self {
        Self {
            prev,
            lines: Vec::new(),
            retired: CudaSeries::default(),
            retired_pairs: Retired::default(),
        }
    }
}

impl Source for CudaSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let cur = cx.probes.cuda_snapshot()?;
        // Export first, print after: whoever reads the console line can scrape it.
        let pids = cur.launches.keys().map(|k| k.pid);
        let dead = cx.ids.gone(pids.chain(cur.calls.keys().map(|k| k.pid)));
        let ids = &mut *cx.ids;
        let live = CudaSeries::of(&cur, |pid| !dead.contains(&pid), |pid| ids.job_rank(pid));
        let exited = CudaSeries::of(&cur, |pid| dead.contains(&pid), |pid| ids.job_rank(pid));
        // This window exports every process's counts, the exited ones' last.
        let mut all = self.retired.clone();
        all.absorb(&live);
        all.absorb(&exited);
        cx.expo.set_section("cuda", all.render());
        self.lines.clear();
        if !cx.console.quiet {
            // The process is described now, before the exited ones are forgotten.
            for l in cuda::window_lines(&self.prev, &cur) {
                let who = cx
                    .ids
                    .get(l.pid)
                    .map(|id| format!(" {{{}}}", id.describe()))
                    .unwrap_or_default();
                self.lines.push((format!("{}{who}", l.text), l.device));
            }
        }
        wire.cuda = super::wire::rows(&self.prev, &cur, cx.ids);
        let mut pids = CudaPids::new();
        for (pid, dev) in (cur.launches.keys().map(|k| (k.pid, k.device)))
            .chain(cur.calls.keys().map(|k| (k.pid, k.device)))
        {
            pids.entry(pid).or_default().insert(dev);
        }
        // After this window's rows: the exited processes' last counts are in them.
        let now = std::time::Instant::now();
        if !dead.is_empty() {
            let n = cx.probes.cuda_prune(&dead)?;
            metrics::counter!(crate::metrics_catalog::CUDA_PRUNED_ENTRIES.name).increment(n);
            cx.ids.forget(&dead);
            self.retired_pairs.retire(exited.jobs(), now);
            self.retired.absorb(&exited);
        }
        let gone = self.retired_pairs.expire(&live.jobs(), now);
        self.retired.forget(&gone);
        self.prev = cur;
        Ok(Some(Fact::CudaPids(pids)))
    }

    /// The window's lines, each with its GPU's state of this window.
    fn derive(&mut self, cx: &mut Ctx<'_>, facts: &Facts, _: &mut pb::Window) -> Result<()> {
        for (text, device) in self.lines.drain(..) {
            let gpu = crate::nvml::GpuFacts::of(facts);
            match nvml::describe_gpu(device, &gpu.gpus, &gpu.samples) {
                Some(g) => cx.console.detail(format_args!("{text} [{g}]")),
                None => cx.console.detail(text),
            }
        }
        Ok(())
    }
}
