//! Process exec events.
//!
//! tracepoint `sched:sched_process_exec`
//! (`TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)`;
//! fields `__data_loc char[] filename; pid_t pid; pid_t old_pid`).
//! Field offsets come from the tracepoint's `format` file, read by userspace
//! and written into the globals below before load.
use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_ktime_get_ns, bpf_probe_read_kernel_str_bytes,
    },
    macros::{map, tracepoint},
    maps::RingBuf,
    programs::TracePointContext,
    EbpfContext, Global,
};
use aya_log_ebpf::debug;
use collector_common::{
    exec::{ExecData, ExecEvent, FILENAME_LEN},
    stat, EventHeader, EventKind,
};

use crate::stats::bump;

// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static EXEC_OFF_FILENAME: Global<u32> = Global::new(8);
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static EXEC_OFF_OLD_PID: Global<u32> = Global::new(16);

/// Exec events for userspace (256 KiB: > 1,000 events of slack).
#[map(name = "EXEC_EVENTS")]
static EXEC_EVENTS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn sched_process_exec(ctx: TracePointContext) -> u32 {
    match try_exec(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

fn try_exec(ctx: &TracePointContext) -> Result<u32, u32> {
    let off_filename = EXEC_OFF_FILENAME.load() as usize;
    let off_old_pid = EXEC_OFF_OLD_PID.load() as usize;

    let Some(mut entry) = EXEC_EVENTS.reserve::<ExecEvent>(0) else {
        bump(stat::EXEC_RING_FULL);
        return Err(1);
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` points at a reserved, exclusively owned ring slot of the right size.
    unsafe {
        (*ev).header = EventHeader {
            ts_ns: bpf_ktime_get_ns(),
            cgroup_id: bpf_get_current_cgroup_id(),
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            kind: EventKind::Exec as u32,
            _pad: 0,
        };
        let data: &mut ExecData = &mut (*ev).data;
        data.old_pid = ctx.read_at::<u32>(off_old_pid).unwrap_or(0);
        data.comm = bpf_get_current_comm().unwrap_or([0; 16]);
        // __data_loc: low 16 bits offset from the record start, high 16 bits length.
        let loc = ctx.read_at::<u32>(off_filename).unwrap_or(0);
        let str_off = (loc & 0xffff) as usize;
        data.filename_len = loc >> 16;
        data.filename[0] = 0;
        let src = (ctx.as_ptr() as *const u8).add(str_off);
        let dst: &mut [u8; FILENAME_LEN] = &mut data.filename;
        if bpf_probe_read_kernel_str_bytes(src, dst).is_err() {
            data.filename[0] = 0;
        }
    }
    entry.submit(0);
    bump(stat::EXEC_EVENTS);
    debug!(ctx, "exec pid={}", (pid_tgid >> 32) as u32);
    Ok(0)
}
