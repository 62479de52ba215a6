//! NCCL uprobes on `libnccl.so.2`. Hooked APIs (nccl.h prototypes; every
//! one is exported as `ncclX` and `pncclX` at one address, attached once):
//!
//! - `ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)`,
//!   `ncclCommInitRankConfig(…, int rank, ncclConfig_t *config)`: the 128-byte
//!   id is passed by value, so on x86-64 it is in memory at `[sp + 8]` and
//!   `rank` takes the 3rd integer register; `ncclCommInitRankScalable(comm*,
//!   nranks, rank, nId, ncclUniqueId *ids, config*)`; `ncclCommInitAll(comm*,
//!   ndev, const int *devlist)`; `ncclCommSplit(parent, color, key, comm*,
//!   config*)` → [`nccl_init_enter`] + [`nccl_init_return`] (cookie
//!   `collector_common::nccl::init`): (pid, `ncclComm_t`) → [`CommInfo`].
//! - `ncclCommShrink(parent, int *exclude, nexclude, comm*, config*, flags)`
//!   and `ncclCommGrow(parent, nranks, const ncclUniqueId *id, rank, comm*,
//!   config*)` → the same two programs: the new communicator, and the call
//!   counted on the parent.
//! - `ncclCommDestroy(comm)` / `ncclCommAbort(comm)` → [`nccl_comm_end`].
//! - `ncclAllReduce`, `ncclReduceScatter`, `ncclBroadcast`, `ncclAllGather`,
//!   `ncclAlltoAll`, `ncclReduce`, `ncclGather`, `ncclScatter`, their
//!   `*Config` variants (one more argument at the end), `ncclSend`,
//!   `ncclRecv`, the one-sided `ncclPutSignal` (comm the 10th argument),
//!   `ncclSignal` and `ncclWaitSignal`, `ncclGroupStart`, `ncclGroupEnd`,
//!   and the lifecycle calls `ncclCommFinalize`, `ncclCommRevoke`,
//!   `ncclCommSuspend`, `ncclCommResume` (which also set the communicator's
//!   state), and `ncclDevCommCreate` (a device communicator) → [`nccl_call`] (cookie: op | argument layout << 8): calls,
//!   count × datatype size, first and latest call time per (pid,
//!   communicator, op).
use aya_ebpf::{
    helpers::{
        bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_jiffies64, bpf_probe_read_user,
    },
    macros::{map, uprobe, uretprobe},
    maps::{Array, HashMap, PerCpuArray},
    programs::{ProbeContext, RetProbeContext},
    EbpfContext,
};
use collector_common::{
    cuda::HandleKey,
    nccl::{
        datatype_size, end, fast, init, layout, op, CommInfo, CommStats, FastSlot, InInit, OpKey,
        OpStats, INIT_ALL_MAX, SEQ_RING,
    },
    stat,
};

use crate::{
    helpers::{add, claim, get_or_insert, now_ns},
    stats::bump,
};

/// (pid, `ncclComm_t`) → the communicator as this rank created it. Entries
/// of exited processes are removed by the collector.
#[map(name = "NCCL_COMMS")]
static NCCL_COMMS: HashMap<HandleKey, CommInfo> = HashMap::with_max_entries(16384, 0);

/// Calls per (pid, op, communicator) of the ops a [`CommStats`] does not
/// hold: point-to-point, one-sided, lifecycle.
#[map(name = "NCCL_OPS")]
static NCCL_OPS: HashMap<OpKey, OpStats> = HashMap::with_max_entries(16384, 0);

/// Collectives (and groups: communicator 0) per (pid, communicator), each
/// in one slot of this table ([`fast`]): a lookup the verifier inlines.
#[map(name = "NCCL_FAST")]
static NCCL_FAST: Array<FastSlot> = Array::with_max_entries(fast::SLOTS, BPF_F_MMAPABLE);

/// An mmapable array's values start on a page, so each slot's hot fields
/// share its first cache line and each op has one of its own.
const BPF_F_MMAPABLE: u32 = aya_ebpf::bindings::BPF_F_MMAPABLE;

/// The same for a (pid, communicator) whose slot of `NCCL_FAST` another
/// holds.
#[map(name = "NCCL_COLL")]
static NCCL_COLL: HashMap<HandleKey, CommStats> = HashMap::with_max_entries(16384, 0);

