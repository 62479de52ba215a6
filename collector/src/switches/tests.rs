use std::path::{Path, PathBuf};

use super::*;

/// infiniband_exporter's real outputs (tests/data/infiniband_exporter).
fn data(rel: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/infiniband_exporter")
        .join(rel);
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn the_ports_form_lists_each_switch_with_its_cabled_ports() {
    let s = switches(&data("ibnetdiscover/test.out")).unwrap();
    let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
    // ib-i1l2s01 is known from the far end of ib-i1l1s01's uplink;
    // ib-i7l2s01 lists no cabled port.
    assert_eq!(names, ["ib-i1l1s01", "ib-i1l2s01", "ib-i4l1s01"]);
    let edr = 100_000_000_000 / 8;
    assert_eq!(s[0].guid, "0x7cfe9003009ce5b0");
    assert_eq!(s[0].ports, [(1, edr), (10, edr), (11, edr)]);
    assert_eq!(
        (s[1].guid.as_str(), &s[1].ports[..]),
        ("0x7cfe900300b07320", &[(1, edr)][..])
    );
    // Port 37 has no cable (`4x ???`).
    assert_eq!(s[2].ports, [(35, edr)]);
}

#[test]
fn the_ports_form_of_an_hdr_fabric_trims_descriptions() {
    let f = vocab::ibnet::parse(&data("ibnetdiscover/test2.out")).unwrap();
    // The aggregation node's port 1 is listed on leaf port 81 and on
    // spine-IB03 port 81: the first stands.
    assert_eq!(f.conflicts, 1);
    let names = f.switch_names();
    let mut got: Vec<&str> = names.values().map(String::as_str).collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [
            "5FB0405-leaf-IB01",
            "5FB0406-spine-IB01",
            "5FB0406-spine-IB02",
            "5FB0406-spine-IB03",
            "Infiniscale-IV Mellanox Technologies"
        ]
    );
    let s = switches(&data("ibnetdiscover/test2.out")).unwrap();
    let leaf = s.iter().find(|s| s.name == "5FB0405-leaf-IB01").unwrap();
    assert_eq!(
        leaf.ports,
        [(79, 200_000_000_000 / 8), (81, 200_000_000_000 / 8)]
    );
}

#[test]
fn real_switch_perfquery_output_becomes_sysfs_named_counters() {
    let (ports, malformed) = perfquery::parse(&data("perfquery/0x7cfe9003009ce5b0.out"));
    assert_eq!(malformed, 0);
    assert_eq!(ports.len(), 2);
    assert_eq!((ports[0].lid, ports[0].port), (1719, 1));
    let c = &ports[0].counters;
    assert_eq!(c["port_xmit_data"], 36_298_026_860_928);
    assert_eq!(c["port_rcv_packets"], 32_262_508_468);
    assert_eq!(c["port_xmit_wait"], 22_730_501);
    assert_eq!(c["symbol_error"], 0);
    // 21 PortCounters(Extended) fields with a sysfs twin; PortSelect,
    // CounterSelect(2) and QP1Dropped have none.
    assert_eq!(c.len(), 21, "{c:?}");
    let (ports, _) = perfquery::parse(&data("perfquery/0x506b4b03005c2740.out"));
    let c = &ports[0].counters;
    assert_eq!(
        (
            c["link_downed"],
            c["port_rcv_switch_relay_errors"],
            c["port_xmit_discards"]
        ),
        (1, 7, 20046)
    );
}

#[test]
fn rows_carry_the_switch_its_ports_and_their_rates() {
    let sw = &switches(&data("ibnetdiscover/test.out")).unwrap()[0];
    let (rows, malformed) = rows(sw, &data("perfquery/0x7cfe9003009ce5b0.out"));
    assert_eq!(malformed, 0);
    // Port 2 was not asked for (no cable in the file): left out.
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (r.switch.as_str(), r.hca.as_str(), r.port),
        ("ib-i1l1s01", "", 1)
    );
    assert_eq!(
        (r.state, r.phys_state, r.rate_bytes_per_sec),
        (4, 5, 12_500_000_000)
    );
    assert_eq!(r.counters["port_rcv_data"], 12_279_028_775_751);
}

/// A stand-in `perfquery`: prints the fixture of the GUID it is asked
/// for, fails for an unknown one, or hangs.
fn fake_perfquery(dir: &Path) -> PathBuf {
    let p = dir.join("perfquery");
    let fixtures =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/infiniband_exporter/perfquery");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\n# args: -l -x -G GUID PORTS\n[ \"$4\" = 0xhang ] && exec sleep 30\nf={}/$4.out\n[ -f \"$f\" ] || {{ echo \"ibwarn: no such GUID $4\" >&2; exit 1; }}\necho \"$@\" >> {}/calls\ncat \"$f\"\n",
            fixtures.display(),
            dir.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[tokio::test]
async fn a_poll_runs_perfquery_per_switch_and_reports_failures_and_caps() {
    let dir = std::env::temp_dir().join(format!("faultline-switches-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut sw = switches(&data("ibnetdiscover/test.out")).unwrap();
    sw.push(Switch {
        name: "gone".into(),
        guid: "0xdead".into(),
        ports: vec![(1, 0)],
    });
    sw.push(Switch {
        name: "stuck".into(),
        guid: "0xhang".into(),
        ports: vec![(1, 0)],
    });
    let section = SwitchesSection {
        enabled: true,
        perfquery: fake_perfquery(&dir),
        timeout_s: 0.5,
        max_ports: 7,
        ..SwitchesSection::default()
    };
    let p = poll(&section, &sw).await;
    // ib-i1l1s01 port 1 (10 and 11 are not in its output), ib-i4l1s01's
    // port 35 is not in its output either (port 1 is, unasked): 1 row.
    assert_eq!(p.rows.len(), 1, "{:#?}", p.rows);
    let calls = std::fs::read_to_string(dir.join("calls")).unwrap();
    assert_eq!(
        calls,
        "-l -x -G 0x7cfe9003009ce5b0 1,10,11\n-l -x -G 0x506b4b03005c2740 35\n"
    );
    // ib-i1l2s01 has no fixture (an unknown GUID to the stand-in).
    let failed: Vec<&str> = p.failed.iter().map(|f| f.0.as_str()).collect();
    assert_eq!(failed, ["ib-i1l2s01", "gone", "stuck"], "{:?}", p.failed);
    assert!(
        p.failed[1].1.contains("no such GUID 0xdead"),
        "{:?}",
        p.failed
    );
    assert_eq!(p.failed[2].1, "timed out after 0.5 s");
    assert_eq!(p.ok, 2);
    assert_eq!(p.dropped, 0);
    // A budget of 2 ports: the first switch's first two.
    let p = poll(
        &SwitchesSection {
            max_ports: 2,
            ..section.clone()
        },
        &sw,
    )
    .await;
    assert_eq!(p.dropped, 1 + 1 + 1 + 1 + 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_or_switchless_fabric_file_says_what_to_do() {
    let e = load(Path::new("/nonexistent/fabric.topo")).unwrap_err();
    assert!(
        e.to_string()
            .contains("save it with `ibnetdiscover > /nonexistent/fabric.topo`"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("faultline-switches-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t");
    std::fs::write(&f, data("ibnetdiscover/test3.out")).unwrap();
    let e = load(&f).unwrap_err();
    assert!(
        e.to_string()
            .ends_with("lists no switch with a cabled port"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
