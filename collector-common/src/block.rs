//! Block-layer aggregation shared between the `block` probes and the collector.
//!
//! The probes aggregate in the kernel: per ([`BlockKey`]) a [`BlockStats`]
//! with request count, bytes and a log2 latency histogram. Userspace reads the
//! maps every window and turns differences into rates and percentiles.

/// Operation classes (`BlockKey::op`), decoded from the tracepoint's `rwbs`.
pub mod op {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const FLUSH: u32 = 2;
    pub const DISCARD: u32 = 3;
    /// Anything else (e.g. zone management, secure erase); not exported as an op label.
    pub const OTHER: u32 = 4;
    pub const COUNT: usize = 5;
}

/// Number of log2 latency buckets. Bucket `i` holds latencies in
/// `[2^i, 2^(i+1))` nanoseconds (bucket 0 also holds 0 ns); the last bucket
/// is open-ended (≥ 2^39 ns ≈ 550 s).
pub const LAT_BUCKETS: usize = 40;

/// Aggregation key: device, operation and the submitter's cgroup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// Kernel `dev_t` as the tracepoint reports it: `major << 20 | minor`.
    pub dev: u32,
    /// One of [`op`].
    pub op: u32,
    /// cgroup v2 id of the submitting task, 0 if unknown.
    pub cgroup_id: u64,
}
const _: () = assert!(core::mem::size_of::<BlockKey>() == 16);

/// Per-key totals since the probes were attached (monotonic counters).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockStats {
    /// Completed requests.
    pub requests: u64,
    /// Completed bytes.
    pub bytes: u64,
    /// Sum of issue→complete latency of the timed requests, ns.
    pub latency_sum_ns: u64,
    /// Largest issue→complete latency seen, ns.
    pub latency_max_ns: u64,
    /// Requests that had an issue timestamp (the histogram's total).
    pub timed: u64,
    pub hist: [u64; LAT_BUCKETS],
}
const _: () = assert!(core::mem::size_of::<BlockStats>() == 8 * (5 + LAT_BUCKETS));

impl BlockStats {
    pub const ZERO: Self = Self {
        requests: 0,
        bytes: 0,
        latency_sum_ns: 0,
        latency_max_ns: 0,
        timed: 0,
        hist: [0; LAT_BUCKETS],
    };

    /// Adds another CPU's share of the same key (the probes keep one value
    /// per CPU): counters add, the maximum is the larger.
    pub fn merge(&mut self, o: &Self) {
        self.requests += o.requests;
        self.bytes += o.bytes;
        self.latency_sum_ns += o.latency_sum_ns;
        self.latency_max_ns = self.latency_max_ns.max(o.latency_max_ns);
        self.timed += o.timed;
        for (a, b) in self.hist.iter_mut().zip(o.hist.iter()) {
            *a += b;
        }
    }
}

/// In-flight request record, keyed by (dev, sector) between issue and completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InflightKey {
    pub dev: u32,
    pub op: u32,
    pub sector: u64,
}
const _: () = assert!(core::mem::size_of::<InflightKey>() == 16);

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InflightVal {
    pub issue_ns: u64,
    pub cgroup_id: u64,
    /// Bytes completed so far (`block_rq_complete`), moved into the aggregate at done.
    pub bytes: u64,
    pub pid: u32,
    /// Sectors not yet completed (from the start tracepoint's `nr_sector`;
    /// 0 = unknown). A partial completion (`blk_update_request()` called for
    /// part of the request, e.g. a short read that loop requeues) advances the
    /// request's sector, so the record moves to the new sector with it.
    pub left_sectors: u32,
}
const _: () = assert!(core::mem::size_of::<InflightVal>() == 32);

/// In-flight record of the BTF-enabled probes, keyed by the kernel's
/// `struct request *` between start and done: the device and op are read
/// once at start, so the completion side needs no reads of the request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RqInflight {
    /// The probe's own start time; 0 when the kernel's `start_time_ns` (the
    /// one `/sys/block/<dev>/stat` uses) times the request instead.
    pub issue_ns: u64,
    pub cgroup_id: u64,
    /// Bytes completed so far (`block_rq_complete`), moved into the aggregate at done.
    pub bytes: u64,
    /// Start sector (read only while per-request sampling is on; else 0).
    pub sector: u64,
    /// `major << 20 | minor` of the request's disk.
    pub dev: u32,
    /// One of [`op`].
    pub op: u32,
    /// Pads [`RqSlot`] to one cache line.
    pub _pad: [u64; 2],
}
const _: () = assert!(core::mem::size_of::<RqInflight>() == 56);