/// A zeroed [`CommStats`], never written: what a communicator's first
/// call into `NCCL_COLL` inserts (808 bytes: too large for the BPF stack).
#[map(name = "NCCL_COLL_ZERO")]
static NCCL_COLL_ZERO: Array<CommStats> = Array::with_max_entries(1, 0);

/// Per CPU: the jiffy of its latest stamped NCCL call and the
/// `bpf_ktime_get_ns` read then ([`stamp_ns`]).
#[map(name = "NCCL_CLOCK")]
static NCCL_CLOCK: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

/// Init calls between entry and return, per thread (`pid_tgid`).
#[map(name = "NCCL_IN_INIT")]
static NCCL_IN_INIT: HashMap<u64, InInit> = HashMap::with_max_entries(4096, 0);

/// Scratch for an [`InInit`] (192 bytes: too large for the BPF stack).
#[map(name = "NCCL_SCRATCH")]
static NCCL_SCRATCH: PerCpuArray<InInit> = PerCpuArray::with_max_entries(1, 0);

/// Return codes after which the new `ncclComm_t` is valid: `ncclSuccess`,
/// and `ncclInProgress` (non-blocking communicators finish in the background).
const NCCL_SUCCESS: u32 = 0;
const NCCL_IN_PROGRESS: u32 = 7;

#[inline(always)]
fn cookie(ctx: &impl EbpfContext) -> u64 {
    // SAFETY: valid program context.
    unsafe { bpf_get_attach_cookie(ctx.as_ptr()) }
}

/// uprobe: the communicator-creating calls (cookie = `init::*`).
#[uprobe]
pub fn nccl_init_enter(ctx: ProbeContext) -> u32 {
    let kind = cookie(&ctx) as u32;
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(s) = NCCL_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: per-CPU scratch, no other user while the program runs here.
    let s = unsafe { &mut *s };
    s.info.unique_id = [0; collector_common::nccl::UNIQUE_ID_BYTES];
    s.info.parent = 0;
    s.info.created_ns = 0;
    s.info.nranks = -1;
    s.info.rank = -1;
    s.info.device = crate::cuda::current_device(pid_tgid as u32);
    s.info.kind = kind;
    s.info.color = 0;
    s.info.key = 0;
    s.info.result = 0;
    s.info.ended = 0;
    s.devlist = 0;
    let a = |n: usize| -> u64 { ctx.arg(n).unwrap_or(0) };
    match kind {
        init::INIT_RANK | init::INIT_RANK_CONFIG => {
            s.out = a(0);
            s.info.nranks = a(1) as i32;
            s.info.rank = a(2) as i32;
            // SAFETY: regs is the probe's pt_regs.
            let sp = unsafe { (*ctx.regs).rsp };
            // SAFETY: a user address read through the checked helper.
            if let Ok(id) = unsafe { bpf_probe_read_user((sp + 8) as *const [u8; 128]) } {
                s.info.unique_id = id;
            }
        }
        init::INIT_RANK_SCALABLE => {
            s.out = a(0);
            s.info.nranks = a(1) as i32;
            s.info.rank = a(2) as i32;
            // SAFETY: as above; the first of the `nId` ids (all ranks pass the same list).
            if let Ok(id) = unsafe { bpf_probe_read_user(a(4) as *const [u8; 128]) } {
                s.info.unique_id = id;
            }
        }
        init::INIT_ALL => {
            s.out = a(0);
            s.info.nranks = a(1) as i32;
            s.devlist = a(2);
        }
        init::SPLIT => {
            s.info.parent = a(0);
            s.info.color = a(1) as i32;
            s.info.key = a(2) as i32;
            s.out = a(3);
        }
        init::SHRINK => {
            // (parent, int *excludeRanks, excludeCount, comm*, config*, flags)
            count_parent(pid_tgid, op::COMM_SHRINK, a(0));
            s.info.parent = a(0);
            s.info.color = init::SHRINK_COLOR;
            s.info.key = a(2) as i32;
            s.out = a(3);
            let pid = (pid_tgid >> 32) as u32;
            if let Some((nranks, rank)) = shrunk(pid, a(0), a(1), a(2) as i32) {
                s.info.nranks = nranks;
                s.info.rank = rank;
            }
        }
        init::GROW => {
            // (parent, nranks, const ncclUniqueId *id, rank, comm*, config*):
            // existing ranks pass their parent and rank -1, new ones no
            // parent, the grow id and their rank.
            count_parent(pid_tgid, op::COMM_GROW, a(0));
            s.info.parent = a(0);
            s.info.nranks = a(1) as i32;
            s.info.rank = a(3) as i32;
            s.info.color = init::GROW_COLOR;
            s.out = a(4);
            if a(2) != 0 {
                // SAFETY: a user address read through the checked helper.
                if let Ok(id) = unsafe { bpf_probe_read_user(a(2) as *const [u8; 128]) } {
                    s.info.unique_id = id;
                }
            }
        }
        _ => return 0,
    }
    if NCCL_IN_INIT.insert(&pid_tgid, s, 0).is_err() {
        bump(stat::NCCL_MAP_FULL);
    }
    0
}

