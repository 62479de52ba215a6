//! Block-layer probes: per (device, op, submitter cgroup) request count,
//! bytes and a log2 latency histogram, aggregated in the kernel.
//!
//! Attach points (classic tracepoints, field offsets patched from tracefs):
//! - `block:block_io_start` — `TP_PROTO(struct request *rq)`, called from
//!   `blk_account_io_start()` in the submitting task: starts the clock and
//!   records the submitter's cgroup/pid (kernel ≥ 6.5).
//! - `block:block_io_done` — `TP_PROTO(struct request *rq)`, from
//!   `blk_account_io_done()`: the request is counted exactly when the kernel
//!   counts it in `/sys/block/<dev>/stat`.
//! - `block:block_rq_complete` — `TP_PROTO(struct request *rq, blk_status_t
//!   error, unsigned int nr_bytes)`: completed bytes (`nr_sector` × 512), as
//!   `blk_account_io_completion()` adds them to the stat sectors.
//! - `block:block_rq_issue` — `TP_PROTO(struct request *rq)`: the clock start
//!   on kernels without `block_io_start` (mode [`MODE_RQ`]), and flush requests,
//!   which the kernel accounts outside `blk_account_io_done()`.
//!
//! In-flight requests are keyed by (dev, sector, op): the classic tracepoints
//! do not expose the request pointer. These programs are the fallback for
//! kernels without BTF (or `[block] btf = false`); `block_btf.rs` has the same
//! attach points as BTF-enabled raw tracepoints keyed by the request pointer.
use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::bpf_get_current_pid_tgid,
    macros::{map, tracepoint},
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::TracePointContext,
    Global,
};
use collector_common::{
    block::{
        agg_slot_index, lat_bucket, op, AggSlot, BlockKey, BlockRequestData, BlockStats,
        InflightKey, InflightVal, AGG_SLOTS, LAT_BUCKETS,
    },
    stat, Event, EventHeader, EventKind,
};

use crate::{
    helpers::{cgroup_id, get_or_insert, now_ns},
    stats::bump,
};

/// Mode: start the clock at `block_io_start`, count at `block_io_done`.
pub const MODE_IO: u32 = 0;
/// Mode: start at `block_rq_issue`, count at `block_rq_complete` (older kernels).
pub const MODE_RQ: u32 = 1;

// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
pub(crate) static BLOCK_MODE: Global<u32> = Global::new(MODE_IO);
/// Emit one sampled per-request event every N completions per CPU; 0 = off.
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
pub(crate) static BLOCK_SAMPLE_EVERY: Global<u32> = Global::new(0);
// Offsets shared by block_rq_issue / block_io_start / block_io_done (same layout).
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLK_OFF_DEV: Global<u32> = Global::new(8);
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLK_OFF_SECTOR: Global<u32> = Global::new(16);
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLK_OFF_RWBS: Global<u32> = Global::new(34);
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLK_OFF_NR_SECTOR: Global<u32> = Global::new(24);
// block_rq_complete has its own layout (no `bytes`, has `error`).
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLKC_OFF_DEV: Global<u32> = Global::new(8);
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLKC_OFF_SECTOR: Global<u32> = Global::new(16);
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLKC_OFF_NR_SECTOR: Global<u32> = Global::new(24);
// SAFETY: a unique symbol name, which the loader looks up to set the value.
#[unsafe(no_mangle)]
static BLKC_OFF_RWBS: Global<u32> = Global::new(34);

/// Totals per (dev, op, cgroup) since attach, per CPU: plain adds to a line
/// no other CPU writes (a shared value's atomic adds bounce its cache line
/// between the CPUs completing I/O). Not preallocated, so memory follows the
/// keys in use, not `max_entries × CPUs`. Only one program per mode writes a
/// key's value (`done`, plus `add_bytes` on the classic path, whose
/// programs never nest on a CPU), so the adds cannot interleave.
#[map(name = "BLOCK_AGG")]
static BLOCK_AGG: PerCpuHashMap<BlockKey, BlockStats> =
    PerCpuHashMap::with_max_entries(16384, aya_ebpf::bindings::BPF_F_NO_PREALLOC);

/// This CPU's aggregate slots, in front of `BLOCK_AGG` (see
/// `collector_common::block::AGG_SLOTS`): an array index and a key compare
/// instead of a hash lookup for the keys that own their slot.
#[map(name = "BLOCK_AGG_SLOTS")]
static BLOCK_AGG_SLOTS: PerCpuArray<AggSlot> = PerCpuArray::with_max_entries(AGG_SLOTS, 0);

/// Requests between start and done.
#[map(name = "BLOCK_INFLIGHT")]
static BLOCK_INFLIGHT: HashMap<InflightKey, InflightVal> = HashMap::with_max_entries(65536, 0);

