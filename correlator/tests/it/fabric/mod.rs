//! A fabric of 4 leaves and 2 spines (each leaf with one uplink to each
//! spine, 4 hosts behind each leaf): its topology and its windows, the HCA
//! ports reported by their hosts and every switch port by a fabric host
//! (`mgmt01`, the collector's `[switches]` source). Shared by
//! `spine_scenarios.rs` and `replay_topology.rs`.
#![allow(dead_code)]

use std::collections::BTreeMap;

use correlator::engine::{ib::parse_topology, Engine};
use proto::v1::{CandidateUpdate, IbPort, Origin, Window};

const NDR_BYTES_PER_S: u64 = 50_000_000_000;
const WINDOW_S: f64 = 10.0;
/// Symbol errors per window at BER 1e-11 on an NDR link (4e12 bits).
const ERRORS_1E11: u64 = 40;
const HOSTS: usize = 16;

/// The topology in `--topology`'s own format: `cN` links host→leaf, `upLS`
/// uplinks leaf L → spine S.
pub fn topology_text() -> String {
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
    t
}

/// [`topology_text`], parsed.
pub fn topology() -> correlator::engine::ib::Topology {
    parse_topology(&topology_text()).expect("topology")
}

/// Port counters by entity name, advanced by each window.
pub struct Fabric {
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
    /// A fabric whose first windows end `WINDOW_S` after `t_ms`.
    pub fn at(t_ms: i64) -> Self {
        let mut f = Self {
            counters: BTreeMap::new(),
            seq: 0,
            t: t_ms,
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

    /// One window of every host and of the fabric host, ingested by `e`,
    /// with `errors` symbol errors added to those ports first.
    pub fn tick(&mut self, e: &mut Engine, errors: &[&str]) -> Vec<CandidateUpdate> {
        let mut out = Vec::new();
        for w in self.next(errors) {
            out.extend(e.ingest(&w));
        }
        out
    }

    /// The next window of every host and of the fabric host (in that
    /// order), with `errors` symbol errors added to those ports first.
    pub fn next(&mut self, errors: &[&str]) -> Vec<Window> {
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
            out.push(self.window(&format!("h{h:02}"), vec![row]));
        }
        let rows = switch_ports()
            .into_iter()
            .map(|(s, p)| IbPort {
                switch: s.clone(),
                port: p,
                ..port_row(&self.counters[&format!("{s}[{p}]")])
            })
            .collect();
        out.push(self.window("mgmt01", rows));
        out
    }
}
