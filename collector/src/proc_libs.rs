//! Shared libraries that running processes map, found where each process
//! sees them: through the process's own root (`/proc/PID/root`), so a
//! library that exists only inside a container image or a private mount
//! namespace (a Kubernetes pod's NCCL, an Enroot/Pyxis job's squashfs, an
//! Apptainer image) is found, and keyed by file identity (device, inode), so
//! one image layer mapped by a hundred pods is one library.
//!
//! A scan is incremental: each process's `maps` is read when the process is
//! first seen, again at every scan while it is young (jobs load NCCL and the
//! CUDA driver in their first minutes, Python through `import torch`) when
//! it mapped something since (its virtual size changed), and then only every
//! [`LibScan::refresh_every`] scans; `/proc/PID/stat` (start time, virtual
//! size) is read every scan to tell a new process from an old pid.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// A file's identity: device and inode as `stat` gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
}

impl FileKey {
    /// The identity of the file at `path` (symlinks followed).
    pub fn of(path: &Path) -> Option<Self> {
        let m = fs::metadata(path).ok()?;
        m.is_file().then(|| Self {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

impl std::fmt::Display for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} inode {}",
            libc::major(self.dev),
            libc::minor(self.dev),
            self.ino
        )
    }
}

/// A family of libraries: given a path a process maps, the paths (as that
/// process sees them) of the family's libraries it implies.
#[derive(Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub candidates: fn(&str) -> Vec<String>,
}

/// One library of a family, as the last scan found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    /// The path inside the process's mount namespace.
    pub inner: PathBuf,
    /// A process that maps it (or whose mapped files imply it), the lowest.
    pub pid: u32,
    /// Processes that map it or imply it.
    pub pids: usize,
    /// The host's own path names the same file (not only inside a container).
    pub on_host: bool,
    /// For a file of an overlay mount (a container's image layers): the
    /// layer file it really is, through pid 1's root (what a uprobe attaches
    /// to: the kernel probes the real inode).
    pub real: Option<PathBuf>,
}

impl Mapped {
    /// A path the collector can open now: the host path where it is the
    /// same file, else through the process's root.
    pub fn path(&self, proc_root: &Path) -> PathBuf {
        if let Some(r) = &self.real {
            r.clone()
        } else if self.on_host {
            self.inner.clone()
        } else {
            through_root(proc_root, self.pid, &self.inner)
        }
    }
}

/// `/proc/PID/root/<inner>`.
pub fn through_root(proc_root: &Path, pid: u32, inner: &Path) -> PathBuf {
    let rel = inner.strip_prefix("/").unwrap_or(inner);
    proc_root.join(pid.to_string()).join("root").join(rel)
}

#[derive(Debug)]
struct Proc {
    /// Start time (clock ticks after boot, `/proc/PID/stat` field 22).
    start: u64,
    /// Virtual memory size at the last `maps` read (field 23): every
    /// `mmap`, `dlopen` included, changes it.
    vsize: u64,
    /// Scan number of the last `maps` read.
    read_at: u64,
    /// (family, file, path inside, the overlay layer file) of what it maps.
    libs: Vec<(usize, FileKey, PathBuf, Option<PathBuf>)>,
}

/// Processes tracked at most (pids beyond are not read; counted).
pub const MAX_PROCS: usize = 65_536;
/// Libraries one process contributes at most.
const MAX_PER_PROC: usize = 16;

/// The incremental scanner (state between scans).
pub struct LibScan {
    proc_root: PathBuf,
    families: Vec<Family>,
    procs: HashMap<u32, Proc>,
    scans: u64,
    /// Seconds after its start during which a process's maps are read at
    /// every scan.
    pub young_s: f64,
    /// Older processes' maps are read again every this many scans.
    pub refresh_every: u64,
    /// `maps` files read in all (cost accounting for the benchmark).
    pub maps_read: u64,
    /// Pids not tracked because of [`MAX_PROCS`].
    pub untracked: u64,
}