/// One all-zero `BlockStats`, the initial value for new keys (too large for the stack).
#[map(name = "BLOCK_ZERO")]
static BLOCK_ZERO: Array<BlockStats> = Array::with_max_entries(1, 0);

#[map(name = "BLOCK_SAMPLE_CTR")]
static BLOCK_SAMPLE_CTR: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Sampled per-request events for the timeline (off unless BLOCK_SAMPLE_EVERY > 0).
#[map(name = "BLOCK_EVENTS")]
static BLOCK_EVENTS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// Decodes the tracepoint's `rwbs` string (see `blk_fill_rwbs()`): an optional
/// leading `F` for REQ_PREFLUSH, then the op letter.
#[inline(always)]
fn decode_op(c0: u8, c1: u8) -> u32 {
    let c = if c0 == b'F' {
        match c1 {
            b'W' | b'R' | b'D' | b'N' => c1,
            _ => return op::FLUSH,
        }
    } else {
        c0
    };
    match c {
        b'R' => op::READ,
        b'W' => op::WRITE,
        b'D' => op::DISCARD,
        _ => op::OTHER,
    }
}

#[inline(always)]
fn read_u32(ctx: &TracePointContext, off: u32) -> Result<u32, u32> {
    // SAFETY: offset from the tracepoint's format; the helper checks the access.
    unsafe { ctx.read_at::<u32>(off as usize) }.map_err(|_| 1u32)
}

#[inline(always)]
fn read_u64(ctx: &TracePointContext, off: u32) -> Result<u64, u32> {
    // SAFETY: as above.
    unsafe { ctx.read_at::<u64>(off as usize) }.map_err(|_| 1u32)
}

#[inline(always)]
fn read_rwbs(ctx: &TracePointContext, off: u32) -> Result<u32, u32> {
    // SAFETY: as above.
    let w = unsafe { ctx.read_at::<[u8; 2]>(off as usize) }.map_err(|_| 1u32)?;
    Ok(decode_op(w[0], w[1]))
}

/// Starts the clock for a request (called in the submitter's context for
/// `block_io_start`).
#[inline(always)]
fn start(ctx: &TracePointContext) -> Result<u32, u32> {
    let dev = read_u32(ctx, BLK_OFF_DEV.load())?;
    let op = read_rwbs(ctx, BLK_OFF_RWBS.load())?;
    let (sector, left_sectors) = if op == op::FLUSH {
        (0, 0)
    } else {
        (
            read_u64(ctx, BLK_OFF_SECTOR.load())?,
            read_u32(ctx, BLK_OFF_NR_SECTOR.load()).unwrap_or(0),
        )
    };
    let key = InflightKey { dev, op, sector };
    let val = InflightVal {
        issue_ns: now_ns(),
        cgroup_id: cgroup_id(),
        bytes: 0,
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        left_sectors,
    };
    bump(stat::BLOCK_ISSUED);
    if BLOCK_INFLIGHT
        .insert(&key, &val, u64::from(BPF_NOEXIST))
        .is_ok()
    {
        return Ok(0);
    }
    // Present already: a previous request at this sector was never seen to
    // complete and the new one replaces it; or the map is full.
    if let Some(p) = BLOCK_INFLIGHT.get_ptr_mut(&key) {
        // SAFETY: map value pointer, valid for the program's duration.
        unsafe { *p = val };
    } else {
        bump(stat::BLOCK_START_MAP_FULL);
    }
    Ok(0)
}

/// Returns this CPU's aggregate for `key`: its slot in `BLOCK_AGG_SLOTS`
/// (claimed when free: the array starts zeroed and a slot is never given
/// back), else its `BLOCK_AGG` value, created zeroed.
#[inline(always)]
pub(crate) fn agg_slot(key: &BlockKey) -> Option<*mut BlockStats> {
    if let Some(s) = BLOCK_AGG_SLOTS.get_ptr_mut(agg_slot_index(key)) {
        // SAFETY: valid per-CPU array value pointer; only the one program
        // per mode that counts requests writes it on this CPU (see `BLOCK_AGG`).
        unsafe {
            if (*s).used == 0 {
                (*s).key = *key;
                // The key is in place before the slot reads as used (the
                // collector may copy the slot meanwhile).
                core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
                core::ptr::write_volatile(&raw mut (*s).used, 1);
                return Some(&raw mut (*s).stats);
            }
            let k = &(*s).key;
            if k.dev == key.dev && k.op == key.op && k.cgroup_id == key.cgroup_id {
                return Some(&raw mut (*s).stats);
            }
        }
    }
    // The zero value comes from a one-entry array: BlockStats is larger than
    // the stack allows.
    let zero = BLOCK_ZERO.get_ptr(0)?;
    // SAFETY: `zero` points into the array's value memory, valid for the run.
    get_or_insert!(BLOCK_AGG, key, unsafe { &*zero })
}

