//! Unit tests of the IB detector's bookkeeping: remembered counters, the
//! horizon's running totals, and the seconds its evidence states.
use std::collections::{BTreeMap, HashMap};

use vocab::ib::saturation;

use super::{
    counters::remember,
    history::{horizon_secs, History, Sample, Sums},
};

#[test]
fn remembered_counters_equal_the_latest_window_even_when_names_change() {
    let cur = |kv: &[(&str, u64)]| -> HashMap<String, u64> {
        kv.iter().map(|(k, v)| ((*k).to_string(), *v)).collect()
    };
    let mut prev = BTreeMap::new();
    for w in [
        cur(&[("symbol_error", 1), ("link_downed", 0)]),
        cur(&[("symbol_error", 5), ("link_downed", 2)]),
        // Same count, one name swapped: the old name must not linger.
        cur(&[("symbol_error", 6), ("port_rcv_errors", 3)]),
        cur(&[("symbol_error", 7)]),
    ] {
        remember(&mut prev, &w);
        let want: BTreeMap<String, u64> = w.into_iter().collect();
        assert_eq!(prev, want);
    }
}

#[test]
fn running_totals_equal_a_recount_of_the_kept_samples() {
    let mut h = History::default();
    for i in 0..500u64 {
        let mut x = Sample {
            secs: 1.0 + (i % 3) as f64,
            bits: if i % 7 == 0 { 0.0 } else { 4e11 },
            retries: (i % 5 != 0).then_some((i % 4, 1000 + i)),
            ..Sample::default()
        };
        x.errors[0] = (i % 11 != 0).then_some(i % 6);
        x.errors[2] = Some(i % 2);
        h.push(x, 60.0);
        let kept = &h.samples;
        let secs: f64 = kept.iter().map(|s| s.secs).sum();
        assert!((h.secs - secs).abs() < 1e-9);
        // The kept suffix spans the horizon and no shorter one does.
        assert!(secs >= 60.0 || kept.len() as u64 == i + 1);
        assert!(secs - kept[0].secs < 60.0);
        for f in [0, 2] {
            let e: u64 = kept
                .iter()
                .filter(|s| s.bits > 0.0)
                .filter_map(|s| s.errors[f])
                .sum();
            assert_eq!(h.sums().horizon[f].0, e);
        }
        let r: u64 = kept.iter().filter_map(|s| s.retries).map(|r| r.0).sum();
        assert_eq!(h.sums().retries_h.0, r);
    }
}

#[test]
fn the_horizon_is_told_in_seconds_even_without_a_rate_this_window() {
    let mut s = Sums {
        secs: 60.0,
        window_secs: 10.0,
        ..Sums::default()
    };
    // 1.2e13 bits over the horizon at 2e11 bits/s: 60 s.
    s.horizon[0] = (5, 1.2e13);
    s.window[0] = (1, 2e12);
    assert!((horizon_secs(&s, 0) - 60.0).abs() < 1e-9);
    // Saturated this window: no bits, and the evidence said 1.2e13 s.
    s.window[0] = (0, 0.0);
    assert_eq!(horizon_secs(&s, 0), 60.0);
}

#[test]
fn saturation_values_follow_the_counter_widths() {
    assert_eq!(saturation("symbol_error"), Some(65_535));
    assert_eq!(saturation("link_error_recovery"), Some(255));
    assert_eq!(saturation("local_link_integrity_errors"), Some(15));
}
