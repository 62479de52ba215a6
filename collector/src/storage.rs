//! Block I/O windows: turning cumulative in-kernel aggregates into
//! per-device/op/cgroup rates, bytes/s and latency percentiles, with device
//! numbers and cgroup ids resolved to names. Pure (no aya): the simulator and
//! tests use it with synthetic snapshots.
use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::Instant,
};

use collector_common::block::{op, BlockKey, BlockStats, LAT_BUCKETS};
pub use vocab::hist::{bucket_lower_ns, bucket_upper_ns, quantile_ns};

// The probes' histogram layout is the wire's.
const _: () = assert!(LAT_BUCKETS == vocab::hist::LAT_BUCKETS);

/// Cumulative block totals as read from the kernel at `taken`.
#[derive(Clone, Debug)]
pub struct BlockSnapshot {
    pub taken: Instant,
    pub stats: BTreeMap<BlockKey, BlockStats>,
    /// Timed requests in flight per device (`dev_t` as the tracepoints report it).
    pub inflight: BTreeMap<u32, u64>,
}

impl BlockSnapshot {
    pub fn empty(taken: Instant) -> Self {
        Self {
            taken,
            stats: BTreeMap::new(),
            inflight: BTreeMap::new(),
        }
    }

    /// Totals for one device and op, summed over cgroups.
    pub fn device_op_total(&self, dev: u32, op: u32) -> BlockStats {
        let mut t = BlockStats::ZERO;
        for (k, v) in &self.stats {
            if k.dev == dev && k.op == op {
                accumulate(&mut t, v);
            }
        }
        t
    }
}

/// Label value of an op class; `None` for ops outside read/write/flush/discard.
pub fn op_name(o: u32) -> Option<&'static str> {
    match o {
        op::READ => Some("read"),
        op::WRITE => Some("write"),
        op::FLUSH => Some("flush"),
        op::DISCARD => Some("discard"),
        _ => None,
    }
}

/// Splits the kernel-internal `dev_t` of the block tracepoints (`major << 20 | minor`).
pub fn dev_major_minor(dev: u32) -> (u32, u32) {
    (dev >> 20, dev & 0xf_ffff)
}

/// Builds the kernel-internal `dev_t` from major and minor numbers.
pub fn make_dev(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xf_ffff)
}

pub fn accumulate(into: &mut BlockStats, v: &BlockStats) {
    into.requests += v.requests;
    into.bytes += v.bytes;
    into.latency_sum_ns += v.latency_sum_ns;
    into.latency_max_ns = into.latency_max_ns.max(v.latency_max_ns);
    into.timed += v.timed;
    for (a, b) in into.hist.iter_mut().zip(v.hist.iter()) {
        *a += b;
    }
}

/// `cur - prev`, never negative. A key whose counters went down (the map was
/// recreated by a collector restart) is treated as new: the window gets `cur`.
pub fn delta(prev: Option<&BlockStats>, cur: &BlockStats) -> BlockStats {
    let Some(p) = prev else { return *cur };
    if cur.requests < p.requests || cur.timed < p.timed || cur.bytes < p.bytes {
        return *cur;
    }
    let mut d = BlockStats {
        requests: cur.requests - p.requests,
        bytes: cur.bytes - p.bytes,
        latency_sum_ns: cur.latency_sum_ns.saturating_sub(p.latency_sum_ns),
        latency_max_ns: 0,
        timed: cur.timed - p.timed,
        hist: [0; LAT_BUCKETS],
    };
    for (i, h) in d.hist.iter_mut().enumerate() {
        *h = cur.hist[i].saturating_sub(p.hist[i]);
    }
    // The kernel keeps a running max. If it rose in this window it is this
    // window's max; otherwise bound it by the highest non-empty bucket.
    d.latency_max_ns = if cur.latency_max_ns > p.latency_max_ns {
        cur.latency_max_ns
    } else {
        d.hist
            .iter()
            .rposition(|&c| c > 0)
            .map_or(0, |b| bucket_upper_ns(b).min(cur.latency_max_ns))
    };
    d
}

/// One row of a block window.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockRow {
    pub device: String,
    /// Latency class of the device (see [`Names::device_class`]).
    pub device_class: &'static str,
    pub op: &'static str,
    /// cgroup path of the submitter (`/` root, `?` unknown).
    pub cgroup: String,
    pub requests: u64,
    pub bytes: u64,
    /// Requests whose issue was seen, so whose latency is known (≤ `requests`).
    pub timed: u64,
    /// log2 latency histogram of the window's timed requests (sums to `timed`).
    pub hist: [u64; LAT_BUCKETS],
    pub iops: f64,
    pub bytes_per_sec: f64,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub max_s: Option<f64>,
    pub mean_s: Option<f64>,
}

