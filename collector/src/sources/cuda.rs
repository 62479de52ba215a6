//! CUDA driver-API probes: launches and calls per process → rows, console
//! lines attributed to their process and GPU, metrics by job and rank; the
//! aggregates of processes that exited are removed from the maps.
use anyhow::Result;
use proto::v1 as pb;

use crate::{
    agent::{Ctx, Source},
    cuda::{self, CudaSnapshot},
    nvml,
};

pub struct CudaSource {
    prev: CudaSnapshot,
}

impl CudaSource {
    pub fn new(prev: CudaSnapshot) -> Self {
        Self { prev }
    }
}

impl Source for CudaSource {
    fn window(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<()> {
        let cur = cx.probes.cuda_snapshot()?;
        // Export first, print after: whoever reads the console line can scrape it.
        let ids = &mut *cx.ids;
        let text = cuda::render_prometheus(&cur, |pid| ids.job_rank(pid));
        cx.expo.set_section("cuda", text);
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
        let pids = cur.launches.keys().map(|k| k.pid);
        let dead = cx.ids.exited(pids.chain(cur.calls.keys().map(|k| k.pid)));
        if !dead.is_empty() {
            let n = cx.probes.cuda_prune(&dead)?;
            metrics::counter!("faultline_cuda_pruned_entries_total").increment(n);
        }
        self.prev = cur;
        Ok(())
    }
}
