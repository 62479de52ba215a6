//! CUDA driver-API probes: launches and calls per process → rows, console
//! lines attributed to their process and GPU, metrics by job and rank; the
//! aggregates of processes that exited are removed from the maps.
use anyhow::Result;
use proto::v1 as pb;

use super::retired::Retired;
use crate::{
    agent::{Ctx, Source},
    cuda::{self, CudaSeries, CudaSnapshot},
    nvml,
};

pub struct CudaSource {
    prev: CudaSnapshot,
    /// Last counts of processes that exited (see [`super::retired`]).
    retired: CudaSeries,
    retired_pairs: Retired,
}

impl CudaSource {
    pub fn new(prev: CudaSnapshot) -> Self {
        Self {
            prev,
            retired: CudaSeries::default(),
            retired_pairs: Retired::default(),
        }
    }
}

impl Source for CudaSource {
    fn window(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<()> {
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
        if !cx.console.quiet {
            for l in cuda::window_lines(&self.prev, &cur) {
                let who = cx
                    .ids
                    .get(l.pid)
                    .map(|id| format!(" {{{}}}", id.describe()))
                    .unwrap_or_default();
                match nvml::describe_gpu(l.device, &cx.gpu.gpus, &cx.gpu.samples) {
                    Some(g) => cx.console.detail(format_args!("{}{who} [{g}]", l.text)),
                    None => cx.console.detail(format_args!("{}{who}", l.text)),
                }
            }
        }
        wire.cuda = crate::window::cuda(&self.prev, &cur, cx.ids);
        cx.gpu.cuda_pids.clear();
        for (pid, dev) in (cur.launches.keys().map(|k| (k.pid, k.device)))
            .chain(cur.calls.keys().map(|k| (k.pid, k.device)))
        {
            cx.gpu.cuda_pids.entry(pid).or_default().insert(dev);
        }
        // After this window's rows: the exited processes' last counts are in them.
        let now = std::time::Instant::now();
        if !dead.is_empty() {
            let n = cx.probes.cuda_prune(&dead)?;
            metrics::counter!("faultline_cuda_pruned_entries_total").increment(n);
            cx.ids.forget(&dead);
            self.retired_pairs.retire(exited.jobs(), now);
            self.retired.absorb(&exited);
        }
        let gone = self.retired_pairs.expire(&live.jobs(), now);
        self.retired.forget(&gone);
        self.prev = cur;
        Ok(())
    }
}
