//! Helpers shared by faultline's workspace-level integration tests.
//!
//! Tests that need root and a BPF-capable kernel call [`require_bpf`] first:
//! locally a missing capability skips the test with the reason printed; in CI
//! (`CI=true`) it fails the test instead, so CI can never go green by skipping.
use std::{
    fs, io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Mutex, MutexGuard},
};

pub mod dcgm_exporter;
pub mod stream;

static KERNEL: Mutex<()> = Mutex::new(());

/// Serialises tests that attach probes or touch shared kernel state
/// (loop devices, tracefs) within one test binary.
pub fn kernel_lock() -> MutexGuard<'static, ()> {
    KERNEL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether this run is CI (`CI` set to something other than empty, 0 or
/// false): there, a missing prerequisite fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// What is missing for eBPF tests on this host, if anything.
pub fn bpf_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root (eBPF load/attach needs CAP_BPF+CAP_PERFMON)".into());
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
    }
    None
}

/// Returns `true` when the test may proceed. Locally prints a skip reason and
/// returns `false` when BPF is unavailable; under `CI=true` panics instead.
pub fn require_bpf(test: &str) -> bool {
    match bpf_missing() {
        None => true,
        Some(why) if in_ci() => panic!("{test}: CI=true but {why}"),
        Some(why) => {
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// cgroup v2 id of this process: the inode number of its cgroup directory,
/// which is what `bpf_get_current_cgroup_id()` returns.
pub fn own_cgroup_id() -> io::Result<u64> {
    let text = fs::read_to_string("/proc/self/cgroup")?;
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("no cgroup v2 entry in /proc/self/cgroup"))?;
    let dir = PathBuf::from("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    Ok(fs::metadata(dir)?.ino())
}

/// A multi-threaded tokio runtime for tests that hold [`kernel_lock`] (a std
/// mutex must not be held across `.await`, so the lock lives outside it).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A loop device backed by a temporary file; detached and the file removed on
/// drop, including when the test panics.
pub struct LoopDevice {
    pub path: PathBuf,
    pub name: String,
    backing: PathBuf,
}

impl LoopDevice {
    /// Creates a `size`-byte sparse backing file in the temp dir and attaches
    /// it with `losetup`.
    pub fn new(size: u64) -> io::Result<Self> {
        Self::new_in(&std::env::temp_dir(), size)
    }

    /// As [`LoopDevice::new`], with the backing file in `dir`.
    pub fn new_in(dir: &std::path::Path, size: u64) -> io::Result<Self> {
        let backing = dir.join(format!(
            "faultline-loop-{}-{}.img",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        fs::File::create(&backing)?.set_len(size)?;
        let out = std::process::Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()?;
        if !out.status.success() {
            let _ = fs::remove_file(&backing);
            return Err(io::Error::other(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        let name = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .ok_or_else(|| io::Error::other("losetup printed no device"))?;
        Ok(Self {
            path,
            name,
            backing,
        })
    }

    /// `major:minor` of the device as in `/sys/block/<name>/dev`.
    pub fn major_minor(&self) -> io::Result<(u32, u32)> {
        let s = fs::read_to_string(format!("/sys/block/{}/dev", self.name))?;
        let (a, b) = s
            .trim()
            .split_once(':')
            .ok_or_else(|| io::Error::other("bad dev file"))?;
        Ok((
            a.parse().map_err(io::Error::other)?,
            b.parse().map_err(io::Error::other)?,
        ))
    }

    /// Turns the kernel's I/O statistics for the device on or off
    /// (`queue/iostats`). The setting outlives a detach (loop devices are
    /// reused), so a test that turns it off turns it back on.
    pub fn set_iostats(&self, on: bool) -> io::Result<()> {
        fs::write(
            format!("/sys/block/{}/queue/iostats", self.name),
            if on { "1" } else { "0" },
        )
    }

    /// The kernel's own accounting, `/sys/block/<name>/stat`.
    pub fn stat(&self) -> io::Result<DiskStat> {
        let s = fs::read_to_string(format!("/sys/block/{}/stat", self.name))?;
        DiskStat::parse(&s).ok_or_else(|| io::Error::other(format!("unparsable stat: {s}")))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup")
            .arg("-d")
            .arg(&self.path)
            .status();
        let _ = fs::remove_file(&self.backing);
    }
}

/// Fields of `/sys/block/<dev>/stat` (Documentation/block/stat.rst).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStat {
    pub read_ios: u64,
    pub read_sectors: u64,
    /// Time spent on reads, ms: the sum of (done − the request's
    /// `start_time_ns`) in ns, divided down when shown.
    pub read_ms: u64,
    pub write_ios: u64,
    pub write_sectors: u64,
    pub write_ms: u64,
    pub in_flight: u64,
    pub discard_ios: u64,
    pub discard_sectors: u64,
    pub flush_ios: u64,
}

impl DiskStat {
    pub fn parse(s: &str) -> Option<Self> {
        let v: Vec<u64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if v.len() < 17 {
            return None;
        }
        Some(Self {
            read_ios: v[0],
            read_sectors: v[2],
            read_ms: v[3],
            write_ios: v[4],
            write_sectors: v[6],
            write_ms: v[7],
            in_flight: v[8],
            discard_ios: v[11],
            discard_sectors: v[13],
            flush_ios: v[15],
        })
    }

    pub fn since(&self, before: &Self) -> Self {
        Self {
            read_ios: self.read_ios - before.read_ios,
            read_sectors: self.read_sectors - before.read_sectors,
            read_ms: self.read_ms - before.read_ms,
            write_ios: self.write_ios - before.write_ios,
            write_sectors: self.write_sectors - before.write_sectors,
            write_ms: self.write_ms - before.write_ms,
            in_flight: self.in_flight,
            discard_ios: self.discard_ios - before.discard_ios,
            discard_sectors: self.discard_sectors - before.discard_sectors,
            flush_ios: self.flush_ios - before.flush_ios,
        }
    }
}

/// A 4 KiB-aligned buffer for O_DIRECT I/O.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize, fill: u8) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "allocation failed");
        // SAFETY: freshly allocated, len bytes.
        unsafe { std::ptr::write_bytes(ptr, fill, len) };
        Self { ptr, len }
    }
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::from_size_align(self.len, 4096).expect("layout");
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// The workload's own tally of what it asked the device to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Issued {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub discard_bytes: u64,
}

/// Direct I/O on a block device: `writes` writes of `wsize` bytes at distinct
/// non-adjacent offsets, `reads` reads of `rsize`, an `fsync` after every
/// `flush_every` writes, and `discards` discards of 1 MiB. Synchronous, so
/// nothing of it is in flight when it returns.
pub fn direct_io_workload(
    dev: &std::path::Path,
    writes: u64,
    wsize: usize,
    reads: u64,
    rsize: usize,
    flush_every: u64,
    discards: u64,
) -> io::Result<Issued> {
    use std::os::unix::{ffi::OsStrExt, fs::OpenOptionsExt};
    let _ = dev.as_os_str().as_bytes();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)?;
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let mut issued = Issued::default();
    let wbuf = AlignedBuf::new(wsize, 0x5a);
    let rbuf = AlignedBuf::new(rsize, 0);
    // Stride of 2 × size keeps requests non-adjacent, so none can merge.
    for i in 0..writes {
        let off = (i * 2 * wsize as u64) as libc::off_t;
        // SAFETY: valid fd, aligned buffer of wsize bytes.
        let n = unsafe { libc::pwrite(fd, wbuf.as_ptr().cast(), wbuf.len(), off) };
        if n != wsize as isize {
            return Err(io::Error::last_os_error());
        }
        issued.writes += 1;
        issued.write_bytes += wsize as u64;
        if flush_every > 0 && (i + 1) % flush_every == 0 {
            f.sync_all()?;
            issued.flushes += 1;
        }
    }
    for i in 0..reads {
        let off = (i * 2 * rsize as u64) as libc::off_t;
        // SAFETY: valid fd, aligned buffer of rsize bytes.
        let n = unsafe { libc::pread(fd, rbuf.as_ptr().cast(), rbuf.len(), off) };
        if n != rsize as isize {
            return Err(io::Error::last_os_error());
        }
        issued.reads += 1;
        issued.read_bytes += rsize as u64;
    }
    const BLKDISCARD: libc::c_ulong = 0x1277;
    for i in 0..discards {
        let range: [u64; 2] = [(8 + 2 * i) << 20, 1 << 20];
        // SAFETY: BLKDISCARD takes a pointer to two u64 (start, length).
        let rc = unsafe { libc::ioctl(fd, BLKDISCARD, range.as_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        issued.discards += 1;
        issued.discard_bytes += 1 << 20;
    }
    Ok(issued)
}

/// `n` synchronous `wsize`-byte O_DIRECT writes with `RWF_DSYNC` (each a
/// `REQ_FUA` write: on a device with a write-back cache and no FUA, as a
/// loop device is, the block layer sends its data and then a flush), at a
/// stride that keeps them from merging. Returns the bytes written.
pub fn dsync_writes(dev: &std::path::Path, n: u64, wsize: usize) -> io::Result<u64> {
    use std::os::{fd::AsRawFd, unix::fs::OpenOptionsExt};
    let f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)?;
    let buf = AlignedBuf::new(wsize, 0xa5);
    for i in 0..n {
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        let off = (i * 2 * wsize as u64) as libc::off_t;
        // SAFETY: valid fd; one iovec over an aligned buffer of wsize bytes.
        let w = unsafe { libc::pwritev2(f.as_raw_fd(), &iov, 1, off, libc::RWF_DSYNC) };
        if w != wsize as isize {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(n * wsize as u64)
}

/// Directory of the C stand-ins built by `tests/build.rs`.
pub const STANDINS_DIR: &str = env!("FAULTLINE_STANDINS_DIR");

/// The stand-in `libcuda.so.1` (ordinary function entries, like the real driver).
pub fn fake_libcuda() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("plain/libcuda.so.1")
}

/// The stand-in `libcuda.so.1` whose entries start with a single-stepped
/// register write (`mov %rdi,%rax`): no probe can be placed past it.
pub fn fake_libcuda_stepped() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("stepped/libcuda.so.1")
}

/// The stand-in `libcuda.so.1` whose entries start with a 5-byte nop.
pub fn fake_libcuda_nop5() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nop5/libcuda.so.1")
}

/// The stand-in `libcuda.so.1` built with CET (`-fcf-protection=full`) and
/// frame pointers: its functions start `endbr64; push %rbp`.
pub fn fake_libcuda_cet() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("cet/libcuda.so.1")
}

/// The `launch_storm` program (launch-heavy stand-in: threads × launches).
pub fn launch_storm() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("launch_storm")
}

/// The `cuda_workload` program.
pub fn cuda_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("cuda_workload")
}

/// The `cudart_workload` program (runs NVIDIA's real `libcudart.so.12`).
pub fn cudart_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("cudart_workload")
}

