//! NCCL communicators and collectives: the probes' maps turned into a
//! communicator id every rank computes alike, per-window rows and metrics.
//!
//! What the numbers mean (a host sees when a collective is *enqueued*, not
//! when it completes on the GPU):
//! - `seq`: collectives the rank has issued on the communicator so far. All
//!   ranks issue a communicator's collectives in the same order, so ranks
//!   with equal `seq` have reached the same collective; a rank whose `seq`
//!   stays behind the others' while nobody advances is holding them up.
//! - `interval_s`: the mean time between the rank's successive collectives
//!   on the communicator during the window, the job's cadence (for a
//!   data-parallel job: one or a few collectives per step). It includes the
//!   time the CPU waits for the GPU, so it rises with a slow rank, a slow
//!   link or a slow GPU alike; it is not a collective's duration.
//! - bytes: count × datatype size as passed (per rank, not bus bytes).
use std::collections::{BTreeMap, BTreeSet};

use collector_common::nccl::{
    init, op, CommInfo, CommStats, OpKey, OpStats, SeqRing, UNIQUE_ID_BYTES,
};
use proto::v1 as pb;

#[cfg(feature = "probes")]
pub mod probe;
pub mod section;
pub mod series;
#[cfg(agent)]
pub mod source;
mod split;

pub use section::NcclSection;

pub use series::{render, render_all, ExitedRanks, MAX_EXITED_RANKS};
use split::resolve_splits;

/// The NCCL maps, copied out (cumulative).
#[derive(Clone, Debug, Default)]
pub struct NcclMaps {
    /// (pid, `ncclComm_t`) → the communicator as that rank created it.
    pub comms: BTreeMap<(u32, u64), CommInfo>,
    pub ops: BTreeMap<OpKey, OpStats>,
    /// (pid, `ncclComm_t`) → the latest collectives' issue times.
    pub seqs: BTreeMap<(u32, u64), SeqRing>,
}

impl NcclMaps {
    /// One (pid, `ncclComm_t`)'s collectives and groups as the probe keeps
    /// them, in one value: each op called into `ops`, the ring into `seqs`
    /// (none for communicator 0, the groups, and the calls NCCL refuses
    /// for a NULL communicator). The probe keeps a communicator in one
    /// place; where two are read (the process's groups, counted on several
    /// threads at once), they add up.
    pub fn add_comm_stats(&mut self, pid: u32, comm: u64, c: &CommStats) {
        for (o, s) in c.called() {
            let e = self.ops.entry(OpKey { pid, op: o, comm }).or_default();
            // The earlier first call (0: none yet).
            e.first_ns = if e.first_ns == 0 || s.first_ns == 0 {
                e.first_ns.max(s.first_ns)
            } else {
                e.first_ns.min(s.first_ns)
            };
            e.last_ns = e.last_ns.max(s.last_ns);
            e.calls += s.calls;
            e.bytes += s.bytes;
            e.unknown_dtype += s.unknown_dtype;
        }
        if comm != 0 && c.ring.seq > 0 {
            let r = self.seqs.entry((pid, comm)).or_default();
            *r = r.merge(&c.ring);
        }
    }
}