/// uretprobe: the init calls: the new communicator(s) into `NCCL_COMMS`.
#[uretprobe]
pub fn nccl_init_return(ctx: RetProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(s) = NCCL_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: the map value is copied into the per-CPU scratch before removal.
    let s = unsafe {
        let Some(rec) = NCCL_IN_INIT.get(&pid_tgid) else {
            bump(stat::NCCL_UNMATCHED_RETURN);
            return 0;
        };
        *s = *rec;
        &mut *s
    };
    let _ = NCCL_IN_INIT.remove(&pid_tgid);
    let rc: u64 = ctx.ret();
    let rc = rc as u32;
    if rc != NCCL_SUCCESS && rc != NCCL_IN_PROGRESS {
        return 0;
    }
    s.info.result = rc;
    s.info.created_ns = now_ns();
    let pid = (pid_tgid >> 32) as u32;
    if s.info.kind == init::INIT_ALL {
        let n = s.info.nranks;
        let mut first = 0u64;
        for i in 0..INIT_ALL_MAX {
            if i as i32 >= n {
                break;
            }
            // SAFETY: user pointers read through the checked helper.
            let Ok(comm) = (unsafe { bpf_probe_read_user((s.out + 8 * i as u64) as *const u64) })
            else {
                break;
            };
            if i == 0 {
                first = comm;
            }
            s.info.rank = i as i32;
            s.info.color = i as i32;
            // The group's first communicator names it (all ranks in one process).
            s.info.parent = first;
            s.info.device = if s.devlist == 0 {
                i as i32
            } else {
                // SAFETY: as above.
                unsafe { bpf_probe_read_user((s.devlist + 4 * i as u64) as *const i32) }
                    .unwrap_or(-1)
            };
            insert_comm(pid, comm, &s.info);
        }
        return 0;
    }
    // SAFETY: the call's `ncclComm_t *`, read through the checked helper.
    let Ok(comm) = (unsafe { bpf_probe_read_user(s.out as *const u64) }) else {
        return 0;
    };
    if comm != 0 {
        insert_comm(pid, comm, &s.info);
    } else if init::is_nocolor(s.info.kind, s.info.color) {
        // No communicator, but the rank took part: the collector pairs
        // every rank's splits of a parent call by call.
        insert_comm(pid, init::nocolor_handle(s.info.created_ns), &s.info);
    }
    0
}

/// A shrink or grow counted on its parent communicator, at entry (as the
/// collectives are: also when NCCL then refuses it).
#[inline(always)]
fn count_parent(pid_tgid: u64, op: u32, parent: u64) {
    let key = OpKey {
        pid: (pid_tgid >> 32) as u32,
        op,
        comm: parent,
    };
    let _ = count_call(&key, None);
}

/// `ncclCommShrink`: the new communicator's (nranks, rank) from the
/// parent's as this rank created it (the survivors keep their order), when
/// the parent is known and the excluded list has at most
/// [`init::SHRINK_EXCLUDE_MAX`] ranks.
#[inline(always)]
fn shrunk(pid: u32, parent: u64, list: u64, count: i32) -> Option<(i32, i32)> {
    let key = HandleKey {
        pid,
        _pad: 0,
        handle: parent,
    };
    // SAFETY: the map value is copied out at once.
    let p = unsafe { NCCL_COMMS.get(&key) }?;
    let (nranks, rank) = (p.nranks, p.rank);
    if nranks <= 0 || rank < 0 || count < 0 || count as usize > init::SHRINK_EXCLUDE_MAX {
        return None;
    }
    let mut below = 0i32;
    for i in 0..init::SHRINK_EXCLUDE_MAX {
        if i as i32 >= count {
            break;
        }
        // SAFETY: a user address read through the checked helper.
        let r = unsafe { bpf_probe_read_user((list + 4 * i as u64) as *const i32) }.ok()?;
        if r < rank {
            below += 1;
        }
    }
    Some((nranks - count, rank - below))
}