/// A fake sysfs tree with InfiniBand devices, for the collector's sysfs
/// reader: `root()` is what `--sysfs-root` takes (it holds `class/infiniband`).
/// Removed on drop.
pub struct FakeIb {
    root: PathBuf,
}

impl FakeIb {
    pub fn new(tag: &str) -> Self {
        let root = std::env::temp_dir().join(format!(
            "faultline-fake-ib-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        fs::create_dir_all(root.join("class/infiniband")).expect("create fake sysfs");
        Self { root }
    }

    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// The directory of a port, created with its `counters/` and `hw_counters/`.
    pub fn port_dir(&self, dev: &str, port: u32) -> PathBuf {
        let d = self
            .root
            .join(format!("class/infiniband/{dev}/ports/{port}"));
        fs::create_dir_all(d.join("counters")).expect("mkdir counters");
        fs::create_dir_all(d.join("hw_counters")).expect("mkdir hw_counters");
        d
    }

    /// Writes a healthy active 4X EDR InfiniBand port with zeroed counters.
    pub fn active_port(&self, dev: &str, port: u32) {
        let d = self.port_dir(dev, port);
        self.write(dev, port, "state", "4: ACTIVE");
        self.write(dev, port, "phys_state", "5: LinkUp");
        self.write(dev, port, "rate", "100 Gb/sec (4X EDR)");
        self.write(dev, port, "link_layer", "InfiniBand");
        self.write(dev, port, "lid", "0x1a");
        for c in [
            "port_xmit_data",
            "port_rcv_data",
            "port_xmit_packets",
            "port_rcv_packets",
            "symbol_error",
            "link_error_recovery",
            "link_downed",
            "port_rcv_errors",
            "port_xmit_discards",
            "local_link_integrity_errors",
            "excessive_buffer_overrun_errors",
            "VL15_dropped",
            "port_xmit_wait",
        ] {
            fs::write(d.join("counters").join(c), "0\n").expect("write counter");
        }
    }

    /// Writes `value` into `<port>/<file>` (e.g. `state`, `counters/symbol_error`).
    pub fn write(&self, dev: &str, port: u32, file: &str, value: &str) {
        let p = self.port_dir(dev, port).join(file);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("mkdir in fake sysfs");
        }
        fs::write(&p, format!("{value}\n")).expect("write fake sysfs file");
    }

    /// Writes `value` into the device's own `file` (`board_id`, `fw_ver`, `hca_type`).
    pub fn device_file(&self, dev: &str, file: &str, value: &str) {
        let p = self.root.join(format!("class/infiniband/{dev}/{file}"));
        fs::write(&p, format!("{value}\n")).expect("write fake sysfs file");
    }

    pub fn counter(&self, dev: &str, port: u32, name: &str, value: u64) {
        self.write(dev, port, &format!("counters/{name}"), &value.to_string());
    }

    pub fn hw_counter(&self, dev: &str, port: u32, name: &str, value: u64) {
        self.write(
            dev,
            port,
            &format!("hw_counters/{name}"),
            &value.to_string(),
        );
    }

    /// Port 1 of mlx5_0..mlx5_3 after `w` windows of 0.5 s of traffic
    /// (500 M words each), with `errors` symbol errors so far on mlx5_2.
    pub fn traffic(&self, w: u64, errors: u64) {
        let words = w * 500_000_000;
        for hca in 0..4 {
            let dev = format!("mlx5_{hca}");
            self.counter(&dev, 1, "port_rcv_data", words);
            self.counter(&dev, 1, "port_xmit_data", words);
        }
        if errors > 0 {
            self.counter("mlx5_2", 1, "symbol_error", errors);
        }
    }

    pub fn remove(&self, dev: &str, port: u32, file: &str) {
        let _ = fs::remove_file(self.port_dir(dev, port).join(file));
    }
}

impl Drop for FakeIb {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// The stand-in libibverbs + provider (`libfakeverbs.so.1`).
pub fn fake_verbs() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("libfakeverbs.so.1")
}

/// The `verbs_workload` program.
pub fn verbs_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("verbs_workload")
}