/// A window of block activity between two snapshots.
#[derive(Clone, Debug, Default)]
pub struct BlockWindow {
    pub seconds: f64,
    pub rows: Vec<BlockRow>,
    /// In-flight (queue depth) per device at the window's end.
    pub inflight: Vec<(String, u64)>,
    /// Requests of ops outside read/write/flush/discard, per device.
    pub unclassified: Vec<(String, u64)>,
}

impl BlockWindow {
    /// Rows with activity between `prev` and `cur`, sorted by device, op, cgroup.
    pub fn between(prev: &BlockSnapshot, cur: &BlockSnapshot, names: &mut Names) -> Self {
        let seconds = cur
            .taken
            .saturating_duration_since(prev.taken)
            .as_secs_f64()
            .max(1e-9);
        let mut rows = Vec::new();
        let mut unclassified: BTreeMap<String, u64> = BTreeMap::new();
        for (k, v) in &cur.stats {
            let d = delta(prev.stats.get(k), v);
            if d.requests == 0 && d.bytes == 0 {
                continue;
            }
            let device = names.device(k.dev);
            let Some(op) = op_name(k.op) else {
                *unclassified.entry(device).or_default() += d.requests;
                continue;
            };
            let to_s = |ns: f64| ns / 1e9;
            // Interpolation inside a log2 bucket can overshoot the true max;
            // the max is exact (or the tighter bound), so quantiles never exceed it.
            let max_ns = d.latency_max_ns as f64;
            let q = |p: f64| quantile_ns(&d.hist, p).map(|v| to_s(v.min(max_ns)));
            rows.push(BlockRow {
                cgroup: names.cgroup(k.cgroup_id),
                device_class: names.device_class(k.dev),
                device,
                op,
                requests: d.requests,
                bytes: d.bytes,
                timed: d.timed,
                hist: d.hist,
                iops: d.requests as f64 / seconds,
                bytes_per_sec: d.bytes as f64 / seconds,
                p50_s: q(0.50),
                p99_s: q(0.99),
                max_s: (d.timed > 0).then(|| to_s(d.latency_max_ns as f64)),
                mean_s: (d.timed > 0).then(|| to_s(d.latency_sum_ns as f64 / d.timed as f64)),
            });
        }
        rows.sort_by(|a, b| (&a.device, a.op, &a.cgroup).cmp(&(&b.device, b.op, &b.cgroup)));
        let inflight = cur
            .inflight
            .iter()
            .map(|(d, n)| (names.device(*d), *n))
            .collect();
        Self {
            seconds,
            rows,
            inflight,
            unclassified: unclassified.into_iter().collect(),
        }
    }

    /// Human-readable lines for the collector's console output.
    pub fn lines(&self) -> Vec<String> {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |s| format!("{:.3}", s * 1e3));
        self.rows
            .iter()
            .map(|r| {
                format!(
                    "block {dev} {op} cgroup={cg} iops={iops:.1} bytes/s={bps:.0} \
                     p50={p50}ms p99={p99}ms max={max}ms",
                    dev = r.device,
                    op = r.op,
                    cg = r.cgroup,
                    iops = r.iops,
                    bps = r.bytes_per_sec,
                    p50 = ms(r.p50_s),
                    p99 = ms(r.p99_s),
                    max = ms(r.max_s),
                )
            })
            .collect()
    }
}

/// Resolves device numbers and cgroup ids to names, with bounded caches.
#[derive(Debug)]
pub struct Names {
    sysfs_root: PathBuf,
    cgroup_root: PathBuf,
    devices: HashMap<u32, Device>,
    cgroups: HashMap<u64, String>,
    /// cgroup ids not found at the last scan, so a miss does not rescan every window.
    cgroup_misses: HashMap<u64, Instant>,
}

/// Cache bounds: past these the cache is cleared and refilled on demand.
const MAX_DEVICES: usize = 4096;
const MAX_CGROUPS: usize = 16384;

impl Names {
    pub fn new(sysfs_root: impl Into<PathBuf>, cgroup_root: impl Into<PathBuf>) -> Self {
        Self {
            sysfs_root: sysfs_root.into(),
            cgroup_root: cgroup_root.into(),
            devices: HashMap::new(),
            cgroups: HashMap::new(),
            cgroup_misses: HashMap::new(),
        }
    }

    pub fn system() -> Self {
        Self::new("/sys", "/sys/fs/cgroup")
    }

