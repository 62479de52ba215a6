//! NCCL probe types: communicators as each rank created them, and
//! collectives / point-to-point calls per (process, communicator, op).
//!
//! NCCL exports every API twice (`ncclX` weak, `pncclX` strong) at one
//! address; the collector attaches once per address. `ncclBcast` is not
//! probed: NCCL implements it by calling `ncclBroadcast` (through the PLT in
//! 2.32.3), so its calls are counted as `Broadcast`. The per-call-config
//! collectives (`ncclAllReduceConfig` …, NCCL 2.32) are separate code that
//! calls no other API: each is probed, and counted under its plain op.

/// Bytes of an `ncclUniqueId` (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// Operation kinds (low byte of the collective programs' attach cookie).
pub mod op {
    pub const ALL_REDUCE: u32 = 0;
    pub const ALL_GATHER: u32 = 1;
    pub const REDUCE_SCATTER: u32 = 2;
    pub const BROADCAST: u32 = 3;
    pub const REDUCE: u32 = 4;
    pub const ALL_TO_ALL: u32 = 5;
    pub const SEND: u32 = 6;
    pub const RECV: u32 = 7;
    /// `ncclGroupStart` / `ncclGroupEnd`: counted per process (communicator 0).
    pub const GROUP_START: u32 = 8;
    pub const GROUP_END: u32 = 9;
    /// `ncclGather` / `ncclGatherConfig` (newer NCCL): a collective.
    pub const GATHER: u32 = 10;
    /// `ncclScatter` / `ncclScatterConfig` (newer NCCL): a collective.
    pub const SCATTER: u32 = 11;
    /// One-sided `ncclPutSignal` (newer NCCL): count × datatype size put.
    pub const PUT_SIGNAL: u32 = 12;
    /// One-sided `ncclSignal`: a signal with no data.
    pub const SIGNAL: u32 = 13;
    /// One-sided `ncclWaitSignal`: a wait enqueued on the stream.
    pub const WAIT_SIGNAL: u32 = 14;
    /// Communicator lifecycle calls, counted per communicator; each also
    /// sets the communicator's end state (see [`super::end`]).
    pub const COMM_FINALIZE: u32 = 15;
    pub const COMM_REVOKE: u32 = 16;
    pub const COMM_SUSPEND: u32 = 17;
    pub const COMM_RESUME: u32 = 18;
    /// `ncclCommShrink` / `ncclCommGrow` calls, counted on the parent
    /// communicator (0 for a new rank of a grow); the new communicator is
    /// recorded as an init ([`super::init::SHRINK`], [`super::init::GROW`]).
    pub const COMM_SHRINK: u32 = 19;
    pub const COMM_GROW: u32 = 20;
    /// `ncclDevCommCreate`: a device communicator for kernels that issue
    /// communication themselves (NCCL's device API), whose traffic no host
    /// probe sees; counted on its communicator so the row says it has one.
    pub const DEV_COMM_CREATE: u32 = 21;
    pub const COUNT: u32 = 22;

