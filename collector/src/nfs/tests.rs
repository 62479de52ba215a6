use std::path::PathBuf;

use proto::v1 as pb;

use super::{parse::split_device, *};

/// procfs's real mountstats (tests/data/procfs/README.md).
const FIXTURE: &str = include_str!("../../../tests/data/procfs/mountstats");

fn op(
    ops: u64,
    transmissions: u64,
    timeouts: u64,
    rtt_ms: u64,
    execute_ms: u64,
    errors: Option<u64>,
) -> OpStats {
    OpStats {
        ops,
        transmissions,
        timeouts,
        bytes_sent: ops * 200,
        bytes_recv: ops * 4096,
        queue_ms: ops / 10,
        rtt_ms,
        execute_ms,
        errors,
    }
}

/// A statistics-1.1 mountstats text (9-field per-op lines, as Linux 5.1+
/// writes them) with one NFSv3 mount and one NFSv4.2 mount.
fn text(read: OpStats, write: OpStats, connects: u64) -> String {
    let line = |name: &str, s: &OpStats| {
        format!(
            "\t{name:>12}: {} {} {} {} {} {} {} {} {}\n",
            s.ops,
            s.transmissions,
            s.timeouts,
            s.bytes_sent,
            s.bytes_recv,
            s.queue_ms,
            s.rtt_ms,
            s.execute_ms,
            s.errors.unwrap_or(0)
        )
    };
    let mut t = String::from("device /dev/nvme0n1p2 mounted on / with fstype ext4\n");
    for (dev, mp, fs) in [
        ("filer1:/home", "/home", "nfs"),
        ("[fd00::5]:/scratch/a", "/mnt/my\\040scratch", "nfs4"),
    ] {
        t.push_str(&format!(
            "device {dev} mounted on {mp} with fstype {fs} statvers=1.1\n\topts:\trw,vers=4.2,hard,proto=tcp,timeo=600,retrans=2\n\tage:\t86400\n\tevents:\t1 2 3\n\tbytes:\t1 2 3 4 5 6 7 8\n\tRPC iostats version: 1.1  p/v: 100003/4 (nfs)\n\txprt:\ttcp 875 1 {connects} 0 0 300 300 0 900 0 2 0 1\n\tper-op statistics\n"
        ));
        t.push_str(&line("NULL", &OpStats::default()));
        t.push_str(&line("READ", &read));
        t.push_str(&line("WRITE", &write));
        t.push_str(&line("GETATTR", &op(50, 50, 0, 25, 30, Some(0))));
        t.push('\n');
    }
    t
}

#[test]
fn procfs_real_mountstats_parses_to_its_exact_counts() {
    let p = parse(FIXTURE);
    assert_eq!(p.malformed, 0);
    // rootfs, sysfs, proc and ext4 are skipped: one NFS mount.
    assert_eq!(p.mounts.len(), 1);
    let m = &p.mounts[0];
    assert_eq!(m.device, "192.168.1.1:/srv/test");
    assert_eq!(
        (m.server.as_str(), m.export.as_str()),
        ("192.168.1.1", "/srv/test")
    );
    assert_eq!(m.mountpoint, "/mnt/nfs/test");
    assert_eq!(m.fstype, "nfs4");
    assert_eq!(
        m.xprts,
        vec![Xprt {
            proto: "tcp".into(),
            connect_count: Some(1),
            sends: Some(6428),
            recvs: Some(6428),
            bad_xids: Some(0),
        }]
    );
    assert_eq!(m.connects(), 1);
    let names: Vec<&str> = m.ops.keys().map(String::as_str).collect();
    assert_eq!(names, ["ACCESS", "NULL", "READ", "WRITE"]);
    assert_eq!(
        m.ops["READ"],
        OpStats {
            ops: 1298,
            transmissions: 1298,
            timeouts: 0,
            bytes_sent: 207_680,
            bytes_recv: 1_210_292_152,
            queue_ms: 6,
            rtt_ms: 79_386,
            execute_ms: 79_407,
            errors: None,
        }
    );
    let a = m.ops["ACCESS"];
    assert_eq!((a.ops, a.transmissions), (2_927_395_007, 2_927_394_995));
    assert_eq!(a.queue_ms, 18_446_743_919_241_604_546);
    assert_eq!((a.rtt_ms, a.execute_ms), (1_667_369_447, 1_953_587_717));
    assert_eq!(
        m.ops["WRITE"],
        OpStats {
            errors: None,
            ..OpStats::default()
        }
    );
    // READ's mean RTT over the mount's life: 79,386 ms / 1,298 RPCs.
    assert_eq!(format!("{:.1}", 79_386.0 / 1298.0), "61.2");
}

