//! Scripted fabric scenarios through the engine: each IB detector fires on
//! its fault with the right entity within 2 windows of onset, and the
//! confounders (single errors, counter reset, collector restart,
//! cluster-wide shift, job end) raise nothing.
use std::collections::HashMap;

use correlator::engine::Engine;
use proto::v1::{CandidateUpdate, IbPort, Origin, Window};

const HOSTS: usize = 16;
const PORTS: [&str; 2] = ["mlx5_0", "mlx5_1"];
/// 4-byte words per direction per window (1 GB).
const WORDS: u64 = 250_000_000;

struct Fabric {
    counters: HashMap<(usize, usize), HashMap<String, u64>>,
    state: HashMap<(usize, usize), u32>,
    seq: HashMap<usize, u64>,
    instance: HashMap<usize, String>,
    t: i64,
}

impl Fabric {
    fn new() -> Self {
        let mut f = Self {
            counters: HashMap::new(),
            state: HashMap::new(),
            seq: HashMap::new(),
            instance: HashMap::new(),
            t: 1_800_000_000_000,
        };
        for h in 0..HOSTS {
            f.instance.insert(h, format!("i{h}-a"));
            for p in 0..PORTS.len() {
                let c = f.counters.entry((h, p)).or_default();
                for n in [
                    "port_rcv_data",
                    "port_xmit_data",
                    "symbol_error",
                    "link_error_recovery",
                    "port_rcv_errors",
                    "link_downed",
                ] {
                    c.insert(n.into(), 1000);
                }
                f.state.insert((h, p), 4);
            }
        }
        f
    }

    fn add(&mut self, h: usize, p: usize, counter: &str, v: u64) {
        *self
            .counters
            .get_mut(&(h, p))
            .expect("port")
            .entry(counter.into())
            .or_default() += v;
    }

    /// One window of every host with normal traffic unless `traffic` is false.
    fn tick(&mut self, e: &mut Engine, traffic: bool) -> Vec<CandidateUpdate> {
        self.t += 1000;
        let mut out = Vec::new();
        for h in 0..HOSTS {
            if traffic {
                for p in 0..PORTS.len() {
                    self.add(h, p, "port_rcv_data", WORDS);
                    self.add(h, p, "port_xmit_data", WORDS);
                }
            }
            let seq = self.seq.entry(h).or_insert(0);
            *seq += 1;
            let w = Window {
                origin: Some(Origin {
                    hostname: format!("h{h:02}"),
                    boot_id: "b".into(),
                    instance: self.instance[&h].clone(),
                    ..Origin::default()
                }),
                seq: *seq,
                end_unix_ms: self.t,
                ib_ports: (0..PORTS.len())
                    .map(|p| IbPort {
                        hca: PORTS[p].into(),
                        port: 1,
                        state: self.state[&(h, p)],
                        phys_state: if self.state[&(h, p)] == 4 { 5 } else { 3 },
                        counters: self.counters[&(h, p)].clone(),
                        ..IbPort::default()
                    })
                    .collect(),
                ..Window::default()
            };
            out.extend(e.ingest(&w));
        }
        out
    }
}

fn opened(u: &[CandidateUpdate]) -> Vec<(String, String)> {
    u.iter()
        .filter(|u| u.state == "opened")
        .map(|u| (u.kind.clone(), u.entity.clone()))
        .collect()
}

