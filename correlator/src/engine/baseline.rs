//! An entity's own history, for judging it when it has too few peers: the
//! median of its latest normal windows.
//!
//! The median shrugs off the bursts of a noisy but healthy entity (an
//! emulated RoCE link retransmitting 8x its usual rate for one window), and
//! windows far from the baseline are kept out of it, so a fault that lasts
//! cannot raise the yardstick it is judged against.
use std::collections::VecDeque;

/// Windows whose median is the baseline.
pub const WINDOWS: usize = 16;
/// Windows the baseline needs before an entity is judged against it.
pub const WARMUP: u32 = 3;
/// Windows within this multiple of the baseline (or below the detector's
/// floor) feed it; others are kept out.
pub const BAND: f64 = 3.0;

#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OwnBaseline {
    recent: VecDeque<f64>,
    learnt: u32,
    value: Option<f64>,
}

impl OwnBaseline {
    /// The baseline, once any window fed it.
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Windows that fed it (saturating).
    pub fn learnt(&self) -> u32 {
        self.learnt
    }

    /// Enough history to judge against.
    pub fn warm(&self) -> bool {
        self.learnt >= WARMUP
    }

    /// Whether `x` is close enough to the baseline to feed it.
    pub fn near(&self, x: f64, floor: f64) -> bool {
        x <= self.value.map_or(floor, |b| (b * BAND).max(floor))
    }

    /// Feeds `x` while warming up, and afterwards when `normal`.
    pub fn learn(&mut self, x: f64, normal: bool) {
        if self.warm() && !normal {
            return;
        }
        if self.recent.len() == WINDOWS {
            self.recent.pop_front();
        }
        self.recent.push_back(x);
        // Median on a stack copy: this runs for every entity every window.
        let mut v = [0.0f64; WINDOWS];
        let n = self.recent.len();
        for (d, s) in v.iter_mut().zip(&self.recent) {
            *d = *s;
        }
        let v = &mut v[..n];
        v.sort_unstable_by(f64::total_cmp);
        self.value = Some(if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        });
        self.learnt = self.learnt.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_recent_normal_windows() {
        let mut b = OwnBaseline::default();
        for x in [10.0, 80.0, 12.0] {
            b.learn(x, false); // warm-up takes every window
        }
        assert!(b.warm());
        assert_eq!(b.value(), Some(12.0));
        // A window 10x the baseline is not normal and stays out.
        assert!(!b.near(120.0, 1.0));
        b.learn(120.0, b.near(120.0, 1.0));
        assert_eq!((b.value(), b.learnt()), (Some(12.0), 3));
        // The window is bounded: old values leave.
        for _ in 0..WINDOWS {
            b.learn(20.0, true);
        }
        assert_eq!(b.value(), Some(20.0));
        assert_eq!(OwnBaseline::default().value(), None);
    }
}