/// The stand-in `libnvidia-ml.so.1` (scenario from `FAKE_NVML_SCENARIO`).
pub fn fake_nvml() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nvml/libnvidia-ml.so.1")
}

/// The stand-in `libnccl.so.2` (NCCL's C ABI; ranks as processes).
pub fn fake_nccl() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl/libnccl.so.2")
}

/// The `nccl_workload` program (one NCCL rank).
pub fn nccl_workload() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl_workload")
}

/// The stand-in `libnccl.so.2` built with push-led entries, as NVIDIA's
/// (`push %rbp` first in every collective and group call).
pub fn fake_nccl_push() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl-push/libnccl.so.2")
}

/// The `nccl_storm` program (collective-heavy stand-in: threads ×
/// grouped all-reduces on `ncclCommInitAll` communicators).
pub fn nccl_storm() -> PathBuf {
    PathBuf::from(STANDINS_DIR).join("nccl_storm")
}

/// The cargo target directory these tests were built in.
pub fn target_dir() -> PathBuf {
    // STANDINS_DIR is <target>/<profile>/build/tests-<hash>/out/standins.
    PathBuf::from(STANDINS_DIR)
        .ancestors()
        .nth(5)
        .map(PathBuf::from)
        .expect("target dir above the stand-ins")
}