#[test]
fn statistics_1_1_ipv6_servers_and_escaped_mount_points() {
    let p = parse(&text(
        op(10, 12, 1, 40, 45, Some(2)),
        op(5, 5, 0, 10, 11, Some(0)),
        1,
    ));
    assert_eq!(p.malformed, 0);
    assert_eq!(p.mounts.len(), 2);
    let v6 = &p.mounts[1];
    assert_eq!(
        (v6.server.as_str(), v6.export.as_str()),
        ("[fd00::5]", "/scratch/a")
    );
    assert_eq!(v6.mountpoint, "/mnt/my scratch");
    assert_eq!(v6.ops["READ"].errors, Some(2));
    assert_eq!(v6.ops["READ"].transmissions, 12);
    assert_eq!(split_device("filer:/a:b"), Some(("filer", "/a:b")));
    assert_eq!(split_device("nocolon"), None);
    // A short per-op line and a device without a server are counted.
    let bad = "device srv:/x mounted on /x with fstype nfs\n\tper-op statistics\n\t        READ: 1 2 3\ndevice nosrv mounted on /y with fstype nfs4\n";
    let p = parse(bad);
    assert_eq!((p.mounts.len(), p.malformed), (1, 2));
    assert!(p.mounts[0].ops.is_empty());
}

#[test]
fn windows_are_exact_deltas_resets_are_unknown_and_mounts_are_bounded() {
    let mut t = NfsTracker::new(8);
    let (rows, c) = t.update(parse(&text(
        op(100, 100, 0, 200, 220, Some(0)),
        op(40, 40, 0, 80, 90, Some(0)),
        1,
    )));
    assert!(rows.is_empty(), "the first read is the base");
    assert_eq!(c.mounts, 2);
    // 900 more READs with 3 retransmissions, 1 major timeout, 9,000 ms of
    // RTT (10 ms each); WRITE unchanged; one reconnection.
    let (rows, c) = t.update(parse(&text(
        op(1000, 1003, 1, 9200, 9500, Some(1)),
        op(40, 40, 0, 80, 90, Some(0)),
        2,
    )));
    assert_eq!(c.resets, 0);
    let reads: Vec<&pb::NfsOp> = rows.iter().filter(|r| r.op == "READ").collect();
    assert_eq!(reads.len(), 2, "one READ row per mount");
    let r = reads[0];
    assert_eq!(
        (
            r.server.as_str(),
            r.export.as_str(),
            r.mountpoint.as_str(),
            r.fstype.as_str()
        ),
        ("filer1", "/home", "/home", "nfs")
    );
    assert_eq!(
        (r.ops, r.retrans, r.timeouts, r.errors, r.reconnects),
        (900, 3, 1, 1, 1)
    );
    assert_eq!(
        (r.rtt_ms_sum, r.exe_ms_sum, r.queue_ms_sum),
        (9000, 9280, 90)
    );
    assert_eq!((r.bytes_sent, r.bytes_recv), (180_000, 3_686_400));
    assert!(
        rows.iter().all(|r| r.op == "READ"),
        "no RPCs, no row: {rows:?}"
    );
    assert_eq!(
        delta::line(r),
        "nfs filer1:/home on /home READ ops=900 rtt=10.00ms exe=10.31ms retrans=3 timeouts=1 reconnects=1"
    );
    // Remounted: counters back to small values, no delta this window.
    let (rows, c) = t.update(parse(&text(
        op(3, 3, 0, 6, 7, Some(0)),
        op(1, 1, 0, 1, 1, Some(0)),
        1,
    )));
    assert!(rows.is_empty());
    assert_eq!(c.resets, 2);
    let (rows, _) = t.update(parse(&text(
        op(13, 13, 0, 26, 27, Some(0)),
        op(1, 1, 0, 1, 1, Some(0)),
        1,
    )));
    assert_eq!(
        rows.iter()
            .map(|r| (r.ops, r.rtt_ms_sum))
            .collect::<Vec<_>>(),
        [(10, 20), (10, 20)]
    );
    let expo = t.render();
    assert!(expo.contains("faultline_nfs_rpc_operations_total{server=\"filer1\",export=\"/home\",mountpoint=\"/home\",op=\"READ\"} 13\n"), "{expo}");
    assert!(expo.contains("faultline_nfs_rpc_rtt_seconds_total{server=\"filer1\",export=\"/home\",mountpoint=\"/home\",op=\"READ\"} 0.026\n"), "{expo}");
    assert!(expo.contains("faultline_nfs_resets_total 2\n"), "{expo}");
    // A bind mount of the same superblock is counted once; past the cap,
    // mounts are dropped and counted.
    let one = text(op(1, 1, 0, 1, 1, None), op(1, 1, 0, 1, 1, None), 1);
    let bind = one.replace("mounted on /home ", "mounted on /srv/home ");
    let mut t = NfsTracker::new(1);
    let (_, c) = t.update(parse(&format!("{one}{bind}")));
    // Kept: filer1:/home at /home; its bind mount at /srv/home is the same
    // superblock; the IPv6 mount (twice) is past the cap of 1.
    assert_eq!((c.mounts, c.duplicates, c.dropped), (1, 1, 2));
    assert!(t
        .render()
        .contains("faultline_nfs_mounts_dropped_total 2\n"));
}

