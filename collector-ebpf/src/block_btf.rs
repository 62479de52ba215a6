//! Block-layer probes on BTF-enabled raw tracepoints (`tp_btf`), keyed by the
//! kernel's `struct request *`: the same attach points, counting rules and
//! aggregates as the classic programs in `block.rs`, without their costs.
//! A raw tracepoint hands the program the `TP_PROTO` arguments (no event
//! record is formatted, no `rwbs` string built), and with the request pointer
//! as the in-flight key a partial completion needs no re-keying.
//!
//! - `block_io_start(struct request *rq)`: start the clock in the submitter.
//! - `block_io_done(struct request *rq)`: count the request (where the kernel
//!   counts it in `/sys/block/<dev>/stat`).
//! - `block_rq_complete(struct request *rq, blk_status_t error, unsigned int
//!   nr_bytes)`: completed bytes (mode RQ: also the count).
//! - `block_rq_issue(struct request *rq)`: flushes (mode IO) or every request
//!   (mode RQ).
//!
//! Struct offsets (`request.q`, `request.cmd_flags`, `request.__sector`,
//! `request.__data_len`, `request_queue.disk`, `gendisk.major`,
//! `gendisk.first_minor`) come from the running kernel's BTF and are patched
//! into the globals below before load; fields are read with
//! `bpf_probe_read_kernel`.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::{btf_tracepoint, map},
    maps::{HashMap, PerCpuArray},
    programs::BtfTracePointContext,
    Global,
};
use collector_common::{
    block::{lat_bucket, op, op_of_cmd_flags, BlockKey, RqInflight, LAT_BUCKETS},
    stat,
};

use crate::{
    block::{agg_slot, maybe_sample, BLOCK_MODE, BLOCK_SAMPLE_EVERY, MODE_IO, MODE_RQ},
    helpers::{add, cgroup_id, now_ns},
    stats::bump,
};

// SAFETY (all offset globals): unique symbol names, set by the loader from BTF.
#[unsafe(no_mangle)]
static BTF_RQ_OFF_Q: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static BTF_RQ_OFF_CMD_FLAGS: Global<u32> = Global::new(24);
#[unsafe(no_mangle)]
static BTF_RQ_OFF_DATA_LEN: Global<u32> = Global::new(44);
#[unsafe(no_mangle)]
static BTF_RQ_OFF_SECTOR: Global<u32> = Global::new(48);
#[unsafe(no_mangle)]
static BTF_Q_OFF_DISK: Global<u32> = Global::new(104);
#[unsafe(no_mangle)]
static BTF_DISK_OFF_MAJOR: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static BTF_DISK_OFF_FIRST_MINOR: Global<u32> = Global::new(4);

/// Requests between start and done, keyed by `struct request *`. A request
/// the probes never see finish (started before a detach) is overwritten when
/// the kernel reuses the request, so the map is bounded by the tag space.
#[map(name = "BLOCK_INFLIGHT_RQ")]
static BLOCK_INFLIGHT_RQ: HashMap<u64, RqInflight> = HashMap::with_max_entries(65536, 0);

/// Per-CPU one-entry cache `[request_queue *, dev]`: consecutive requests
/// mostly share a queue, which saves three reads per request.
#[map(name = "BLOCK_DEV_CACHE")]
static BLOCK_DEV_CACHE: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn read<T: Copy>(base: u64, off: u32) -> Option<T> {
    // SAFETY: the helper checks the kernel address and fails cleanly.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.ok()
}

/// `disk_devt(rq->q->disk)` as the tracepoints report it (0 without a disk).
#[inline(always)]
fn rq_dev(rq: u64) -> u32 {
    let Some(q) = read::<u64>(rq, BTF_RQ_OFF_Q.load()) else {
        return 0;
    };
    let cache = BLOCK_DEV_CACHE.get_ptr_mut(0);
    if let Some(c) = cache {
        // SAFETY: per-CPU slot; the program is not re-entered on this CPU.
        if unsafe { (*c)[0] } == q && q != 0 {
            return unsafe { (*c)[1] } as u32;
        }
    }
    let disk = read::<u64>(q, BTF_Q_OFF_DISK.load()).unwrap_or(0);
    let dev = if disk == 0 {
        0
    } else {
        let major = read::<u32>(disk, BTF_DISK_OFF_MAJOR.load()).unwrap_or(0);
        let minor = read::<u32>(disk, BTF_DISK_OFF_FIRST_MINOR.load()).unwrap_or(0);
        (major << 20) | (minor & 0xfffff)
    };
    if let Some(c) = cache {
        // SAFETY: as above.
        unsafe { *c = [q, u64::from(dev)] };
    }
    dev
}

#[inline(always)]
fn rq_op(rq: u64) -> u32 {
    read::<u32>(rq, BTF_RQ_OFF_CMD_FLAGS.load()).map_or(op::OTHER, op_of_cmd_flags)
}

