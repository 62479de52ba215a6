use std::path::{Path, PathBuf};

use super::{parse::*, *};

/// lustre_exporter's real Lustre 2.10.1 client files
/// (tests/data/lustre_exporter/README.md).
fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/lustre_exporter/proc/fs/lustre")
}

const OST0: &str = "lustrefs-OST0000-osc-ffff88105db50000";
const MDT0: &str = "lustrefs-MDT0000-mdc-ffff88105db50000";

fn fixture(class: &str, dev: &str, file: &str) -> String {
    std::fs::read_to_string(fixture_root().join(class).join(dev).join(file)).unwrap()
}

#[test]
fn real_osc_stats_parse_to_their_exact_counts() {
    let s = stats(&fixture("osc", OST0, "stats"));
    assert_eq!(s.malformed, 0);
    // The [usec] RPC types; req_active ([reqs]) and write_bytes ([bytes])
    // are not RPC times.
    let names: Vec<&str> = s.rpcs.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "ldlm_cancel",
            "obd_ping",
            "ost_connect",
            "ost_punch",
            "ost_statfs",
            "ost_write"
        ]
    );
    assert_eq!(
        s.rpcs["ost_write"],
        RpcStat {
            samples: 18_210_286,
            sum_us: 110_277_857_878
        }
    );
    assert_eq!(
        s.rpcs["obd_ping"],
        RpcStat {
            samples: 5153,
            sum_us: 1_765_137
        }
    );
    assert_eq!(
        s.wait,
        RpcStat {
            samples: 18_215_581,
            sum_us: 110_282_569_237
        }
    );
    // The fixture's own cross-check: req_waittime counts every RPC, the
    // typed lines all but 3 of them.
    let total: u64 = s.rpcs.values().map(|r| r.samples).sum();
    assert_eq!(s.wait.samples - total, 3, "{:?}", s.rpcs);
}

#[test]
fn real_mdc_stats_and_imports_parse() {
    let s = stats(&fixture("mdc", MDT0, "stats"));
    assert_eq!(s.malformed, 0);
    assert_eq!(
        s.rpcs["mds_close"],
        RpcStat {
            samples: 11,
            sum_us: 12_404
        }
    );
    assert_eq!(s.rpcs.len(), 10, "{:?}", s.rpcs.keys());
    let i = import(&fixture("osc", OST0, "import"));
    assert_eq!(
        i,
        Import {
            target: "lustrefs-OST0000_UUID".into(),
            state: "FULL".into(),
            nid: "172.20.20.5@o2ib".into(),
            connection_attempts: 1,
            timeouts: 0,
        }
    );
    let m = import(&fixture("mdc", MDT0, "import"));
    assert_eq!(
        (m.target.as_str(), m.nid.as_str()),
        ("lustrefs-MDT0000_UUID", "172.20.20.2@o2ib")
    );
}

#[test]
fn lustre_2_15_stats_with_usecs_and_elapsed_time_parse() {
    let text = "snapshot_time             1783960164.279418700 secs.nsecs\n\
                start_time                1783705564.331211471 secs.nsecs\n\
                elapsed_time              254599.948207229 secs.nsecs\n\
                req_waittime              83 samples [usecs] 11 40 1493 32135\n\
                req_active                83 samples [reqs] 1 1 83 83\n\
                ost_read                  80 samples [usecs] 11 40 1400 30000\n\
                ost_connect               3 samples [usecs] 20 40 93\n\
                ldlm_bl_callback          2 samples [reqs]\n\
                garbage line\n";
    let s = stats(text);
    assert_eq!(
        s.rpcs["ost_read"],
        RpcStat {
            samples: 80,
            sum_us: 1400
        }
    );
    // Without sumsq (an older writer) the sum is still the third value.
    assert_eq!(
        s.rpcs["ost_connect"],
        RpcStat {
            samples: 3,
            sum_us: 93
        }
    );
    assert_eq!(
        s.wait,
        RpcStat {
            samples: 83,
            sum_us: 1493
        }
    );
    assert_eq!(s.malformed, 1);
}