/// Per-CPU direct-mapped aggregate slots (`BLOCK_AGG_SLOTS`) in front of
/// the per-CPU hash map `BLOCK_AGG`: on each CPU a key claims slot
/// [`agg_slot_index`] if it is free and keeps it for good (aggregates are
/// never removed); a key whose slot another key holds uses the hash map.
/// A key's total is the sum of its slots and hash values over all CPUs.
pub const AGG_SLOTS: u32 = 256;

/// One aggregate slot: `used` is non-zero once `key` owns it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggSlot {
    pub used: u64,
    pub key: BlockKey,
    pub stats: BlockStats,
}
const _: () = assert!(core::mem::size_of::<AggSlot>() == 24 + core::mem::size_of::<BlockStats>());

/// 2^64 / φ: the multiplier of the Fibonacci (multiplicative) hashes below.
pub(crate) const PHI: u64 = 0x9E37_79B9_7F4A_7C15;

/// The aggregate slot of `k`: a multiplicative hash of its fields.
#[inline(always)]
pub fn agg_slot_index(k: &BlockKey) -> u32 {
    let h = ((u64::from(k.dev) << 8) | u64::from(k.op)).wrapping_mul(PHI) ^ k.cgroup_id;
    (h.wrapping_mul(PHI) >> 56) as u32 % AGG_SLOTS
}

/// Slots of the BTF probes' in-flight table (`BLOCK_RQ_SLOTS`): a request's
/// record lives in slot [`rq_slot`] of its pointer when that slot is free,
/// else in the overflow hash map `BLOCK_INFLIGHT_RQ`.
pub const RQ_SLOTS: u32 = 1 << RQ_SLOT_BITS;
pub const RQ_SLOT_BITS: u32 = 16;

/// One slot: the owning request as a number (its pointer's distance from
/// the table, never 0; 0 = free) and its record. 64 bytes: the table is
/// mmapable, so its values start on a page and each slot fills exactly one
/// cache line (the start and the done of a request often run on different
/// CPUs; a slot across two lines moved both between them).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RqSlot {
    pub rq: u64,
    pub rec: RqInflight,
}
const _: () = assert!(core::mem::size_of::<RqSlot>() == 64);

/// The slot of request `rq` (a pointer, or its distance from a fixed
/// address): a multiplicative hash, which spreads the tag set's evenly
/// spaced requests.
#[inline(always)]
pub fn rq_slot(rq: u64) -> u32 {
    ((rq >> 4).wrapping_mul(PHI) >> (64 - RQ_SLOT_BITS)) as u32
}

/// Maps a request's `cmd_flags & REQ_OP_MASK` to [`op`] exactly as the
/// classic tracepoints' `rwbs` decodes (`blk_fill_rwbs()`): read, write,
/// flush, discard and secure erase ("DE") as discard; anything else other.
#[inline(always)]
pub fn op_of_cmd_flags(cmd_flags: u32) -> u32 {
    match cmd_flags & 0xff {
        0 => op::READ,
        1 => op::WRITE,
        2 => op::FLUSH,
        3 | 5 => op::DISCARD,
        _ => op::OTHER,
    }
}

/// Sampled per-request record for the timeline (optional stream).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockRequestData {
    pub sector: u64,
    pub latency_ns: u64,
    pub bytes: u32,
    pub dev: u32,
    pub op: u32,
    pub _pad: u32,
}
const _: () = assert!(core::mem::size_of::<BlockRequestData>() == 32);

