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

    /// Whether every rank of the communicator takes part (its calls advance
    /// the communicator's collective sequence); send/recv, one-sided calls,
    /// groups and lifecycle calls do not.
    pub fn is_collective(op: u32) -> bool {
        op <= ALL_TO_ALL || op == GATHER || op == SCATTER
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

/// `ncclDataType_t` → bytes per element (0: unknown type).
pub const fn datatype_size(dt: u32) -> u64 {
    match dt {
        0 | 1 => 1,   // ncclInt8, ncclUint8
        2 | 3 => 4,   // ncclInt32, ncclUint32
        4 | 5 => 8,   // ncclInt64, ncclUint64
        6 => 2,       // ncclFloat16
        7 => 4,       // ncclFloat32
        8 => 8,       // ncclFloat64
        9 => 2,       // ncclBfloat16
        10 | 11 => 1, // ncclFloat8e4m3, ncclFloat8e5m2
        _ => 0,
    }
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
    /// When collective `n` was issued, if it is still in the ring.
    pub fn issued(&self, n: u64) -> Option<u64> {
        if n == 0 || n > self.seq || self.seq - n >= SEQ_RING as u64 {
            return None;
        }
        Some(self.ts[(n as usize) & (SEQ_RING - 1)])
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): `#[repr(C)]`, no implicit padding (sizes asserted), any bit pattern valid.
    unsafe impl aya::Pod for super::CommInfo {}
    unsafe impl aya::Pod for super::InInit {}
    unsafe impl aya::Pod for super::OpKey {}
    unsafe impl aya::Pod for super::OpStats {}
    unsafe impl aya::Pod for super::SeqRing {}
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