#[test]
fn degrading_link_is_one_incident_on_the_right_port_within_two_windows() {
    let mut f = Fabric::new();
    let mut e = Engine::default();
    let mut all = Vec::new();
    for _ in 0..10 {
        all.extend(f.tick(&mut e, true));
    }
    assert!(all.is_empty(), "healthy fabric: {all:?}");
    let onset = 10;
    let mut opened_at = None;
    for w in onset..onset + 20 {
        // Bit errors ramp up on one link.
        f.add(3, 1, "symbol_error", 20 + 5 * (w - onset) as u64);
        f.add(3, 1, "link_error_recovery", 1);
        let u = f.tick(&mut e, true);
        if opened_at.is_none() && !opened(&u).is_empty() {
            opened_at = Some(w);
        }
        all.extend(u);
    }
    assert_eq!(
        opened(&all),
        [("ib_link_degraded".to_string(), "h03/mlx5_1/1".to_string())],
        "exactly one incident: {all:#?}"
    );
    let at = opened_at.expect("opened");
    assert!(at - onset <= 1, "opened {} windows after onset", at - onset);
    let first = all
        .iter()
        .find(|u| u.state == "opened")
        .expect("opened update");
    assert!(
        first
            .evidence
            .iter()
            .any(|e| e.starts_with("symbol_error +")),
        "{:?}",
        first.evidence
    );
    assert!(
        first
            .evidence
            .iter()
            .any(|e| e.contains("fabric median is 0")),
        "{:?}",
        first.evidence
    );
    assert!(
        first.runbook.contains("mlxlink -d mlx5_1 -p 1"),
        "{}",
        first.runbook
    );
    assert!(first.confidence >= 0.6);
    let id = first.incident_id.clone();
    assert!(
        all.iter().all(|u| u.incident_id == id),
        "one identity for the whole episode"
    );
    // The fault stops: the incident resolves after the quiet period.
    let mut after = Vec::new();
    for _ in 0..8 {
        after.extend(f.tick(&mut e, true));
    }
    assert_eq!(
        after.iter().filter(|u| u.state == "resolved").count(),
        1,
        "{after:#?}"
    );
    assert!(e.open().is_empty());
}

#[test]
fn confounders_raise_nothing() {
    let mut f = Fabric::new();
    let mut e = Engine::default();
    let mut all = Vec::new();
    for w in 0..40usize {
        // Isolated single errors all over the fabric.
        f.add(w % HOSTS, w % 2, "symbol_error", 1 + (w % 2) as u64);
        // A one-off burst on one port in one window.
        if w == 5 {
            f.add(7, 0, "symbol_error", 9);
        }
        // Counter reset on one port (driver reload).
        if w == 12 {
            for v in f.counters.get_mut(&(4, 0)).expect("port").values_mut() {
                *v = 0;
            }
        }
        // Collector restart on one host: new instance, sequence from 1.
        if w == 18 {
            f.instance.insert(9, "i9-b".into());
            f.seq.insert(9, 0);
        }
        // Cluster-wide: every link sees the same error rate (e.g. a fabric-wide event).
        if (25..30).contains(&w) {
            for h in 0..HOSTS {
                for p in 0..2 {
                    f.add(h, p, "symbol_error", 15);
                }
            }
        }
        // Job end: no traffic at all for a while.
        let traffic = !(32..36).contains(&w);
        all.extend(f.tick(&mut e, traffic));
    }
    assert!(all.is_empty(), "no incident for confounders: {all:#?}");
}

#[test]
fn link_down_opens_at_once_and_resolves_when_back() {
    let mut f = Fabric::new();
    let mut e = Engine::default();
    for _ in 0..5 {
        assert!(f.tick(&mut e, true).is_empty());
    }
    f.state.insert((2, 0), 1);
    f.add(2, 0, "link_downed", 1);
    let u = f.tick(&mut e, true);
    assert_eq!(
        opened(&u),
        [("ib_link_down".to_string(), "h02/mlx5_0/1".to_string())]
    );
    assert!(
        u[0].evidence[0].starts_with("state ACTIVE -> DOWN"),
        "{:?}",
        u[0].evidence
    );
    f.tick(&mut e, true);
    f.state.insert((2, 0), 4);
    let mut rest = Vec::new();
    for _ in 0..8 {
        rest.extend(f.tick(&mut e, true));
    }
    assert!(opened(&rest).is_empty(), "{rest:#?}");
    assert_eq!(
        rest.iter()
            .filter(|u| u.state == "resolved" && u.kind == "ib_link_down")
            .count(),
        1
    );
}