    /// Kernel name of a block device (`loop3`, `nvme0n1`) from
    /// `<sysfs>/dev/block/MAJ:MIN`; `MAJ:MIN` when it cannot be resolved.
    pub fn device(&mut self, dev: u32) -> String {
        self.resolve(dev).name.clone()
    }

    /// Latency class of a block device: `nvme`, `hdd`, `ssd`, `network`,
    /// `virtual`, or `""` when sysfs does not tell. A partition takes the
    /// class of its disk.
    pub fn device_class(&mut self, dev: u32) -> &'static str {
        self.resolve(dev).class
    }

    fn resolve(&mut self, dev: u32) -> &Device {
        if self.devices.len() >= MAX_DEVICES && !self.devices.contains_key(&dev) {
            self.devices.clear();
        }
        let root = &self.sysfs_root;
        self.devices
            .entry(dev)
            .or_insert_with(|| Device::read(root, dev))
    }

    /// cgroup v2 path (relative to the cgroup root, starting with `/`) of a
    /// cgroup id; `?` when unknown (0, or the cgroup is gone).
    pub fn cgroup(&mut self, id: u64) -> String {
        if id == 0 {
            return "?".into();
        }
        if let Some(p) = self.cgroups.get(&id) {
            return p.clone();
        }
        let recently_missed = self
            .cgroup_misses
            .get(&id)
            .is_some_and(|t| t.elapsed().as_secs() < 30);
        if !recently_missed {
            self.rescan_cgroups();
            if let Some(p) = self.cgroups.get(&id) {
                return p.clone();
            }
            if self.cgroup_misses.len() >= MAX_CGROUPS {
                self.cgroup_misses.clear();
            }
            self.cgroup_misses.insert(id, Instant::now());
        }
        "?".into()
    }

    fn rescan_cgroups(&mut self) {
        self.cgroups.clear();
        let root = self.cgroup_root.clone();
        walk_cgroups(&root, &root, &mut self.cgroups, 0);
    }
}

/// A block device as sysfs describes it.
#[derive(Debug)]
struct Device {
    name: String,
    class: &'static str,
}

impl Device {
    /// Follows `<sysfs>/dev/block/MAJ:MIN` to the device's directory (e.g.
    /// `../../devices/pci…/nvme0n1/nvme0n1p1`). A partition's directory has a
    /// `partition` file and no `queue/`; its parent is the disk's.
    fn read(sysfs_root: &Path, dev: u32) -> Self {
        let (ma, mi) = dev_major_minor(dev);
        let link = sysfs_root.join(format!("dev/block/{ma}:{mi}"));
        let resolved = fs::read_link(&link).ok().and_then(|target| {
            let name = target.file_name()?.to_string_lossy().into_owned();
            let dir = link.parent()?.join(&target);
            let disk_dir = if dir.join("partition").exists() {
                dir.parent()?.to_path_buf()
            } else {
                dir
            };
            let disk = disk_dir.file_name()?.to_string_lossy().into_owned();
            let rotational = crate::bounded_read::read_to_string(
                &disk_dir.join("queue/rotational"),
                crate::bounded_read::SYSFS_MAX,
            )
            .ok()
            .and_then(|s| s.trim().parse::<u8>().ok());
            Some(Self {
                name,
                class: device_class(&disk, &target, rotational),
            })
        });
        resolved.unwrap_or_else(|| Self {
            name: format!("{ma}:{mi}"),
            class: "",
        })
    }
}

/// Latency class from the disk's kernel name, its sysfs path and
/// `queue/rotational`. Names decide first: loop devices, for one, report
/// whatever rotational their backing file's device has.
fn device_class(disk: &str, path: &Path, rotational: Option<u8>) -> &'static str {
    const NETWORK: [&str; 2] = ["nbd", "rbd"];
    const VIRTUAL: [&str; 5] = ["loop", "dm-", "md", "zram", "ram"];
    let named = |prefixes: &[&str]| prefixes.iter().any(|p| disk.starts_with(p));
    // iSCSI disks sit under their session (`…/host2/session1/target2:0:0/…`);
    // Ceph RBD devices on the `rbd` bus (`…/devices/rbd/0/block/rbd0`).
    let network_path = path.components().any(|c| {
        let c = c.as_os_str().to_string_lossy();
        c == "rbd"
            || c.strip_prefix("session")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    if disk.starts_with("nvme") {
        "nvme"
    } else if named(&NETWORK) || network_path {
        "network"
    } else if named(&VIRTUAL) {
        "virtual"
    } else {
        match rotational {
            Some(1) => "hdd",
            Some(0) => "ssd",
            _ => "",
        }
    }
}

fn walk_cgroups(root: &Path, dir: &Path, out: &mut HashMap<u64, String>, depth: usize) {
    if depth > 32 || out.len() >= MAX_CGROUPS {
        return;
    }
    let Ok(meta) = fs::metadata(dir) else { return };
    let rel = dir.strip_prefix(root).unwrap_or(Path::new(""));
    out.insert(meta.ino(), format!("/{}", rel.display()));
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            walk_cgroups(root, &e.path(), out, depth + 1);
        }
    }
}

