//! Switch port counters through the engine: a fabric of 4 leaves and 2
//! spines (each leaf with one uplink to each spine, 4 hosts behind each
//! leaf), the HCA ports reported by their hosts and every switch port by a
//! fabric host (`mgmt01`, the collector's `[switches]` source). A spine
//! whose uplinks degrade together is one incident on the spine listing
//! them; one bad uplink, seen from both of its ends, is one incident on the
//! uplink; a leaf port facing an HCA reports into that HCA link's incident.
use std::collections::{BTreeMap, BTreeSet};

use correlator::engine::{ib::parse_topology, DetectConfig, Engine};
use proto::v1::{CandidateUpdate, IbPort, Origin, Window};

const NDR_BYTES_PER_S: u64 = 50_000_000_000;
const WINDOW_S: f64 = 10.0;
/// Symbol errors per window at BER 1e-11 on an NDR link (4e12 bits).
const ERRORS_1E11: u64 = 40;
const HOSTS: usize = 16;

/// `cN` links host→leaf, `upLS` uplinks leaf L → spine S.
fn topology() -> correlator::engine::ib::Topology {
    let mut t = String::new();
    for h in 0..HOSTS {
        let leaf = h / 4 + 1;
        t.push_str(&format!(
            "c{h} h{h:02}/mlx5_0/1 leaf0{leaf}[{}]\n",
            h % 4 + 1
        ));
    }
    for l in 1..=4 {
        for s in 1..=2 {
            t.push_str(&format!("up{l}{s} leaf0{l}[{}] spine0{s}[{l}]\n", 32 + s));
        }
    }
    parse_topology(&t).expect("topology")
}

/// Port counters by entity name, advanced by each window.
struct Fabric {
    counters: BTreeMap<String, BTreeMap<String, u64>>,
    seq: u64,
    t: i64,
}

/// Every switch port of the topology: (switch, port).
fn switch_ports() -> Vec<(String, u32)> {
    let mut v = Vec::new();
    for l in 1..=4u32 {
        for p in 1..=4 {
            v.push((format!("leaf0{l}"), p));
        }
        for s in 1..=2u32 {
            v.push((format!("leaf0{l}"), 32 + s));
            v.push((format!("spine0{s}"), l));
        }
    }
    v
}

fn port_row(counters: &BTreeMap<String, u64>) -> IbPort {
    IbPort {
        port: 1,
        state: 4,
        phys_state: 5,
        rate_bytes_per_sec: NDR_BYTES_PER_S,
        counters: counters.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        link_layer: "InfiniBand".into(),
        ..IbPort::default()
    }
}

impl Fabric {
    fn new() -> Self {
        let mut f = Self {
            counters: BTreeMap::new(),
            seq: 0,
            t: 1_800_000_000_000,
        };
        let keys = (0..HOSTS)
            .map(|h| format!("h{h:02}"))
            .chain(switch_ports().into_iter().map(|(s, p)| format!("{s}[{p}]")));
        for k in keys {
            let c = f.counters.entry(k).or_default();
            for n in [
                "port_rcv_data",
                "port_xmit_data",
                "symbol_error",
                "link_downed",
            ] {
                c.insert(n.into(), 7);
            }
        }
        f
    }

    fn add(&mut self, key: &str, counter: &str, v: u64) {
        *self
            .counters
            .get_mut(key)
            .expect("port")
            .entry(counter.into())
            .or_default() += v;
    }

    fn window(&self, host: &str, ports: Vec<IbPort>) -> Window {
        let ms = (WINDOW_S * 1000.0) as i64;
        Window {
            origin: Some(Origin {
                hostname: host.into(),
                boot_id: "b".into(),
                instance: "i".into(),
                ..Origin::default()
            }),
            seq: self.seq,
            start_unix_ms: self.t - ms,
            end_unix_ms: self.t,
            ib_ports: ports,
            ..Window::default()
        }
    }

    /// One window of every host and of the fabric host, with `errors`
    /// symbol errors added to those ports first.
    fn tick(&mut self, e: &mut Engine, errors: &[&str]) -> Vec<CandidateUpdate> {
        self.t += (WINDOW_S * 1000.0) as i64;
        self.seq += 1;
        let words = (NDR_BYTES_PER_S as f64 * WINDOW_S * 0.5 / 4.0) as u64;
        let keys: Vec<String> = self.counters.keys().cloned().collect();
        for k in &keys {
            self.add(k, "port_rcv_data", words);
            self.add(k, "port_xmit_data", words);
        }
        for k in errors {
            self.add(k, "symbol_error", ERRORS_1E11);
        }
        let mut out = Vec::new();
        for h in 0..HOSTS {
            let row = IbPort {
                hca: "mlx5_0".into(),
                ..port_row(&self.counters[&format!("h{h:02}")])
            };
            out.extend(e.ingest(&self.window(&format!("h{h:02}"), vec![row])));
        }
        let rows = switch_ports()
            .into_iter()
            .map(|(s, p)| IbPort {
                switch: s.clone(),
                port: p,
                ..port_row(&self.counters[&format!("{s}[{p}]")])
            })
            .collect();
        out.extend(e.ingest(&self.window("mgmt01", rows)));
        out
    }
}

/// Healthy for 3 windows, `bad` ports at BER 1e-11 for 8, healthy for 10.
fn run(bad: &[&str]) -> Vec<CandidateUpdate> {
    let mut e = Engine::new(&DetectConfig::default(), topology());
    let mut f = Fabric::new();
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