    /// Label value of an op (the API name without its prefix).
    pub fn name(op: u32) -> &'static str {
        match op {
            ALL_REDUCE => "AllReduce",
            ALL_GATHER => "AllGather",
            REDUCE_SCATTER => "ReduceScatter",
            BROADCAST => "Broadcast",
            REDUCE => "Reduce",
            ALL_TO_ALL => "AlltoAll",
            SEND => "Send",
            RECV => "Recv",
            GROUP_START => "GroupStart",
            GROUP_END => "GroupEnd",
            GATHER => "Gather",
            SCATTER => "Scatter",
            PUT_SIGNAL => "PutSignal",
            SIGNAL => "Signal",
            WAIT_SIGNAL => "WaitSignal",
            COMM_FINALIZE => "CommFinalize",
            COMM_REVOKE => "CommRevoke",
            COMM_SUSPEND => "CommSuspend",
            COMM_RESUME => "CommResume",
            COMM_SHRINK => "CommShrink",
            COMM_GROW => "CommGrow",
            DEV_COMM_CREATE => "DevCommCreate",
            _ => "unknown",
        }
    }

    /// The uprobe program of `op` (one per op: its op and argument layout
    /// are constants in it, where one shared program reads them from the
    /// attach cookie, a helper call on every call); `nccl_call` reads the
    /// cookie.
    pub const fn program(op: u32) -> &'static str {
        match op {
            ALL_REDUCE => "nccl_all_reduce",
            ALL_GATHER => "nccl_all_gather",
            REDUCE_SCATTER => "nccl_reduce_scatter",
            BROADCAST => "nccl_broadcast",
            REDUCE => "nccl_reduce",
            ALL_TO_ALL => "nccl_all_to_all",
            SEND => "nccl_send",
            RECV => "nccl_recv",
            GROUP_START => "nccl_group_start",
            GROUP_END => "nccl_group_end",
            GATHER => "nccl_gather",
            SCATTER => "nccl_scatter",
            PUT_SIGNAL => "nccl_put_signal",
            SIGNAL => "nccl_signal",
            WAIT_SIGNAL => "nccl_wait_signal",
            COMM_FINALIZE => "nccl_comm_finalize",
            COMM_REVOKE => "nccl_comm_revoke",
            COMM_SUSPEND => "nccl_comm_suspend",
            COMM_RESUME => "nccl_comm_resume",
            DEV_COMM_CREATE => "nccl_dev_comm_create",
            _ => "nccl_call",
        }
    }

    /// Whether every rank of the communicator takes part (its calls advance
    /// the communicator's collective sequence); send/recv, one-sided calls,
    /// groups and lifecycle calls do not.
    pub const fn is_collective(op: u32) -> bool {
        op <= ALL_TO_ALL || op == GATHER || op == SCATTER
    }

    /// The ops a [`super::CommStats`] holds, in slot order: the
    /// collectives, then the groups (communicator 0).
    pub const IN_COMM_STATS: [u32; super::COMM_OPS] = [
        ALL_REDUCE,
        ALL_GATHER,
        REDUCE_SCATTER,
        BROADCAST,
        REDUCE,
        ALL_TO_ALL,
        GATHER,
        SCATTER,
        GROUP_START,
        GROUP_END,
    ];

    /// `op`'s slot in [`super::CommStats::ops`], if it has one (the
    /// inverse of [`IN_COMM_STATS`]).
    pub const fn comm_slot(op: u32) -> Option<usize> {
        match op {
            ALL_REDUCE..=ALL_TO_ALL => Some(op as usize),
            GATHER | SCATTER => Some(op as usize - 4),
            GROUP_START | GROUP_END => Some(op as usize),
            _ => None,
        }
    }
}

/// Where a collective's count, datatype and communicator are among its
/// arguments (x86-64 SysV: the 7th and later integer arguments are on the
/// stack). Bits 8..16 of the attach cookie.
pub mod layout {
    /// `(send, recv, count, datatype, op|root, comm, stream)`: AllReduce,
    /// ReduceScatter, Broadcast. count = arg 2, datatype = arg 3, comm = arg 5.
    pub const COMM_ARG5: u32 = 0;
    /// `(send, recv, count, datatype, comm, stream)`: AllGather, AlltoAll.
    pub const COMM_ARG4: u32 = 1;
    /// `(buff, count, datatype, peer, comm, stream)`: Send, Recv.
    /// count = arg 1, datatype = arg 2, comm = arg 4.
    pub const COUNT_ARG1: u32 = 2;
    /// `(send, recv, count, datatype, op, root, comm, stream)`: Reduce; comm
    /// is the 7th argument, on the stack at `[sp + 8]` at entry.
    pub const COMM_STACK: u32 = 3;
    /// No arguments (groups).
    pub const NONE: u32 = 4;
    /// `ncclPutSignal(localbuff, count, datatype, peer, peerWin,
    /// peerWinOffset, sigIdx, ctx, flags, comm, stream)`: count = arg 1,
    /// datatype = arg 2, comm the 10th argument, at `[sp + 32]` at entry.
    pub const PUT_SIGNAL: u32 = 5;
    /// `ncclSignal(peer, sigIdx, ctx, flags, comm, stream)`: comm = arg 4, no data.
    pub const COMM_ONLY_ARG4: u32 = 6;
    /// `ncclWaitSignal(nDesc, descs, comm, stream)`: comm = arg 2, no data.
    pub const COMM_ONLY_ARG2: u32 = 7;
    /// `ncclCommFinalize(comm)`, `ncclCommRevoke(comm, flags)`,
    /// `ncclCommSuspend(comm, flags)`, `ncclCommResume(comm)`,
    /// `ncclDevCommCreate(comm, reqs*, devComm*)`: comm = arg 0, no data; a
    /// lifecycle op also sets the communicator's state ([`super::end::of_op`]).
    pub const COMM_ARG0: u32 = 8;

