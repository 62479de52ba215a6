//! Block windows, names and the exposition against synthetic snapshots and sysfs trees.
use super::*;
use crate::block::render_prometheus;

fn stats(requests: u64, bytes: u64, lats_ns: &[u64]) -> BlockStats {
    let mut s = BlockStats::ZERO;
    s.requests = requests;
    s.bytes = bytes;
    for &l in lats_ns {
        s.timed += 1;
        s.latency_sum_ns += l;
        s.latency_max_ns = s.latency_max_ns.max(l);
        s.hist[collector_common::block::lat_bucket(l)] += 1;
    }
    s
}

#[test]
fn delta_subtracts_and_treats_a_decrease_as_restart() {
    let a = stats(10, 4096 * 10, &[1000; 10]);
    let b = stats(
        15,
        4096 * 15,
        &[
            1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 3000, 3000, 3000, 3000,
            3000,
        ],
    );
    let d = delta(Some(&a), &b);
    assert_eq!((d.requests, d.bytes, d.timed), (5, 4096 * 5, 5));
    assert_eq!(d.hist[collector_common::block::lat_bucket(3000)], 5);
    assert_eq!(d.hist[collector_common::block::lat_bucket(1000)], 0);
    assert_eq!(d.latency_max_ns, 3000, "running max rose: exact");
    // Counters went down: the map was recreated, the window is `cur`.
    let restarted = stats(2, 8192, &[500, 700]);
    assert_eq!(delta(Some(&b), &restarted), restarted);
    assert_eq!(delta(None, &restarted), restarted);
}

#[test]
fn delta_max_bounded_by_bucket_when_running_max_did_not_move() {
    let a = stats(1, 0, &[1_000_000]);
    let mut b = a;
    b.requests += 2;
    b.timed += 2;
    b.hist[collector_common::block::lat_bucket(2000)] += 2;
    let d = delta(Some(&a), &b);
    // 2000 ns lies in [1024, 2048): bound 2048, below the running max.
    assert_eq!(d.latency_max_ns, 2048);
}

#[test]
fn quantiles_interpolate_within_log2_buckets() {
    let mut h = [0u64; LAT_BUCKETS];
    assert_eq!(quantile_ns(&h, 0.5), None);
    h[10] = 100; // [1024, 2048)
    let p50 = quantile_ns(&h, 0.5).unwrap();
    assert!((p50 - 1536.0).abs() < 1e-9, "{p50}");
    h[20] = 1; // one slow request in [1 MiB ns, 2 MiB ns)
    let p99 = quantile_ns(&h, 0.99).unwrap();
    assert!((1024.0..2048.0).contains(&p99), "{p99}");
    let p100 = quantile_ns(&h, 1.0).unwrap();
    assert_eq!(p100, 2097152.0);
}

#[test]
fn names_resolve_from_a_fake_sysfs_and_fall_back_to_numbers() {
    let root = std::env::temp_dir().join(format!("faultline-names-{}", std::process::id()));
    let devblock = root.join("sys/dev/block");
    fs::create_dir_all(&devblock).unwrap();
    fs::create_dir_all(root.join("sys/devices/virtual/block/loop3")).unwrap();
    std::os::unix::fs::symlink("../../devices/virtual/block/loop3", devblock.join("7:3")).unwrap();
    let cg = root.join("cg");
    fs::create_dir_all(cg.join("system.slice/slurmstepd.scope/job_42")).unwrap();
    let job_ino = fs::metadata(cg.join("system.slice/slurmstepd.scope/job_42"))
        .unwrap()
        .ino();
    let mut n = Names::new(root.join("sys"), &cg);
    assert_eq!(n.device(make_dev(7, 3)), "loop3");
    assert_eq!(n.device(make_dev(259, 1)), "259:1");
    assert_eq!(n.cgroup(job_ino), "/system.slice/slurmstepd.scope/job_42");
    assert_eq!(n.cgroup(0), "?");
    assert_eq!(n.cgroup(u64::MAX), "?");
    fs::remove_dir_all(&root).unwrap();
}

/// Adds a device at `<sys>/devices/<path>` and its `dev/block/MAJ:MIN`
/// link. `queue` is the disk's `queue/rotational`, `"part"` for a
/// partition (a `partition` file, no `queue/`), `""` for neither.
fn fake_device(sys: &Path, dev: u32, path: &str, queue: &str) {
    let dir = sys.join("devices").join(path);
    fs::create_dir_all(&dir).unwrap();
    match queue {
        "part" => fs::write(dir.join("partition"), "1\n").unwrap(),
        "" => {}
        r => {
            fs::create_dir_all(dir.join("queue")).unwrap();
            fs::write(dir.join("queue/rotational"), format!("{r}\n")).unwrap();
        }
    }
    let (ma, mi) = dev_major_minor(dev);
    let link = sys.join(format!("dev/block/{ma}:{mi}"));
    std::os::unix::fs::symlink(format!("../../devices/{path}"), link).unwrap();
}