#[inline(always)]
fn insert_comm(pid: u32, comm: u64, info: &CommInfo) {
    let key = HandleKey {
        pid,
        _pad: 0,
        handle: comm,
    };
    if NCCL_COMMS.insert(&key, info, 0).is_err() {
        bump(stat::NCCL_MAP_FULL);
    }
}

/// uprobe: `ncclCommDestroy(comm)` (cookie 1) / `ncclCommAbort(comm)` (cookie 2).
#[uprobe]
pub fn nccl_comm_end(ctx: ProbeContext) -> u32 {
    let how = cookie(&ctx) as u32;
    let key = HandleKey {
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        _pad: 0,
        handle: ctx.arg(0).unwrap_or(0),
    };
    if let Some(c) = NCCL_COMMS.get_ptr_mut(&key) {
        // SAFETY: a valid map value pointer for the program's run.
        unsafe { (*c).ended = how };
    }
    0
}

/// uprobe: any collective, point-to-point or group API (cookie: op |
/// layout << 8); the collector attaches each op's own program below
/// ([`op::program`]), with its op and layout built in.
#[uprobe]
pub fn nccl_call(ctx: ProbeContext) -> u32 {
    let c = cookie(&ctx) as u32;
    call(&ctx, c & 0xff, (c >> 8) & 0xff)
}

/// One uprobe program per op (named by [`op::program`]).
macro_rules! op_program {
    ($($name:ident = $op:expr;)*) => {$(
        #[uprobe]
        pub fn $name(ctx: ProbeContext) -> u32 {
            call(&ctx, $op, layout::of_op($op))
        }
    )*};
}

op_program! {
    nccl_all_reduce = op::ALL_REDUCE;
    nccl_all_gather = op::ALL_GATHER;
    nccl_reduce_scatter = op::REDUCE_SCATTER;
    nccl_broadcast = op::BROADCAST;
    nccl_reduce = op::REDUCE;
    nccl_all_to_all = op::ALL_TO_ALL;
    nccl_send = op::SEND;
    nccl_recv = op::RECV;
    nccl_group_start = op::GROUP_START;
    nccl_group_end = op::GROUP_END;
    nccl_gather = op::GATHER;
    nccl_scatter = op::SCATTER;
    nccl_put_signal = op::PUT_SIGNAL;
    nccl_signal = op::SIGNAL;
    nccl_wait_signal = op::WAIT_SIGNAL;
    nccl_comm_finalize = op::COMM_FINALIZE;
    nccl_comm_revoke = op::COMM_REVOKE;
    nccl_comm_suspend = op::COMM_SUSPEND;
    nccl_comm_resume = op::COMM_RESUME;
    nccl_dev_comm_create = op::DEV_COMM_CREATE;
}

/// A collective, point-to-point or group call: a collective or a group is
/// counted in its (pid, communicator)'s [`CommStats`] (one array lookup),
/// any other op under its [`OpKey`].
#[inline(always)]
fn call(ctx: &ProbeContext, op: u32, lay: u32) -> u32 {
    let a = |n: usize| -> u64 { ctx.arg(n).unwrap_or(0) };
    let (count, dtype, comm) = match lay {
        layout::COMM_ARG5 => (a(2), a(3) as u32, a(5)),
        layout::COMM_ARG4 => (a(2), a(3) as u32, a(4)),
        layout::COUNT_ARG1 => (a(1), a(2) as u32, a(4)),
        // The 7th argument.
        layout::COMM_STACK => (a(2), a(3) as u32, stack_arg(ctx, 0)),
        // The 10th argument (`ncclPutSignal`).
        layout::PUT_SIGNAL => (a(1), a(2) as u32, stack_arg(ctx, 3)),
        layout::COMM_ONLY_ARG4 => (0, 0, a(4)),
        layout::COMM_ONLY_ARG2 => (0, 0, a(2)),
        layout::COMM_ARG0 => (0, 0, a(0)),
        _ => (0, 0, 0),
    };
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let bytes = layout::has_bytes(lay).then_some((count, dtype));
    if let Some(slot) = op::comm_slot(op) {
        count_in_comm(pid, comm, slot, op::is_collective(op), bytes);
        return 0;
    }
    let key = OpKey { pid, op, comm };
    if count_call(&key, bytes).is_none() {
        return 0;
    }
    let state = end::of_op(op);
    if lay == layout::COMM_ARG0 && state != 0 {
        set_state(pid, comm, state);
    }
    0
}