/// Counts one finished request of `bytes` (and its latency when timed) into
/// this CPU's aggregate `s` (from [`agg_slot`]).
#[inline(always)]
pub(crate) fn count_request(s: *mut BlockStats, bytes: u64, latency: Option<u64>) {
    bump(stat::BLOCK_COMPLETED);
    // SAFETY (all field accesses): `s` is a valid per-CPU map value pointer
    // with no other writer on this CPU (see `BLOCK_AGG`).
    unsafe {
        (*s).requests += 1;
        (*s).bytes += bytes;
        if let Some(lat) = latency {
            (*s).timed += 1;
            (*s).latency_sum_ns += lat;
            if lat > (*s).latency_max_ns {
                (*s).latency_max_ns = lat;
            }
            let b = lat_bucket(lat);
            if b < LAT_BUCKETS {
                (*s).hist[b] += 1;
            }
        }
    }
}

/// Counts a finished request (and its latency when it was timed); `rec` is
/// its in-flight record, looked up by the caller. `bytes` is added too when
/// `Some` (mode RQ counts bytes and requests in one place).
#[inline(always)]
fn done(ikey: &InflightKey, rec: Option<InflightVal>, bytes: Option<u64>) -> Result<u32, u32> {
    let InflightKey { dev, op, sector } = *ikey;
    let now = now_ns();
    let (cgroup_id, latency, rec_bytes) = match rec {
        Some(r) => {
            let _ = BLOCK_INFLIGHT.remove(ikey);
            (r.cgroup_id, Some(now.saturating_sub(r.issue_ns)), r.bytes)
        }
        None => {
            bump(stat::BLOCK_UNMATCHED);
            (0, None, 0)
        }
    };
    let key = BlockKey { dev, op, cgroup_id };
    let Some(s) = agg_slot(&key) else {
        bump(stat::BLOCK_AGG_MAP_FULL);
        return Ok(0);
    };
    let b = bytes.unwrap_or(0) + rec_bytes;
    count_request(s, b, latency);
    if let Some(lat) = latency {
        maybe_sample(dev, op, sector, lat, bytes.unwrap_or(0), cgroup_id);
    }
    Ok(0)
}