    /// The layout of `op`'s APIs (its `*Config` variant's too: one more
    /// argument at the end); [`NONE`] for an op with no program of its own.
    pub const fn of_op(op: u32) -> u32 {
        use super::op;
        match op {
            op::ALL_REDUCE | op::REDUCE_SCATTER | op::BROADCAST | op::GATHER | op::SCATTER => {
                COMM_ARG5
            }
            op::ALL_GATHER | op::ALL_TO_ALL => COMM_ARG4,
            op::REDUCE => COMM_STACK,
            op::SEND | op::RECV => COUNT_ARG1,
            op::PUT_SIGNAL => PUT_SIGNAL,
            op::SIGNAL => COMM_ONLY_ARG4,
            op::WAIT_SIGNAL => COMM_ONLY_ARG2,
            op::COMM_FINALIZE
            | op::COMM_REVOKE
            | op::COMM_SUSPEND
            | op::COMM_RESUME
            | op::DEV_COMM_CREATE => COMM_ARG0,
            _ => NONE,
        }
    }

    /// Whether the layout carries a count and a datatype (bytes are summed).
    pub const fn has_bytes(layout: u32) -> bool {
        layout <= COMM_STACK || layout == PUT_SIGNAL
    }
}

/// Communicator end states (`CommInfo::ended`; the attach cookie of
/// `nccl_comm_end`). Any nonzero state means the communicator issues no
/// more collectives (for now, when suspended).
pub mod end {
    /// `ncclCommDestroy`.
    pub const DESTROYED: u32 = 1;
    /// `ncclCommAbort`.
    pub const ABORTED: u32 = 2;
    /// `ncclCommFinalize`: flushed, only `ncclCommDestroy` may follow.
    pub const FINALIZED: u32 = 3;
    /// `ncclCommRevoke` (newer NCCL): in-flight operations stopped; only
    /// destroy, split or shrink may follow.
    pub const REVOKED: u32 = 4;
    /// `ncclCommSuspend` (newer NCCL): resources released until `ncclCommResume`.
    pub const SUSPENDED: u32 = 5;
    /// `ncclCommResume`: clears [`SUSPENDED`] (never stored).
    pub const RESUMED: u32 = 6;

    /// The state a lifecycle op ([`super::op`]`::COMM_*`) sets (0: none).
    pub const fn of_op(op: u32) -> u32 {
        match op {
            super::op::COMM_FINALIZE => FINALIZED,
            super::op::COMM_REVOKE => REVOKED,
            super::op::COMM_SUSPEND => SUSPENDED,
            super::op::COMM_RESUME => RESUMED,
            _ => 0,
        }
    }

    /// Label value of an end state (`""`: live).
    pub fn name(state: u32) -> &'static str {
        match state {
            0 => "",
            DESTROYED => "destroyed",
            ABORTED => "aborted",
            FINALIZED => "finalized",
            REVOKED => "revoked",
            SUSPENDED => "suspended",
            _ => "unknown",
        }
    }
}

/// The attach cookie of a collective program: op and argument layout.
pub const fn cookie(op: u32, layout: u32) -> u64 {
    (op | (layout << 8)) as u64
}

/// Communicator creation entry points (cookie of the init programs).
pub mod init {
    /// `ncclCommInitRank(comm*, nranks, ncclUniqueId id, rank)`: the id by
    /// value, on the stack at `[sp + 8]`; rank in the 3rd integer register.
    pub const INIT_RANK: u32 = 0;
    /// `ncclCommInitRankConfig(comm*, nranks, id, rank, config*)`.
    pub const INIT_RANK_CONFIG: u32 = 1;
    /// `ncclCommInitRankScalable(comm*, nranks, rank, nId, ncclUniqueId *ids, config*)`.
    pub const INIT_RANK_SCALABLE: u32 = 2;
    /// `ncclCommInitAll(comm*, ndev, const int *devlist)`: every rank in one process.
    pub const INIT_ALL: u32 = 3;
    /// `ncclCommSplit(parent, color, key, comm*, config*)`.
    pub const SPLIT: u32 = 4;
    /// `NCCL_SPLIT_NOCOLOR`: the rank takes part in the split but joins no
    /// new communicator (NCCL returns a NULL one).
    pub const SPLIT_NOCOLOR: i32 = -1;

