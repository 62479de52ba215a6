//! Fleet-wide yardsticks (peer medians) recomputed at most once per half
//! window of event time. Each recomputation walks every entity, so it must
//! not run per window: hosts send windows in any order (a reconnecting
//! collector replays its spool, a thousand streams interleave), and a
//! window older than the cached slot is judged against the newest medians
//! rather than forcing a fresh walk. Only a window that moves event time
//! forward by half a window or more recomputes.

/// One cached value and the window end it was computed at.
#[derive(Clone, Debug, Default)]
pub struct SlotCache<T> {
    at: Option<(i64, T)>,
    /// Recomputations so far (a scaling test counts them).
    pub recomputed: u64,
}

impl<T: Clone> SlotCache<T> {
    /// The cached value, or `compute()` when the window ending at `end_ms`
    /// (of length `len_ms`) lies half a window or more past the cache.
    pub fn get(&mut self, end_ms: i64, len_ms: i64, compute: impl FnOnce() -> T) -> T {
        if let Some((t, v)) = &self.at {
            if end_ms - t < (len_ms / 2).max(1) {
                return v.clone();
            }
        }
        let v = compute();
        self.at = Some((end_ms, v.clone()));
        self.recomputed += 1;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::SlotCache;

    #[test]
    fn recomputes_only_when_event_time_moves_half_a_window_forward() {
        let mut c = SlotCache::default();
        let mut calls = 0;
        // 100 hosts each send windows 1..=5 (1 s long) in host-major order,
        // as interleaved streams or spool replays do.
        for _host in 0..100 {
            for seq in 1..=5i64 {
                c.get(seq * 1000, 1000, || {
                    calls += 1;
                    seq
                });
            }
        }
        // Once per slot on the first host, never again for older windows.
        assert_eq!(calls, 5);
        assert_eq!(c.recomputed, 5);
        // A window 0.4 window-lengths later reuses, 0.5 recomputes.
        assert_eq!(c.get(5400, 1000, || -1), 5);
        assert_eq!(c.get(5500, 1000, || 6), 6);
    }
}
