//! The kernel log's record format, as `/dev/kmsg` gives it
//! (`Documentation/ABI/testing/dev-kmsg`): one record per read(2),
//!
//! ```text
//! PRIO,SEQ,TS_USEC,FLAGS[,...];message\n
//!  KEY=VALUE\n            (continuation lines: the record's dictionary)
//! ```
//!
//! `PRIO` is `facility << 3 | level`; `SEQ` the record's 64-bit sequence
//! number (a gap: records overwritten before they were read); `TS_USEC` the
//! kernel's monotonic clock at the record, in microseconds. A read that
//! finds its record overwritten fails with `EPIPE` and the next read goes on
//! from the oldest record left (node_exporter's and gpud's readers do the
//! same). Files and FIFOs in the same format (tests, replays) are read line
//! by line: a header line is one record, continuation lines are skipped.
use std::{
    fs::File,
    io::{self, Read},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

/// The kernel's facility (`LOG_KERN`): the only records the driver writes.
/// A line written into `/dev/kmsg` from user space gets `LOG_USER` (1) or
/// whatever facility its writer names, never 0.
pub const FACILITY_KERN: u32 = 0;

/// The largest record `/dev/kmsg` hands out (`CONSOLE_EXT_LOG_MAX`): a
/// read with a smaller buffer fails with `EINVAL`.
pub const READ_BUF: usize = 8192;

/// One record of the kernel log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub facility: u32,
    pub level: u32,
    pub seq: u64,
    /// The kernel's monotonic clock at the record (µs since boot).
    pub ts_usec: u64,
    pub message: String,
}

/// Why a header line is not a record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("no ';' between the record's prefix and its message")]
    NoMessage,
    #[error("the record's prefix has fewer than 3 fields (PRIO,SEQ,TS_USEC)")]
    ShortPrefix,
    #[error("the record's {0} is not a number")]
    NotANumber(&'static str),
}

impl Record {
    /// Parses one header line (without its trailing newline). The message
    /// keeps the kernel's escaping (`\xNN` for non-printable bytes).
    pub fn parse(line: &str) -> Result<Self, RecordError> {
        let (prefix, message) = line.split_once(';').ok_or(RecordError::NoMessage)?;
        let mut f = prefix.split(',');
        let mut num = |what: &'static str| -> Result<u64, RecordError> {
            f.next()
                .ok_or(RecordError::ShortPrefix)?
                .trim()
                .parse()
                .map_err(|_| RecordError::NotANumber(what))
        };
        let prio = num("PRIO")?;
        let seq = num("SEQ")?;
        let ts_usec = num("TS_USEC")?;
        let prio = u32::try_from(prio).map_err(|_| RecordError::NotANumber("PRIO"))?;
        Ok(Self {
            facility: prio >> 3,
            level: prio & 7,
            seq,
            ts_usec,
            message: message.to_string(),
        })
    }

    /// Written by the kernel itself (a driver's report), not from user
    /// space through `/dev/kmsg`.
    pub fn is_kernel(&self) -> bool {
        self.facility == FACILITY_KERN
    }
}

/// What one [`KmsgReader::next_line`] call found.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A header line (one record).
    Line(String),
    /// Records were overwritten before they were read (`EPIPE`); reading
    /// goes on from the oldest one left.
    Overwritten,
    /// A line longer than the bound, skipped (its length).
    TooLong(usize),
    /// Nothing more for now (`EAGAIN`, or the end of a file).
    Empty,
}

/// Reads `/dev/kmsg` (or a file or FIFO in its format) without blocking.
pub struct KmsgReader {
    file: File,
    /// Bytes read and not yet split into lines (files and FIFOs only: a
    /// read of `/dev/kmsg` is one whole record).
    pending: Vec<u8>,
    /// Skipping the rest of an over-long line up to its newline.
    skipping: Option<usize>,
    max_line: usize,
    buf: Box<[u8; READ_BUF]>,
}