impl LibScan {
    pub fn new(proc_root: impl Into<PathBuf>, families: Vec<Family>) -> Self {
        Self {
            proc_root: proc_root.into(),
            families,
            procs: HashMap::new(),
            scans: 0,
            young_s: 600.0,
            refresh_every: 10,
            maps_read: 0,
            untracked: 0,
        }
    }

    pub fn proc_root(&self) -> &Path {
        &self.proc_root
    }

    /// Scans `/proc` (incrementally) and returns, per family (in the order
    /// given), every library some live process maps or implies.
    pub fn scan(&mut self) -> Vec<BTreeMap<FileKey, Mapped>> {
        self.scans += 1;
        let uptime_ticks = uptime_ticks(&self.proc_root);
        let young_ticks = (self.young_s * clock_ticks() as f64) as u64;
        let mut alive = BTreeSet::new();
        let Ok(rd) = fs::read_dir(&self.proc_root) else {
            return vec![BTreeMap::new(); self.families.len()];
        };
        let mut untracked = 0u64;
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Some((start, vsize)) = stat_of(&e.path()) else {
                continue;
            };
            if !self.procs.contains_key(&pid) && self.procs.len() >= MAX_PROCS {
                untracked += 1;
                continue;
            }
            alive.insert(pid);
            let young = uptime_ticks.is_some_and(|u| u.saturating_sub(start) < young_ticks);
            // A young process is read again when it mapped something
            // (its size changed); any process at the refresh.
            let due = match self.procs.get(&pid) {
                Some(p) if p.start == start => {
                    (young && p.vsize != vsize)
                        || self.scans.saturating_sub(p.read_at) >= self.refresh_every.max(1)
                }
                _ => true,
            };
            if due {
                let libs = self.read_proc(pid);
                self.maps_read += 1;
                self.procs.insert(
                    pid,
                    Proc {
                        start,
                        vsize,
                        read_at: self.scans,
                        libs,
                    },
                );
            }
        }
        self.untracked += untracked;
        if untracked > 0 {
            metrics::counter!(crate::metrics_catalog::LIBRARY_SCAN_UNTRACKED.name)
                .increment(untracked);
        }
        self.procs.retain(|pid, _| alive.contains(pid));
        self.collect()
    }

    /// What the tracked processes map, per family.
    fn collect(&self) -> Vec<BTreeMap<FileKey, Mapped>> {
        let mut out: Vec<BTreeMap<FileKey, Mapped>> = vec![BTreeMap::new(); self.families.len()];
        let mut pids: Vec<&u32> = self.procs.keys().collect();
        pids.sort();
        for pid in pids {
            for (fam, key, inner, real) in &self.procs[pid].libs {
                let m = out[*fam].entry(*key).or_insert_with(|| Mapped {
                    inner: inner.clone(),
                    pid: *pid,
                    pids: 0,
                    on_host: real.is_none() && FileKey::of(inner) == Some(*key),
                    real: real.clone(),
                });
                m.pids += 1;
            }
        }
        out
    }

    /// The family libraries process `pid` maps or implies, resolved in its root.
    fn read_proc(&self, pid: u32) -> Vec<(usize, FileKey, PathBuf, Option<PathBuf>)> {
        let dir = self.proc_root.join(pid.to_string());
        let Ok(maps) = fs::read_to_string(dir.join("maps")) else {
            return Vec::new();
        };
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut tried: BTreeSet<(usize, String)> = BTreeSet::new();
        let mut out = Vec::new();
        for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
            if !path.starts_with('/') || !seen.insert(path) {
                continue;
            }
            for (i, f) in self.families.iter().enumerate() {
                for c in (f.candidates)(path) {
                    if out.len() >= MAX_PER_PROC || !tried.insert((i, c.clone())) {
                        continue;
                    }
                    let inner = PathBuf::from(&c);
                    let via = through_root(&self.proc_root, pid, &inner);
                    let Some(seen) = FileKey::of(&via) else {
                        continue;
                    };
                    // An overlay reports its own device for every file: two
                    // containers of one image would look like two files.
                    // The layer file is the identity the kernel probes.
                    match overlay_real(&self.proc_root, pid, &via, &inner) {
                        Some((real, key)) => out.push((i, key, inner, Some(real))),
                        None => out.push((i, seen, inner, None)),
                    }
                }
            }
        }
        out
    }
}