#[inline(always)]
pub(crate) fn maybe_sample(dev: u32, op: u32, sector: u64, lat: u64, bytes: u64, cgroup_id: u64) {
    let every = BLOCK_SAMPLE_EVERY.load();
    if every == 0 {
        return;
    }
    let Some(c) = BLOCK_SAMPLE_CTR.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU slot.
    unsafe {
        *c += 1;
        if *c < every {
            return;
        }
        *c = 0;
    }
    let Some(mut entry) = BLOCK_EVENTS.reserve::<Event<BlockRequestData>>(0) else {
        bump(stat::BLOCK_RING_FULL);
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let ev = entry.as_mut_ptr();
    // SAFETY: exclusively owned reserved slot.
    unsafe {
        (*ev).header = EventHeader {
            ts_ns: now_ns(),
            cgroup_id,
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            kind: EventKind::BlockRequest as u32,
            _pad: 0,
        };
        (*ev).data = BlockRequestData {
            sector,
            latency_ns: lat,
            bytes: bytes as u32,
            dev,
            op,
            _pad: 0,
        };
    }
    entry.submit(0);
}

/// A partial completion of the timed request `r` (at `ikey`): adds its
/// bytes to the record and moves the record to the sector the request
/// continues at (where the next completion and `block_io_done` will report
/// it). Returns whether the completion was partial.
#[inline(always)]
fn follow_partial(ikey: &InflightKey, r: *mut InflightVal, nr_sector: u32) -> bool {
    // SAFETY: `r` is a valid map value pointer; copied before the entry moves.
    let mut moved = unsafe { *r };
    if nr_sector == 0 || moved.left_sectors <= nr_sector {
        return false;
    }
    moved.left_sectors -= nr_sector;
    moved.bytes += u64::from(nr_sector) << 9;
    let next = InflightKey {
        sector: ikey.sector + u64::from(nr_sector),
        ..*ikey
    };
    if BLOCK_INFLIGHT.insert(&next, &moved, 0).is_err() {
        bump(stat::BLOCK_START_MAP_FULL);
        return false;
    }
    let _ = BLOCK_INFLIGHT.remove(ikey);
    bump(stat::BLOCK_PARTIAL);
    true
}

/// Bytes of a completion (what `blk_account_io_completion()` adds to the
/// stat sectors): kept in the in-flight record `rec` and counted at done.
/// Without a record (request started before attach) they go straight to the
/// aggregate.
#[inline(always)]
fn add_bytes(dev: u32, op: u32, rec: Option<*mut InflightVal>, bytes: u64) -> Result<u32, u32> {
    if let Some(r) = rec {
        // SAFETY: valid map value pointer; one request completes on one CPU.
        unsafe { (*r).bytes += bytes };
        return Ok(0);
    }
    let key = BlockKey {
        dev,
        op,
        cgroup_id: 0,
    };
    let Some(s) = agg_slot(&key) else {
        bump(stat::BLOCK_AGG_MAP_FULL);
        return Ok(0);
    };
    // SAFETY: valid per-CPU map value pointer, no other writer on this CPU.
    unsafe { (*s).bytes += bytes };
    Ok(0)
}

/// tracepoint `block:block_io_start` (mode IO): start the clock in the submitter.
#[tracepoint(category = "block", name = "block_io_start")]
pub fn block_io_start(ctx: TracePointContext) -> u32 {
    match start(&ctx) {
        Ok(r) | Err(r) => r,
    }
}

/// tracepoint `block:block_io_done` (mode IO): count the request (one that
/// `block_io_start` or, for flushes, `block_rq_issue` recorded).
#[tracepoint(category = "block", name = "block_io_done")]
pub fn block_io_done(ctx: TracePointContext) -> u32 {
    let r = (|| {
        let dev = read_u32(&ctx, BLK_OFF_DEV.load())?;
        let op = read_rwbs(&ctx, BLK_OFF_RWBS.load())?;
        let sector = if op == op::FLUSH {
            0
        } else {
            read_u64(&ctx, BLK_OFF_SECTOR.load())?
        };
        let ikey = InflightKey { dev, op, sector };
        // SAFETY: the value is copied out before `done` removes the entry.
        let Some(rec) = unsafe { BLOCK_INFLIGHT.get(&ikey) }.copied() else {
            // Not counted: the end of a PREFLUSH/FUA sequence, whose request
            // was counted when its data completed (this tracepoint cannot
            // tell the two apart; the kernel counts one of them), or a
            // request started before the attach.
            bump(stat::BLOCK_UNMATCHED);
            return Ok(0);
        };
        done(&ikey, Some(rec), None)
    })();
    match r {
        Ok(r) | Err(r) => r,
    }
}

/// tracepoint `block:block_rq_issue`: the clock start in mode RQ, and for
/// flush requests in mode IO (the kernel's flush request skips
/// `blk_account_io_start()`, so `block_io_start` never sees it, while
/// `block_io_done` does).
#[tracepoint(category = "block", name = "block_rq_issue")]
pub fn block_rq_issue(ctx: TracePointContext) -> u32 {
    let r = (|| {
        if BLOCK_MODE.load() == MODE_IO {
            let op = read_rwbs(&ctx, BLK_OFF_RWBS.load())?;
            if op != op::FLUSH {
                return Ok(0);
            }
        }
        start(&ctx)
    })();
    match r {
        Ok(r) | Err(r) => r,
    }
}

/// tracepoint `block:block_rq_complete`: completed bytes; in mode RQ (and for
/// flushes) also the request count and latency.
#[tracepoint(category = "block", name = "block_rq_complete")]
pub fn block_rq_complete(ctx: TracePointContext) -> u32 {
    let r = (|| {
        let dev = read_u32(&ctx, BLKC_OFF_DEV.load())?;
        let sector = read_u64(&ctx, BLKC_OFF_SECTOR.load())?;
        let nr_sector = read_u32(&ctx, BLKC_OFF_NR_SECTOR.load())?;
        let op = read_rwbs(&ctx, BLKC_OFF_RWBS.load())?;
        let bytes = u64::from(nr_sector) << 9;
        // A flush request reports sector -1 here and 0 at issue: key flushes by 0.
        let sector = if op == op::FLUSH { 0 } else { sector };
        let ikey = InflightKey { dev, op, sector };
        let rec = BLOCK_INFLIGHT.get_ptr_mut(&ikey);
        if let Some(r) = rec {
            if op != op::FLUSH && follow_partial(&ikey, r, nr_sector) {
                return Ok(0);
            }
        }
        if BLOCK_MODE.load() == MODE_RQ {
            // SAFETY: valid map value pointer, copied before `done` removes it.
            done(&ikey, rec.map(|r| unsafe { *r }), Some(bytes))
        } else if bytes > 0 {
            add_bytes(dev, op, rec, bytes)
        } else {
            Ok(0)
        }
    })();
    match r {
        Ok(r) | Err(r) => r,
    }
}