/// A file of NVIDIA's wheels that `scripts/setup.sh` installs into
/// `<target dir>/nvidia-venv` (`rel` under its `site-packages/nvidia/`, e.g.
/// `nccl/lib/libnccl.so.2`). Missing: `None` with a loud message, and a
/// panic under `CI=true` (CI must run these tests).
pub fn nvidia_wheel_file(rel: &str) -> Option<PathBuf> {
    let venv = std::env::var_os("FAULTLINE_NVIDIA_VENV")
        .map_or_else(|| target_dir().join("nvidia-venv"), PathBuf::from);
    let found = std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|py| py.path().join("site-packages/nvidia").join(rel))
        .find(|p| p.is_file());
    if found.is_some() {
        return found;
    }
    let msg = format!(
        "NVIDIA's {rel} is not in {}: run scripts/setup.sh (it installs nvidia-cuda-runtime-cu12, nvidia-nccl-cu12 and nvidia-ml-py there)",
        venv.display()
    );
    if in_ci() {
        panic!("{msg}");
    }
    eprintln!("\n!!!!!!!! SKIPPED: {msg} !!!!!!!!\n");
    None
}

/// A child process killed and reaped when dropped (also when a test panics).
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child's stdout lines, read on a thread, as a channel (a test waits on
/// them with a timeout instead of sleeping).
pub fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits for the collector's console line of window `n` or later (`window
/// N: …`); returns it.
pub fn wait_window(col: &std::sync::mpsc::Receiver<String>, n: u64) -> String {
    loop {
        let l = col
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("collector output");
        let k = l
            .strip_prefix("window ")
            .and_then(|r| r.split(':').next())
            .and_then(|k| k.parse::<u64>().ok());
        if k.is_some_and(|k| k >= n) {
            return l;
        }
    }
}