/// `statfs` magic of overlayfs.
const OVERLAYFS_MAGIC: i64 = 0x794c_7630;

/// For `via` (process `pid`'s path `inner` through its root) on an overlay
/// mount: the layer file it is (the upper layer first, then the lower ones
/// in order, the first that has it), at the layer paths of the mount
/// options (the mounting runtime's, the host's: as the collector sees them,
/// else through pid 1's root), and that file's identity.
fn overlay_real(
    proc_root: &Path,
    pid: u32,
    via: &Path,
    inner: &Path,
) -> Option<(PathBuf, FileKey)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(via.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statfs is a valid out-parameter.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid statfs.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 || st.f_type as i64 != OVERLAYFS_MAGIC {
        return None;
    }
    let info = fs::read_to_string(proc_root.join(pid.to_string()).join("mountinfo")).ok()?;
    let (layers, rel) = overlay_layers(&info, inner)?;
    // The collector's own tree first (a host service), then the host's as
    // pid 1 sees it (a DaemonSet with the host's PID namespace).
    let host = proc_root.join("1/root");
    [Path::new("/"), host.as_path()].iter().find_map(|base| {
        layers.iter().find_map(|l| {
            let p = base.join(l.trim_start_matches('/')).join(&rel);
            FileKey::of(&p).map(|k| (p, k))
        })
    })
}

/// From a process's `mountinfo`: the layer directories (upper first) of the
/// overlay mount holding `inner` (the deepest mount point above it), and
/// `inner`'s path relative to those layers.
fn overlay_layers(mountinfo: &str, inner: &Path) -> Option<(Vec<String>, PathBuf)> {
    let mut best: Option<(usize, Vec<String>, PathBuf)> = None;
    for l in mountinfo.lines() {
        let Some((pre, post)) = l.split_once(" - ") else {
            continue;
        };
        let f: Vec<&str> = pre.split(' ').collect();
        let p: Vec<&str> = post.split(' ').collect();
        let (Some(root), Some(point), Some(&"overlay"), Some(opts)) =
            (f.get(3), f.get(4), p.first(), p.get(2))
        else {
            continue;
        };
        let point = unescape(point);
        let Ok(rest) = inner.strip_prefix(&point) else {
            continue;
        };
        let depth = Path::new(&point).components().count();
        if best.as_ref().is_some_and(|b| b.0 >= depth) {
            continue;
        }
        let mut upper = Vec::new();
        let mut lower = Vec::new();
        for o in split_unescaped(opts, ',') {
            if let Some(v) = o.strip_prefix("upperdir=") {
                upper.push(unescape(v));
            } else if let Some(v) = o.strip_prefix("lowerdir=") {
                lower.extend(split_unescaped(v, ':').iter().map(|x| unescape(x)));
            }
        }
        let rel = Path::new(unescape(root).trim_start_matches('/')).join(rest);
        upper.extend(lower);
        best = Some((depth, upper, rel));
    }
    best.map(|(_, l, r)| (l, r))
}

/// Splits at `sep` not preceded by a backslash (mountinfo escapes commas
/// and colons inside overlay layer paths so).
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut esc = false;
    for ch in s.chars() {
        if esc {
            cur.push(ch);
            esc = false;
        } else if ch == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            esc = ch == '\\';
            cur.push(ch);
        }
    }
    out.push(cur);
    out
}