/// FNV-1a, 64 bits.
fn fnv(bytes: impl IntoIterator<Item = u8>, seed: u64) -> u64 {
    bytes.into_iter().fold(seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The id of the communicator an `ncclUniqueId` creates: every rank passes
/// the same 128 bytes, so every rank computes the same id, with no scheduler.
pub fn id_of_unique_id(unique_id: &[u8; UNIQUE_ID_BYTES]) -> u64 {
    fnv(unique_id.iter().copied(), FNV_OFFSET)
}

/// A split's id: its parent's id and colour (the ranks that pass one colour
/// to one parent form one communicator).
pub fn id_of_split(parent: u64, color: i32) -> u64 {
    fnv(
        b"split"
            .iter()
            .copied()
            .chain(parent.to_le_bytes())
            .chain(color.to_le_bytes()),
        FNV_OFFSET,
    )
}

/// `ncclCommInitAll`: all ranks in one process; the id is the host's, the
/// process's and the group's first handle (nobody else can be a member).
pub fn id_of_init_all(host: &str, pid: u32, first: u64) -> u64 {
    fnv(
        b"all"
            .iter()
            .copied()
            .chain(host.bytes())
            .chain(pid.to_le_bytes())
            .chain(first.to_le_bytes()),
        FNV_OFFSET,
    )
}

/// The communicator id of `(pid, comm)`, following splits to their root
/// (bounded depth); `None` when a split's parent is not known (created
/// before the probes attached).
pub fn comm_id(maps: &NcclMaps, host: &str, pid: u32, comm: u64) -> Option<u64> {
    let mut chain = Vec::new();
    let mut cur = (pid, comm);
    for _ in 0..16 {
        let info = maps.comms.get(&cur)?;
        match info.kind {
            // A shrink follows its parent as a split does (its colour is
            // `init::SHRINK_COLOR`), and so does a grow by a rank of the
            // parent (`init::GROW_COLOR`); a new rank of a grow has no
            // parent and is named by the grow's id (below).
            init::SPLIT | init::SHRINK | init::GROW
                if info.kind != init::GROW || info.parent != 0 =>
            {
                chain.push(info.color);
                cur = (pid, info.parent);
            }
            init::INIT_ALL => {
                let root = id_of_init_all(host, pid, info.parent);
                return Some(chain.iter().rev().fold(root, |id, c| id_of_split(id, *c)));
            }
            _ => {
                let root = id_of_unique_id(&info.unique_id);
                return Some(chain.iter().rev().fold(root, |id, c| id_of_split(id, *c)));
            }
        }
    }
    None
}

/// Hex form of an id (the wire and label form).
pub fn id_hex(id: u64) -> String {
    format!("{id:016x}")
}

/// One rank of one communicator on this host: cumulative counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankState {
    pub comm: String,
    pub nranks: i32,
    pub rank: i32,
    pub device: i32,
    pub pid: u32,
    pub init: &'static str,
    pub ended: bool,
    /// op → (calls, bytes).
    pub ops: BTreeMap<&'static str, (u64, u64)>,
    /// Collectives issued so far.
    pub seq: u64,
    /// `CLOCK_MONOTONIC` ns of the latest collective (0: none).
    pub last_ns: u64,
    /// The latest collectives' issue times (the probe's ring).
    pub ring: Option<SeqRing>,
    /// For an `ncclCommSplit` rank: the parent communicator's id as this
    /// collector names it (empty otherwise), the colour and key it passed,
    /// and its rank in the parent (-1: unknown).
    pub parent: String,
    pub color: i32,
    pub key: i32,
    pub parent_rank: i32,
    /// The rank's process exited: these are its final counts.
    pub exited: bool,
    /// The oldest CUDA driver call the rank's process is inside now
    /// (entered, not returned): its name and age in seconds.
    pub blocked: Option<(&'static str, f64)>,
}

/// Every rank the maps know, by (pid, `ncclComm_t`); ops on handles that no
/// init was seen for are kept under the handle's own id (`h:` + handle).
pub fn ranks(maps: &NcclMaps, host: &str) -> BTreeMap<(u32, u64), RankState> {
    let mut out: BTreeMap<(u32, u64), RankState> = BTreeMap::new();
    for (&(pid, comm), info) in &maps.comms {
        if init::is_nocolor(info.kind, info.color) {
            // A split this rank joined with no colour: no communicator.
            continue;
        }
        let id = comm_id(maps, host, pid, comm)
            .map(id_hex)
            .unwrap_or_else(|| format!("h:{pid}:{comm:x}"));
        out.insert(
            (pid, comm),
            RankState {
                comm: id,
                nranks: info.nranks,
                rank: info.rank,
                device: info.device,
                pid,
                init: init::name(info.kind),
                ended: info.ended != 0,
                ..Default::default()
            },
        );
    }
    for (k, v) in &maps.ops {
        if k.comm == 0 {
            continue;
        }
        let r = out.entry((k.pid, k.comm)).or_insert_with(|| RankState {
            comm: format!("h:{}:{:x}", k.pid, k.comm),
            nranks: -1,
            rank: -1,
            device: -1,
            pid: k.pid,
            init: "unknown",
            ..Default::default()
        });
        let e = r.ops.entry(op::name(k.op)).or_default();
        e.0 += v.calls;
        e.1 += v.bytes;
        if op::is_collective(k.op) {
            r.seq += v.calls;
            r.last_ns = r.last_ns.max(v.last_ns);
        }
    }
    for (k, ring) in &maps.seqs {
        if let Some(r) = out.get_mut(k) {
            r.ring = Some(*ring);
        }
    }
    resolve_splits(maps, &mut out);
    out
}

/// A rank on this host: (pid, `ncclComm_t`).
pub type RankKey = (u32, u64);

/// Each live rank's lag behind the first rank of its communicator on this
/// host to issue the highest collective all of them have issued: (that
/// sequence number, lag in seconds). Only communicators with two or more
/// live ranks here whose issue times of that collective are all kept.
pub fn lags(ranks: &BTreeMap<(u32, u64), RankState>) -> BTreeMap<(u32, u64), (u64, f64)> {
    type Members<'a> = Vec<(&'a (u32, u64), &'a SeqRing)>;
    let mut by_comm: BTreeMap<&str, Members<'_>> = BTreeMap::new();
    for (k, r) in ranks {
        if let (false, Some(ring)) = (r.ended, &r.ring) {
            by_comm.entry(r.comm.as_str()).or_default().push((k, ring));
        }
    }
    let mut out = BTreeMap::new();
    for members in by_comm.values().filter(|m| m.len() >= 2) {
        let Some(n) = members.iter().map(|(_, g)| g.seq).min() else {
            continue;
        };
        let issued: Option<Vec<u64>> = members.iter().map(|(_, g)| g.issued(n)).collect();
        let Some(issued) = issued else { continue };
        let Some(&first) = issued.iter().min() else {
            continue;
        };
        for ((k, _), t) in members.iter().zip(issued) {
            out.insert(**k, (n, (t - first) as f64 / 1e9));
        }
    }
    out
}

/// Per-process group calls: pid → (ncclGroupStart, ncclGroupEnd).
pub fn groups(maps: &NcclMaps) -> BTreeMap<u32, (u64, u64)> {
    let mut out: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for (k, v) in maps.ops.iter().filter(|(k, _)| k.comm == 0) {
        let e = out.entry(k.pid).or_default();
        match k.op {
            op::GROUP_START => e.0 += v.calls,
            op::GROUP_END => e.1 += v.calls,
            _ => {}
        }
    }
    out
}

/// `CLOCK_REALTIME − CLOCK_MONOTONIC` now, ns (to date probe timestamps).
pub fn realtime_offset_ns() -> i128 {
    let now = |id| {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec out-pointer and a valid clock id.
        unsafe { libc::clock_gettime(id, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    now(libc::CLOCK_REALTIME) - now(libc::CLOCK_MONOTONIC)
}

/// A rank's HCA ports: the `hca/port`s its process bound QPs to (verbs
/// probes), else the HCAs `NCCL_IB_HCA` allows (whole HCAs), at most 8.
pub fn rank_hcas(observed: Option<&BTreeSet<String>>, env: Vec<String>) -> Vec<String> {
    match observed {
        Some(o) if !o.is_empty() => o.iter().take(8).cloned().collect(),
        _ => env.into_iter().take(8).collect(),
    }
}

/// Who a process is: (job, rank) as identity knows it, and its HCAs.
pub struct Who {
    pub job: String,
    pub rank: Option<u32>,
    pub hcas: Vec<String>,
}

/// The window's rows: one per rank with activity, or created or ended in
/// the window, with this window's op deltas.
pub fn window_rows(
    prev: &BTreeMap<(u32, u64), RankState>,
    cur: &BTreeMap<(u32, u64), RankState>,
    offset_ns: i128,
    mut who: impl FnMut(u32) -> Who,
) -> Vec<pb::NcclRank> {
    let mut out = Vec::new();
    let lag = lags(cur);
    for (k, r) in cur {
        let p = prev.get(k);
        let ops: Vec<pb::NcclOpCount> = r
            .ops
            .iter()
            .filter_map(|(name, (calls, bytes))| {
                let (pc, pb_) = p.and_then(|p| p.ops.get(name)).copied().unwrap_or((0, 0));
                let dc = calls.saturating_sub(pc);
                (dc > 0).then(|| pb::NcclOpCount {
                    op: (*name).to_string(),
                    calls: dc,
                    bytes: bytes.saturating_sub(pb_),
                })
            })
            .collect();
        // A rank whose process exited always gets its last row (exited).
        let changed = r.exited || p.is_none_or(|p| p.ended != r.ended);
        if ops.is_empty() && !changed {
            // Silent this window: still a row, so the correlator sees the
            // rank's sequence standing still (a hang is exactly that).
            if r.ended {
                continue;
            }
        }
        let dseq = r.seq.saturating_sub(p.map_or(0, |p| p.seq));
        let interval_s = match p {
            Some(p) if p.last_ns > 0 && dseq > 0 && r.last_ns > p.last_ns => {
                (r.last_ns - p.last_ns) as f64 / 1e9 / dseq as f64
            }
            _ => 0.0,
        };
        let w = who(r.pid);
        out.push(pb::NcclRank {
            comm: r.comm.clone(),
            nranks: r.nranks,
            rank: r.rank,
            device: r.device,
            pid: r.pid,
            job: w.job,
            job_rank: w.rank,
            hcas: w.hcas,
            ops,
            seq: r.seq,
            last_unix_ms: if r.last_ns == 0 {
                0
            } else {
                ((i128::from(r.last_ns) + offset_ns) / 1_000_000) as i64
            },
            interval_s,
            init: r.init.to_string(),
            ended: r.ended,
            lag_seq: lag.get(k).map_or(0, |l| l.0),
            lag_s: lag.get(k).map_or(0.0, |l| l.1),
            blocked_call: r.blocked.map(|b| b.0.to_string()).unwrap_or_default(),
            blocked_s: r.blocked.map_or(0.0, |b| b.1),
            exited: r.exited,
            parent: r.parent.clone(),
            color: r.color,
            key: r.key,
            parent_rank: if r.parent.is_empty() {
                0
            } else {
                r.parent_rank
            },
        });
    }
    out
}

/// Per process: the oldest CUDA driver call it is inside (entered, not
/// returned) among `calls` (pid, call kind, entry time), with its age at
/// `now_ns` in seconds; both times on the probes' clock (`CLOCK_MONOTONIC`).
pub fn blocked(
    calls: impl IntoIterator<Item = (u32, u32, u64)>,
    now_ns: u64,
) -> BTreeMap<u32, (&'static str, f64)> {
    let mut oldest: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
    for (pid, kind, start) in calls {
        let e = oldest.entry(pid).or_insert((start, kind));
        if start < e.0 {
            *e = (start, kind);
        }
    }
    oldest
        .into_iter()
        .map(|(pid, (start, kind))| {
            let age = now_ns.saturating_sub(start) as f64 / 1e9;
            (pid, (collector_common::cuda::call::name(kind), age))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn info(kind: u32, id: u8, rank: i32) -> CommInfo {
        CommInfo {
            unique_id: [id; UNIQUE_ID_BYTES],
            parent: 0,
            created_ns: 1,
            nranks: 4,
            rank,
            device: rank,
            kind,
            color: 0,
            key: 0,
            result: 0,
            ended: 0,
        }
    }

    #[test]
    fn ranks_of_one_unique_id_share_the_id_and_splits_follow_their_parent() {
        let mut m = NcclMaps::default();
        // Two processes (ranks 0 and 1) with different handles, same unique id.
        m.comms.insert((10, 0xa0), info(init::INIT_RANK, 7, 0));
        m.comms
            .insert((11, 0xb0), info(init::INIT_RANK_CONFIG, 7, 1));
        m.comms.insert((12, 0xc0), info(init::INIT_RANK, 8, 0));
        let a = comm_id(&m, "h", 10, 0xa0).unwrap();
        assert_eq!(Some(a), comm_id(&m, "h", 11, 0xb0));
        assert_ne!(Some(a), comm_id(&m, "h", 12, 0xc0));
        // Splits of the same parent with the same colour agree; colours differ.
        let mut s = info(init::SPLIT, 0, -1);
        s.parent = 0xa0;
        s.color = 3;
        m.comms.insert((10, 0xa1), s);
        s.parent = 0xb0;
        m.comms.insert((11, 0xb1), s);
        s.color = 4;
        m.comms.insert((11, 0xb2), s);
        let sa = comm_id(&m, "h", 10, 0xa1).unwrap();
        assert_eq!(Some(sa), comm_id(&m, "h", 11, 0xb1));
        assert_ne!(Some(sa), comm_id(&m, "h", 11, 0xb2));
        assert_ne!(sa, a);
        // A split whose parent was created before the probes: unknown.
        s.parent = 0xdead;
        m.comms.insert((11, 0xb3), s);
        assert_eq!(comm_id(&m, "h", 11, 0xb3), None);
    }

    #[test]
    fn a_communicators_collectives_read_back_as_ops_and_its_ring() {
        let mut c = CommStats::default();
        let ar = op::comm_slot(op::ALL_REDUCE).unwrap();
        let sc = op::comm_slot(op::SCATTER).unwrap();
        c.ops[ar].s = OpStats {
            calls: 5,
            bytes: 20_480,
            unknown_dtype: 0,
            first_ns: 100,
            last_ns: 900,
        };
        c.ops[sc].s.calls = 2;
        c.ops[sc].s.bytes = 64;
        c.ring.seq = 7;
        c.ring.ts[7] = 900;
        let mut m = NcclMaps::default();
        m.comms.insert((10, 0xa0), info(init::INIT_RANK, 7, 0));
        m.add_comm_stats(10, 0xa0, &c);
        // A NULL communicator's calls are counted, with no ring.
        m.add_comm_stats(10, 0, &c);
        let key = |o, comm| OpKey {
            pid: 10,
            op: o,
            comm,
        };
        assert_eq!(m.ops.len(), 4, "the two ops called, on each handle");
        assert_eq!(m.ops[&key(op::ALL_REDUCE, 0xa0)], c.ops[ar].s);
        assert_eq!(m.ops[&key(op::SCATTER, 0xa0)].bytes, 64);
        assert_eq!(m.ops[&key(op::SCATTER, 0)].calls, 2);
        assert_eq!(m.seqs.len(), 1);
        assert_eq!(m.seqs[&(10, 0xa0)].issued(7), Some(900));
        let r = &ranks(&m, "h")[&(10, 0xa0)];
        assert_eq!(r.seq, 7, "5 all-reduces and 2 scatters");
        assert_eq!(r.ops["AllReduce"], (5, 20_480));
        assert_eq!(r.last_ns, 900);
        // The same communicator read twice adds up; the first call is the earlier.
        let mut later = c;
        later.ops[ar].s.first_ns = 50;
        later.ops[ar].s.last_ns = 950;
        m.add_comm_stats(10, 0xa0, &later);
        let s = m.ops[&key(op::ALL_REDUCE, 0xa0)];
        assert_eq!(
            (s.calls, s.bytes, s.first_ns, s.last_ns),
            (10, 40_960, 50, 950)
        );
        assert_eq!(m.seqs[&(10, 0xa0)].seq, 14);
    }

    #[test]
    fn window_rows_carry_deltas_sequence_and_cadence() {
        let mut m = NcclMaps::default();
        m.comms.insert((10, 0xa0), info(init::INIT_RANK, 7, 0));
        let key = |o| OpKey {
            pid: 10,
            op: o,
            comm: 0xa0,
        };
        m.ops.insert(
            key(op::ALL_REDUCE),
            OpStats {
                calls: 10,
                bytes: 40_000,
                unknown_dtype: 0,
                first_ns: 1_000_000_000,
                last_ns: 2_000_000_000,
            },
        );
        let prev = ranks(&m, "h");
        m.ops.insert(
            key(op::ALL_REDUCE),
            OpStats {
                calls: 14,
                bytes: 56_000,
                unknown_dtype: 0,
                first_ns: 1_000_000_000,
                last_ns: 4_000_000_000,
            },
        );
        m.ops.insert(
            key(op::SEND),
            OpStats {
                calls: 3,
                bytes: 300,
                unknown_dtype: 0,
                first_ns: 3_000_000_000,
                last_ns: 3_500_000_000,
            },
        );
        let cur = ranks(&m, "h");
        let who = |_| Who {
            job: "j".into(),
            rank: Some(5),
            hcas: vec!["mlx5_0".into()],
        };
        let rows = window_rows(&prev, &cur, 0, who);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.seq, 14, "sends are not collectives");
        assert_eq!(
            (r.interval_s * 1e3).round(),
            500.0,
            "2 s over 4 collectives"
        );
        let ar = r.ops.iter().find(|o| o.op == "AllReduce").unwrap();
        assert_eq!((ar.calls, ar.bytes), (4, 16_000));
        let s = r.ops.iter().find(|o| o.op == "Send").unwrap();
        assert_eq!((s.calls, s.bytes), (3, 300));
        assert_eq!(r.last_unix_ms, 4_000);
        // Nothing new: the rank still reports (its sequence stands still).
        let rows = window_rows(&cur, &cur, 0, who);
        assert_eq!(rows.len(), 1);
        assert!(rows[0].ops.is_empty());
        assert_eq!(rows[0].interval_s, 0.0);
    }

    /// Sample lines (`name{labels}`) that occur twice in an exposition.
    fn duplicates(text: &str) -> Vec<String> {
        let mut seen = BTreeSet::new();
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.rsplit_once(' ').map(|(k, _)| k.to_string()))
            .filter(|k| !seen.insert(k.clone()))
            .collect()
    }

    /// A parent of `n` ranks, rank i in process 100 + i (handle 0xa0), and
    /// its split by each rank: (colour, key) per rank, created at `t`.
    fn split_maps(n: i32, parts: &[(i32, i32)], t: u64, m: &mut NcclMaps) {
        for r in 0..n {
            let mut p = info(init::INIT_RANK, 7, r);
            p.nranks = n;
            m.comms.insert((100 + r as u32, 0xa0), p);
        }
        for (r, &(color, key)) in parts.iter().enumerate() {
            let mut s = info(init::SPLIT, 0, -1);
            s.nranks = -1;
            s.parent = 0xa0;
            s.color = color;
            s.key = key;
            s.created_ns = t;
            let h = if color == init::SPLIT_NOCOLOR {
                init::nocolor_handle(t)
            } else {
                0xb0 + t
            };
            m.comms.insert((100 + r as u32, h), s);
        }
    }

    #[test]
    fn a_split_with_every_member_here_gets_nccl_s_rank_and_size() {
        let mut m = NcclMaps::default();
        // Colour 0: ranks 0 and 3, keys 9 and -1 (3 first); colour 1:
        // ranks 1, 2, 4 with keys 5, 5, 1: 4 first, then 1 and 2 by parent rank.
        split_maps(5, &[(0, 9), (1, 5), (1, 5), (0, -1), (1, 1)], 10, &mut m);
        let all = ranks(&m, "h");
        let got = |pid: u32| {
            let r = &all[&(pid, 0xb0 + 10)];
            (r.color, r.key, r.parent_rank, r.rank, r.nranks)
        };
        assert_eq!(got(100), (0, 9, 0, 1, 2));
        assert_eq!(got(103), (0, -1, 3, 0, 2));
        assert_eq!(got(104), (1, 1, 4, 0, 3));
        assert_eq!(got(101), (1, 5, 1, 1, 3));
        assert_eq!(got(102), (1, 5, 2, 2, 3));
        let parent = &all[&(100, 0xa0)].comm;
        assert!(all
            .values()
            .filter(|r| r.init == "ncclCommSplit")
            .all(|r| &r.parent == parent));
        // A second split of the same parent pairs up call by call.
        split_maps(5, &[(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)], 20, &mut m);
        let all = ranks(&m, "h");
        for r in 0..5u32 {
            let s = &all[&(100 + r, 0xb0 + 20)];
            assert_eq!((s.rank, s.nranks), (r as i32, 5));
            assert_eq!(
                all[&(100 + r, 0xb0 + 10)].nranks,
                if r == 0 || r == 3 { 2 } else { 3 }
            );
        }
        let rows = window_rows(&BTreeMap::new(), &all, 0, |_| Who {
            job: "j".into(),
            rank: None,
            hcas: vec![],
        });
        let row = rows
            .iter()
            .find(|x| x.pid == 103 && x.init == "ncclCommSplit" && x.color == 0 && x.key == -1)
            .expect("row");
        assert_eq!(
            (row.parent.as_str(), row.parent_rank, row.rank, row.nranks),
            (parent.as_str(), 3, 0, 2)
        );
        let text = render(&all, |_| "j".into());
        assert!(duplicates(&text).is_empty(), "{text}");
    }

    #[test]
    fn a_split_with_members_elsewhere_keeps_minus_one_and_distinct_series() {
        let mut m = NcclMaps::default();
        // Two of the parent's four ranks are here (100, 101); both pass colour 0.
        split_maps(4, &[(0, 0), (0, 0)], 10, &mut m);
        m.comms.remove(&(102, 0xa0));
        m.comms.remove(&(103, 0xa0));
        for pid in [100, 101] {
            m.ops.insert(
                OpKey {
                    pid,
                    op: op::ALL_REDUCE,
                    comm: 0xb0 + 10,
                },
                OpStats {
                    calls: 3,
                    bytes: 12,
                    ..Default::default()
                },
            );
        }
        let all = ranks(&m, "h");
        let a = &all[&(100, 0xba)];
        let b = &all[&(101, 0xba)];
        assert_eq!(a.comm, b.comm);
        assert_eq!((a.rank, a.nranks, a.parent_rank), (-1, -1, 0));
        assert_eq!((b.rank, b.nranks, b.parent_rank), (-1, -1, 1));
        let text = render(&all, |_| "j".into());
        assert!(duplicates(&text).is_empty(), "{text}");
        assert!(
            text.contains("parent_rank=\"1\",pid=\"101\",hpc_job=\"j\",op=\"AllReduce\"} 3"),
            "{text}"
        );
        // A rank that passed NCCL_SPLIT_NOCOLOR joins nothing, yet counts as
        // having split: the others' ranks are computed.
        let mut m = NcclMaps::default();
        split_maps(3, &[(0, 0), (init::SPLIT_NOCOLOR, 0), (0, -5)], 10, &mut m);
        let all = ranks(&m, "h");
        assert_eq!(all.len(), 3 + 2, "no rank for the NOCOLOR split: {all:?}");
        assert_eq!((all[&(100, 0xba)].rank, all[&(100, 0xba)].nranks), (1, 2));
        assert_eq!((all[&(102, 0xba)].rank, all[&(102, 0xba)].nranks), (0, 2));
        // A rank missing its split (not returned yet): not computed.
        let mut m = NcclMaps::default();
        split_maps(3, &[(0, 0), (0, 0)], 10, &mut m);
        assert!(ranks(&m, "h")
            .values()
            .filter(|r| r.init == "ncclCommSplit")
            .all(|r| r.rank == -1));
    }

    #[test]
    fn exited_ranks_keep_their_series_then_fold_into_job_totals() {
        let mut m = NcclMaps::default();
        m.comms.insert((10, 0xa0), info(init::INIT_RANK, 7, 0));
        m.comms.insert((11, 0xa0), info(init::INIT_RANK, 7, 1));
        for (pid, calls) in [(10, 5), (11, 7)] {
            m.ops.insert(
                OpKey {
                    pid,
                    op: op::ALL_REDUCE,
                    comm: 0xa0,
                },
                OpStats {
                    calls,
                    bytes: calls * 4,
                    ..Default::default()
                },
            );
        }
        let mut all = ranks(&m, "h");
        let t0 = Instant::now();
        let mut ex = ExitedRanks::new(Duration::from_secs(60), 2);
        let gone = all.remove(&(11, 0xa0)).expect("rank 1");
        let mut last = gone.clone();
        last.exited = true;
        // Its last row says so, also when it issued nothing in the window.
        let rows = window_rows(
            &BTreeMap::from([((11, 0xa0), gone)]),
            &BTreeMap::from([((11, 0xa0), last.clone())]),
            0,
            |_| Who {
                job: "j".into(),
                rank: None,
                hcas: vec![],
            },
        );
        assert_eq!(rows.len(), 1);
        assert!(rows[0].exited);
        ex.retire((11, 0xa0), last, "j".into(), t0);
        let live_jobs = BTreeSet::from(["j".to_string()]);
        ex.expire(t0 + Duration::from_secs(59), &live_jobs);
        let text = render_all(&all, &ex, |_| "j".into());
        let calls = |text: &str, rank: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with("faultline_nccl_calls_total{")
                        && l.contains(&format!("rank=\"{rank}\""))
                })
                .map(|l| l.rsplit_once(' ').map_or("", |x| x.1).to_string())
        };
        assert_eq!(calls(&text, "1").as_deref(), Some("7"), "{text}");
        assert!(
            text.contains("faultline_nccl_job_calls_total{hpc_job=\"j\",op=\"AllReduce\"} 12"),
            "{text}"
        );
        ex.expire(t0 + Duration::from_secs(60), &live_jobs);
        assert!(ex.is_empty());
        let text = render_all(&all, &ex, |_| "j".into());
        assert_eq!(calls(&text, "1"), None);
        assert!(
            text.contains("faultline_nccl_job_calls_total{hpc_job=\"j\",op=\"AllReduce\"} 12"),
            "{text}"
        );
        assert!(
            text.contains("faultline_nccl_job_bytes_total{hpc_job=\"j\",op=\"AllReduce\"} 48"),
            "{text}"
        );
        // Bounded: past max_jobs, the least recently folded job with no rank left goes.
        for (i, j) in ["k", "l"].into_iter().enumerate() {
            let mut r = all[&(10, 0xa0)].clone();
            r.exited = true;
            ex.retire(
                (20 + i as u32, 0xa0),
                r,
                j.into(),
                t0 + Duration::from_secs(61 + i as u64),
            );
        }
        ex.expire(t0 + Duration::from_secs(200), &live_jobs);
        assert_eq!(ex.folded_jobs(), 2, "j is live, k the oldest idle");
        let text = render_all(&BTreeMap::new(), &ex, |_| String::new());
        assert!(text.contains("hpc_job=\"j\""), "{text}");
        assert!(!text.contains("hpc_job=\"k\""), "{text}");
        assert!(text.contains("hpc_job=\"l\""), "{text}");
    }

    #[test]
    fn the_oldest_in_flight_call_of_a_process_is_its_blocked_call() {
        use collector_common::cuda::call;
        let b = blocked(
            [
                (7, call::MEM_ALLOC, 9_000_000_000),
                (7, call::STREAM_SYNC, 4_000_000_000),
                (8, call::CTX_SYNC, 9_500_000_000),
            ],
            10_000_000_000,
        );
        assert_eq!(b[&7], ("cuStreamSynchronize", 6.0));
        assert_eq!(b[&8], ("cuCtxSynchronize", 0.5));
        assert!(!b.contains_key(&9));
    }
}
