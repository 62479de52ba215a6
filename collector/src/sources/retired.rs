//! Counts of processes that exited. The CUDA and verbs series are sums, per
//! job and rank, of the per-process entries in the kernel maps; an exited
//! process's entries are pruned from the maps, and without this its share
//! would leave the sum: the counter would go backwards, which Prometheus
//! reads as a reset (and then counts the remaining value again as an
//! increase). So its last counts are kept here, per (job, rank), and added to
//! the live ones. A pair no live process has had for [`RETAIN`] is forgotten
//! (its series ends, which Prometheus reads as staleness, not as a reset);
//! at most [`MAX_PAIRS`] are kept, the longest idle forgotten first.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

/// How long a (job, rank) with no live process keeps its series.
pub const RETAIN: Duration = Duration::from_secs(15 * 60);
/// At most this many (job, rank) pairs are kept per source.
pub const MAX_PAIRS: usize = 4096;

pub type Pair = (String, String);

/// When each kept pair last had a live process.
#[derive(Debug, Default)]
pub struct Retired {
    seen: BTreeMap<Pair, Instant>,
}

impl Retired {
    /// Pairs whose processes exited this window: keep them.
    pub fn retire(&mut self, pairs: impl IntoIterator<Item = Pair>, now: Instant) {
        for p in pairs {
            self.seen.insert(p, now);
        }
    }

    /// The pairs to forget at `now`, given those with a live process (which
    /// are kept and marked seen).
    pub fn expire(&mut self, live: &BTreeSet<Pair>, now: Instant) -> BTreeSet<Pair> {
        for (p, t) in self.seen.iter_mut() {
            if live.contains(p) {
                *t = now;
            }
        }
        let mut gone: BTreeSet<Pair> = self
            .seen
            .iter()
            .filter(|(_, t)| now.duration_since(**t) > RETAIN)
            .map(|(p, _)| p.clone())
            .collect();
        let over = self.seen.len().saturating_sub(gone.len() + MAX_PAIRS);
        if over > 0 {
            let mut idle: Vec<(&Pair, &Instant)> = self
                .seen
                .iter()
                .filter(|(p, _)| !gone.contains(*p))
                .collect();
            idle.sort_by_key(|(_, t)| **t);
            gone.extend(idle.into_iter().take(over).map(|(p, _)| p.clone()));
        }
        for p in &gone {
            self.seen.remove(p);
        }
        if !gone.is_empty() {
            metrics::counter!(crate::metrics_catalog::EXITED_SERIES_FORGOTTEN.name)
                .increment(gone.len() as u64);
        }
        gone
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(j: &str) -> Pair {
        (j.to_string(), "0".to_string())
    }

    #[test]
    fn pairs_live_or_recent_stay_and_idle_ones_go_after_retain() {
        let t0 = Instant::now();
        let mut r = Retired::default();
        r.retire([pair("a"), pair("b")], t0);
        let live: BTreeSet<Pair> = [pair("a")].into();
        assert!(r.expire(&live, t0 + RETAIN / 2).is_empty());
        // b has been idle since t0, a was seen live at RETAIN/2.
        let gone = r.expire(&BTreeSet::new(), t0 + RETAIN + Duration::from_secs(1));
        assert_eq!(gone, [pair("b")].into());
        assert_eq!(r.len(), 1);
        let gone = r.expire(&BTreeSet::new(), t0 + RETAIN * 2);
        assert_eq!(gone, [pair("a")].into());
        assert!(r.is_empty());
    }

    #[test]
    fn at_most_max_pairs_are_kept_the_longest_idle_first_forgotten() {
        let t0 = Instant::now();
        let mut r = Retired::default();
        for i in 0..MAX_PAIRS + 3 {
            r.retire(
                [pair(&format!("j{i:05}"))],
                t0 + Duration::from_millis(i as u64),
            );
        }
        let gone = r.expire(&BTreeSet::new(), t0 + Duration::from_secs(60));
        assert_eq!(
            gone,
            [pair("j00000"), pair("j00001"), pair("j00002")].into()
        );
        assert_eq!(r.len(), MAX_PAIRS);
    }
}
