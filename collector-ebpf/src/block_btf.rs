//! Block-layer probes on BTF-enabled raw tracepoints (`tp_btf`), keyed by the
//! kernel's `struct request *`: the same aggregates as the classic programs
//! in `block.rs`, without their costs. A raw tracepoint hands the program the
//! `TP_PROTO` arguments (no event record is formatted, no `rwbs` string
//! built), and with the request pointer as the in-flight key a partial
//! completion needs no re-keying. Two programs run per request in mode IO
//! (each tracepoint's call into BPF is a fixed cost, paid per request):
//!
//! - `block_io_start(struct request *rq)` (mode IO): note the submitter's
//!   cgroup, in the submitter's context.
//! - `block_rq_complete(struct request *rq, blk_status_t error, unsigned int
//!   nr_bytes)`: the completed bytes (what the stat's sectors add, per
//!   completion), and at the request's last completion the count, timed from
//!   the kernel's own start stamp `rq->start_time_ns` (what the stat's time
//!   fields use), so no program reads the clock twice per request.
//! - `block_rq_issue(struct request *rq)` (mode RQ only): the issue time.
//!
//! Which completions count a request mirrors `blk_account_io_done()`: the
//! data part of a PREFLUSH/FUA sequence (`RQF_FLUSH_SEQ`) completes once for
//! its data and again, with no bytes, when the sequence ends; only the second
//! counts. The flush machinery's own flush request (`REQ_OP_FLUSH` with
//! `RQF_FLUSH_SEQ`, never started through `block_io_start`) is the stat's
//! flush and is timed from its stamp, as the stat times it.
//!
//! Struct offsets (`request.q`, `request.cmd_flags`, `request.rq_flags`,
//! `request.__sector`, `request.__data_len`, `request.start_time_ns`,
//! `request_queue.disk`, `gendisk.major`, `gendisk.first_minor`, and the
//! submitter's cgroup id through `task_struct.cgroups`, `css_set.dfl_cgrp`,
//! `cgroup.kn`, `kernfs_node.id`) and the bits of `RQF_IO_STAT` and
//! `RQF_FLUSH_SEQ` come from the running kernel's BTF and are patched into
//! the globals below before load; fields are read with direct loads the
//! verifier checks against BTF (no helper call).
//!
//! The kernel stamps `start_time_ns` only for requests it accounts
//! (`RQF_IO_STAT`: the device's `queue/iostats` is on, the default). A
//! completed read, write or discard without the flag switches every later
//! start to the probe's own clock (`BLOCK_OWN_CLOCK`), as does a kernel whose
//! BTF does not name the flag; the requests completed before the switch are
//! counted untimed (`stat::BLOCK_UNTIMED`).
use core::sync::atomic::{compiler_fence, Ordering};

use aya_ebpf::{
    helpers::bpf_get_current_task_btf,
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap},
    programs::BtfTracePointContext,
    Global,
};
use collector_common::{
    block::{op, op_of_cmd_flags, rq_slot, BlockKey, RqInflight, RqSlot, RQ_SLOTS},
    stat,
};

use crate::{
    block::{agg_slot, count_request, maybe_sample, BLOCK_SAMPLE_EVERY},
    helpers::{claim, now_ns},
    stats::bump,
};

// SAFETY (all offset globals): unique symbol names, set by the loader from BTF.
#[unsafe(no_mangle)]
static BTF_RQ_OFF_Q: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static BTF_RQ_OFF_CMD_FLAGS: Global<u32> = Global::new(24);
#[unsafe(no_mangle)]
static BTF_RQ_OFF_RQ_FLAGS: Global<u32> = Global::new(28);
#[unsafe(no_mangle)]
static BTF_RQ_OFF_START_TIME: Global<u32> = Global::new(96);
#[unsafe(no_mangle)]
static BTF_TASK_OFF_CGROUPS: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static BTF_CSS_SET_OFF_DFL_CGRP: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static BTF_CGROUP_OFF_KN: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static BTF_KN_OFF_ID: Global<u32> = Global::new(0);
/// `RQF_IO_STAT` as a mask of `request.rq_flags`; 0 = not in the kernel's
/// BTF, so the probes always take their own start time.
#[unsafe(no_mangle)]
static BTF_RQF_IO_STAT: Global<u32> = Global::new(0);
/// `RQF_FLUSH_SEQ` as a mask of `request.rq_flags`; 0 = unknown, so every
/// last completion counts (a PREFLUSH/FUA write with data counts twice).
#[unsafe(no_mangle)]
static BTF_RQF_FLUSH_SEQ: Global<u32> = Global::new(0);
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