/// The JSON incident updates a `subscribe --json` printed so far.
pub fn updates(sub: &std::sync::mpsc::Receiver<String>) -> Vec<serde_json::Value> {
    sub.try_iter()
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// A JSON array of strings (an update's `evidence`, `affected_jobs`).
pub fn json_strs(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect()
}

/// `faultline-correlator subscribe --endpoint URL ARGS…` once the
/// correlator accepts it (retried for up to 20 s while it starts); stdout
/// piped.
pub fn subscriber(url: &str, args: &[&str]) -> std::process::Child {
    use std::io::BufRead as _;
    let start = std::time::Instant::now();
    loop {
        let mut s = Command::new(bin("faultline-correlator"))
            .args(["subscribe", "--endpoint", url])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("subscriber");
        let err = s.stderr.take().expect("stderr");
        let first = io::BufReader::new(err).lines().next();
        if matches!(&first, Some(Ok(l)) if l.starts_with("subscribed to")) {
            return s;
        }
        let _ = s.wait();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "correlator never accepted a subscriber"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A binary of the workspace from the target directory of this test run
/// (`cargo xtask test` builds them first).
pub fn bin(name: &str) -> PathBuf {
    std::env::current_exe()
        .expect("test executable path")
        .parent()
        .and_then(|p| p.parent())
        .expect("target directory")
        .join(name)
}

/// The collector reading only the sysfs tree at `sysfs` (probes and NVML
/// off), closing a window every `window` seconds and streaming it to
/// `correlator` through the spool `spool`; stdout piped, stderr discarded.
pub fn streaming_collector(window: &str, correlator: &str, spool: &Path, sysfs: &Path) -> Command {
    let mut c = Command::new(bin("faultline-collector"));
    c.args([
        "--window",
        window,
        "--duration",
        "60",
        "--quiet",
        "--no-cuda",
        "--no-verbs",
        "--no-nvml",
        "--no-block",
        "--no-otlp",
    ])
    .args(["--metrics-addr", "127.0.0.1:0", "--correlator", correlator])
    .arg("--spool-dir")
    .arg(spool)
    .arg("--sysfs-root")
    .arg(sysfs)
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    c
}
