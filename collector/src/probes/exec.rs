//! Draining `sched_process_exec` events from their ring buffer.
use std::io;

use aya::maps::{MapData, RingBuf};
use collector_common::{
    exec::{ExecEvent, COMM_LEN},
    EventKind,
};
use tokio::io::unix::AsyncFd;

/// One exec as seen by the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecRecord {
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub old_pid: u32,
    pub cgroup_id: u64,
    pub comm: String,
    pub filename: String,
    /// The kernel's filename was longer than what the probe kept.
    pub filename_truncated: bool,
}

impl ExecRecord {
    /// Decodes one ring item; `None` for a short or mistagged record.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < size_of::<ExecEvent>() {
            return None;
        }
        // SAFETY: length checked; ExecEvent is plain old data; unaligned read.
        let ev: ExecEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        if EventKind::try_from(ev.header.kind) != Ok(EventKind::Exec) {
            return None;
        }
        let filename = cstr(&ev.data.filename);
        let kept = filename.len();
        Some(Self {
            ts_ns: ev.header.ts_ns,
            pid: ev.header.pid,
            tid: ev.header.tid,
            old_pid: ev.data.old_pid,
            cgroup_id: ev.header.cgroup_id,
            comm: cstr(&ev.data.comm[..COMM_LEN]),
            filename,
            // filename_len counts the trailing NUL.
            filename_truncated: (ev.data.filename_len as usize).saturating_sub(1) > kept,
        })
    }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The exec ring, registered with tokio: readiness comes from epoll on the
/// ring's fd, so draining never busy-polls.
pub struct ExecRing {
    fd: AsyncFd<RingBuf<MapData>>,
    malformed: u64,
}

impl ExecRing {
    pub(super) fn new(fd: AsyncFd<RingBuf<MapData>>) -> Self {
        Self { fd, malformed: 0 }
    }

    /// Waits until at least one event is available, then appends everything
    /// in the ring to `out`.
    pub async fn recv_batch(&mut self, out: &mut Vec<ExecRecord>) -> io::Result<()> {
        loop {
            let mut guard = self.fd.readable_mut().await?;
            // Clear first, then drain: an event committed after the drain
            // re-arms readiness instead of being missed.
            guard.clear_ready();
            let ring = guard.get_inner_mut();
            let before = out.len();
            while let Some(item) = ring.next() {
                match ExecRecord::parse(&item) {
                    Some(r) => out.push(r),
                    None => {
                        self.malformed += 1;
                        metrics::counter!("faultline_ring_malformed_total", "ring" => "exec")
                            .increment(1);
                    }
                }
            }
            let n = out.len() - before;
            if n > 0 {
                metrics::counter!("faultline_probe_events_total", "probe" => "exec")
                    .increment(n as u64);
                return Ok(());
            }
        }
    }

    /// Ring items that could not be decoded.
    pub fn malformed(&self) -> u64 {
        self.malformed
    }
}
