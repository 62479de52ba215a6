//! Draining `sched_process_exec` events from their ring buffer.
use collector_common::{
    exec::{ExecEvent, COMM_LEN},
    EventKind,
};

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

impl crate::probes::ring::Decode for ExecRecord {
    const RING: &'static str = "EXEC_EVENTS";
    const LABEL: &'static str = "exec";
    fn decode(bytes: &[u8]) -> Option<Self> {
        Self::parse(bytes)
    }
}

/// The exec event ring.
pub type ExecRing = crate::probes::ring::EventRing<ExecRecord>;

impl crate::probes::Probes {
    /// Takes the exec event ring (once).
    pub fn take_exec_ring(&mut self) -> Result<ExecRing, crate::probes::ProbeError> {
        self.take_ring()
    }
}
