//! The launch controller's hit cost and CPU rate.
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use super::{cpu_rate, measure::CPU_HIST_MAX, recent_cost, CPU_HORIZON};

#[test]
fn the_hit_cost_is_the_median_of_recent_measurements() {
    let us = |v: &[f64]| v.iter().map(|x| x * 1e-6).collect::<VecDeque<f64>>();
    let c = |v: &[f64]| recent_cost(&us(v)).map(|x| (x * 1e9).round());
    assert_eq!(c(&[]), None);
    assert_eq!(c(&[12.9]), Some(12_900.0));
    // A high start and a spike: the median stays with what recurs.
    assert_eq!(c(&[12.9, 9.5, 9.4]), Some(9_500.0));
    assert_eq!(c(&[9.5, 9.4, 17.0, 9.6, 9.3]), Some(9_500.0));
    // Two of five spiking still leave it.
    assert_eq!(c(&[17.0, 9.4, 16.0, 9.6, 9.3]), Some(9_600.0));
    // A real move is followed once it is most of the window.
    assert_eq!(c(&[9.4, 12.0, 12.1, 11.9, 9.3]), Some(11_900.0));
    assert_eq!(c(&[f64::NAN, 9.0]), Some(9_000.0));
}

#[test]
fn the_cpu_rate_spans_the_horizon_not_the_last_check() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut h = VecDeque::new();
    assert_eq!(cpu_rate(&mut h, at(0), 10.0, CPU_HORIZON), None);
    // A 2-CPU process read in 10 ms ticks: 4 s, then a 25 ms check that
    // read one tick too many (2.4 CPUs on its own).
    let r = cpu_rate(&mut h, at(4000), 18.0, CPU_HORIZON).expect("rate");
    assert!((r - 2.0).abs() < 1e-9, "{r}");
    let r = cpu_rate(&mut h, at(4025), 18.06, CPU_HORIZON).expect("rate");
    assert!((r - 2.0).abs() < 0.02, "{r}");
    // Readings older than needed go: the span starts at the newest
    // reading at least the horizon old.
    for k in 1..=100u64 {
        cpu_rate(
            &mut h,
            at(4025 + 100 * k),
            18.06 + 0.2 * k as f64,
            CPU_HORIZON,
        );
    }
    let span = at(14_025).duration_since(h.front().expect("kept").0);
    assert!(
        span >= CPU_HORIZON && span < CPU_HORIZON + Duration::from_millis(100),
        "{span:?}"
    );
    assert!(h.len() <= 22, "{}", h.len());
    // Bounded whatever the check rate.
    let mut h = VecDeque::new();
    for k in 0..1000u64 {
        cpu_rate(&mut h, at(k), k as f64 * 0.002, CPU_HORIZON);
    }
    assert!(h.len() <= CPU_HIST_MAX);
}
