//! `node_lost` under skewed clocks: one host's clock running 40 s ahead
//! (inside `max_future_s`) neither raises `node_lost` for live hosts nor
//! hides a silent one; a correlator that falls behind sees no silence.
use std::sync::{
    atomic::{AtomicI64, Ordering},
    Arc,
};

use proto::v1::{Origin, Window};

use super::*;

const T0: i64 = 1_800_000_000_000;
const LEN: i64 = 100;

fn window(host: &str, end: i64) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            ..Origin::default()
        }),
        start_unix_ms: end - LEN,
        end_unix_ms: end,
        ..Window::default()
    }
}

/// A detector whose arrival clock the test moves.
fn live() -> (NodeDetector, Arc<AtomicI64>) {
    let wall = Arc::new(AtomicI64::new(T0));
    let w = wall.clone();
    let mut d = NodeDetector::default();
    d.set_arrival_clock(move || w.load(Ordering::Relaxed));
    (d, wall)
}

/// One 100 ms round: the wall clock moves on and each `(host, skew_ms)`
/// sends the window it closed now by its own clock. Returns who was lost.
fn round(d: &mut NodeDetector, wall: &AtomicI64, hosts: &[(&str, i64)]) -> Vec<String> {
    let now = wall.fetch_add(LEN, Ordering::Relaxed) + LEN;
    hosts
        .iter()
        .flat_map(|(h, skew)| d.observe(h, &window(h, now + skew)))
        .map(|f| f.entity)
        .collect()
}

/// Rounds until someone is lost (at most `max`): (rounds, who).
fn until_lost(
    d: &mut NodeDetector,
    wall: &AtomicI64,
    hosts: &[(&str, i64)],
    max: usize,
) -> (usize, Vec<String>) {
    for n in 1..=max {
        let lost = round(d, wall, hosts);
        if !lost.is_empty() {
            return (n, lost);
        }
    }
    (max, Vec::new())
}

const AHEAD: i64 = 40_000;

#[test]
fn two_hosts_one_clock_40s_ahead_no_false_node_lost_and_its_silence_is_seen() {
    let (mut d, wall) = live();
    let both = [("a", 0), ("b", AHEAD)];
    // 5 s of both hosts alive: nobody is lost (the old cluster clock jumped
    // to b's +40 s and declared a lost at once).
    let (_, lost) = until_lost(&mut d, &wall, &both, 50);
    assert_eq!(lost, Vec::<String>::new());
    // b falls silent: lost within its usual bound, 3 windows (+1 for the
    // check), not after 40 s.
    let (n, lost) = until_lost(&mut d, &wall, &[("a", 0)], 400);
    assert_eq!(lost, ["b"]);
    assert!(n <= 4, "b lost after {n} windows of silence");
    // a stays alive.
    let (_, lost) = until_lost(&mut d, &wall, &[("a", 0)], 50);
    assert_eq!(lost, Vec::<String>::new());
}

#[test]
fn three_hosts_one_clock_40s_ahead_silent_hosts_are_lost_in_bound() {
    let (mut d, wall) = live();
    let (_, lost) = until_lost(&mut d, &wall, &[("a", 0), ("b", AHEAD), ("c", 0)], 50);
    assert_eq!(lost, Vec::<String>::new());
    // The host ahead falls silent: its last window was dated 40 s ahead,
    // which used to hold every check back for 40 s.
    let (n, lost) = until_lost(&mut d, &wall, &[("a", 0), ("c", 0)], 400);
    assert_eq!((lost, n <= 4), (vec!["b".to_string()], true), "{n}");
    let (n, lost) = until_lost(&mut d, &wall, &[("a", 0)], 400);
    assert_eq!((lost, n <= 4), (vec!["c".to_string()], true), "{n}");
}

#[test]
fn event_time_only_a_clock_ahead_does_not_hold_the_checks_back() {
    // Replay and simulation: no arrival clock, the same guarantee for
    // three hosts or more (the median ignores the one ahead).
    let mut d = NodeDetector::default();
    let wall = AtomicI64::new(T0);
    let (_, lost) = until_lost(&mut d, &wall, &[("a", 0), ("b", AHEAD), ("c", 0)], 50);
    assert_eq!(lost, Vec::<String>::new());
    let (n, lost) = until_lost(&mut d, &wall, &[("a", 0), ("c", 0)], 400);
    assert_eq!((lost, n <= 4), (vec!["b".to_string()], true), "{n}");
}

#[test]
fn a_correlator_that_falls_behind_sees_no_silence() {
    let (mut d, wall) = live();
    let hosts = [("a", 0), ("b", 0), ("c", 0), ("d", 0)];
    until_lost(&mut d, &wall, &hosts, 20);
    // The engine stalls for 2 s: the windows of that time are judged in
    // one burst, all at the same arrival time.
    let t = wall.load(Ordering::Relaxed);
    wall.store(t + 2000, Ordering::Relaxed);
    let mut lost = Vec::new();
    for k in 1..=20 {
        for (h, _) in hosts {
            lost.extend(
                d.observe(h, &window(h, t + k * LEN))
                    .into_iter()
                    .map(|f| f.entity),
            );
        }
    }
    assert_eq!(lost, Vec::<String>::new());
    // A host silent on both clocks is still lost.
    let (n, lost) = until_lost(&mut d, &wall, &hosts[..3], 400);
    assert_eq!((lost, n <= 4), (vec!["d".to_string()], true), "{n}");
}
