//! One origin's sequence: the highest number accepted, the gaps below it
//! (numbers skipped and never received, which a late window may still
//! fill), and the budget of numbers it may still skip.
//!
//! Each window may jump at most `max_seq_jump` past the last one, and the
//! jumps together may skip at most `max_seq_skip_per_min` numbers per
//! minute of wall-clock time (unused allowance accumulates up to
//! `max_seq_jump`): a real collector skips only the windows it dropped from
//! a full spool, at most one per window length of the time it was cut off,
//! while chained jumps, each under `max_seq_jump`, cannot move a sequence
//! arbitrarily far ahead. A jump that is accepted anyway leaves a gap that
//! the real collector's windows fill: they are new, not duplicates.
use std::time::Instant;

/// Gaps remembered per origin; past it the smallest is forgotten (a gap
/// spoofed with many tiny jumps cannot push out a large one).
pub const MAX_GAPS: usize = 8;

/// The skip budget (from `[detect.limits]`).
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Numbers one window may skip at most, and the budget's capacity.
    pub max_jump: u64,
    /// Refill per minute of wall-clock time; 0 = no budget.
    pub per_min: u64,
}

/// What a window's number means for its origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Past the last accepted number, skipping `skipped` numbers.
    Next { skipped: u64 },
    /// Below the last accepted number, in a gap: never received before.
    Late,
    /// Already received (a resend after a reconnect).
    Duplicate,
    /// Jumps more than `max_jump` past `last`.
    TooFar,
    /// Would skip `skipped` numbers with only `allowed` left in the budget.
    OverBudget { skipped: u64, allowed: u64 },
}

#[derive(Clone, Debug)]
pub struct Seq {
    pub last: u64,
    /// When a window of this origin was last seen (duplicates too).
    pub seen: Instant,
    /// Ranges `[from, to]` of skipped numbers never received.
    gaps: Vec<(u64, u64)>,
    /// Numbers the origin may still skip, as of `refilled`.
    skip: f64,
    refilled: Instant,
}

impl Seq {
    /// A new origin whose first window is `seq` (nothing before it is a gap:
    /// a collector resumed against a correlator without an ingest log
    /// starts at its oldest spooled window).
    pub fn new(seq: u64, now: Instant, b: Budget) -> Self {
        Self {
            last: seq,
            seen: now,
            gaps: Vec::new(),
            skip: b.max_jump as f64,
            refilled: now,
        }
    }

    /// The budget at `now`.
    fn allowance(&self, now: Instant, b: Budget) -> f64 {
        let rate = b.per_min as f64 / 60.0;
        let elapsed = now.saturating_duration_since(self.refilled).as_secs_f64();
        (self.skip + elapsed * rate).min(b.max_jump as f64)
    }

    /// What `seq` would be (nothing changes).
    pub fn judge(&self, seq: u64, now: Instant, b: Budget) -> Verdict {
        if seq <= self.last {
            return if self.gap_of(seq).is_some() {
                Verdict::Late
            } else {
                Verdict::Duplicate
            };
        }
        if seq > self.last.saturating_add(b.max_jump) {
            return Verdict::TooFar;
        }
        let skipped = seq - self.last - 1;
        if b.per_min > 0 && skipped > 0 {
            let allowed = self.allowance(now, b);
            if skipped as f64 > allowed {
                return Verdict::OverBudget {
                    skipped,
                    allowed: allowed as u64,
                };
            }
        }
        Verdict::Next { skipped }
    }

    /// Records an accepted `seq` of verdict `v` (`Next` or `Late`).
    pub fn accept(&mut self, seq: u64, v: Verdict, now: Instant, b: Budget) {
        self.seen = now;
        match v {
            Verdict::Next { skipped } => {
                if skipped > 0 {
                    if b.per_min > 0 {
                        self.skip = (self.allowance(now, b) - skipped as f64).max(0.0);
                        self.refilled = now;
                    }
                    self.add_gap(self.last + 1, seq - 1);
                }
                self.last = seq;
            }
            Verdict::Late => self.fill(seq),
            Verdict::Duplicate | Verdict::TooFar | Verdict::OverBudget { .. } => {}
        }
    }

