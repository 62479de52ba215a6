//! A window trimmed to what the engine judges: only its own host's entities,
//! and at most the per-window caps (`[detect.limits]`) of every row kind, so
//! that one window's cost is bounded whatever its size.
//!
//! Identity: the engine names a port, GPU, block device or usage resource
//! under the window's host (`vocab::entity::port(host, …)` and friends),
//! whatever the row says, and a rank, CUDA, verbs, workload, NCCL or NCCL
//! Inspector row is placed on the window's host. The one field that names an entity outright
//! is an event's `entity`: an event naming another host's entity is dropped
//! and counted (`foreign`), so a host cannot raise an XID on another's GPU.
use std::{borrow::Cow, collections::HashSet};

use proto::v1::Window;
use vocab::entity::host_of;

use crate::limits::LimitsConfig;

/// What was dropped, by `faultline_engine_dropped_total{what}`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Events naming another host's entity.
    pub foreign: usize,
    /// IB ports, GPUs and block devices over `max_entities_per_window`.
    pub entities: usize,
    /// Steps and NCCL ranks over `max_ranks_per_window`.
    pub ranks: usize,
    /// Events over `max_events_per_window`.
    pub events: usize,
    /// CUDA, verbs, workload, usage and NCCL Inspector rows over
    /// `max_rows_per_window`.
    pub cuda: usize,
    pub verbs: usize,
    pub workload: usize,
    pub usage: usize,
    pub nccl_perf: usize,
    /// Distinct jobs over `max_jobs_per_window` (their rows are dropped).
    pub jobs: usize,
}

impl Dropped {
    /// (what, how many) of the non-zero counts.
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, usize)> {
        [
            ("foreign", self.foreign),
            ("entities", self.entities),
            ("ranks", self.ranks),
            ("events", self.events),
            ("cuda", self.cuda),
            ("verbs", self.verbs),
            ("workload", self.workload),
            ("usage", self.usage),
            ("nccl_perf", self.nccl_perf),
            ("jobs", self.jobs),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
    }
}

/// The first `cap` rows of `rows` (all of them when within it).
fn head<T>(rows: &[T], cap: usize) -> &[T] {
    &rows[..rows.len().min(cap)]
}