    /// The `NCCL_COMMS` handle a `NCCL_SPLIT_NOCOLOR` split is recorded
    /// under (it creates no communicator, yet the collector pairs every
    /// rank's splits of a parent call by call): bit 63, which no user-space
    /// pointer has, over the call's return time.
    pub const fn nocolor_handle(created_ns: u64) -> u64 {
        created_ns | (1 << 63)
    }

    /// Whether a communicator record is a `NCCL_SPLIT_NOCOLOR` split's
    /// (no communicator, not a rank).
    pub const fn is_nocolor(kind: u32, color: i32) -> bool {
        kind == SPLIT && color == SPLIT_NOCOLOR
    }
    /// `ncclCommShrink(parent, int *excludeRanks, excludeCount, comm*, config*,
    /// flags)` (newer NCCL): the parent's ranks but the excluded ones.
    pub const SHRINK: u32 = 5;
    /// `ncclCommGrow(parent, nranks, const ncclUniqueId *id, rank, comm*,
    /// config*)` (newer NCCL): the parent's ranks (`parent` set, rank -1)
    /// and new ones (`parent` NULL, `id` and rank given).
    pub const GROW: u32 = 6;
    /// `CommInfo::color` of a shrink (split colours are ≥ 0; a split with
    /// `NCCL_SPLIT_NOCOLOR`, -1, creates nothing): the communicator id
    /// follows the parent as a split's does. `key` is the excluded count.
    pub const SHRINK_COLOR: i32 = -2;
    /// `CommInfo::color` of a grow by a rank of the parent.
    pub const GROW_COLOR: i32 = -3;
    /// Excluded ranks a shrink's probe reads to compute the rank's new rank.
    pub const SHRINK_EXCLUDE_MAX: usize = 32;

    pub fn name(kind: u32) -> &'static str {
        match kind {
            INIT_RANK => "ncclCommInitRank",
            INIT_RANK_CONFIG => "ncclCommInitRankConfig",
            INIT_RANK_SCALABLE => "ncclCommInitRankScalable",
            INIT_ALL => "ncclCommInitAll",
            SPLIT => "ncclCommSplit",
            SHRINK => "ncclCommShrink",
            GROW => "ncclCommGrow",
            _ => "unknown",
        }
    }
}

/// `ncclCommInitAll`: communicators read back at its return (one per device).
pub const INIT_ALL_MAX: usize = 8;

/// `ncclDataType_t` → bytes per element (0: unknown type), 4 bits each:
/// ncclInt8, ncclUint8 1; ncclInt32, ncclUint32 4; ncclInt64, ncclUint64
/// 8; ncclFloat16 2; ncclFloat32 4; ncclFloat64 8; ncclBfloat16 2;
/// ncclFloat8e4m3, ncclFloat8e5m2 1 (a shift and a mask in the probe, no
/// branches).
const DATATYPE_SIZES: u64 = 0x1128_4288_4411;

/// `ncclDataType_t` → bytes per element (0: unknown type).
pub const fn datatype_size(dt: u32) -> u64 {
    if dt >= 12 {
        return 0;
    }
    (DATATYPE_SIZES >> (dt * 4)) & 0xf
}

/// A communicator as one rank created it, keyed by (pid, `ncclComm_t`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CommInfo {
    /// The `ncclUniqueId` the ranks passed (all ranks pass the same bytes);
    /// for a split, the parent's id (see `color`); zero for `ncclCommInitAll`.
    pub unique_id: [u8; UNIQUE_ID_BYTES],
    /// `ncclComm_t` of the parent for a split, else 0.
    pub parent: u64,
    /// `bpf_ktime_get_ns` at the init's return.
    pub created_ns: u64,
    /// -1 when not passed (a split: NCCL computes it).
    pub nranks: i32,
    pub rank: i32,
    /// CUDA device of the creating thread's current context (-1: unknown).
    pub device: i32,
    /// One of [`init`].
    pub kind: u32,
    /// Split colour; for `ncclCommInitAll` the index in its device list.
    pub color: i32,
    /// Split key.
    pub key: i32,
    /// `ncclResult_t` the init returned.
    pub result: u32,
    /// One of [`end`] (0: live): destroy, abort, finalize, revoke, suspend.
    pub ended: u32,
}
const _: () = assert!(core::mem::size_of::<CommInfo>() == UNIQUE_ID_BYTES + 16 + 32);