/// mountinfo's octal escapes (`\040` for a space) and backslash escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let oct = b.get(i + 1..i + 4).and_then(|d| {
                std::str::from_utf8(d)
                    .ok()
                    .and_then(|d| u8::from_str_radix(d, 8).ok())
            });
            match (oct, b.get(i + 1)) {
                (Some(v), _) => {
                    out.push(v);
                    i += 4;
                    continue;
                }
                (None, Some(&c)) => {
                    out.push(c);
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Fields 22 (start time) and 23 (virtual memory size) of `DIR/stat`
/// (counted after the parenthesised command name).
fn stat_of(dir: &Path) -> Option<(u64, u64)> {
    let s = fs::read_to_string(dir.join("stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    // Field 3 is the first after ')'.
    let mut f = rest.split_whitespace().skip(19);
    let start = f.next()?.parse().ok()?;
    let vsize = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
    Some((start, vsize))
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|t| *t > 0).unwrap_or(100)
}

/// Seconds since boot in clock ticks (`PROC/uptime`).
fn uptime_ticks(proc_root: &Path) -> Option<u64> {
    let s = fs::read_to_string(proc_root.join("uptime")).ok()?;
    let secs: f64 = s.split_whitespace().next()?.parse().ok()?;
    Some((secs * clock_ticks() as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("faultline-proclibs-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn nccl(p: &str) -> Vec<String> {
        if p.rsplit('/')
            .next()
            .is_some_and(|f| f.starts_with("libnccl.so"))
        {
            vec![p.to_string()]
        } else {
            Vec::new()
        }
    }

    /// A process `pid` of a fake /proc whose root is `root`, mapping `files`.
    fn proc(d: &Path, pid: u32, start: u64, root: &Path, files: &[&str]) {
        let p = d.join("proc").join(pid.to_string());
        fs::create_dir_all(&p).unwrap();
        let maps: String = files
            .iter()
            .map(|f| format!("7f00-7f10 r-xp 00000000 08:01 1 {f}\n"))
            .collect();
        fs::write(p.join("maps"), maps).unwrap();
        fs::write(
            p.join("stat"),
            format!(
                "{pid} (py thon) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} {} 0\n",
                files.len() * 4096
            ),
        )
        .unwrap();
        let _ = fs::remove_file(p.join("root"));
        std::os::unix::fs::symlink(root, p.join("root")).unwrap();
    }

    #[test]
    fn a_library_only_inside_a_process_root_is_found_and_shared_layers_are_one() {
        let d = tmp("roots");
        fs::write(d.join("proc-uptime"), "").unwrap();
        fs::create_dir_all(d.join("proc")).unwrap();
        fs::write(d.join("proc/uptime"), "100000.0 1.0\n").unwrap();
        // Two containers of one image share one file (hard link: one inode);
        // a third has its own copy; the path exists in neither host tree.
        let img = d.join("img/opt/nccl/lib");
        fs::create_dir_all(&img).unwrap();
        fs::write(img.join("libnccl.so.2"), b"layer one").unwrap();
        let c2 = d.join("c2/opt/nccl/lib");
        fs::create_dir_all(&c2).unwrap();
        fs::hard_link(img.join("libnccl.so.2"), c2.join("libnccl.so.2")).unwrap();
        let c3 = d.join("c3/opt/nccl/lib");
        fs::create_dir_all(&c3).unwrap();
        fs::write(c3.join("libnccl.so.2"), b"a new layer").unwrap();
        proc(
            &d,
            10,
            1,
            &d.join("img"),
            &["/opt/nccl/lib/libnccl.so.2", "/usr/lib/libc.so.6"],
        );
        proc(&d, 11, 1, &d.join("c2"), &["/opt/nccl/lib/libnccl.so.2"]);
        proc(&d, 12, 1, &d.join("c3"), &["/opt/nccl/lib/libnccl.so.2"]);
        let mut s = LibScan::new(
            d.join("proc"),
            vec![Family {
                name: "nccl",
                candidates: nccl,
            }],
        );
        let got = s.scan().remove(0);
        assert_eq!(got.len(), 2, "{got:?}");
        let shared = &got[&FileKey::of(&img.join("libnccl.so.2")).unwrap()];
        assert_eq!((shared.pid, shared.pids, shared.on_host), (10, 2, false));
        assert_eq!(
            shared.path(&d.join("proc")),
            d.join("proc/10/root/opt/nccl/lib/libnccl.so.2")
        );
        assert_eq!(s.maps_read, 3);
        // Old processes are not read again until the refresh; a process that
        // exits takes its library with it.
        fs::remove_dir_all(d.join("proc/12")).unwrap();
        let got = s.scan().remove(0);
        assert_eq!(got.len(), 1);
        assert_eq!(s.maps_read, 3, "nothing re-read before the refresh");
        // A new process with a reused pid (another start time) is read.
        proc(&d, 11, 7, &d.join("c3"), &["/opt/nccl/lib/libnccl.so.2"]);
        let got = s.scan().remove(0);
        assert_eq!(s.maps_read, 4);
        assert_eq!(got.len(), 2);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn young_processes_are_read_when_they_map_more_and_old_ones_at_the_refresh() {
        let d = tmp("young");
        fs::create_dir_all(d.join("proc")).unwrap();
        fs::write(d.join("proc/uptime"), "1000.0 1.0\n").unwrap();
        let root = d.join("r");
        fs::create_dir_all(root.join("lib")).unwrap();
        // Started 1 s before "now": young; the other started at boot.
        let hz = clock_ticks();
        proc(&d, 20, 999 * hz, &root, &["/usr/bin/python3"]);
        proc(&d, 21, 1, &root, &["/usr/bin/sleep"]);
        let mut s = LibScan::new(
            d.join("proc"),
            vec![Family {
                name: "nccl",
                candidates: nccl,
            }],
        );
        s.refresh_every = 3;
        assert!(s.scan()[0].is_empty());
        // The young process loads NCCL later (dlopen): seen at the next scan.
        fs::write(root.join("lib/libnccl.so.2"), b"x").unwrap();
        proc(
            &d,
            20,
            999 * hz,
            &root,
            &["/usr/bin/python3", "/lib/libnccl.so.2"],
        );
        proc(&d, 21, 1, &root, &["/usr/bin/sleep", "/lib/libnccl.so.2"]);
        let got = s.scan().remove(0);
        assert_eq!(got.values().next().map(|m| m.pids), Some(1), "{got:?}");
        assert_eq!(s.maps_read, 3);
        s.scan();
        assert_eq!(
            s.maps_read, 3,
            "a young process that mapped nothing new is not read"
        );
        let got = s.scan().remove(0);
        assert_eq!(
            got.values().next().map(|m| m.pids),
            Some(2),
            "old one at the refresh"
        );
        assert_eq!(s.maps_read, 4);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn overlay_layers_come_upper_first_relative_to_the_mount() {
        let info = "78 52 0:41 / / rw - overlay overlay rw,lowerdir=/s/l/A:/s/l/B,upperdir=/s/c1/diff,workdir=/s/c1/work\n\
                    85 78 254:0 /x /etc/hosts rw - ext4 /dev/vda rw\n\
                    90 78 0:50 /sub /opt/odd\\040dir rw - overlay overlay lowerdir=/t/a\\:b,upperdir=/t/u\n";
        let (l, rel) = overlay_layers(info, Path::new("/opt/nccl/lib/libnccl.so.2")).unwrap();
        assert_eq!(l, ["/s/c1/diff", "/s/l/A", "/s/l/B"]);
        assert_eq!(rel, PathBuf::from("opt/nccl/lib/libnccl.so.2"));
        let (l, rel) = overlay_layers(info, Path::new("/opt/odd dir/x.so")).unwrap();
        assert_eq!(l, ["/t/u", "/t/a\\:b"].map(unescape));
        assert_eq!(rel, PathBuf::from("sub/x.so"));
    }
}
