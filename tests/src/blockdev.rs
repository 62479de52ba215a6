//! Block devices for the block-I/O probes' tests: loop devices, their
//! `/sys/block/<dev>/stat`, and direct I/O whose every request is known.
use std::{fs, io, path::PathBuf};

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