/// An init call between its entry and return, per thread.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct InInit {
    pub info: CommInfo,
    /// Where NCCL writes the new `ncclComm_t` (an array for `ncclCommInitAll`).
    pub out: u64,
    /// `ncclCommInitAll`'s device list pointer.
    pub devlist: u64,
}
const _: () = assert!(core::mem::size_of::<InInit>() == core::mem::size_of::<CommInfo>() + 16);

/// Aggregate key: which process called which op on which communicator.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpKey {
    pub pid: u32,
    /// One of [`op`].
    pub op: u32,
    /// `ncclComm_t` (0 for groups).
    pub comm: u64,
}
const _: () = assert!(core::mem::size_of::<OpKey>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpStats {
    pub calls: u64,
    /// Sum of count × datatype size.
    pub bytes: u64,
    /// Calls with a datatype the probe does not know (their bytes are not summed).
    pub unknown_dtype: u64,
    /// `bpf_ktime_get_ns` of the first and latest call.
    pub first_ns: u64,
    pub last_ns: u64,
}
const _: () = assert!(core::mem::size_of::<OpStats>() == 40);

/// Collectives whose issue time each rank keeps (a power of two).
pub const SEQ_RING: usize = 16;

/// Per (pid, communicator): the collectives issued so far and the issue
/// times (`bpf_ktime_get_ns`) of the latest [`SEQ_RING`], collective `n`
/// (1-based) at `ts[n % SEQ_RING]`. Ranks of one communicator on a host are
/// compared at the same sequence number: the lag of a rank behind the first
/// to issue that collective.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqRing {
    pub seq: u64,
    pub ts: [u64; SEQ_RING],
}
const _: () = assert!(core::mem::size_of::<SeqRing>() == 8 + 8 * SEQ_RING);
const _: () = assert!(SEQ_RING.is_power_of_two());

impl SeqRing {
    /// `self` and `other` counted apart for one communicator (never by
    /// the probe, which keeps each in one place, unless the application
    /// broke NCCL's rule of one call at a time per communicator): the
    /// collectives of both, and the latest issue times among them.
    pub fn merge(&self, other: &SeqRing) -> SeqRing {
        let mut all = [0u64; 2 * SEQ_RING];
        let mut n = 0;
        for r in [self, other] {
            let kept = r.seq.min(SEQ_RING as u64);
            for k in 0..kept {
                all[n] = r.ts[((r.seq - k) as usize) & (SEQ_RING - 1)];
                n += 1;
            }
        }
        all[..n].sort_unstable();
        let seq = self.seq + other.seq;
        let mut out = SeqRing {
            seq,
            ts: [0; SEQ_RING],
        };
        // The latest issue times, numbered back from `seq`.
        for (back, &t) in all[..n].iter().rev().take(SEQ_RING).enumerate() {
            out.ts[((seq - back as u64) as usize) & (SEQ_RING - 1)] = t;
        }
        out
    }

    /// When collective `n` was issued, if it is still in the ring.
    pub fn issued(&self, n: u64) -> Option<u64> {
        if n == 0 || n > self.seq || self.seq - n >= SEQ_RING as u64 {
            return None;
        }
        Some(self.ts[(n as usize) & (SEQ_RING - 1)])
    }
}

/// Ops a [`CommStats`] holds ([`op::IN_COMM_STATS`]).
pub const COMM_OPS: usize = 10;

/// Per (pid, communicator): its collectives (and, for communicator 0, the
/// process's groups) in one value, so that such a call's probe does one
/// lookup (its count, bytes and times, and the collectives' issue-time
/// ring); the collector reads it back as per-op [`OpStats`] and the
/// [`SeqRing`]. Other ops (point-to-point, one-sided, lifecycle) are
/// counted per [`OpKey`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommStats {
    /// The probe's clock for these calls: the jiffy of the latest and the
    /// `bpf_ktime_get_ns` read at the first call in it (the time every
    /// call in that jiffy is stamped with). First, so that in the probe's
    /// table ([`FastSlot`]) it shares the slot's first cache line with the
    /// key and the ring's count: a call touches that line, the ring's
    /// line it writes and its op's.
    pub tick: [u64; 2],
    pub ring: SeqRing,
    /// Puts the first op (`ncclAllReduce`'s) on a cache line of its own in
    /// the probe's table.
    pub _pad: [u64; 2],
    /// Slot [`op::comm_slot`]`(op)`; `calls` 0 where the op was never called.
    pub ops: [CommOp; COMM_OPS],
}
const _: () = assert!(
    core::mem::size_of::<CommStats>()
        == core::mem::size_of::<SeqRing>() + 32 + COMM_OPS * core::mem::size_of::<CommOp>()
);
const _: () = assert!((24 + core::mem::size_of::<SeqRing>() + 32).is_multiple_of(64));