#[test]
fn device_classes_from_a_fake_sysfs() {
    let root = std::env::temp_dir().join(format!("faultline-class-{}", std::process::id()));
    let sys = root.join("sys");
    fs::create_dir_all(sys.join("dev/block")).unwrap();
    let cases = [
        ("pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1", "0", "nvme"),
        (
            "pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1/nvme0n1p1",
            "part",
            "nvme",
        ),
        (
            "pci0000:00/ata1/host0/target0:0:0/0:0:0:0/block/sda",
            "1",
            "hdd",
        ),
        // The partition has no queue/: its class is its disk's.
        (
            "pci0000:00/ata1/host0/target0:0:0/0:0:0:0/block/sda/sda1",
            "part",
            "hdd",
        ),
        (
            "pci0000:00/ata2/host1/target1:0:0/1:0:0:0/block/sdb",
            "0",
            "ssd",
        ),
        (
            "pci0000:00/ata2/host1/target1:0:0/1:0:0:0/block/sdb/sdb2",
            "part",
            "ssd",
        ),
        // iSCSI: a spinning sd disk behind a session is network storage.
        (
            "platform/host3/session1/target3:0:0/3:0:0:0/block/sdc",
            "1",
            "network",
        ),
        ("virtual/block/nbd0", "0", "network"),
        ("rbd/0/block/rbd0", "0", "network"),
        // Names decide before rotational: this loop's backing disk spins.
        ("virtual/block/loop3", "1", "virtual"),
        ("virtual/block/loop4/loop4p1", "part", "virtual"),
        ("virtual/block/dm-0", "0", "virtual"),
        ("virtual/block/md0", "0", "virtual"),
        ("virtual/block/zram0", "0", "virtual"),
        ("virtual/block/ram0", "0", "virtual"),
        // No readable queue/rotational and no telling name: unknown.
        ("pci0000:00/0000:00:02.0/virtio1/block/vda", "", ""),
    ];
    for (i, (path, queue, _)) in cases.iter().enumerate() {
        fake_device(&sys, make_dev(8, i as u32), path, queue);
    }
    let mut n = Names::new(&sys, "/nonexistent");
    for (i, (path, _, class)) in cases.iter().enumerate() {
        let dev = make_dev(8, i as u32);
        let name = path.rsplit('/').next().unwrap();
        assert_eq!(
            (n.device(dev).as_str(), n.device_class(dev)),
            (name, *class)
        );
    }
    // No dev/block link: the number stands in for the name, class unknown.
    let gone = make_dev(259, 9);
    assert_eq!(
        (n.device(gone).as_str(), n.device_class(gone)),
        ("259:9", "")
    );
    // Classes are cached with the names: gone from sysfs, still known.
    fs::remove_dir_all(&root).unwrap();
    assert_eq!(n.device_class(make_dev(8, 3)), "hdd");
    let mut unreadable = Names::new("/nonexistent", "/nonexistent");
    assert_eq!(unreadable.device_class(make_dev(8, 0)), "");
}

#[test]
fn device_cache_is_bounded() {
    let mut n = Names::new("/nonexistent", "/nonexistent");
    for mi in 0..(MAX_DEVICES as u32 + 10) {
        assert_eq!(n.device_class(make_dev(8, mi)), "");
    }
    assert!(n.devices.len() <= MAX_DEVICES, "{}", n.devices.len());
    assert_eq!(n.device(make_dev(8, 5)), "8:5");
}

#[test]
fn window_rows_and_prometheus_text() {
    let t0 = Instant::now();
    let dev = make_dev(7, 3);
    let key = |op, cg| BlockKey {
        dev,
        op,
        cgroup_id: cg,
    };
    let mut a = BlockSnapshot::empty(t0);
    a.stats
        .insert(key(op::READ, 0), stats(4, 4 * 4096, &[1000; 4]));
    let mut b = BlockSnapshot::empty(t0 + std::time::Duration::from_secs(2));
    b.stats
        .insert(key(op::READ, 0), stats(14, 14 * 4096, &[1000; 14]));
    b.stats
        .insert(key(op::WRITE, 0), stats(3, 3 * 8192, &[5000; 3]));
    b.stats.insert(key(op::OTHER, 0), stats(2, 0, &[]));
    b.inflight.insert(dev, 2);
    let mut names = Names::new("/nonexistent", "/nonexistent");
    let w = BlockWindow::between(&a, &b, &mut names);
    assert_eq!(w.rows.len(), 2);
    let r = &w.rows[0];
    assert_eq!(
        (r.device.as_str(), r.op, r.requests, r.bytes),
        ("7:3", "read", 10, 40960)
    );
    assert!((r.iops - 5.0).abs() < 1e-9);
    assert!((r.bytes_per_sec - 20480.0).abs() < 1e-9);
    assert!(r.p99_s.unwrap() <= r.max_s.unwrap());
    assert_eq!((r.timed, r.device_class), (10, ""));
    assert_eq!(r.hist[collector_common::block::lat_bucket(1000)], 10);
    assert_eq!(r.hist.iter().sum::<u64>(), 10);
    assert_eq!(w.unclassified, vec![("7:3".to_string(), 2)]);
    assert_eq!(w.inflight, vec![("7:3".to_string(), 2)]);

    let text = render_prometheus(&b, &mut names);
    assert!(text.contains("faultline_block_requests_total{device=\"7:3\",op=\"read\"} 14\n"));
    assert!(text.contains("faultline_block_bytes_total{device=\"7:3\",op=\"write\"} 24576\n"));
    assert!(text.contains("faultline_block_latency_seconds_count{device=\"7:3\",op=\"write\"} 3\n"));
    assert!(text.contains(
        "faultline_block_latency_seconds_bucket{device=\"7:3\",op=\"read\",le=\"+Inf\"} 14\n"
    ));
    assert!(text.contains("faultline_block_inflight{device=\"7:3\"} 2\n"));
    // 1000 ns is in bucket 9 = [512, 1024): le = 1.024e-6 s holds all 14.
    assert!(text.contains("faultline_block_latency_seconds_bucket{device=\"7:3\",op=\"read\",le=\"1.024e-6\"} 14\n"), "{text}");
    assert!(!text.contains("op=\"other\""));
}