/// Requests between start and done, by `struct request *`: slot
/// [`rq_slot`]`(rq)` of this table when it is free (claimed with a
/// compare-and-swap, released at done: array indexing, no hash, no lock, no
/// allocation), else `BLOCK_INFLIGHT_RQ`. A record the probes never see
/// finish (started before a detach) is overwritten when the kernel reuses the
/// request, so both are bounded by the tag space. Mmapable: the collector
/// counts in-flight requests by reading it as memory.
#[map(name = "BLOCK_RQ_SLOTS")]
static BLOCK_RQ_SLOTS: Array<RqSlot> =
    Array::with_max_entries(RQ_SLOTS, aya_ebpf::bindings::BPF_F_MMAPABLE);

/// Non-zero once a completed read, write or discard carried no kernel start
/// stamp (a device with `queue/iostats` off): from then on `block_io_start`
/// takes the probe's own start time too. One flag for all devices: the
/// extra clock read is the price of timing such a device at all.
#[map(name = "BLOCK_OWN_CLOCK")]
static BLOCK_OWN_CLOCK: Array<u32> = Array::with_max_entries(1, 0);

/// Overflow of `BLOCK_RQ_SLOTS`: requests whose slot another in-flight
/// request holds.
#[map(name = "BLOCK_INFLIGHT_RQ")]
static BLOCK_INFLIGHT_RQ: HashMap<u64, RqInflight> = HashMap::with_max_entries(16384, 0);

/// `rq` as a plain number: its distance from this table's first value. The
/// verifier allows only adds and subtracts on a BTF pointer (hashing needs
/// shifts and a multiply), and the difference of two pointers is a scalar to
/// a privileged program; the table does not move, so the number is one to
/// one with the request.
#[inline(always)]
fn scalar(rq: u64) -> Option<u64> {
    let base = BLOCK_RQ_SLOTS.get_ptr(0)? as u64;
    Some(rq.wrapping_sub(base))
}

/// The slot of `rq` and `rq` as a number (the slot's owner value and the
/// overflow map's key; never 0, which marks a free slot).
#[inline(always)]
fn slot_of(rq: u64) -> Option<(*mut RqSlot, u64)> {
    let id = scalar(rq)?;
    Some((BLOCK_RQ_SLOTS.get_ptr_mut(rq_slot(id))?, id))
}

/// `rq`'s record, in its slot or the overflow map.
#[inline(always)]
fn record_mut(rq: u64) -> Option<*mut RqInflight> {
    let (s, id) = slot_of(rq)?;
    // SAFETY: valid array value pointer; a request's own slot is written
    // only by its own start/issue/done, which the block layer orders.
    unsafe {
        if (*s).rq == id {
            return Some(&raw mut (*s).rec);
        }
    }
    BLOCK_INFLIGHT_RQ.get_ptr_mut(&id)
}

/// What a start records of a request (the fields of [`RqInflight`]).
#[derive(Clone, Copy)]
struct Start {
    issue_ns: u64,
    cgroup_id: u64,
    bytes: u64,
    sector: u64,
    dev: u32,
    op: u32,
}

/// Stores `v` as `rq`'s record (replacing one it left behind); false when
/// both the slot and the overflow map are taken. The fields go straight
/// into the slot: no record is built on the stack and copied (the compiler
/// turned that into a call to `memset` and a 56-byte copy).
#[inline(always)]
fn put(rq: u64, v: &Start) -> bool {
    let Some((s, id)) = slot_of(rq) else {
        return false;
    };
    // SAFETY: as in `record_mut`; the slot is ours once the swap from 0
    // succeeded (or it already was).
    unsafe {
        let prev = claim(&raw mut (*s).rq, id);
        if prev == 0 || prev == id {
            let r = &raw mut (*s).rec;
            (*r).issue_ns = v.issue_ns;
            (*r).cgroup_id = v.cgroup_id;
            (*r).bytes = v.bytes;
            (*r).sector = v.sector;
            (*r).dev = v.dev;
            (*r).op = v.op;
            return true;
        }
    }
    let val = RqInflight {
        issue_ns: v.issue_ns,
        cgroup_id: v.cgroup_id,
        bytes: v.bytes,
        sector: v.sector,
        dev: v.dev,
        op: v.op,
        _pad: [0; 2],
    };
    BLOCK_INFLIGHT_RQ.insert(&id, &val, 0).is_ok()
}

