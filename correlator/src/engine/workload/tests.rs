//! Step-time and latency change-points of the workload detector.
use super::*;

fn cfg() -> WorkloadConfig {
    WorkloadConfig::default()
}

/// Feeds `k` windows of `steps` steps at `secs` (± a deterministic
/// 1 % wobble); returns the first window index with a change.
fn feed(
    sh: &mut Shift,
    t: &mut i64,
    win_ms: i64,
    k: usize,
    secs: f64,
    steps: u64,
) -> Option<usize> {
    let delta = (1.0f64 + cfg().min_slowdown).ln();
    let mut first = None;
    for i in 0..k {
        let wobble = 1.0 + 0.01 * (((i * 7) % 5) as f64 - 2.0) / 2.0;
        let c = sh.observe(*t, *t + win_ms, (secs * wobble).ln(), steps, delta, &cfg());
        *t += win_ms;
        if c.is_some() && first.is_none() {
            first = Some(i);
        }
    }
    first
}

#[test]
fn a_15_percent_slowdown_is_found_after_the_same_time_at_any_window_length() {
    // 2 s steps: 1 s windows report every other window, 30 s windows 15.
    for (win_ms, steps) in [(2_000i64, 1u64), (10_000, 5), (30_000, 15)] {
        let mut sh = Shift::default();
        let mut t = 0;
        let warm = (120_000 / win_ms) as usize;
        assert_eq!(feed(&mut sh, &mut t, win_ms, warm, 2.0, steps), None);
        let found = feed(&mut sh, &mut t, win_ms, 40, 2.3, steps).expect("found");
        let after_s = (found as i64 + 1) * win_ms / 1000;
        assert!(
            (20..=60).contains(&after_s),
            "window {win_ms} ms: found after {after_s} s"
        );
    }
}

#[test]
fn steady_wobble_and_a_5_percent_drift_open_nothing() {
    let mut sh = Shift::default();
    let mut t = 0;
    assert_eq!(feed(&mut sh, &mut t, 10_000, 200, 2.0, 5), None);
    assert_eq!(feed(&mut sh, &mut t, 10_000, 100, 2.1, 5), None);
}