/// The time an NCCL call is stamped with: `bpf_ktime_get_ns` as read by
/// the first stamped call on this CPU within the current jiffy (one tick:
/// 1–10 ms), so at most one precise clock read per CPU and tick (it costs
/// more than all the rest of the program); the others read `jiffies`.
/// Never later than the call, earlier by less than a tick.
#[inline(always)]
fn stamp_ns() -> u64 {
    // SAFETY: the helper takes no arguments and cannot fail.
    let j = unsafe { bpf_jiffies64() };
    let Some(c) = NCCL_CLOCK.get_ptr_mut(0) else {
        return now_ns();
    };
    // SAFETY: per-CPU slot; a program preempted here by another on this
    // CPU leaves it a (jiffy, time) pair of that tick either way.
    unsafe {
        if (*c)[0] == j {
            return (*c)[1];
        }
        let now = now_ns();
        (*c)[0] = j;
        (*c)[1] = now;
        now
    }
}

/// [`stamp_ns`] with the clock kept in the communicator's own value
/// (`CommStats::tick`, a cache line the call touches anyway): the jiffy
/// is read before the time and written after it, so a thread that sees a
/// jiffy sees a time read in it (x86-64 keeps stores and loads in order).
///
/// # Safety
/// `tick` points into a map value, valid for the program's run.
#[inline(always)]
unsafe fn comm_stamp_ns(tick: *mut [u64; 2]) -> u64 {
    // SAFETY: the helper takes no arguments and cannot fail.
    let j = unsafe { bpf_jiffies64() };
    // SAFETY: the caller's pointer; volatile keeps the order.
    unsafe {
        let t = tick.cast::<u64>();
        if core::ptr::read_volatile(t) == j {
            return core::ptr::read_volatile(t.add(1));
        }
        let now = now_ns();
        core::ptr::write_volatile(t.add(1), now);
        core::ptr::write_volatile(t, j);
        now
    }
}

/// Adds `v` to the u64 at `p`: atomically when `shared` (the process's
/// threads may call at once), else plainly (one caller at a time).
///
/// # Safety
/// `p` points into a map value, valid and aligned for the program's run.
#[inline(always)]
unsafe fn add_to(p: *mut u64, v: u64, shared: bool) {
    if shared {
        add(p, v);
    } else {
        // SAFETY: the caller's pointer.
        unsafe { *p += v };
    }
}

/// One call into `s`: its count, count × datatype size when `bytes`
/// carries them, and its time `now` (the first call's also kept). `shared`:
/// see [`add_to`].
///
/// # Safety
/// `s` points into a map value, valid for the program's run.
#[inline(always)]
unsafe fn record(s: *mut OpStats, bytes: Option<(u64, u32)>, now: u64, shared: bool) {
    // SAFETY: the caller's pointer.
    unsafe {
        add_to(&raw mut (*s).calls, 1, shared);
        if let Some((count, dtype)) = bytes {
            let size = datatype_size(dtype);
            if size == 0 {
                add_to(&raw mut (*s).unknown_dtype, 1, shared);
            } else {
                add_to(&raw mut (*s).bytes, count.wrapping_mul(size), shared);
            }
        }
        // Claimed once: a plain read on every later call.
        if (*s).first_ns == 0 {
            let _ = claim(&raw mut (*s).first_ns, now);
        }
        (*s).last_ns = now;
    }
}

/// One call of the `key` no [`CommStats`] holds: its count, and count ×
/// datatype size when `bytes` carries them. The time it was counted at,
/// `None` when the map is full.
#[inline(always)]
fn count_call(key: &OpKey, bytes: Option<(u64, u32)>) -> Option<u64> {
    let Some(s) = get_or_insert!(NCCL_OPS, key, &OpStats::default()) else {
        bump(stat::NCCL_MAP_FULL);
        return None;
    };
    bump(stat::NCCL_CALLS);
    let now = stamp_ns();
    // SAFETY: a valid map value pointer for the program's run; the ops
    // under one key may come from several threads.
    unsafe { record(s, bytes, now, true) };
    Some(now)
}

