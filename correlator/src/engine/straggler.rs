//! `straggler`: one rank's step time far above its job's median for
//! consecutive windows. When the rank's GPU throttles or its host's link
//! degrades, the straggler is evidence on that incident instead (a root cause
//! absorbs its symptoms); otherwise the candidate says no cause was found.
use std::collections::HashMap;

use proto::v1::Window;

use super::{
    median,
    workload::{Place, Symptom},
};

/// Step time above this multiple of the job median makes a rank slow.
pub const SLOW_FACTOR: f64 = 1.3;
/// A job needs this many ranks for a meaningful median.
pub const MIN_RANKS: usize = 4;

#[derive(Debug, Clone)]
struct Rank {
    seconds: f64,
    host: String,
    device: i32,
    hca: String,
    streak: u32,
}

/// A slow rank: either a straggler finding or evidence for a cause.
#[derive(Debug)]
pub struct Slow {
    pub job: String,
    pub rank: u32,
    pub host: String,
    pub device: i32,
    pub hca: String,
    pub seconds: f64,
    pub median: f64,
}

#[derive(Debug, Default)]
pub struct StragglerDetector {
    ranks: HashMap<(String, u32), Rank>,
}

impl StragglerDetector {
    /// Updates the ranks reported by this window; returns the slow ranks
    /// (after persistence) and the `<job>/<rank>` entities evaluated.
    pub fn observe(&mut self, host: &str, w: &Window) -> (Vec<Slow>, Vec<String>) {
        let mut evaluated = Vec::new();
        for s in &w.steps {
            let r = self.ranks.entry((s.job.clone(), s.rank)).or_insert(Rank {
                seconds: s.seconds,
                host: host.to_string(),
                device: s.device,
                hca: s.hca.clone(),
                streak: 0,
            });
            r.seconds = s.seconds;
            r.host = host.to_string();
            r.device = s.device;
            r.hca = s.hca.clone();
            evaluated.push(format!("{}/{}", s.job, s.rank));
        }
        let mut slow = Vec::new();
        let jobs: Vec<String> = {
            let mut j: Vec<String> = w.steps.iter().map(|s| s.job.clone()).collect();
            j.sort();
            j.dedup();
            j
        };
        for job in jobs {
            let times: Vec<f64> = self
                .ranks
                .iter()
                .filter(|((j, _), _)| *j == job)
                .map(|(_, r)| r.seconds)
                .collect();
            if times.len() < MIN_RANKS {
                continue;
            }
            let m = median(&times);
            for s in w.steps.iter().filter(|s| s.job == job) {
                let Some(r) = self.ranks.get_mut(&(job.clone(), s.rank)) else {
                    continue;
                };
                r.streak = if m > 0.0 && r.seconds > SLOW_FACTOR * m {
                    r.streak + 1
                } else {
                    0
                };
                if r.streak >= 2 {
                    slow.push(Slow {
                        job: job.clone(),
                        rank: s.rank,
                        host: r.host.clone(),
                        device: r.device,
                        hca: r.hca.clone(),
                        seconds: r.seconds,
                        median: m,
                    });
                }
            }
        }
        (slow, evaluated)
    }
}

impl Slow {
    pub fn describe(&self) -> String {
        format!(
            "job {} rank {} step {:.2} s vs job median {:.2} s (+{:.0}%)",
            self.job,
            self.rank,
            self.seconds,
            self.median,
            100.0 * (self.seconds / self.median - 1.0)
        )
    }

    /// The slow rank as a workload symptom (its own placement only).
    pub fn symptom(&self) -> Symptom {
        Symptom {
            kind: "straggler",
            job: self.job.clone(),
            entity: format!("{}/{}", self.job, self.rank),
            line: self.describe(),
            ratio: if self.median > 0.0 {
                self.seconds / self.median
            } else {
                1.0
            },
            since_ms: 0,
            places: vec![Place {
                host: self.host.clone(),
                rank: i32::try_from(self.rank).unwrap_or(i32::MAX),
                device: self.device,
                hca: self.hca.clone(),
            }],
        }
    }
}