/// One op's [`OpStats`] in a [`CommStats`], padded to a cache line (in the
/// probe's table, whose slots start on one, each op is on a line of its
/// own).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommOp {
    pub s: OpStats,
    pub _pad: [u64; 3],
}
const _: () = assert!(core::mem::size_of::<CommOp>() == 64);

impl CommStats {
    /// Each op called on the communicator with its stats.
    pub fn called(&self) -> impl Iterator<Item = (u32, &OpStats)> {
        op::IN_COMM_STATS
            .iter()
            .zip(&self.ops)
            .filter(|(_, o)| o.s.calls > 0)
            .map(|(&o, s)| (o, &s.s))
    }
}

/// The probe's table of [`CommStats`] in an array (a lookup the verifier
/// inlines, where a hash map's costs a hashed search): slot
/// [`fast::index`]`(pid, comm)` holds one (pid, communicator) once claimed;
/// a (pid, communicator) whose slot another holds is kept in the
/// `NCCL_COLL` hash map instead, and a slot is only claimed by one that is
/// not there, so each lives in one place.
pub mod fast {
    /// Slots (a power of two).
    pub const SLOTS: u32 = 1024;
    /// [`super::FastSlot::state`]: free, being claimed (its key not yet
    /// written), held.
    pub const FREE: u64 = 0;
    pub const CLAIMING: u64 = 1;
    pub const HELD: u64 = 2;

    /// The slot of (pid, comm): a multiplicative hash.
    pub const fn index(pid: u32, comm: u64) -> u32 {
        let h = (comm ^ ((pid as u64) << 40) ^ pid as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - SLOTS.trailing_zeros())) as u32
    }
}