/// `w` within the caps: borrowed when it already is, else a copy of only the
/// rows kept (never a clone of the whole window), with what was dropped.
/// Cost: one pass over the window's events, and over the rows within the
/// caps for the job count.
pub fn clip<'a>(l: &LimitsConfig, w: &'a Window) -> (Cow<'a, Window>, Dropped) {
    let host = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
    let (max_e, max_r, max_rows) = (
        l.max_entities_per_window,
        l.max_ranks_per_window,
        l.max_rows_per_window,
    );
    let own = |e: &proto::v1::Event| host_of(&e.entity) == host;
    let foreign = w.events.iter().filter(|e| !own(e)).count();
    let own_events = w.events.len() - foreign;
    let mut d = Dropped {
        foreign,
        entities: w.ib_ports.len().saturating_sub(max_e)
            + w.gpus.len().saturating_sub(max_e)
            + w.block.len().saturating_sub(max_e),
        ranks: w.steps.len().saturating_sub(max_r) + w.nccl.len().saturating_sub(max_r),
        events: own_events.saturating_sub(l.max_events_per_window),
        cuda: w.cuda.len().saturating_sub(max_rows),
        verbs: w.verbs.len().saturating_sub(max_rows),
        workload: w.workload.len().saturating_sub(max_rows),
        usage: w.usage.len().saturating_sub(max_rows),
        nccl_perf: w.nccl_perf.len().saturating_sub(max_rows),
        jobs: 0,
    };
    // The jobs judged: the first `max_jobs_per_window` distinct ones of the
    // rows within the row caps.
    let (cuda, verbs, steps, workload, nccl, usage, perf) = (
        head(&w.cuda, max_rows),
        head(&w.verbs, max_rows),
        head(&w.steps, max_r),
        head(&w.workload, max_rows),
        head(&w.nccl, max_r),
        head(&w.usage, max_rows),
        head(&w.nccl_perf, max_rows),
    );
    let jobs = cuda
        .iter()
        .map(|c| c.job.as_str())
        .chain(verbs.iter().map(|v| v.job.as_str()))
        .chain(steps.iter().map(|s| s.job.as_str()))
        .chain(workload.iter().map(|s| s.job.as_str()))
        .chain(nccl.iter().map(|s| s.job.as_str()))
        .chain(usage.iter().map(|u| u.job.as_str()))
        .chain(perf.iter().map(|p| p.job.as_str()));
    let mut kept: HashSet<&str> = HashSet::new();
    let mut over_jobs = false;
    for j in jobs {
        if kept.len() < l.max_jobs_per_window {
            kept.insert(j);
        } else if !kept.contains(j) {
            over_jobs = true;
            break;
        }
    }
    if !over_jobs && d.counts().next().is_none() {
        return (Cow::Borrowed(w), d);
    }
    let mut dropped_jobs: HashSet<&str> = HashSet::new();
    let mut keep_job = |j: &'a str| {
        let k = !over_jobs || kept.contains(j);
        if !k {
            dropped_jobs.insert(j);
        }
        k
    };
    fn rows<'w, T: Clone>(
        rows: &'w [T],
        cap: usize,
        job: impl Fn(&'w T) -> &'w str,
        keep: &mut impl FnMut(&'w str) -> bool,
    ) -> Vec<T> {
        head(rows, cap)
            .iter()
            .filter(|r| keep(job(r)))
            .cloned()
            .collect()
    }
    let c = Window {
        origin: w.origin.clone(),
        seq: w.seq,
        start_unix_ms: w.start_unix_ms,
        end_unix_ms: w.end_unix_ms,
        dropped_before: w.dropped_before,
        ib_ports: head(&w.ib_ports, max_e).to_vec(),
        gpus: head(&w.gpus, max_e).to_vec(),
        block: head(&w.block, max_e).to_vec(),
        events: w
            .events
            .iter()
            .filter(|e| own(e))
            .take(l.max_events_per_window)
            .cloned()
            .collect(),
        cuda: rows(&w.cuda, max_rows, |x| x.job.as_str(), &mut keep_job),
        verbs: rows(&w.verbs, max_rows, |x| x.job.as_str(), &mut keep_job),
        steps: rows(&w.steps, max_r, |x| x.job.as_str(), &mut keep_job),
        workload: rows(&w.workload, max_rows, |x| x.job.as_str(), &mut keep_job),
        nccl: rows(&w.nccl, max_r, |x| x.job.as_str(), &mut keep_job),
        usage: rows(&w.usage, max_rows, |x| x.job.as_str(), &mut keep_job),
        nccl_perf: rows(&w.nccl_perf, max_rows, |x| x.job.as_str(), &mut keep_job),
        nfs: head(&w.nfs, max_e).to_vec(),
    };
    d.jobs = dropped_jobs.len();
    (Cow::Owned(c), d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::v1::{Event, JobUsage, Origin, StepTime};

    fn window(host: &str) -> Window {
        Window {
            origin: Some(Origin {
                hostname: host.into(),
                ..Origin::default()
            }),
            seq: 1,
            ..Window::default()
        }
    }

    #[test]
    fn a_window_within_the_caps_is_borrowed() {
        let mut w = window("n1");
        w.events = vec![Event {
            kind: "gpu_xid".into(),
            entity: "n1/gpu0".into(),
            ..Event::default()
        }];
        let (c, d) = clip(&LimitsConfig::default(), &w);
        assert!(matches!(c, Cow::Borrowed(_)));
        assert_eq!(d, Dropped::default());
    }

    #[test]
    fn foreign_events_and_rows_over_the_caps_are_dropped_and_counted() {
        let l = LimitsConfig {
            max_events_per_window: 2,
            max_rows_per_window: 3,
            max_ranks_per_window: 4,
            max_jobs_per_window: 2,
            ..LimitsConfig::default()
        };
        let mut w = window("n1");
        // n10/gpu0 is not n1's: host names are compared whole.
        w.events = ["n1/gpu0", "n2/gpu0", "n10/gpu0", "n1", "n1/mlx5_0/1"]
            .iter()
            .map(|e| Event {
                entity: (*e).into(),
                ..Event::default()
            })
            .collect();
        w.usage = (0..10)
            .map(|i| JobUsage {
                job: "a".into(),
                resource: i.to_string(),
                ..JobUsage::default()
            })
            .collect();
        w.steps = ["a", "b", "c", "a", "c", "a"]
            .iter()
            .map(|j| StepTime {
                job: (*j).into(),
                ..StepTime::default()
            })
            .collect();
        let (c, d) = clip(&l, &w);
        let entities: Vec<&str> = c.events.iter().map(|e| e.entity.as_str()).collect();
        assert_eq!(entities, ["n1/gpu0", "n1"]);
        assert_eq!(c.usage.len(), 3);
        // Steps: 4 within the rank cap; job c past the 2 jobs (a, b).
        let jobs: Vec<&str> = c.steps.iter().map(|s| s.job.as_str()).collect();
        assert_eq!(jobs, ["a", "b", "a"]);
        assert_eq!(
            d,
            Dropped {
                foreign: 2,
                events: 1,
                usage: 7,
                ranks: 2,
                jobs: 1,
                ..Dropped::default()
            }
        );
    }
}
