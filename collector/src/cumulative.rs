//! Cumulative counters read again each window, turned into window deltas:
//! the bookkeeping the NFS (`nfs/delta.rs`, mountstats) and Lustre
//! (`lustre/delta.rs`, per-target files) families share. Each read's items
//! are keyed; an item seen for the first time is the base (no delta); an
//! item whose counters went back (unmounted and mounted again between two
//! reads) has no delta that window, is counted as a reset, and its new
//! values are the base. What a delta is, and the rows it makes, stay with
//! the family.
use std::{collections::HashMap, hash::Hash};

/// A counter's increase, `None` when it went backwards.
pub fn inc(cur: u64, prev: u64) -> Option<u64> {
    cur.checked_sub(prev)
}

/// The latest read of every item by key, in read order, and the resets
/// since start.
#[derive(Debug)]
pub struct Tracker<K, V> {
    prev: HashMap<K, V>,
    /// The latest read's keys in read order (for the exposition).
    order: Vec<K>,
    resets_total: u64,
}

impl<K: Eq + Hash + Clone, V> Default for Tracker<K, V> {
    fn default() -> Self {
        Self {
            prev: HashMap::new(),
            order: Vec::new(),
            resets_total: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, V> Tracker<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A new read, which replaces the last: for every item the last read
    /// had too, its rows `delta(cur, prev)`, `None` when a counter went
    /// back (a reset). Returns the window's rows and its resets; items not
    /// in this read are forgotten.
    pub fn update<R>(
        &mut self,
        read: impl IntoIterator<Item = (K, V)>,
        mut delta: impl FnMut(&V, &V) -> Option<Vec<R>>,
    ) -> (Vec<R>, u64) {
        let read = read.into_iter();
        let mut rows = Vec::new();
        let mut resets = 0;
        let mut next = HashMap::with_capacity(read.size_hint().0);
        let mut order = Vec::with_capacity(read.size_hint().0);
        for (key, cur) in read {
            if let Some(p) = self.prev.get(&key) {
                match delta(&cur, p) {
                    Some(r) => rows.extend(r),
                    None => resets += 1,
                }
            }
            order.push(key.clone());
            next.insert(key, cur);
        }
        self.resets_total += resets;
        self.prev = next;
        self.order = order;
        (rows, resets)
    }

    /// Items of the latest read (distinct keys).
    pub fn len(&self) -> usize {
        self.prev.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prev.is_empty()
    }

    /// The latest read's items, in read order.
    pub fn latest(&self) -> impl Iterator<Item = &V> {
        self.order.iter().filter_map(|k| self.prev.get(k))
    }

    /// Reads of an item whose counters went back, since start.
    pub fn resets_total(&self) -> u64 {
        self.resets_total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_read_is_the_base_then_deltas_resets_and_read_order() {
        // Rows: the increase of each counter, `None` when one went back.
        let delta = |cur: &Vec<u64>, prev: &Vec<u64>| -> Option<Vec<u64>> {
            cur.iter().zip(prev).map(|(c, p)| inc(*c, *p)).collect()
        };
        let mut t: Tracker<&str, Vec<u64>> = Tracker::new();
        assert_eq!(
            t.update([("b", vec![5, 5]), ("a", vec![1, 1])], delta),
            (vec![], 0)
        );
        assert_eq!((t.len(), t.resets_total()), (2, 0));
        // `a` rose, `b` went back (remounted): no rows for `b`, one reset;
        // `c` is new: the base.
        let (rows, resets) = t.update(
            [("b", vec![2, 9]), ("a", vec![4, 1]), ("c", vec![7, 7])],
            delta,
        );
        assert_eq!((rows, resets), (vec![3, 0], 1));
        assert_eq!(
            t.latest().collect::<Vec<_>>(),
            [&vec![2, 9], &vec![4, 1], &vec![7, 7]]
        );
        // `b`'s new values are its base; `a` and `c`, absent, are forgotten.
        let (rows, resets) = t.update([("b", vec![3, 10])], delta);
        assert_eq!((rows, resets), (vec![1, 1], 0));
        assert_eq!((t.len(), t.resets_total()), (1, 1));
        assert_eq!(t.update(Vec::new(), delta), (vec![], 0));
        assert!(t.is_empty());
    }

    #[test]
    fn a_counter_that_went_back_has_no_increase() {
        assert_eq!(inc(10, 3), Some(7));
        assert_eq!(inc(3, 3), Some(0));
        assert_eq!(inc(2, 3), None);
    }
}