/// One slot of the [`fast`] table.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FastSlot {
    /// One of [`fast::FREE`], [`fast::CLAIMING`], [`fast::HELD`].
    pub state: u64,
    pub pid: u32,
    pub _pad: u32,
    /// `ncclComm_t` (0: the process's groups).
    pub comm: u64,
    pub stats: CommStats,
}
const _: () = assert!(core::mem::size_of::<FastSlot>() == 24 + core::mem::size_of::<CommStats>());
// Whole cache lines: the table is mmapable, so its values start on a page.
const _: () = assert!(core::mem::size_of::<FastSlot>().is_multiple_of(64));

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): `#[repr(C)]`, no implicit padding (sizes asserted), any bit pattern valid.
    unsafe impl aya::Pod for super::CommInfo {}
    unsafe impl aya::Pod for super::InInit {}
    unsafe impl aya::Pod for super::OpKey {}
    unsafe impl aya::Pod for super::OpStats {}
    unsafe impl aya::Pod for super::SeqRing {}
    unsafe impl aya::Pod for super::CommStats {}
    unsafe impl aya::Pod for super::FastSlot {}
    unsafe impl aya::Pod for super::CommOp {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_sizes_follow_nccl_h() {
        // nccl.h: ncclInt8 0 … ncclBfloat16 9, ncclFloat8e4m3 10, ncclFloat8e5m2 11.
        let sizes: [u64; 12] = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];
        for (dt, s) in sizes.iter().enumerate() {
            assert_eq!(datatype_size(dt as u32), *s, "datatype {dt}");
        }
        assert_eq!(datatype_size(12), 0);
    }

    #[test]
    fn collectives_are_the_all_rank_ops() {
        let coll: [u32; 8] = [
            op::ALL_REDUCE,
            op::ALL_GATHER,
            op::REDUCE_SCATTER,
            op::BROADCAST,
            op::REDUCE,
            op::ALL_TO_ALL,
            op::GATHER,
            op::SCATTER,
        ];
        for o in 0..op::COUNT {
            assert_eq!(op::is_collective(o), coll.contains(&o), "{}", op::name(o));
            assert_ne!(op::name(o), "unknown", "op {o} has a label");
        }
    }

    #[test]
    fn every_collective_and_group_has_its_own_slot() {
        let mut seen = [false; COMM_OPS];
        for o in 0..op::COUNT {
            let Some(slot) = op::comm_slot(o) else {
                assert!(!op::is_collective(o), "{} has a slot", op::name(o));
                continue;
            };
            assert!(slot < COMM_OPS, "{}", op::name(o));
            assert!(!seen[slot], "{} shares slot {slot}", op::name(o));
            seen[slot] = true;
            assert_eq!(op::IN_COMM_STATS[slot], o, "{}", op::name(o));
        }
        assert!(seen.iter().all(|&s| s), "every slot is an op's");
        assert_eq!(op::comm_slot(op::GROUP_END), Some(9));
        assert_eq!(op::comm_slot(op::SEND), None);
    }

    #[test]
    fn a_comm_value_reads_back_as_its_called_ops() {
        let mut c = CommStats::default();
        c.ops[op::comm_slot(op::GATHER).unwrap()].s.calls = 3;
        c.ops[op::comm_slot(op::ALL_REDUCE).unwrap()].s.calls = 2;
        let mut got = c.called().map(|(o, s)| (o, s.calls));
        assert_eq!(got.next(), Some((op::ALL_REDUCE, 2)));
        assert_eq!(got.next(), Some((op::GATHER, 3)));
        assert_eq!(got.next(), None);
    }

    #[test]
    fn fast_slots_spread_and_stay_in_the_table() {
        let mut hit = [0u32; fast::SLOTS as usize];
        // 64 communicators (malloc'd, 16-byte aligned, 4 KiB apart) of 8 ranks.
        for pid in 1000..1008u32 {
            for c in 0..64u64 {
                let i = fast::index(pid, 0x5555_0000_0000 + c * 4096);
                hit[i as usize] += 1;
            }
        }
        let used = hit.iter().filter(|&&h| h > 0).count();
        assert!(used > 350, "512 keys in {used} slots");
    }

    fn ring(seq: u64, t0: u64, step: u64) -> SeqRing {
        let mut r = SeqRing {
            seq,
            ts: [0; SEQ_RING],
        };
        for n in seq.saturating_sub(SEQ_RING as u64 - 1).max(1)..=seq {
            r.ts[(n as usize) & (SEQ_RING - 1)] = t0 + n * step;
        }
        r
    }

    #[test]
    fn rings_counted_apart_merge_into_the_latest_issues() {
        // 20 collectives at 10, 20, … 200 and 3 at 1005, 1010, 1015.
        let a = ring(20, 0, 10);
        let b = ring(3, 1000, 5);
        let m = a.merge(&b);
        assert_eq!(m.seq, 23);
        assert_eq!(m.issued(23), Some(1015));
        assert_eq!(m.issued(21), Some(1005));
        assert_eq!(m.issued(20), Some(200));
        assert_eq!(m.issued(8), Some(80));
        assert_eq!(m.issued(7), None, "out of the ring");
        assert_eq!(a.merge(&SeqRing::default()), a);
    }

    #[test]
    fn lifecycle_states_count_as_their_calls() {
        assert_eq!(end::of_op(op::COMM_FINALIZE), end::FINALIZED);
        assert_eq!(end::of_op(op::COMM_REVOKE), end::REVOKED);
        assert_eq!(end::of_op(op::COMM_SUSPEND), end::SUSPENDED);
        assert_eq!(end::of_op(op::COMM_RESUME), end::RESUMED);
        assert_eq!(end::of_op(op::ALL_REDUCE), 0);
        assert_eq!(end::name(0), "");
        assert_eq!(end::name(end::SUSPENDED), "suspended");
    }

    #[test]
    fn bytes_only_where_a_count_is_passed() {
        for l in [
            layout::COMM_ARG5,
            layout::COMM_ARG4,
            layout::COUNT_ARG1,
            layout::COMM_STACK,
            layout::PUT_SIGNAL,
        ] {
            assert!(layout::has_bytes(l), "{l}");
        }
        for l in [
            layout::NONE,
            layout::COMM_ONLY_ARG4,
            layout::COMM_ONLY_ARG2,
            layout::COMM_ARG0,
        ] {
            assert!(!layout::has_bytes(l), "{l}");
        }
    }
}
