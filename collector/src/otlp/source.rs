//! Workload signals received over OTLP → step times and workload samples;
//! each job/rank's latest step time on `/metrics` (`faultline_job_step_seconds`).
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    otlp::Receiver,
    prom_text::Text,
    sources::{Ctx, Fact, Source},
};

use proto::metric::Family;

pub const JOB_STEP_SECONDS: Family = Family::gauge(
    "faultline_job_step_seconds",
    &["hpc_job", "rank"],
    "Mean training step time of the job's rank in the latest window that had steps (OTLP)",
);
pub const JOB_STEP_MAX_SECONDS: Family = Family::gauge(
    "faultline_job_step_max_seconds",
    &["hpc_job", "rank"],
    "Longest training step of the job's rank in the latest window that had steps (OTLP)",
);

/// The families above, for `crate::metrics_catalog`.
pub const FAMILIES: &[&Family] = &[&JOB_STEP_SECONDS, &JOB_STEP_MAX_SECONDS];

/// A job/rank whose last step is older than this leaves `/metrics`.
pub const STEP_TTL: Duration = Duration::from_secs(300);
/// At most this many job/rank step series (a node runs a few ranks).
pub const MAX_STEP_SERIES: usize = 1024;

/// The latest step time of one job/rank.
#[derive(Clone, Copy, Debug)]
struct LastStep {
    mean: f64,
    max: f64,
    at: Instant,
}

pub struct OtlpSource {
    rx: Receiver,
    last: BTreeMap<(String, u32), LastStep>,
}

impl OtlpSource {
    pub fn new(rx: Receiver) -> Self {
        Self {
            rx,
            last: BTreeMap::new(),
        }
    }

    /// Remembers this window's step times, forgets the stale ones, and
    /// renders the rest.
    fn steps_section(&mut self, steps: &[pb::StepTime], now: Instant) -> String {
        for s in steps {
            let key = (s.job.clone(), s.rank);
            if !self.last.contains_key(&key) && self.last.len() >= MAX_STEP_SERIES {
                metrics::counter!(crate::metrics_catalog::JOB_STEP_SERIES_DROPPED.name)
                    .increment(1);
                continue;
            }
            self.last.insert(
                key,
                LastStep {
                    mean: s.seconds,
                    max: s.max_seconds.max(s.seconds),
                    at: now,
                },
            );
        }
        self.last
            .retain(|_, v| now.saturating_duration_since(v.at) < STEP_TTL);
        let mut t = Text::new();
        for ((job, rank), v) in &self.last {
            let rank = rank.to_string();
            let l = [("hpc_job", job.as_str()), ("rank", rank.as_str())];
            t.add(&JOB_STEP_SECONDS, &l, v.mean);
            t.add(&JOB_STEP_MAX_SECONDS, &l, v.max);
        }
        t.render()
    }
}

impl Source for OtlpSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let ids = &mut *cx.ids;
        let (steps, workload) = self.rx.shared.take_window(|pid| ids.get(pid).cloned());
        for s in &steps {
            cx.console.detail(format_args!(
                "steps job={} rank={} count={} mean={:.4}s max={:.4}s",
                s.job, s.rank, s.count, s.seconds, s.max_seconds
            ));
        }
        cx.expo
            .set_section("steps", self.steps_section(&steps, Instant::now()));
        wire.steps = steps;
        wire.workload = workload;
        wire.nccl_perf = self.rx.shared.nccl_perf.take();
        for p in &wire.nccl_perf {
            cx.console.detail(format_args!(
                "nccl-inspector gpu={} comm={} nranks={} {}{} size={} points={} exec={:.1}us busbw={:.2}GB/s",
                p.device,
                if p.comm_id.is_empty() { &p.comm_name } else { &p.comm_id },
                p.nranks,
                p.op,
                if p.algo_proto.is_empty() { String::new() } else { format!("/{}", p.algo_proto) },
                p.message_size,
                p.points,
                p.exec_us,
                p.busbw_gbs
            ));
        }
        Ok(None)
    }
}