#[test]
fn flapping_link_is_one_flapping_incident_absorbing_the_downs() {
    let mut f = Fabric::new();
    let mut e = Engine::default();
    for _ in 0..3 {
        f.tick(&mut e, true);
    }
    let mut all = Vec::new();
    for w in 0..12 {
        f.state.insert((6, 1), if w % 2 == 0 { 1 } else { 4 });
        all.extend(f.tick(&mut e, true));
    }
    let kinds = opened(&all);
    assert_eq!(
        kinds
            .iter()
            .filter(|(k, _)| k == "ib_link_flapping")
            .count(),
        1,
        "{kinds:?}"
    );
    assert!(
        kinds.iter().all(|(_, ent)| ent == "h06/mlx5_1/1"),
        "{kinds:?}"
    );
    let open = e.open();
    assert_eq!(
        open.len(),
        1,
        "only the flapping incident stays open: {open:#?}"
    );
    assert_eq!(open[0].kind, "ib_link_flapping");
}

#[test]
fn topology_makes_both_ends_of_a_link_one_incident() {
    let topo = correlator::engine::ib::parse_topology(
        "# link  endpoint  endpoint\nleaf2-p7 h03/mlx5_1/1 h04/mlx5_1/1\n",
    )
    .expect("topology");
    let mut e = Engine {
        ib: correlator::engine::ib::IbDetector::with_topology(topo),
        ..Engine::default()
    };
    let mut f = Fabric::new();
    for _ in 0..5 {
        assert!(f.tick(&mut e, true).is_empty());
    }
    let mut all = Vec::new();
    for _ in 0..4 {
        f.add(3, 1, "symbol_error", 40);
        f.add(4, 1, "symbol_error", 35);
        all.extend(f.tick(&mut e, true));
    }
    assert_eq!(
        opened(&all),
        [("ib_link_degraded".to_string(), "leaf2-p7".to_string())],
        "{all:#?}"
    );
    let ev: Vec<&String> = all.iter().flat_map(|u| &u.evidence).collect();
    assert!(
        ev.iter().any(|e| *e == "reported by h03/mlx5_1/1")
            && ev.iter().any(|e| *e == "reported by h04/mlx5_1/1"),
        "{ev:?}"
    );
    assert!(
        correlator::engine::ib::parse_topology("x h1/mlx5_0/1\ny h1/mlx5_0/1\n")
            .unwrap_err()
            .contains("already belongs to link x")
    );
    assert!(correlator::engine::ib::parse_topology("x h1\n")
        .unwrap_err()
        .contains("is not <host>/<hca>/<port>"));
}

/// Asserts that the only incident opened is `ib_link_degraded` on `entity`
/// and returns its opening update.
fn only_degraded<'a>(all: &'a [CandidateUpdate], entity: &str) -> &'a CandidateUpdate {
    assert_eq!(
        opened(all),
        [("ib_link_degraded".to_string(), entity.to_string())],
        "{all:#?}"
    );
    all.iter()
        .find(|u| u.state == "opened")
        .expect("an opened update")
}

/// Asserts that some evidence line of `u` satisfies `pred`.
fn assert_evidence(u: &CandidateUpdate, pred: impl Fn(&str) -> bool) {
    assert!(u.evidence.iter().any(|e| pred(e)), "{:?}", u.evidence);
}

/// Counters named `names`, all at 0.
fn zeroed(names: &[&str]) -> std::collections::HashMap<String, u64> {
    names.iter().map(|k| (k.to_string(), 0)).collect()
}

/// A window of a host with one port in state ACTIVE.
fn one_port_window(host: &str, seq: u64, period_ms: i64, port: IbPort) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            instance: format!("{host}-1"),
            ..Origin::default()
        }),
        seq,
        end_unix_ms: 1_800_000_000_000 + seq as i64 * period_ms,
        ib_ports: vec![IbPort {
            port: 1,
            state: 4,
            phys_state: 5,
            ..port
        }],
        ..Window::default()
    }
}