/// Removes and returns `rq`'s record.
#[inline(always)]
fn take(rq: u64) -> Option<RqInflight> {
    let (s, id) = slot_of(rq)?;
    // SAFETY: as in `record_mut`. The record is copied out before the slot
    // is released (the fence keeps the compiler from reordering).
    unsafe {
        if (*s).rq == id {
            let rec = (*s).rec;
            compiler_fence(Ordering::SeqCst);
            core::ptr::write_volatile(&raw mut (*s).rq, 0);
            return Some(rec);
        }
    }
    // SAFETY: the value is copied out before the entry is removed.
    let rec = unsafe { BLOCK_INFLIGHT_RQ.get(&id) }.copied()?;
    let _ = BLOCK_INFLIGHT_RQ.remove(&id);
    Some(rec)
}

/// A field of a kernel struct at `base + off`. The pointers come from the
/// raw tracepoint's typed arguments and the offsets from read-only globals
/// the verifier sees as constants, so these are plain loads the verifier
/// checks against the kernel's BTF (and guards against faults), not helper
/// calls: the cheapest way to read the request.
#[inline(always)]
fn read<T: Copy>(base: u64, off: u32) -> T {
    // SAFETY: `base` is a BTF-typed kernel pointer (a tracepoint argument or
    // a field read from one) and `off` a member offset from the same BTF;
    // the verifier turns the load into a fault-guarded kernel read.
    unsafe { core::ptr::read_volatile((base + u64::from(off)) as *const T) }
}

/// `disk_devt(rq->q->disk)` as the tracepoints report it (0 without a disk).
#[inline(always)]
fn rq_dev(rq: u64) -> u32 {
    let q: u64 = read(rq, BTF_RQ_OFF_Q.load());
    if q == 0 {
        return 0;
    }
    let disk: u64 = read(q, BTF_Q_OFF_DISK.load());
    if disk == 0 {
        return 0;
    }
    let major: u32 = read(disk, BTF_DISK_OFF_MAJOR.load());
    let minor: u32 = read(disk, BTF_DISK_OFF_FIRST_MINOR.load());
    (major << 20) | (minor & 0xfffff)
}

#[inline(always)]
fn rq_op(rq: u64) -> u32 {
    op_of_cmd_flags(read::<u32>(rq, BTF_RQ_OFF_CMD_FLAGS.load()))
}

/// The current task's cgroup v2 id, `current->cgroups->dfl_cgrp->kn->id`:
/// what `bpf_get_current_cgroup_id()` returns, read with four loads from the
/// BTF-typed task pointer (the helper call and its RCU read section cost
/// more than the loads; a tracing program runs under RCU already). 0 if a
/// link is missing.
#[inline(always)]
fn current_cgroup_id() -> u64 {
    // SAFETY: the helper takes no arguments; it returns the current task
    // as a BTF-typed pointer, never null in a task or interrupt context.
    let task = unsafe { bpf_get_current_task_btf() } as u64;
    let cset: u64 = read(task, BTF_TASK_OFF_CGROUPS.load());
    if cset == 0 {
        return 0;
    }
    let cgrp: u64 = read(cset, BTF_CSS_SET_OFF_DFL_CGRP.load());
    if cgrp == 0 {
        return 0;
    }
    let kn: u64 = read(cgrp, BTF_CGROUP_OFF_KN.load());
    if kn == 0 {
        return 0;
    }
    read(kn, BTF_KN_OFF_ID.load())
}

/// Whether `block_io_start` takes its own start time (see `BLOCK_OWN_CLOCK`).
#[inline(always)]
fn own_clock() -> bool {
    if BTF_RQF_IO_STAT.load() == 0 {
        return true;
    }
    BLOCK_OWN_CLOCK.get(0).is_some_and(|f| *f != 0)
}

/// The kernel's start stamp of `rq` (op `op`, flags `rq_flags`) when it
/// accounts the request (`RQF_IO_STAT`), or when it is a flush: the flush
/// machinery's flush request is stamped when it is set up, and the stat's
/// flush time counts from that stamp.
#[inline(always)]
fn kernel_start(rq: u64, op: u32, rq_flags: u32) -> Option<u64> {
    let mask = BTF_RQF_IO_STAT.load();
    if op != op::FLUSH && (mask == 0 || rq_flags & mask == 0) {
        return None;
    }
    let t: u64 = read(rq, BTF_RQ_OFF_START_TIME.load());
    (t != 0).then_some(t)
}

/// Records `rq`'s start (its op is `op`): the submitter's cgroup, the
/// device, and the time when `own_clock` (else the kernel's stamp times it).
#[inline(always)]
fn start(rq: u64, op: u32, own_clock: bool) {
    let sector = if BLOCK_SAMPLE_EVERY.load() != 0 && op != op::FLUSH {
        read::<u64>(rq, BTF_RQ_OFF_SECTOR.load())
    } else {
        0
    };
    let val = Start {
        issue_ns: if own_clock { now_ns() } else { 0 },
        cgroup_id: current_cgroup_id(),
        bytes: 0,
        sector,
        dev: rq_dev(rq),
        op,
    };
    bump(stat::BLOCK_ISSUED);
    // A record left by a request the probes never saw finish is replaced
    // by the request that reuses its memory.
    if !put(rq, &val) {
        bump(stat::BLOCK_START_MAP_FULL);
    }
}

