//! Scenarios through the whole engine: hosts mounting one NFS target.
use proto::v1::{CandidateUpdate, CudaProc, NfsOp, Origin, Window};

use super::*;
use crate::engine::{
    workload::{Place, Symptom},
    DetectConfig, Engine,
};
use vocab::kind::IncidentKind;

const LEN_MS: i64 = 10_000;
const T0: i64 = 1_700_000_000_000;

fn host(i: usize) -> String {
    format!("n{i:03}")
}

/// One host's window `k`: 400 READs and 40 GETATTRs on filer1:/home at
/// `factor` × their healthy mean RTT (READ 2.0–2.35 ms by host, GETATTR
/// 0.3 ms), and the host's job.
fn window(i: usize, k: i64, factor: f64) -> Window {
    let read_ms = 2.0 + 0.05 * i as f64;
    let row = |op: &str, ops: u64, rtt: f64| NfsOp {
        server: "filer1".into(),
        export: "/home".into(),
        mountpoint: "/home".into(),
        fstype: "nfs4".into(),
        op: op.into(),
        ops,
        retrans: 0,
        rtt_ms_sum: (ops as f64 * rtt * factor).round() as u64,
        exe_ms_sum: (ops as f64 * (rtt * factor + 0.1)).round() as u64,
        ..NfsOp::default()
    };
    Window {
        origin: Some(Origin {
            hostname: host(i),
            ..Origin::default()
        }),
        seq: k as u64 + 1,
        start_unix_ms: T0 + k * LEN_MS,
        end_unix_ms: T0 + (k + 1) * LEN_MS,
        nfs: vec![row("READ", 400, read_ms), row("GETATTR", 40, 0.3)],
        cuda: vec![CudaProc {
            job: format!("job-{}", i / 2),
            device: 0,
            ..CudaProc::default()
        }],
        ..Window::default()
    }
}

/// Runs `windows` slots over 8 hosts; `factor(host, slot)` scales the RTT.
fn run(windows: i64, factor: impl Fn(usize, i64) -> f64) -> Vec<(i64, CandidateUpdate)> {
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut out = Vec::new();
    for k in 0..windows {
        for i in 0..8 {
            for u in e.ingest(&window(i, k, factor(i, k))) {
                out.push((k, u));
            }
        }
    }
    out
}

fn nfs(out: &[(i64, CandidateUpdate)], state: &str) -> Vec<(i64, CandidateUpdate)> {
    out.iter()
        .filter(|(_, u)| u.kind == "nfs_latency" && u.state == state)
        .cloned()
        .collect()
}