#[test]
fn small_fabric_uses_own_history_and_verbs_errors_confirm() {
    // One host with one port: no peers to compare with.
    let mut e = Engine::default();
    let mut counters = zeroed(&["port_rcv_data", "port_xmit_data", "symbol_error"]);
    let mut all = Vec::new();
    for seq in 1..=12u64 {
        *counters.get_mut("port_rcv_data").unwrap() += WORDS;
        *counters.get_mut("port_xmit_data").unwrap() += WORDS;
        if seq == 4 {
            *counters.get_mut("symbol_error").unwrap() += 1; // a single error in the baseline
        }
        if seq >= 9 {
            *counters.get_mut("symbol_error").unwrap() += 30;
        }
        let port = IbPort {
            hca: "mlx5_0".into(),
            counters: counters.clone(),
            ..IbPort::default()
        };
        let w = Window {
            verbs: if seq >= 9 {
                vec![proto::v1::VerbsCompletions {
                    pid: 7,
                    qp: 77,
                    status: "IBV_WC_RETRY_EXC_ERR".into(),
                    count: 4,
                    job: "j1".into(),
                }]
            } else {
                vec![]
            },
            ..one_port_window("solo", seq, 1000, port)
        };
        all.extend(e.ingest(&w));
    }
    let o = only_degraded(&all, "solo/mlx5_0/1");
    assert_evidence(o, |e| {
        e.contains("this port's own baseline is 0 (7 windows)")
    });
    assert_evidence(o, |e| {
        e == "4 verbs work completions in error on this host this window"
    });
    assert_eq!(o.affected_jobs, ["j1"]);
}

/// A RoCE port (rxe names, no `counters/`) whose healthy error rate is not
/// zero: retransmits every window. Judged against its own history it must
/// not be flagged while the baseline is learnt or while it stays at that
/// rate; a tenfold-plus rise opens one incident within 2 windows, and the
/// incident resolves once the rate is back.
#[test]
fn roce_port_with_noisy_baseline_is_judged_against_its_learnt_history() {
    let mut e = Engine::default();
    let mut hw = zeroed(&[
        "sent_pkts",
        "rcvd_pkts",
        "completer_retry_err",
        "rcvd_seq_err",
    ]);
    let mut all = Vec::new();
    let mut opened_at = None;
    for seq in 1..=40u64 {
        let faulty = (16..24).contains(&seq);
        // Healthy: 60k packets and 5–9 retries a window; faulty: a tenth of
        // the traffic and 40 retries.
        let (pkts, retries) = if faulty {
            (6_000, 40)
        } else {
            (60_000, 5 + seq % 5)
        };
        *hw.get_mut("sent_pkts").unwrap() += pkts;
        *hw.get_mut("rcvd_pkts").unwrap() += pkts / 50;
        *hw.get_mut("completer_retry_err").unwrap() += retries;
        *hw.get_mut("rcvd_seq_err").unwrap() += retries / 2;
        let w = one_port_window(
            "guest",
            seq,
            2000,
            IbPort {
                hca: "rxe0".into(),
                hw_counters: hw.clone(),
                link_layer: "Ethernet".into(),
                ..IbPort::default()
            },
        );
        let ups = e.ingest(&w);
        if opened_at.is_none() && ups.iter().any(|u| u.state == "opened") {
            opened_at = Some(seq);
        }
        all.extend(ups);
    }
    let o = only_degraded(&all, "guest/rxe0/1");
    assert!(
        opened_at.is_some_and(|s| (16..=17).contains(&s)),
        "opened at {opened_at:?}"
    );
    assert_evidence(o, |e| e.starts_with("completer_retry_err +40"));
    assert_evidence(o, |e| e.contains("x this port's own baseline"));
    let resolved: Vec<_> = all.iter().filter(|u| u.state == "resolved").collect();
    assert_eq!(resolved.len(), 1, "{all:#?}");
    assert_eq!(resolved[0].incident_id, o.incident_id);
}

