//! Opening, merging, capping and resolving incidents.
use super::*;
use vocab::kind::IncidentKind;

fn mgr() -> IncidentManager {
    IncidentManager::new(IncidentConfig {
        severity: Default::default(),
        quiet_s: 2.0,
        quiet_windows: 2,
        update_delta: 0.05,
    })
}

fn states(ups: &[CandidateUpdate]) -> Vec<(String, String)> {
    ups.iter()
        .map(|u| (u.state.clone(), u.entity.clone()))
        .collect()
}

#[test]
fn a_window_resolves_only_its_own_hosts_and_evaluated_incidents() {
    let mut m = mgr();
    let f = |e: &str| Finding::new(IncidentKind::GpuThermalThrottle, e, 0.8);
    // "a" opens a GPU incident and one on an entity it evaluates; "ab"
    // (a host whose name starts with "a") opens its own.
    let ups = m.apply(1000, "a", vec![], vec![f("a/gpu0"), f("job/0")], &[]);
    assert_eq!(ups.len(), 2);
    m.apply(1000, "ab", vec![], vec![f("ab/gpu0")], &[]);
    // Many quiet windows from "ab" resolve only "ab/gpu0".
    let mut got = Vec::new();
    for t in 2..10 {
        got.extend(states(&m.apply(t * 1000, "ab", vec![], vec![], &[])));
    }
    assert_eq!(got, vec![("resolved".into(), "ab/gpu0".into())]);
    // Quiet windows from "a" (which evaluates job/0) resolve both of
    // its incidents once 2 windows and 2 s have passed, in key order.
    let mut got = Vec::new();
    for t in 2..5 {
        got.extend(states(&m.apply(
            t * 1000,
            "a",
            vec!["job/0".to_string()],
            vec![],
            &[],
        )));
    }
    assert_eq!(
        got,
        vec![
            ("resolved".into(), "a/gpu0".into()),
            ("resolved".into(), "job/0".into())
        ]
    );
    assert!(m.open().is_empty());
    assert!(m.by_entity.is_empty());
}

#[test]
fn each_host_fills_only_its_share_and_node_lost_is_the_lost_hosts() {
    let mut m = mgr().with_cap(100, 2);
    let f = |k, e: &str| Finding::new(IncidentKind::parse(k).expect("a known kind"), e, 0.8);
    // "a" raises 3 of its own: the third is over its share of 2.
    let ups = m.apply(
        1000,
        "a",
        vec![],
        vec![
            f("gpu_xid", "a/gpu0"),
            f("gpu_xid", "a/gpu1"),
            f("gpu_xid", "a/gpu2"),
        ],
        &[],
    );
    assert_eq!(ups.len(), 2);
    assert_eq!((m.open_of("a"), m.dropped_per_host), (2, 1));
    // Its window notices 3 lost hosts: each is charged to the lost host.
    let lost = ["b", "c", "d"].map(|h| f("node_lost", h));
    assert_eq!(m.apply(2000, "a", vec![], lost.to_vec(), &[]).len(), 3);
    assert_eq!((m.open_of("a"), m.open_of("b")), (2, 1));
    // "b" reports again: its node_lost resolves and its share is free.
    m.apply(3000, "b", vec![], vec![], &[]);
    assert_eq!(m.open_of("b"), 0);
    assert!(!m.per_host.contains_key("b"));
}
