//! Switch port counters through the engine: a fabric of 4 leaves and 2
//! spines (each leaf with one uplink to each spine, 4 hosts behind each
//! leaf), the HCA ports reported by their hosts and every switch port by a
//! fabric host (`mgmt01`, the collector's `[switches]` source). A spine
//! whose uplinks degrade together is one incident on the spine listing
//! them; one bad uplink, seen from both of its ends, is one incident on the
//! uplink; a leaf port facing an HCA reports into that HCA link's incident.
use crate::fabric;

use std::collections::{BTreeMap, BTreeSet};

use correlator::engine::{DetectConfig, Engine};
use fabric::{topology, Fabric};
use proto::v1::CandidateUpdate;

/// Healthy for 3 windows, `bad` ports at BER 1e-11 for 8, healthy for 10.
fn run(bad: &[&str]) -> Vec<CandidateUpdate> {
    let mut e = Engine::new(&DetectConfig::default(), topology());
    let mut f = Fabric::at(1_800_000_000_000);
    let mut all = Vec::new();
    for _ in 0..3 {
        all.extend(f.tick(&mut e, &[]));
    }
    assert!(all.is_empty(), "{all:#?}");
    for _ in 0..8 {
        all.extend(f.tick(&mut e, bad));
    }
    for _ in 0..10 {
        all.extend(f.tick(&mut e, &[]));
    }
    all
}

/// The incidents of a run: id → (kind, entity) of its first update.
fn incidents(all: &[CandidateUpdate]) -> BTreeMap<String, (String, String)> {
    let mut m = BTreeMap::new();
    for u in all {
        m.entry(u.incident_id.clone())
            .or_insert((u.kind.clone(), u.entity.clone()));
    }
    m
}

/// Incidents not resolved into another (the faults as reported).
fn standing(all: &[CandidateUpdate]) -> BTreeSet<(String, String)> {
    let absorbed: BTreeSet<&str> = all
        .iter()
        .filter(|u| {
            u.evidence
                .iter()
                .any(|e| e.starts_with("explained by incident"))
        })
        .map(|u| u.incident_id.as_str())
        .collect();
    incidents(all)
        .into_iter()
        .filter(|(id, _)| !absorbed.contains(id.as_str()))
        .map(|(_, v)| v)
        .collect()
}

#[test]
fn a_spine_whose_uplinks_degrade_together_is_one_spine_incident() {
    let _turn = tests::one_file_at_a_time(file!());
    // The spine's own ends of its four uplinks.
    let all = run(&["spine01[1]", "spine01[2]", "spine01[3]", "spine01[4]"]);
    assert_eq!(
        standing(&all),
        [("ib_link_degraded".to_string(), "switch:spine01".to_string())].into(),
        "{all:#?}"
    );
    let last = all
        .iter()
        .filter(|u| u.entity == "switch:spine01")
        .find(|u| {
            u.evidence[0].starts_with(
                "4 of the 4 uplinks of switch spine01 degraded at once (up11, up21, up31, up41)",
            )
        })
        .unwrap_or_else(|| panic!("an update naming all four uplinks: {all:#?}"));
    assert!(
        last.evidence.iter().any(|e| e.starts_with("member up31: ")),
        "{:?}",
        last.evidence
    );
    assert_eq!(
        all.iter()
            .rfind(|u| u.entity == "switch:spine01")
            .map(|u| u.state.as_str()),
        Some("resolved")
    );
}

#[test]
fn one_bad_uplink_seen_from_both_ends_is_one_uplink_incident() {
    let _turn = tests::one_file_at_a_time(file!());
    let all = run(&["leaf02[33]", "spine01[2]"]);
    let inc = incidents(&all);
    assert_eq!(
        inc.values().cloned().collect::<Vec<_>>(),
        [("ib_link_degraded".to_string(), "up21".to_string())],
        "{all:#?}"
    );
    let opened = all.iter().find(|u| u.state == "opened").expect("opened");
    assert!(
        opened
            .evidence
            .iter()
            .any(|e| e.starts_with("reported by switch:")),
        "{:?}",
        opened.evidence
    );
    // Two uplinks of a spine stay two uplink incidents (below
    // extent_min_ports).
    let all = run(&["spine02[1]", "spine02[4]"]);
    let got: BTreeSet<(String, String)> = incidents(&all).into_values().collect();
    assert_eq!(
        got,
        [
            ("ib_link_degraded".to_string(), "up12".to_string()),
            ("ib_link_degraded".to_string(), "up42".to_string())
        ]
        .into()
    );
}

#[test]
fn a_leaf_port_facing_an_hca_reports_into_that_links_incident() {
    let _turn = tests::one_file_at_a_time(file!());
    // Errors counted only by the leaf's receiver (the HCA's transmitter or
    // the cable towards the leaf): the host's own counters are clean.
    let all = run(&["leaf01[3]"]);
    let inc = incidents(&all);
    assert_eq!(
        inc.values().cloned().collect::<Vec<_>>(),
        [("ib_link_degraded".to_string(), "c2".to_string())],
        "{all:#?}"
    );
    let opened = all.iter().find(|u| u.state == "opened").expect("opened");
    assert!(
        opened
            .evidence
            .iter()
            .any(|e| e == "reported by switch:leaf01/3"),
        "{:?}",
        opened.evidence
    );
}