/// A fault that lasts and wavers (every other window 5x, then 14x the
/// port's noisy baseline): its windows must not feed the baseline, or the
/// baseline climbs and the incident resolves while the fault is still there.
#[test]
fn sustained_moderate_fault_stays_open_until_it_ends() {
    let mut e = Engine::default();
    let mut hw = zeroed(&["sent_pkts", "rcvd_pkts", "completer_retry_err"]);
    let mut all = Vec::new();
    let mut resolved_at = None;
    for seq in 1..=50u64 {
        let faulty = (12..36).contains(&seq);
        // Healthy: 3–5 retries per 40k packets; faulty: 20 or 56.
        let (pkts, retries) = if faulty {
            (40_000, if seq % 2 == 0 { 20 } else { 56 })
        } else {
            (40_000, 3 + seq % 3)
        };
        *hw.get_mut("sent_pkts").unwrap() += pkts;
        *hw.get_mut("completer_retry_err").unwrap() += retries;
        let w = one_port_window(
            "noisy",
            seq,
            2000,
            IbPort {
                hca: "rxe0".into(),
                hw_counters: hw.clone(),
                ..IbPort::default()
            },
        );
        let ups = e.ingest(&w);
        if ups.iter().any(|u| u.state == "resolved") {
            resolved_at.get_or_insert(seq);
        }
        all.extend(ups);
    }
    let o = only_degraded(&all, "noisy/rxe0/1");
    assert_evidence(o, |e| e.contains("x this port's own baseline"));
    assert!(
        resolved_at.is_some_and(|s| s >= 36),
        "resolved at {resolved_at:?} (the fault lasts until window 35): {all:#?}"
    );
    assert_eq!(all.iter().filter(|u| u.state == "opened").count(), 1);
}

/// A real capture (`examples/rxe-netem-loss.jsonl`): the collector's windows
/// from the soft-RoCE guest of `cargo xtask rdma-vm`, rxe0 → rxe1 perftest
/// traffic with 5 % netem loss on veth0 from 1796250578 s to 1796250594 s,
/// then a link flap. The healthy emulated link retransmits in bursts (up to
/// 8x its median in one window); only the loss may raise `ib_link_degraded`.
#[test]
fn real_rxe_capture_flags_the_lossy_port_only_while_lossy() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/rxe-netem-loss.jsonl"
    );
    let mut engine = Engine::default();
    let mut out = Vec::new();
    correlator::replay::replay(std::path::Path::new(path), &mut engine, false, &mut out).unwrap();
    let ups: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (loss_on, loss_off) = (1_796_250_578_000i64, 1_796_250_594_000i64);
    let degraded: Vec<(i64, &str, &str)> = ups
        .iter()
        .filter(|u| u["kind"] == "ib_link_degraded")
        .map(|u| {
            (
                u["ts"].as_i64().unwrap(),
                u["state"].as_str().unwrap(),
                u["entity"].as_str().unwrap(),
            )
        })
        .collect();
    let opened: Vec<_> = degraded.iter().filter(|d| d.1 == "opened").collect();
    assert_eq!(opened.len(), 1, "{degraded:?}");
    let (t_open, _, entity) = *opened[0];
    assert_eq!(entity, "rxe-guest/rxe0/1");
    // Within 2 windows (2 s each) of the loss starting.
    assert!(
        (loss_on..=loss_on + 4_000).contains(&t_open),
        "opened at {t_open}"
    );
    let resolved = degraded
        .iter()
        .find(|d| d.1 == "resolved")
        .expect("resolved");
    assert!(
        resolved.0 > loss_off,
        "resolved at {} before {loss_off}",
        resolved.0
    );
    // The link flap later in the capture is its own incident.
    assert!(ups
        .iter()
        .any(|u| u["kind"] == "ib_link_down" && u["entity"] == "rxe-guest/rxe0/1"));
}