#[test]
fn client_devices_are_named_and_server_links_are_not() {
    assert_eq!(
        device_name(OST0),
        Some(("lustrefs", "lustrefs-OST0000", "ffff88105db50000"))
    );
    assert_eq!(
        device_name("scratch-fs-MDT0001-mdc-ffff9bc043537800"),
        Some(("scratch-fs", "scratch-fs-MDT0001", "ffff9bc043537800"))
    );
    // The MDS's own link to an OST, on a server.
    assert_eq!(device_name("lustrefs-OST0000-osc-MDT0000"), None);
    assert_eq!(device_name("num_refs"), None);
}

#[test]
fn mounts_name_each_file_systems_mount_point() {
    let m = mounts(
        "/dev/sda1 / ext4 rw 0 0\n\
         172.20.20.1@o2ib:172.20.20.2@o2ib:/lustrefs /mnt/lus\\040tre lustre rw,flock 0 0\n\
         10.0.0.1@tcp:/lustrefs /other lustre rw 0 0\n",
    );
    assert_eq!(m.len(), 1);
    assert_eq!(m["lustrefs"], "/mnt/lus tre");
}

/// A copy of the fixture tree with a mount table, to change between reads.
struct Tree {
    dir: Dir,
}

/// A directory removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Tree {
    fn new() -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            Dir(std::env::temp_dir().join(format!("faultline-lustre-{}-{n}", std::process::id())));
        let _ = std::fs::remove_dir_all(dir.path());
        for class in ["osc", "mdc"] {
            for e in std::fs::read_dir(fixture_root().join(class)).unwrap() {
                let e = e.unwrap();
                let to = dir.path().join("lustre").join(class).join(e.file_name());
                std::fs::create_dir_all(&to).unwrap();
                for f in std::fs::read_dir(e.path()).unwrap() {
                    let f = f.unwrap();
                    std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
                }
            }
        }
        std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
        std::fs::write(
            dir.path().join("proc/self/mounts"),
            "172.20.20.1@o2ib:/lustrefs /lustre lustre rw 0 0\n",
        )
        .unwrap();
        Self { dir }
    }

    fn section(&self, max_targets: usize) -> LustreSection {
        LustreSection {
            enabled: true,
            roots: vec![
                self.dir.path().join("absent"),
                self.dir.path().join("lustre"),
            ],
            mounts: "self/mounts".into(),
            max_targets,
        }
    }

    fn reader(&self, max_targets: usize) -> LustreReader {
        LustreReader::new(&self.dir.path().join("proc"), &self.section(max_targets))
    }

    /// Adds `samples` RPCs of `sum_us` in all to one line of a device's
    /// stats (and to req_waittime).
    fn add(&self, dev: &str, op: &str, samples: u64, sum_us: u64) {
        let p = self.dir.path().join("lustre/osc").join(dev).join("stats");
        let text = std::fs::read_to_string(&p).unwrap();
        let mut text = text;
        if !text
            .lines()
            .any(|l| l.split_whitespace().next() == Some(op))
        {
            // The type's first RPC adds its line.
            text.push_str(&format!("{op} 0 samples [usec] 0 0 0 0\n"));
        }
        let out: Vec<String> = text
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.first() == Some(&op) || f.first() == Some(&"req_waittime") {
                    let n: u64 = f[1].parse().unwrap();
                    let sum: u64 = f[6].parse().unwrap();
                    format!(
                        "{} {} samples {} {} {} {} {}",
                        f[0],
                        n + samples,
                        f[3],
                        f[4],
                        f[5],
                        sum + sum_us,
                        f[7]
                    )
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&p, out.join("\n") + "\n").unwrap();
    }

    fn set_import(&self, dev: &str, key: &str, value: u64) {
        let p = self.dir.path().join("lustre/osc").join(dev).join("import");
        let text = std::fs::read_to_string(&p).unwrap();
        let out: Vec<String> = text
            .lines()
            .map(|l| match l.split_once(':') {
                Some((k, _)) if k.trim() == key => format!("{k}: {value}"),
                _ => l.to_string(),
            })
            .collect();
        std::fs::write(&p, out.join("\n") + "\n").unwrap();
    }
}

