//! The kernel log as a signal source: `/dev/kmsg`'s records ([`record`]),
//! the NVIDIA driver's reports among them ([`nvrm`]), and [`KmsgLog`], which
//! reads them each window, bounded and resumable across restarts. The
//! source that turns them into events is `kmsg::source`; `docs/kmsg.md`
//! describes the whole path.
pub mod nvrm;
pub mod record;
pub mod section;
#[cfg(agent)]
pub mod source;
mod state;

use std::io;

use proto::metric::Family;

use self::{
    nvrm::Report,
    record::{KmsgReader, Next, Record},
};
pub use self::{section::KmsgSection, state::Resume};

/// A driver report read this window, with the record's time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub report: Report,
    /// The record's time on the kernel's monotonic clock (µs since boot).
    pub ts_usec: u64,
}

/// What one window's reading counted (also exported as metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub records: u64,
    /// Records overwritten before they were read (sequence gaps).
    pub lost: u64,
    /// Driver-like reports from user space (facility not 0), ignored.
    pub untrusted: u64,
    pub too_long: u64,
    pub malformed: u64,
    /// Records at or below the saved position of this boot, skipped.
    pub replayed: u64,
    /// The window's bound was reached: the rest waits.
    pub full: bool,
}

/// The kernel log, read window by window.
pub struct KmsgLog {
    reader: KmsgReader,
    resume: Resume,
    max_records: usize,
}

impl KmsgLog {
    /// Opens the log at the position [`Resume`] gives for this boot.
    pub fn open(cfg: &KmsgSection, boot_id: String) -> io::Result<Self> {
        let resume = Resume::load(&cfg.state_file, boot_id);
        let to_end = resume.start_at_end(cfg.first_start == "end");
        let reader = KmsgReader::open(&cfg.path, cfg.max_line_bytes, to_end)?;
        Ok(Self {
            reader,
            resume,
            max_records: cfg.max_records,
        })
    }

    /// Up to `max_records` new records; the driver's reports among them.
    pub fn read(&mut self, out: &mut Vec<Read>) -> io::Result<Counts> {
        let mut c = Counts::default();
        while c.records < self.max_records as u64 {
            let line = match self.reader.next_line()? {
                Next::Line(l) => l,
                Next::Overwritten => continue, // counted from the sequence gap
                Next::TooLong(_) => {
                    c.too_long += 1;
                    continue;
                }
                Next::Empty => break,
            };
            c.records += 1;
            let Ok(rec) = Record::parse(&line) else {
                c.malformed += 1;
                continue;
            };
            match self.resume.advance(rec.seq) {
                state::Step::Old => {
                    c.replayed += 1;
                    continue;
                }
                state::Step::New { lost } => c.lost += lost,
            }
            let Some(report) = nvrm::parse(&rec.message) else {
                continue;
            };
            if !rec.is_kernel() {
                c.untrusted += 1;
                continue;
            }
            out.push(Read {
                report,
                ts_usec: rec.ts_usec,
            });
        }
        c.full = c.records >= self.max_records as u64;
        self.resume.save();
        Ok(c)
    }
}

/// This boot's id (`proc_root/sys/kernel/random/boot_id`); empty when
/// unreadable (then a saved position never matches: read from the start).
pub fn boot_id(proc_root: &std::path::Path) -> String {
    crate::bounded_read::read_to_string(&proc_root.join("sys/kernel/random/boot_id"), 128)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The kernel's monotonic clock now, µs (the clock of `TS_USEC`).
pub fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000)
        .saturating_add(ts.tv_nsec as u64 / 1000)
}

pub const KMSG_RECORDS: Family = Family::counter(
    "faultline_kmsg_records_total",
    &[],
    "Kernel log records read",
);
pub const KMSG_LOST: Family = Family::counter(
    "faultline_kmsg_lost_total",
    &[],
    "Kernel log records overwritten before the collector read them (sequence gaps)",
);
pub const KMSG_DROPPED: Family = Family::counter(
    "faultline_kmsg_dropped_total",
    &["reason"],
    "Kernel log records or reports not turned into events, by reason (untrusted: a driver-like line written from user space; too_long; malformed; events: past kmsg.max_events in a window)",
);
pub const KMSG_REPORTS: Family = Family::counter(
    "faultline_kmsg_reports_total",
    &["kind"],
    "NVIDIA driver reports read from the kernel log, by kind (xid, sxid)",
);
pub const KMSG_FOLDED: Family = Family::counter(
    "faultline_kmsg_folded_total",
    &[],
    "Driver reports folded into an earlier event of the same GPU or switch and code (a burst)",
);
pub const KMSG_JOINED: Family = Family::counter(
    "faultline_kmsg_joined_total",
    &[],
    "XIDs NVML and the kernel log both reported, sent as one event (source nvml+kmsg)",
);
pub const KMSG_UNPLACED: Family = Family::counter(
    "faultline_kmsg_unplaced_total",
    &[],
    "XIDs from the kernel log whose PCI address names no GPU NVML knows: reported against the node",
);
pub const KMSG_WINDOW_FULL: Family = Family::counter(
    "faultline_kmsg_window_full_total",
    &[],
    "Windows that read kmsg.max_records records: the rest waited for the next window",
);

/// The kernel log's families, for `crate::agent::describe::all`.
pub const FAMILIES: &[&Family] = &[
    &KMSG_RECORDS,
    &KMSG_LOST,
    &KMSG_DROPPED,
    &KMSG_REPORTS,
    &KMSG_FOLDED,
    &KMSG_JOINED,
    &KMSG_UNPLACED,
    &KMSG_WINDOW_FULL,
];

/// HELP of the kernel log's families.
pub fn describe() {
    proto::metric::describe_all(FAMILIES);
}
