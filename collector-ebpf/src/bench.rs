//! The benchmarks' programs (object `faultline-bench-probes`, never loaded by
//! the collector itself): the synthetic producer for the ring-buffer drain
//! benchmark, an empty uprobe for the uprobe baseline, and empty programs on
//! the block tracepoints for the block baseline.
//!
//! tracepoint `syscalls:sys_enter_getppid`: when the calling process is the
//! benchmark's (`BENCH_TGID`), writes `BENCH_BATCH` 32-byte records into
//! `BENCH_RING`; a full ring is counted in `STATS[BENCH_RING_FULL]`.
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, map, tracepoint, uprobe},
    maps::RingBuf,
    programs::{BtfTracePointContext, ProbeContext, TracePointContext},
    Global,
};
use collector_common::stat;

use crate::{
    helpers::now_ns,
    stats::{bump, bump_by},
};

// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BENCH_TGID: Global<u32> = Global::new(0);

/// Records per getppid() call.
const BENCH_BATCH: u64 = 64;

#[map(name = "BENCH_RING")]
static BENCH_RING: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

#[tracepoint(category = "syscalls", name = "sys_enter_getppid")]
pub fn bench_ring_producer(_ctx: TracePointContext) -> u32 {
    if (bpf_get_current_pid_tgid() >> 32) as u32 != BENCH_TGID.load() {
        return 0;
    }
    let now = now_ns();
    let mut written = 0u64;
    for i in 0..BENCH_BATCH {
        match BENCH_RING.reserve::<[u64; 4]>(0) {
            Some(mut e) => {
                e.write([now, i, 0, 0]);
                e.submit(0);
                written += 1;
            }
            None => bump(stat::BENCH_RING_FULL),
        }
    }
    bump_by(stat::BENCH_EVENTS, written);
    0
}

/// uprobe that does nothing: the baseline of the uprobe benchmark (the cost
/// of the trap itself, without faultline's work).
#[uprobe]
pub fn bench_empty_uprobe(_ctx: ProbeContext) -> u32 {
    0
}

/// Empty BTF-enabled raw tracepoint programs on the two block tracepoints
/// faultline's BTF path uses per request (mode IO): the block benchmark's
/// "empty" row, what any program there costs before it does anything (the
/// tracepoint's call into BPF, once per request at each of the two).
#[btf_tracepoint(function = "block_io_start")]
pub fn bench_empty_io_start(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// See [`bench_empty_io_start`].
#[btf_tracepoint(function = "block_rq_complete")]
pub fn bench_empty_rq_complete(_ctx: BtfTracePointContext) -> i32 {
    0
}