#[test]
fn a_generated_proc_root_is_read_through_the_configured_path() {
    let root = std::env::temp_dir().join(format!("faultline-nfs-proc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("1")).unwrap();
    let write = |s: &str| std::fs::write(root.join("1/mountstats"), s).unwrap();
    write(&text(
        op(100, 100, 0, 500, 510, Some(0)),
        op(10, 10, 0, 30, 31, Some(0)),
        1,
    ));
    let cfg = crate::config::FileConfig::parse(
        &format!(
            "[collector]\nproc_root = {:?}\n[nfs]\nmountstats = \"1/mountstats\"\nmax_mounts = 4\n",
            root.display()
        ),
        "test",
    )
    .unwrap();
    let mut r = NfsReader::new(&cfg.collector.proc_root, &cfg.nfs);
    assert_eq!(r.path(), root.join("1/mountstats"));
    // The server slows 10x: 400 READs at 50 ms RTT against 5 ms before.
    write(&text(
        op(500, 502, 0, 20_500, 20_910, Some(0)),
        op(30, 30, 0, 90, 93, Some(0)),
        1,
    ));
    let (rows, c) = r.window().unwrap();
    assert_eq!(c.mounts, 2);
    let got: Vec<(String, String, u64, u64, u64)> = rows
        .iter()
        .map(|x| {
            (
                x.mountpoint.clone(),
                x.op.clone(),
                x.ops,
                x.retrans,
                x.rtt_ms_sum,
            )
        })
        .collect();
    let want = |mp: &str| {
        [
            (mp.to_string(), "READ".to_string(), 400, 2, 20_000),
            (mp.to_string(), "WRITE".to_string(), 20, 0, 60),
        ]
    };
    let mut expected: Vec<_> = want("/home").to_vec();
    expected.extend(want("/mnt/my scratch"));
    assert_eq!(got, expected);
    // READ's mean RTT this window: 20,000 ms / 400 = 50 ms.
    assert_eq!(rows[0].rtt_ms_sum / rows[0].ops, 50);
    std::fs::remove_file(root.join("1/mountstats")).unwrap();
    let e = r.window().unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("reading {}", root.join("1/mountstats").display())),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(
        mountstats_path(&PathBuf::from("/host/proc"), "/1/mountstats"),
        PathBuf::from("/host/proc/1/mountstats")
    );
}