/// Counts a finished request (op `op`, flags `rq_flags` as read now): its
/// in-flight record's device, op, cgroup and bytes plus `extra_bytes`, timed
/// from the record's own start time or else the kernel's stamp. A request
/// without a record is read from the request, cgroup 0: the flush
/// machinery's flush request (mode IO: it skips `block_io_start`), or one
/// started before the attach (counted unmatched).
#[inline(always)]
fn done(rq: u64, op: u32, rq_flags: u32, extra_bytes: u64) {
    let rec = take(rq);
    let (dev, op, cgroup_id, own_start, bytes, sector) = match rec {
        Some(r) => (
            r.dev,
            r.op,
            r.cgroup_id,
            r.issue_ns,
            r.bytes + extra_bytes,
            r.sector,
        ),
        None => {
            if op != op::FLUSH {
                bump(stat::BLOCK_UNMATCHED);
            }
            (rq_dev(rq), op, 0, 0, extra_bytes, 0)
        }
    };
    let started = if own_start != 0 {
        Some(own_start)
    } else {
        kernel_start(rq, op, rq_flags)
    };
    let latency = started.map(|t| now_ns().saturating_sub(t));
    if latency.is_none() && rec.is_some() {
        bump(stat::BLOCK_UNTIMED);
        // A read, write or discard the kernel did not time: its device does
        // not keep I/O statistics, so take our own start times from now on.
        // (Passthrough and other ops are never stamped by the kernel.)
        if matches!(op, op::READ | op::WRITE | op::DISCARD) {
            if let Some(f) = BLOCK_OWN_CLOCK.get_ptr_mut(0) {
                // SAFETY: a one-entry array's value; every writer stores 1.
                unsafe { core::ptr::write_volatile(f, 1) };
            }
        }
    }
    let key = BlockKey { dev, op, cgroup_id };
    let Some(s) = agg_slot(&key) else {
        bump(stat::BLOCK_AGG_MAP_FULL);
        return;
    };
    count_request(s, bytes, latency);
    if let Some(lat) = latency {
        maybe_sample(dev, op, sector, lat, bytes, cgroup_id);
    }
}

/// tp_btf `block_io_start` (mode IO): the submitter's cgroup (and the
/// probe's own start time only where the kernel stamps none).
#[btf_tracepoint(function = "block_io_start")]
pub fn block_btf_io_start(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    start(rq, rq_op(rq), own_clock());
    0
}

/// tp_btf `block_rq_issue` (attached in mode RQ only): every request,
/// timed from issue with the probe's own clock.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn block_btf_rq_issue(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    start(rq, rq_op(rq), true);
    0
}

/// tp_btf `block_rq_complete`: completed bytes (`nr_bytes` rounded down to
/// sectors, as the stat's sectors count them, completion by completion);
/// the request's last completion also counts it. Not the last: a partial
/// completion (fewer bytes than `__data_len` still holds), and the data part
/// of a PREFLUSH/FUA sequence, which the kernel completes again, with no
/// bytes, when the sequence ends (and counts only then).
#[btf_tracepoint(function = "block_rq_complete")]
pub fn block_btf_rq_complete(ctx: BtfTracePointContext) -> i32 {
    let rq: u64 = ctx.arg(0);
    let nr_bytes: u64 = ctx.arg::<u64>(2) & 0xffff_ffff;
    let bytes = (nr_bytes >> 9) << 9;
    // `__data_len` still holds the bytes left before this completion.
    let left = u64::from(read::<u32>(rq, BTF_RQ_OFF_DATA_LEN.load()));
    let rq_flags: u32 = read(rq, BTF_RQ_OFF_RQ_FLAGS.load());
    let op = rq_op(rq);
    let partial = nr_bytes < left;
    let seq_data = op != op::FLUSH && rq_flags & BTF_RQF_FLUSH_SEQ.load() != 0;
    if partial || seq_data {
        if let Some(r) = record_mut(rq) {
            // SAFETY: valid map value pointer; one request completes on one CPU.
            unsafe { (*r).bytes += bytes };
            if partial {
                bump(stat::BLOCK_PARTIAL);
            }
            return 0;
        }
    }
    done(rq, op, rq_flags, bytes);
    0
}