#[test]
fn a_target_ten_times_slower_on_eight_hosts_is_one_target_incident() {
    // Healthy for 6 slots, 10x from slot 6 to 11, healthy again after.
    let out = run(20, |_, k| if (6..12).contains(&k) { 10.0 } else { 1.0 });
    let opened = nfs(&out, "opened");
    assert_eq!(opened.len(), 1, "{opened:#?}");
    let (k, u) = &opened[0];
    // The second slow slot, at the first host's window.
    assert_eq!(*k, 7);
    assert_eq!(u.entity, "nfs:filer1:/home");
    assert_eq!(
        u.evidence[1],
        "affected hosts: n000 n001 n002 n003 n004 n005 n006 n007"
    );
    assert!(
        u.evidence[0].starts_with("RPC latency on filer1:/home rose on 8 of the 8 hosts"),
        "{:?}",
        u.evidence
    );
    // READ: median of the hosts' 20.0–23.5 ms over their 2.0–2.35 ms history.
    assert_eq!(
        u.evidence[2],
        "GETATTR mean RTT 3.00 ms (median over 8 hosts), 10.0x their own history 0.30 ms; 320 RPCs, 0 retransmissions in their latest windows"
    );
    assert_eq!(
        u.evidence[3],
        "READ mean RTT 21.75 ms (median over 8 hosts), 10.0x their own history 2.17 ms; 3200 RPCs, 0 retransmissions in their latest windows"
    );
    assert_eq!(u.affected_jobs, ["job-0", "job-1", "job-2", "job-3"]);
    assert!(out.iter().all(|(_, u)| u.kind != "storage_latency"
        && !(u.kind == "nfs_latency" && u.entity != "nfs:filer1:/home")));
    // Resolved once quiet (30 s and 2 windows of a host) after slot 11.
    let resolved = nfs(&out, "resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0].1.incident_id, u.incident_id);
    assert_eq!(resolved[0].0, 15);
}

#[test]
fn one_host_slow_alone_is_a_host_side_incident_not_the_target() {
    let out = run(12, |i, k| if i == 3 && k >= 6 { 10.0 } else { 1.0 });
    let opened = nfs(&out, "opened");
    assert_eq!(opened.len(), 1, "{opened:#?}");
    let (k, u) = &opened[0];
    assert_eq!(*k, 7);
    assert_eq!(u.entity, "n003/nfs:filer1:/home");
    assert_eq!(
        u.evidence[0],
        "READ mean RTT 21.50 ms on n003's mount /home of filer1:/home, 10.0x its own history 2.15 ms; 400 RPCs, 0 retransmissions this window"
    );
    assert_eq!(
        u.evidence[1],
        "7 other hosts on the same target are fine: median READ RTT 2.20 ms (9.8x): a host-side problem (this client, its NIC or network path), not the server"
    );
    assert_eq!(u.affected_jobs, ["job-1"]);
}

#[test]
fn two_hosts_of_eight_slow_are_two_host_incidents_and_a_quiet_fleet_raises_nothing() {
    let out = run(12, |i, k| {
        if (i == 1 || i == 6) && k >= 6 {
            10.0
        } else {
            1.0
        }
    });
    let mut ents: Vec<String> = nfs(&out, "opened")
        .into_iter()
        .map(|(_, u)| u.entity)
        .collect();
    ents.sort();
    assert_eq!(ents, ["n001/nfs:filer1:/home", "n006/nfs:filer1:/home"]);
    assert!(run(12, |_, _| 1.0).is_empty());
    // A slow but too light procedure (below min_ops) is not judged.
    let mut d = NfsDetector::new(NfsConfig::default());
    let mut w = window(0, 0, 50.0);
    w.nfs[0].ops = 19;
    w.nfs[1].ops = 19;
    d.observe("n000", &w, &[]);
    assert!(d.is_empty());
}

#[test]
fn series_are_bounded_and_idle_hosts_forgotten() {
    let cfg = NfsConfig {
        max_series: 3,
        ..NfsConfig::default()
    };
    let mut d = NfsDetector::new(cfg);
    for i in 0..3 {
        d.observe(&host(i), &window(i, 0, 1.0), &[]);
    }
    // 2 procedures per host: the second host's GETATTR and the third
    // host's two are past the cap of 3.
    assert_eq!((d.len(), d.dropped), (3, 3));
    d.forget_hosts(&[host(0)].into_iter().collect());
    assert_eq!(d.len(), 1);
}

#[test]
fn a_target_incident_explains_the_jobs_on_its_affected_hosts() {
    let on = |h: &str| Symptom {
        kind: IncidentKind::JobSlowdown,
        job: "job-1".into(),
        entity: "job-1".into(),
        line: "step time +40 %".into(),
        ratio: 1.4,
        since_ms: 0,
        places: vec![Place {
            host: h.into(),
            rank: 0,
            device: 0,
            hca: String::new(),
        }],
    };
    let ev = vec![
        "RPC latency on filer1:/home rose on 2 of the 8 hosts mounting it".to_string(),
        format!("{AFFECTED}n002 n003"),
    ];
    assert!(on("n003").explained_by("nfs_latency", "nfs:filer1:/home", &ev));
    assert!(!on("n004").explained_by("nfs_latency", "nfs:filer1:/home", &ev));
    assert!(!on("n00").explained_by("nfs_latency", "nfs:filer1:/home", &ev));
    assert!(on("n004").explained_by("nfs_latency", "n004/nfs:filer1:/home", &[]));
    assert!(!on("n004").explained_by("storage_latency", "nfs:filer1:/home", &ev));
}

/// One client's Lustre window `k`: 300 `ost_write` RPCs to each of two
/// OSTs at the mean the lustre_exporter fixture's client measured (6.05 ms,
/// tests/data/lustre_exporter), OST0003's times `factor` ×.
fn lustre_window(i: usize, k: i64, factor: f64) -> Window {
    let row = |ost: &str, nid: &str, f: f64| NfsOp {
        server: format!("lustrefs-{ost}"),
        export: "lustrefs".into(),
        mountpoint: "/lustre".into(),
        fstype: "lustre".into(),
        op: "ost_write".into(),
        ops: 300,
        rtt_ms_sum: (300.0 * (6.05 + 0.02 * i as f64) * f).round() as u64,
        nid: nid.into(),
        ..NfsOp::default()
    };
    Window {
        nfs: vec![
            row("OST0000", "172.20.20.5@o2ib", 1.0),
            row("OST0003", "172.20.20.6@o2ib", factor),
        ],
        ..window(i, k, 1.0)
    }
}

#[test]
fn a_slow_lustre_ost_is_one_target_incident_naming_its_server() {
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut out = Vec::new();
    for k in 0..10 {
        for i in 0..8 {
            let f = if k >= 6 { 8.0 } else { 1.0 };
            out.extend(e.ingest(&lustre_window(i, k, f)));
        }
    }
    let opened: Vec<&CandidateUpdate> = out.iter().filter(|u| u.state == "opened").collect();
    assert_eq!(opened.len(), 1, "{opened:#?}");
    let u = opened[0];
    assert_eq!(
        (u.kind.as_str(), u.entity.as_str()),
        ("lustre_latency", "lustre:lustrefs-OST0003")
    );
    assert!(
        u.evidence[0]
            .starts_with("RPC latency on lustrefs-OST0003 of lustrefs rose on 8 of the 8 hosts"),
        "{:?}",
        u.evidence
    );
    // The hosts' 48.4–49.5 ms over their 6.05–6.19 ms history.
    assert_eq!(
        u.evidence[2],
        "ost_write mean RPC time 48.96 ms (median over 8 hosts), 8.0x their own history 6.12 ms; 2400 RPCs, 0 import timeouts in their latest windows"
    );
    assert_eq!(u.evidence[3], "served from 172.20.20.6@o2ib");
    assert!(
        u.runbook.contains("obdfilter.lustrefs-OST0003.brw_stats"),
        "{}",
        u.runbook
    );
    assert_eq!(u.affected_jobs, ["job-0", "job-1", "job-2", "job-3"]);
}

#[test]
fn an_ipv6_nfs_server_keeps_its_whole_name() {
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut out = Vec::new();
    for k in 0..8 {
        for i in 0..8 {
            let mut w = window(i, k, if k >= 5 { 10.0 } else { 1.0 });
            for r in &mut w.nfs {
                r.server = "[fd00::5]".into();
            }
            out.extend(e.ingest(&w));
        }
    }
    let opened: Vec<&str> = out
        .iter()
        .filter(|u| u.state == "opened")
        .map(|u| u.entity.as_str())
        .collect();
    assert_eq!(opened, ["nfs:[fd00::5]:/home"]);
}

/// A healthy target with 500 clients costs no walk over its clients (each
/// one O(clients): per window that made a slot O(clients²)); one slow
/// client makes its target's windows walk again, and its incident is found
/// as before.
#[test]
fn a_healthy_target_costs_no_walk_over_its_clients() {
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut opened = Vec::new();
    for k in 0..12 {
        for i in 0..500 {
            // Host 7 is 10x slower from slot 6.
            let f = if i == 7 && k >= 6 { 10.0 } else { 1.0 };
            // The eight hosts' RTTs (2.0–2.35 ms), over and over.
            let mut w = window(i % 8, k, f);
            w.origin = Some(Origin {
                hostname: host(i),
                ..Origin::default()
            });
            for u in e.ingest(&w) {
                if u.kind == "nfs_latency" && u.state == "opened" {
                    opened.push((k, u.entity));
                }
            }
        }
        if k == 5 {
            assert_eq!(e.nfs.walks, 0, "no slow series yet");
        }
    }
    // From host 7's first slow window (slot 6) on, every window of the
    // target walks: 6 slots of 500 windows less hosts 0–6 of slot 6.
    assert_eq!(e.nfs.walks, 6 * 500 - 7);
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert!(opened[0].1.contains("n007"), "{opened:?}");
}
