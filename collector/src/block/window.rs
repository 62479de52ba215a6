//! Block I/O windows: turning cumulative in-kernel aggregates into
//! per-device/op/cgroup rates, bytes/s and latency percentiles, with device
//! numbers and cgroup ids resolved to names. Pure (no aya): the simulator and
//! tests use it with synthetic snapshots.
use std::{
    collections::{BTreeMap, HashMap},
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::Instant,
};

use collector_common::block::{op, BlockKey, BlockStats, LAT_BUCKETS};
pub use vocab::hist::{bucket_lower_ns, bucket_upper_ns, quantile_ns};

/// The cgroup v2 hierarchy, where cgroup ids are resolved to paths.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

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
                t.merge(v);
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
    /// Exact sum and maximum of the timed requests' latencies, ns.
    pub latency_sum_ns: u64,
    pub latency_max_ns: u64,
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
                latency_sum_ns: d.latency_sum_ns,
                latency_max_ns: d.latency_max_ns,
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
        Self::new("/sys", cgroup2_root())
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

/// Where the cgroup v2 hierarchy is mounted (the ids the probes read are its
/// directories' inodes): the first `cgroup2` mount in `/proc/self/mounts`
/// (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts, where
/// walking all of `/sys/fs/cgroup` would mix in v1 hierarchies' inodes).
pub fn cgroup2_root() -> PathBuf {
    fs::read_to_string("/proc/self/mounts")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let mut f = l.split_whitespace();
                let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
                (fstype == "cgroup2").then(|| PathBuf::from(dir))
            })
        })
        .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"))
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

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