/// (pid, comm)'s [`CommStats`]: its slot of `NCCL_FAST` when it holds it
/// or claims it now (free, and `NCCL_COLL` has no entry of it), else its
/// `NCCL_COLL` entry (inserted zeroed when new); `None` when that map is
/// full.
#[inline(always)]
fn comm_stats(pid: u32, comm: u64) -> Option<*mut CommStats> {
    let slot = NCCL_FAST.get_ptr_mut(fast::index(pid, comm))?;
    // SAFETY: a valid map value pointer for the program's run.
    unsafe {
        let state = (*slot).state;
        if state == fast::HELD && (*slot).pid == pid && (*slot).comm == comm {
            return Some(&raw mut (*slot).stats);
        }
    }
    let key = HandleKey {
        pid,
        _pad: 0,
        handle: comm,
    };
    if let Some(s) = NCCL_COLL.get_ptr_mut(&key) {
        return Some(s);
    }
    // SAFETY: as above; the state word is claimed with a compare-exchange,
    // so one CPU writes the key; the slot's stats were zeroed when it was
    // freed (by the collector, for a process that exited).
    unsafe {
        if (*slot).state == fast::FREE && claim(&raw mut (*slot).state, fast::CLAIMING) == 0 {
            (*slot).pid = pid;
            (*slot).comm = comm;
            (*slot).state = fast::HELD;
            return Some(&raw mut (*slot).stats);
        }
    }
    let zero = NCCL_COLL_ZERO.get(0)?;
    let _ = NCCL_COLL.insert(&key, zero, u64::from(aya_ebpf::bindings::BPF_NOEXIST));
    NCCL_COLL.get_ptr_mut(&key)
}

/// A collective or group call (`slot`: its op's in [`CommStats::ops`]) on
/// (pid, comm): counted, and for a collective recorded as the
/// communicator's collective number `seq + 1`, issued now. NCCL requires
/// a communicator's calls to be serialised by the application, so the
/// plain read-modify-writes per rank are exact; the groups (communicator
/// 0) are the process's, whose threads may call at once, and add
/// atomically.
#[inline(always)]
fn count_in_comm(pid: u32, comm: u64, slot: usize, collective: bool, bytes: Option<(u64, u32)>) {
    let Some(s) = comm_stats(pid, comm) else {
        bump(stat::NCCL_MAP_FULL);
        return;
    };
    bump(stat::NCCL_CALLS);
    // SAFETY: a valid map value pointer for the program's run; the slot is
    // bounds-checked, the ring index masked into its array.
    unsafe {
        let now = comm_stamp_ns(&raw mut (*s).tick);
        let Some(o) = (*s).ops.get_mut(slot) else {
            return;
        };
        record(&raw mut o.s, bytes, now, comm == 0);
        if collective {
            let n = (*s).ring.seq + 1;
            (*s).ring.ts[(n as usize) & (SEQ_RING - 1)] = now;
            (*s).ring.seq = n;
        }
    }
}

/// Stack argument `n` past the six register arguments (the 7th is `n` 0),
/// at `[sp + 8 + 8n]` at the function's entry (the probe's placement
/// changes neither `sp` nor the stack: `probes/entry.rs`).
#[inline(always)]
fn stack_arg(ctx: &ProbeContext, n: u64) -> u64 {
    // SAFETY: regs is the probe's pt_regs.
    let sp = unsafe { (*ctx.regs).rsp };
    // SAFETY: a user address read through the checked helper.
    unsafe { bpf_probe_read_user((sp + 8 + 8 * n) as *const u64) }.unwrap_or(0)
}

/// A lifecycle call's effect on (pid, comm)'s state: finalize and revoke
/// end a live or suspended communicator, suspend pauses a live one, resume
/// clears a suspension. Destroy and abort (`nccl_comm_end`) come last.
#[inline(always)]
fn set_state(pid: u32, comm: u64, state: u32) {
    let key = HandleKey {
        pid,
        _pad: 0,
        handle: comm,
    };
    let Some(c) = NCCL_COMMS.get_ptr_mut(&key) else {
        return;
    };
    // SAFETY: a valid map value pointer for the program's run.
    unsafe {
        let cur = (*c).ended;
        let next = match state {
            end::FINALIZED | end::REVOKED if cur == 0 || cur == end::SUSPENDED => state,
            end::SUSPENDED if cur == 0 => state,
            end::RESUMED if cur == end::SUSPENDED => 0,
            _ => cur,
        };
        (*c).ended = next;
    }
}