/// Prometheus text for the block metrics, summed over cgroups:
/// `faultline_block_requests_total{device,op}`, `faultline_block_bytes_total{device,op}`,
/// `faultline_block_latency_seconds{device,op}` (histogram with log2 buckets)
/// and `faultline_block_inflight{device}`.
pub fn render_prometheus(snap: &BlockSnapshot, names: &mut Names) -> String {
    let mut by: BTreeMap<(String, &'static str), BlockStats> = BTreeMap::new();
    for (k, v) in &snap.stats {
        let Some(op) = op_name(k.op) else { continue };
        let e = by
            .entry((names.device(k.dev), op))
            .or_insert(BlockStats::ZERO);
        accumulate(e, v);
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP faultline_block_requests_total Completed block requests.\n\
         # TYPE faultline_block_requests_total counter"
    );
    for ((d, o), v) in &by {
        let _ = writeln!(
            s,
            "faultline_block_requests_total{{device=\"{d}\",op=\"{o}\"}} {}",
            v.requests
        );
    }
    let _ = writeln!(
        s,
        "# HELP faultline_block_bytes_total Completed block bytes.\n\
         # TYPE faultline_block_bytes_total counter"
    );
    for ((d, o), v) in &by {
        let _ = writeln!(
            s,
            "faultline_block_bytes_total{{device=\"{d}\",op=\"{o}\"}} {}",
            v.bytes
        );
    }
    let _ = writeln!(
        s,
        "# HELP faultline_block_latency_seconds Block request latency, submit to completion.\n\
         # TYPE faultline_block_latency_seconds histogram"
    );
    for ((d, o), v) in &by {
        let mut cum = 0u64;
        for (b, c) in v.hist.iter().enumerate() {
            cum += c;
            if b + 1 == LAT_BUCKETS {
                break;
            }
            let le = bucket_upper_ns(b) as f64 / 1e9;
            let _ = writeln!(
                s,
                "faultline_block_latency_seconds_bucket{{device=\"{d}\",op=\"{o}\",le=\"{le:e}\"}} {cum}"
            );
        }
        let _ = writeln!(
            s,
            "faultline_block_latency_seconds_bucket{{device=\"{d}\",op=\"{o}\",le=\"+Inf\"}} {}\n\
             faultline_block_latency_seconds_sum{{device=\"{d}\",op=\"{o}\"}} {}\n\
             faultline_block_latency_seconds_count{{device=\"{d}\",op=\"{o}\"}} {}",
            v.timed,
            v.latency_sum_ns as f64 / 1e9,
            v.timed
        );
    }
    let _ = writeln!(
        s,
        "# HELP faultline_block_inflight Timed block requests in flight.\n\
         # TYPE faultline_block_inflight gauge"
    );
    let mut inflight: BTreeMap<String, u64> = BTreeMap::new();
    for (dev, n) in &snap.inflight {
        *inflight.entry(names.device(*dev)).or_default() += n;
    }
    for (d, n) in &inflight {
        let _ = writeln!(s, "faultline_block_inflight{{device=\"{d}\"}} {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
        std::os::unix::fs::symlink("../../devices/virtual/block/loop3", devblock.join("7:3"))
            .unwrap();
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
        assert!(
            text.contains("faultline_block_latency_seconds_count{device=\"7:3\",op=\"write\"} 3\n")
        );
        assert!(text.contains(
            "faultline_block_latency_seconds_bucket{device=\"7:3\",op=\"read\",le=\"+Inf\"} 14\n"
        ));
        assert!(text.contains("faultline_block_inflight{device=\"7:3\"} 2\n"));
        // 1000 ns is in bucket 9 = [512, 1024): le = 1.024e-6 s holds all 14.
        assert!(text.contains("faultline_block_latency_seconds_bucket{device=\"7:3\",op=\"read\",le=\"1.024e-6\"} 14\n"), "{text}");
        assert!(!text.contains("op=\"other\""));
    }
}