impl KmsgReader {
    /// Opens `path` read-only and non-blocking. `to_end`: skip what is in
    /// the buffer now (`lseek(SEEK_END)`: `/dev/kmsg` then reads only new
    /// records; a file, only what is appended).
    pub fn open(path: &Path, max_line: usize, to_end: bool) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        if to_end {
            // SAFETY: a valid open descriptor; lseek has no memory effects.
            // A FIFO cannot seek (ESPIPE): it has no past to skip.
            let _ =
                unsafe { libc::lseek(std::os::fd::AsRawFd::as_raw_fd(&file), 0, libc::SEEK_END) };
        }
        Ok(Self {
            file,
            pending: Vec::new(),
            skipping: None,
            max_line: max_line.max(64),
            buf: Box::new([0; READ_BUF]),
        })
    }

    /// The next header line, skipping continuation lines.
    pub fn next_line(&mut self) -> io::Result<Next> {
        loop {
            if let Some(n) = self.take_line() {
                return Ok(n);
            }
            match self.file.read(&mut self.buf[..]) {
                Ok(0) => return Ok(Next::Empty),
                Ok(n) => self.pending.extend_from_slice(&self.buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Next::Empty),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => return Ok(Next::Overwritten),
                Err(e) => return Err(e),
            }
        }
    }

    /// One complete line out of `pending`, or `None` when it holds none.
    fn take_line(&mut self) -> Option<Next> {
        loop {
            let Some(nl) = self.pending.iter().position(|&b| b == b'\n') else {
                if self.pending.len() > self.max_line {
                    // Drop what is held; the rest of the line is skipped.
                    let n = self.pending.len();
                    self.pending.clear();
                    self.skipping = Some(self.skipping.unwrap_or(0) + n);
                }
                return None;
            };
            let line: Vec<u8> = self.pending.drain(..=nl).collect();
            if let Some(skipped) = self.skipping.take() {
                return Some(Next::TooLong(skipped + line.len()));
            }
            if line.first() == Some(&b' ') {
                continue; // a continuation line (KEY=VALUE)
            }
            if line.len() > self.max_line + 1 {
                return Some(Next::TooLong(line.len()));
            }
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            return Some(Next::Line(text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_and_user_spaces_records() {
        let r = Record::parse("3,1204,8812345678,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x")
            .expect("record");
        assert_eq!(
            (r.facility, r.level, r.seq, r.ts_usec),
            (0, 3, 1204, 8812345678)
        );
        assert!(r.is_kernel());
        assert!(r.message.starts_with("NVRM: Xid"));
        // `echo '<3>...' > /dev/kmsg`: the kernel gives it LOG_USER (8 | 3).
        let u = Record::parse("11,1205,8812345999,-;NVRM: Xid (PCI:0000:3b:00): 79").expect("user");
        assert_eq!((u.facility, u.level), (1, 3));
        assert!(!u.is_kernel());
        // Newer kernels add fields after FLAGS (the caller id).
        let c = Record::parse("6,7,10,c,caller=T1;hello").expect("caller");
        assert_eq!(c.message, "hello");
        assert_eq!(Record::parse("no prefix"), Err(RecordError::NoMessage));
        assert_eq!(
            Record::parse("3,x,1,-;m"),
            Err(RecordError::NotANumber("SEQ"))
        );
        assert_eq!(Record::parse("3,1;m"), Err(RecordError::ShortPrefix));
    }

    #[test]
    fn a_file_reads_line_by_line_skipping_dictionaries_and_long_lines() {
        let dir = std::env::temp_dir().join(format!("faultline-kmsg-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("kmsg");
        let long = "x".repeat(300);
        std::fs::write(
            &p,
            format!("3,1,5,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n3,2,6,-;{long}\n3,3,7,-;third\n"),
        )
        .expect("write");
        let mut r = KmsgReader::open(&p, 128, false).expect("open");
        assert_eq!(
            r.next_line().expect("1"),
            Next::Line("3,1,5,-;first".into())
        );
        assert!(matches!(r.next_line().expect("2"), Next::TooLong(n) if n > 300));
        assert_eq!(
            r.next_line().expect("3"),
            Next::Line("3,3,7,-;third".into())
        );
        assert_eq!(r.next_line().expect("4"), Next::Empty);
        let mut end = KmsgReader::open(&p, 128, true).expect("open at the end");
        assert_eq!(end.next_line().expect("end"), Next::Empty);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
