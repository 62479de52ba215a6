//! Capped exponential backoff with full jitter for the sender's reconnects.
use std::time::Duration;

/// Capped exponential backoff with full jitter: after the n-th consecutive
/// failure the wait is uniformly random in [0, min(max, min·2ⁿ)]; one
/// successful delivery resets it. Every failure path goes through it, so no
/// failure can make a tight reconnect loop.
#[derive(Debug)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max: max.max(min),
            failures: 0,
        }
    }

    /// Upper bound of the next wait.
    pub fn cap(&self) -> Duration {
        self.min
            .saturating_mul(1u32 << self.failures.min(20))
            .min(self.max)
    }

    /// The wait after one more failure.
    pub fn next_wait(&mut self) -> Duration {
        let cap = self.cap();
        self.failures = self.failures.saturating_add(1);
        cap.mul_f64(fastrand::f64())
    }

    /// The wait after one more failure, at least half the cap ("equal
    /// jitter"): n failures take at least the sum of the halves, so the
    /// number of attempts in a given time is bounded (held-aside windows'
    /// retries), while attempts of many collectors still spread out.
    pub fn next_wait_at_least_half(&mut self) -> Duration {
        let cap = self.cap();
        self.failures = self.failures.saturating_add(1);
        cap.mul_f64(0.5 + 0.5 * fastrand::f64())
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}