#[test]
fn a_window_is_the_rpc_delta_per_target_and_type() {
    let t = Tree::new();
    let mut r = t.reader(1024);
    // Nothing moved: eight targets read, no rows.
    let (rows, counts) = r.window();
    assert_eq!(
        counts,
        WindowCounts {
            targets: 8,
            resets: 0
        }
    );
    assert!(rows.is_empty(), "{rows:#?}");
    // 400 writes of 24 ms in all on OST0003, 2 pings on OST0005.
    let ost3 = "lustrefs-OST0003-osc-ffff88105db50000";
    t.add(ost3, "ost_write", 400, 24_000);
    t.add("lustrefs-OST0005-osc-ffff88105db50000", "obd_ping", 2, 700);
    let (rows, _) = r.window();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let w = rows.iter().find(|r| r.op == "ost_write").unwrap();
    assert_eq!(
        (
            w.server.as_str(),
            w.export.as_str(),
            w.mountpoint.as_str(),
            w.fstype.as_str()
        ),
        ("lustrefs-OST0003", "lustrefs", "/lustre", "lustre")
    );
    assert_eq!(
        (w.ops, w.rtt_ms_sum, w.timeouts, w.reconnects),
        (400, 24, 0, 0)
    );
    assert_eq!(w.nid, "172.20.20.6@o2ib");
    let p = rows.iter().find(|r| r.op == "obd_ping").unwrap();
    assert_eq!(
        (p.server.as_str(), p.ops, p.rtt_ms_sum),
        ("lustrefs-OST0005", 2, 0)
    );
    assert!(
        delta::line(w).contains("ops=400 rpc=0.06ms"),
        "{}",
        delta::line(w)
    );
}

#[test]
fn timeouts_and_reconnects_without_completions_are_one_import_row() {
    let t = Tree::new();
    let mut r = t.reader(1024);
    let ost1 = "lustrefs-OST0001-osc-ffff88105db50000";
    t.set_import(ost1, "timeouts", 3);
    t.set_import(ost1, "connection_attempts", 2);
    let (rows, _) = r.window();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        (
            rows[0].op.as_str(),
            rows[0].ops,
            rows[0].timeouts,
            rows[0].reconnects
        ),
        ("import", 0, 3, 1)
    );
}

#[test]
fn counters_going_back_are_a_reset_not_a_window() {
    let t = Tree::new();
    t.add(OST0, "ost_write", 100, 1000);
    let mut r = t.reader(1024);
    let p = t.dir.path().join("lustre/osc").join(OST0).join("stats");
    std::fs::write(&p, "snapshot_time 1 secs.nsecs\nreq_waittime 5 samples [usec] 1 2 9 20\nost_write 5 samples [usec] 1 2 9 20\n").unwrap();
    let (rows, counts) = r.window();
    assert!(rows.is_empty(), "{rows:#?}");
    assert_eq!(counts.resets, 1);
    t.add(OST0, "ost_write", 10, 50_000);
    let (rows, counts) = r.window();
    assert_eq!(counts.resets, 0);
    assert_eq!((rows[0].ops, rows[0].rtt_ms_sum), (10, 50));
    assert!(
        r.render().contains("faultline_lustre_resets_total 1\n"),
        "{}",
        r.render()
    );
}

#[test]
fn targets_past_the_cap_are_counted_and_the_exposition_names_state_and_nid() {
    let t = Tree::new();
    let r = t.reader(3);
    let text = r.render();
    assert!(text.contains("faultline_lustre_targets 3\n"), "{text}");
    // Two reads (construction and none since): 5 devices past the cap.
    assert!(
        text.contains("faultline_lustre_targets_dropped_total 5\n"),
        "{text}"
    );
    assert!(
        text.contains(r#"faultline_lustre_import_full{fsname="lustrefs",target="lustrefs-MDT0000",mountpoint="/lustre",state="FULL",nid="172.20.20.2@o2ib"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"faultline_lustre_rpc_operations_total{fsname="lustrefs",target="lustrefs-OST0000",mountpoint="/lustre",op="ost_write"} 18210286"#),
        "{text}"
    );
}