/// log2 bucket index of a latency in ns, clamped to the last bucket.
///
/// Written with shifts only: the BPF instruction set has no count-leading-zeros,
/// and this must compile for both sides.
#[inline(always)]
pub fn lat_bucket(ns: u64) -> usize {
    let mut v = ns;
    let mut b = 0usize;
    if v >= 1 << 32 {
        v >>= 32;
        b += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        b += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        b += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        b += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        b += 2;
    }
    if v >= 1 << 1 {
        b += 1;
    }
    if b >= LAT_BUCKETS {
        LAT_BUCKETS - 1
    } else {
        b
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all four): `#[repr(C)]`, no implicit padding (sizes asserted), any bit pattern valid.
    unsafe impl aya::Pod for super::BlockKey {}
    unsafe impl aya::Pod for super::BlockStats {}
    unsafe impl aya::Pod for super::InflightKey {}
    unsafe impl aya::Pod for super::InflightVal {}
    unsafe impl aya::Pod for super::BlockRequestData {}
    unsafe impl aya::Pod for super::RqInflight {}
    unsafe impl aya::Pod for super::RqSlot {}
    unsafe impl aya::Pod for super::AggSlot {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::distinct;

    #[test]
    fn request_ops_decode_like_rwbs() {
        // REQ_OP_* values (include/linux/blk_types.h), with flag bits above
        // the op mask (e.g. REQ_PREFLUSH on a write stays a write).
        assert_eq!(op_of_cmd_flags(0), op::READ);
        assert_eq!(op_of_cmd_flags(1), op::WRITE);
        assert_eq!(op_of_cmd_flags(1 | 1 << 18), op::WRITE);
        assert_eq!(op_of_cmd_flags(2 | 1 << 18), op::FLUSH);
        assert_eq!(op_of_cmd_flags(3), op::DISCARD);
        assert_eq!(op_of_cmd_flags(5), op::DISCARD);
        assert_eq!(op_of_cmd_flags(9), op::OTHER);
    }

    #[test]
    fn per_cpu_values_merge_into_one_total() {
        let mut a = BlockStats::ZERO;
        a.requests = 3;
        a.bytes = 12288;
        a.timed = 2;
        a.latency_sum_ns = 5000;
        a.latency_max_ns = 4000;
        a.hist[11] = 2;
        let mut b = BlockStats::ZERO;
        b.requests = 1;
        b.bytes = 4096;
        b.timed = 1;
        b.latency_sum_ns = 9000;
        b.latency_max_ns = 9000;
        b.hist[13] = 1;
        let mut t = BlockStats::ZERO;
        t.merge(&a);
        t.merge(&b);
        assert_eq!((t.requests, t.bytes, t.timed), (4, 16384, 3));
        assert_eq!((t.latency_sum_ns, t.latency_max_ns), (14000, 9000));
        assert_eq!((t.hist[11], t.hist[13]), (2, 1));
        assert_eq!(t.hist.iter().sum::<u64>(), t.timed);
    }

    #[test]
    fn request_slots_spread_a_tag_set() {
        // 1024 requests of 384 bytes each, as a tag set allocates them.
        let base = 0xffff_8881_0400_0000u64;
        let distinct =
            distinct::<{ RQ_SLOTS as usize / 64 }>((0..1024u64).map(|i| rq_slot(base + i * 384)));
        // Few collisions: at most 2 % of the requests share a slot.
        assert!(distinct >= 1004, "{distinct} distinct slots");
    }

    #[test]
    fn aggregate_slots_spread_devices_ops_and_cgroups() {
        // 8 devices × 2 ops × 8 cgroups = 128 keys into 256 slots.
        let keys = (0..8u32).flat_map(|dev| {
            [op::READ, op::WRITE].into_iter().flat_map(move |op| {
                (0..8u64).map(move |cg| BlockKey {
                    dev: (259 << 20) | dev,
                    op,
                    cgroup_id: 4000 + cg * 17,
                })
            })
        });
        let distinct = distinct::<{ AGG_SLOTS as usize / 64 }>(keys.map(|k| agg_slot_index(&k)));
        // A random map of 128 keys to 256 slots leaves ~101 distinct; the
        // rest of the keys still count, through the hash map.
        assert!(distinct >= 85, "{distinct} distinct slots");
    }

    #[test]
    fn buckets_match_log2() {
        assert_eq!(lat_bucket(0), 0);
        assert_eq!(lat_bucket(1), 0);
        assert_eq!(lat_bucket(2), 1);
        assert_eq!(lat_bucket(3), 1);
        assert_eq!(lat_bucket(1023), 9);
        assert_eq!(lat_bucket(1024), 10);
        for shift in 0..LAT_BUCKETS as u32 {
            assert_eq!(lat_bucket(1u64 << shift), shift as usize);
        }
        assert_eq!(lat_bucket(u64::MAX), LAT_BUCKETS - 1);
    }
}