/// Starts the clock for `rq`, whose op is `op`.
#[inline(always)]
fn start(rq: u64, op: u32) {
    let sector = if BLOCK_SAMPLE_EVERY.load() != 0 && op != op::FLUSH {
        read::<u64>(rq, BTF_RQ_OFF_SECTOR.load()).unwrap_or(0)
    } else {
        0
    };
    let val = RqInflight {
        issue_ns: now_ns(),
        cgroup_id: cgroup_id(),
        bytes: 0,
        sector,
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        dev: rq_dev(rq),
        op,
        _pad: 0,
    };
    bump(stat::BLOCK_ISSUED);
    // BPF_ANY: a record left by a request the probes never saw finish is
    // replaced by the request that reuses its memory.
    if BLOCK_INFLIGHT_RQ.insert(&rq, &val, 0).is_err() {
        bump(stat::BLOCK_START_MAP_FULL);
    }
}

/// Counts a finished request: its in-flight record's device, op, cgroup and
/// latency (a request started before the attach is read from the request
/// and counted untimed, cgroup 0). `extra_bytes` is added too (mode RQ).
#[inline(always)]
fn done(rq: u64, extra_bytes: u64) {
    // SAFETY: the value is copied out before the entry is removed.
    let rec = unsafe { BLOCK_INFLIGHT_RQ.get(&rq) }.copied();
    let now = now_ns();
    let (dev, op, cgroup_id, latency, bytes, sector) = match rec {
        Some(r) => {
            let _ = BLOCK_INFLIGHT_RQ.remove(&rq);
            (
                r.dev,
                r.op,
                r.cgroup_id,
                Some(now.saturating_sub(r.issue_ns)),
                r.bytes + extra_bytes,
                r.sector,
            )
        }
        None => {
            bump(stat::BLOCK_UNMATCHED);
            (rq_dev(rq), rq_op(rq), 0, None, extra_bytes, 0)
        }
    };
    let key = BlockKey { dev, op, cgroup_id };
    let Some(s) = agg_slot(&key) else {
        bump(stat::BLOCK_AGG_MAP_FULL);
        return;
    };
    bump(stat::BLOCK_COMPLETED);
    // SAFETY (all field pointers): `s` is a valid map value pointer.
    unsafe {
        add(&raw mut (*s).requests, 1);
        if bytes > 0 {
            add(&raw mut (*s).bytes, bytes);
        }
        if let Some(lat) = latency {
            add(&raw mut (*s).timed, 1);
            add(&raw mut (*s).latency_sum_ns, lat);
            if lat > (*s).latency_max_ns {
                (*s).latency_max_ns = lat;
            }
            let b = lat_bucket(lat);
            if b < LAT_BUCKETS {
                add(&raw mut (*s).hist[b], 1);
            }
            maybe_sample(dev, op, sector, lat, bytes, cgroup_id);
        }
    }
}

/// tp_btf `block_io_start` (mode IO): start the clock in the submitter.
#[btf_tracepoint(function = "block_io_start")]
pub fn block_btf_io_start(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    start(rq, rq_op(rq));
    0
}

/// tp_btf `block_io_done` (mode IO): count the request.
#[btf_tracepoint(function = "block_io_done")]
pub fn block_btf_io_done(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    done(rq, 0);
    0
}

/// tp_btf `block_rq_issue`: every request in mode RQ; in mode IO only
/// flushes (the kernel's flush request skips `blk_account_io_start()`).
#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_btf_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let op = rq_op(rq);
    if BLOCK_MODE.load() == MODE_IO && op != op::FLUSH {
        return 0;
    }
    start(rq, op);
    0
}

/// tp_btf `block_rq_complete`: completed bytes (`nr_bytes` rounded down to
/// sectors, as the stat's sectors count them); in mode RQ the final
/// completion (all remaining bytes) also counts the request.
#[btf_tracepoint(function = "block_rq_complete")]
pub fn block_btf_rq_complete(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let nr_bytes: u64 = ctx.arg::<u64>(2) & 0xffff_ffff;
    let bytes = (nr_bytes >> 9) << 9;
    let rec = BLOCK_INFLIGHT_RQ.get_ptr_mut(&rq);
    if BLOCK_MODE.load() == MODE_RQ {
        // `__data_len` still holds the bytes left before this completion.
        let left = read::<u32>(rq, BTF_RQ_OFF_DATA_LEN.load()).map_or(0, u64::from);
        if let Some(r) = rec {
            if nr_bytes < left {
                // SAFETY: valid map value pointer; one request completes on one CPU.
                unsafe { (*r).bytes += bytes };
                bump(stat::BLOCK_PARTIAL);
                return 0;
            }
        }
        done(rq, bytes);
        return 0;
    }
    if bytes == 0 {
        return 0;
    }
    match rec {
        // SAFETY: as above.
        Some(r) => unsafe { (*r).bytes += bytes },
        None => {
            // Started before the attach: bytes straight to the aggregate.
            let key = BlockKey {
                dev: rq_dev(rq),
                op: rq_op(rq),
                cgroup_id: 0,
            };
            match agg_slot(&key) {
                // SAFETY: valid map value pointer.
                Some(s) => unsafe { add(&raw mut (*s).bytes, bytes) },
                None => bump(stat::BLOCK_AGG_MAP_FULL),
            }
        }
    }
    0
}
