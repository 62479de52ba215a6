//! `sched:sched_process_exec` events: the first end-to-end probe, and the
//! signal the collector uses to refresh its per-process identity cache.

/// Bytes of the exec'd filename kept (NUL-terminated, truncated).
pub const FILENAME_LEN: usize = 128;
/// Bytes of `comm` kept (the kernel's TASK_COMM_LEN).
pub const COMM_LEN: usize = 16;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExecData {
    /// Pid before exec (differs from the header pid only when a non-leader thread exec'd).
    pub old_pid: u32,
    /// Length of the filename as the kernel stored it (before truncation).
    pub filename_len: u32,
    pub comm: [u8; COMM_LEN],
    pub filename: [u8; FILENAME_LEN],
}
const _: () = assert!(core::mem::size_of::<ExecData>() == 8 + COMM_LEN + FILENAME_LEN);

pub type ExecEvent = crate::Event<ExecData>;
const _: () = assert!(core::mem::size_of::<ExecEvent>() == 32 + 152);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, `#[repr(C)]`, no padding (asserted above), any bit pattern valid.
    unsafe impl aya::Pod for super::ExecData {}
}