    /// Replays `seq` from the ingest log (no budget: it was accepted).
    pub fn restore(&mut self, seq: u64, now: Instant) {
        if seq > self.last {
            if seq > self.last + 1 {
                self.add_gap(self.last + 1, seq - 1);
            }
            self.last = seq;
        } else if self.gap_of(seq).is_some() {
            self.fill(seq);
        }
        self.seen = now;
    }

    fn gap_of(&self, seq: u64) -> Option<usize> {
        self.gaps.iter().position(|&(a, b)| a <= seq && seq <= b)
    }

    fn add_gap(&mut self, from: u64, to: u64) {
        self.gaps.push((from, to));
        if self.gaps.len() > MAX_GAPS {
            if let Some(i) = (0..self.gaps.len()).min_by_key(|&i| self.gaps[i].1 - self.gaps[i].0) {
                self.gaps.remove(i);
            }
        }
    }

    fn fill(&mut self, seq: u64) {
        let Some(i) = self.gap_of(seq) else {
            return;
        };
        let (a, b) = self.gaps[i];
        match (seq == a, seq == b) {
            (true, true) => {
                self.gaps.remove(i);
            }
            (true, false) => self.gaps[i].0 = seq + 1,
            (false, true) => self.gaps[i].1 = seq - 1,
            (false, false) => {
                self.gaps[i].1 = seq - 1;
                self.add_gap(seq + 1, b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const B: Budget = Budget {
        max_jump: 1000,
        per_min: 600,
    };

    #[test]
    fn chained_jumps_spend_one_budget_and_their_gaps_stay_fillable() {
        let t = Instant::now();
        let mut s = Seq::new(5, t, B);
        // 5 → 1004 skips 998 of the 1000.
        let v = s.judge(1004, t, B);
        assert_eq!(v, Verdict::Next { skipped: 998 });
        s.accept(1004, v, t, B);
        // The next jump of 500 is within max_jump but over the budget.
        assert_eq!(
            s.judge(1505, t, B),
            Verdict::OverBudget {
                skipped: 500,
                allowed: 2
            }
        );
        // One second later 10 more numbers may be skipped, never more than
        // max_jump however long the origin rests.
        assert_eq!(
            s.judge(1017, t + Duration::from_secs(1), B),
            Verdict::Next { skipped: 12 }
        );
        assert_eq!(
            s.judge(2004, t + Duration::from_secs(86_400), B),
            Verdict::Next { skipped: 999 }
        );
        assert_eq!(
            s.judge(3005, t + Duration::from_secs(86_400), B),
            Verdict::TooFar
        );
        // The windows the jump skipped are new; each only once.
        assert_eq!(s.judge(6, t, B), Verdict::Late);
        s.accept(6, Verdict::Late, t, B);
        assert_eq!(s.judge(6, t, B), Verdict::Duplicate);
        s.accept(500, Verdict::Late, t, B);
        assert_eq!(s.gaps, vec![(7, 499), (501, 1003)]);
        assert_eq!(s.judge(1004, t, B), Verdict::Duplicate);
        // The next number never needs budget.
        assert_eq!(s.judge(1005, t, B), Verdict::Next { skipped: 0 });
    }

    #[test]
    fn many_tiny_gaps_do_not_push_out_a_large_one() {
        let t = Instant::now();
        let mut s = Seq::new(1, t, B);
        s.restore(900, t);
        for k in 0..20 {
            s.restore(902 + 2 * k, t);
        }
        assert_eq!(s.gaps.len(), MAX_GAPS);
        assert_eq!(s.judge(2, t, B), Verdict::Late);
        assert_eq!(s.judge(899, t, B), Verdict::Late);
    }
}
