//! NFS through the whole simulator (real streaming, the real engine): every
//! node mounts `filer01:/datasets`; the target's RPCs 10x slower raise one
//! `nfs_latency` on the target naming every host and the training job,
//! whose slowdown it explains; one host's mount alone slower raises one on
//! that host's mount; healthy mounts raise nothing. Then the windows' rows
//! themselves, as the collector's mountstats reader emits them.
use proto::v1::CandidateUpdate;
use sim::{
    cluster::{nfs, Cluster, ClusterSpec, JOB},
    faults, run, SimArgs,
};

const NODES: usize = 16;

use crate::scenario;

fn args(inject: &[&str]) -> SimArgs {
    SimArgs {
        nodes: NODES,
        speed: 20.0,
        // The job's slowdown needs `workload.min_persist_s` (20 s) to be a
        // symptom to join.
        duration: 70.0,
        onset: 30.0,
        ..scenario::args(inject)
    }
}

/// Every incident of a run by id, latest update of each.
async fn incidents(inject: &[&str]) -> Vec<CandidateUpdate> {
    scenario::latest_updates(args(inject)).await
}

/// The numbers of the evidence line starting with `prefix`, in order.
fn numbers(u: &CandidateUpdate, prefix: &str) -> Vec<f64> {
    let line = u
        .evidence
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} in {:#?}", u.evidence));
    line.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.trim_matches('.').parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_target_is_one_incident_naming_its_hosts_and_job() {
    let _turn = tests::one_file_at_a_time(file!());
    let got = incidents(&["nfs-slow@filer01:/datasets:factor=10"]).await;
    assert_eq!(got.len(), 1, "{got:#?}");
    let u = &got[0];
    assert_eq!(
        (u.kind.as_str(), u.entity.as_str()),
        ("nfs_latency", "nfs:filer01:/datasets")
    );
    let hosts: Vec<String> = (0..NODES).map(|i| format!("n{i:03}")).collect();
    assert!(
        u.evidence[0].starts_with(&format!(
            "RPC latency on filer01:/datasets rose on {NODES} of the {NODES} hosts mounting it"
        )),
        "{:#?}",
        u.evidence
    );
    let affected = format!("affected hosts: {}", hosts.join(" "));
    assert!(u.evidence.contains(&affected), "{:#?}", u.evidence);
    assert_eq!(u.affected_jobs, [JOB], "{u:#?}");
    // Healthy 1 MiB READs at a median 0.6-1.0 ms by host (means up to
    // 1.06x that, ±10 % by window), 10x slower.
    let read = numbers(u, "READ mean RTT ");
    let (x, n, ratio, base) = (read[0], read[1], read[2], read[3]);
    assert_eq!(n, NODES as f64, "{read:?}");
    assert!((0.55..=1.2).contains(&base), "READ history {base} ms");
    assert!((5.5..=12.0).contains(&x), "READ {x} ms");
    assert!((8.5..=11.5).contains(&ratio), "READ {ratio}x");
    // GETATTR at 0.25-0.4 ms, 10x: above the 2 ms floor as well.
    let getattr = numbers(u, "GETATTR mean RTT ");
    assert!((2.2..=4.8).contains(&getattr[0]), "{getattr:?}");
    assert!((8.5..=11.5).contains(&getattr[2]), "{getattr:?}");
    // The job's reads waited: its slowdown is explained by the target's
    // incident, not an incident of its own.
    assert!(
        u.evidence
            .iter()
            .any(|l| l.starts_with(&format!("explains job {JOB} "))),
        "{:#?}",
        u.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_s_mount_alone_is_its_own_incident() {
    let _turn = tests::one_file_at_a_time(file!());
    let got = incidents(&["nfs-slow@n003:factor=10"]).await;
    let nfs: Vec<&CandidateUpdate> = got.iter().filter(|u| u.kind == "nfs_latency").collect();
    assert_eq!(nfs.len(), 1, "{got:#?}");
    let u = nfs[0];
    assert_eq!(u.entity, "n003/nfs:filer01:/datasets");
    assert_eq!(u.affected_jobs, [JOB], "{u:#?}");
    assert!(
        u.evidence[1].starts_with(&format!(
            "{} other hosts on the same target are fine",
            NODES - 1
        )),
        "{:#?}",
        u.evidence
    );
    // Its slowest procedure by RPCs (READ) 10x its own history.
    let read = numbers(u, "READ mean RTT ");
    let (x, ratio, base) = (read[0], read[read.len() - 4], read[read.len() - 3]);
    assert!((5.5..=12.0).contains(&x), "{read:?}");
    assert!((8.5..=11.5).contains(&ratio), "{read:?}");
    assert!((0.55..=1.2).contains(&base), "{read:?}");
    // Its slowed ranks are explained by its mount: nothing else opened.
    assert_eq!(got.len(), 1, "{got:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_mounts_raise_nothing() {
    let _turn = tests::one_file_at_a_time(file!());
    let got = incidents(&[]).await;
    assert!(got.is_empty(), "{got:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_fault_specs_are_checked() {
    let _turn = tests::one_file_at_a_time(file!());
    for (spec, why) in [
        (
            "nfs-slow:factor=0.5",
            "factor=0.5 must be an RTT multiplier in 1..=1000",
        ),
        (
            "nfs-slow:factor=5000",
            "factor=5000 must be an RTT multiplier in 1..=1000",
        ),
        (
            "nfs-slow@filer02:/home",
            "does not fit this kind: it takes the NFS target filer01:/datasets",
        ),
        (
            "nfs-slow@n003/gpu1",
            "does not fit this kind: it takes the NFS target filer01:/datasets",
        ),
        ("nfs-slow@n099", "or a host n000..n015"),
    ] {
        let e = run(args(&[spec])).await.expect_err(spec);
        assert!(format!("{e:#}").contains(why), "{spec}: {e:#}");
    }
}

fn cluster() -> Cluster {
    Cluster::new(ClusterSpec {
        nodes: 4,
        window_s: 10.0,
        seed: 3,
        ..ClusterSpec::default()
    })
}

/// The rows as the collector emits them: per procedure the window's RPCs,
/// no retransmissions, bytes per RPC, cumulative milliseconds whose mean
/// is the mount's RTT (10x after the onset), execution at least the RTT.
#[test]
fn windows_carry_the_mount_s_rows() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut c = cluster();
    let fs = faults::parse_all(&["nfs-slow:factor=10".to_string()], &c, 3).expect("spec");
    assert_eq!(fs[0].name, "nfs-slow@nfs:filer01:/datasets");
    assert_eq!(fs[0].expected(&c), Some(("nfs_latency", nfs::entity(None))));
    // Its description parses back to the same fault.
    let again = faults::parse_all(&[fs[0].describe()], &c, 3).expect("round trip");
    assert_eq!(again[0].kind, fs[0].kind);
    assert_eq!(again[0].target, fs[0].target);
    let mut mean = |k: u64| -> Vec<(String, f64)> {
        c.advance(&fs, 60.0);
        assert_eq!(c.window_index(), k);
        let w = c.window(0).expect("n000 is up");
        w.nfs
            .iter()
            .map(|r| {
                assert_eq!(
                    (
                        r.server.as_str(),
                        r.export.as_str(),
                        r.mountpoint.as_str(),
                        r.fstype.as_str()
                    ),
                    ("filer01", "/datasets", "/datasets", "nfs4")
                );
                assert_eq!(
                    (r.retrans, r.timeouts, r.errors, r.reconnects),
                    (0, 0, 0, 0)
                );
                assert!(r.exe_ms_sum >= r.rtt_ms_sum, "{r:?}");
                assert!(r.ops > 0, "{r:?}");
                if r.op == "READ" {
                    // 240 RPCs a second over 10 s (Poisson).
                    assert!((2100..=2700).contains(&r.ops), "{r:?}");
                    assert!(r.bytes_recv > r.ops << 20, "{r:?}");
                }
                (r.op.clone(), r.rtt_ms_sum as f64 / r.ops as f64)
            })
            .collect()
    };
    let healthy = mean(1);
    let ops: Vec<&str> = healthy.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ops, ["GETATTR", "READ", "WRITE"]);
    for k in 2..=6 {
        let now = mean(k);
        for ((op, h), (_, x)) in healthy.iter().zip(&now) {
            let (lo, hi) = if op == "GETATTR" {
                (0.2, 0.5)
            } else {
                (0.5, 1.2)
            };
            assert!((lo..=hi).contains(h), "{op} healthy {h} ms");
            let r = x / h;
            assert!((0.8..=1.25).contains(&r), "window {k} {op}: {x} ms vs {h}");
        }
    }
    for k in 7..=9 {
        let now = mean(k);
        for ((op, h), (_, x)) in healthy.iter().zip(&now) {
            let r = x / h;
            assert!((8.0..=12.5).contains(&r), "window {k} {op}: {x} ms vs {h}");
        }
    }
}
