//! `ncclCommSplit` ranks: each one's parent, colour, key and rank in the
//! parent, and NCCL's rank and size where every rank of the parent is on
//! this host.
use std::collections::{BTreeMap, BTreeSet};

use collector_common::nccl::{init, CommInfo};

use super::{NcclMaps, RankKey, RankState};

/// A split rank's key and its creation record.
type Split<'a> = (RankKey, &'a CommInfo);

/// How deep splits of splits are followed when filling parents' ranks.
const MAX_SPLIT_DEPTH: usize = 16;

/// Fills each `ncclCommSplit` rank's parent id, colour, key and rank in the
/// parent, and computes its rank and size where every rank of the parent is
/// on this host (see [`local_split_ranks`]); elsewhere they stay -1 and the
/// correlator computes them from the rows of every host.
pub(super) fn resolve_splits(maps: &NcclMaps, out: &mut BTreeMap<(u32, u64), RankState>) {
    let splits: Vec<Split<'_>> = maps
        .comms
        .iter()
        .filter(|(_, i)| i.kind == init::SPLIT)
        .map(|(k, i)| (*k, i))
        .collect();
    if splits.is_empty() {
        return;
    }
    // A split's parent may itself be a split whose rank is computed in an
    // earlier pass: repeat until nothing changes (bounded).
    for _ in 0..MAX_SPLIT_DEPTH {
        let mut changed = false;
        for &((pid, comm), info) in &splits {
            let (pcomm, prank) = match out.get(&(pid, info.parent)) {
                Some(p) => (p.comm.clone(), p.rank),
                None => (format!("h:{pid}:{:x}", info.parent), -1),
            };
            if let Some(r) = out.get_mut(&(pid, comm)) {
                changed |= r.parent != pcomm || r.parent_rank != prank;
                r.parent = pcomm;
                r.parent_rank = prank;
                r.color = info.color;
                r.key = info.key;
            }
        }
        for (k, (rank, size)) in local_split_ranks(&splits, out) {
            if let Some(r) = out.get_mut(&k) {
                changed |= (r.rank, r.nranks) != (rank, size);
                r.rank = rank;
                r.nranks = size;
            }
        }
        if !changed {
            break;
        }
    }
}

/// NCCL's rule for `ncclCommSplit`, applied where every rank of the parent
/// is on this host (the parent's ranks seen here are exactly `0..nranks`):
/// the ranks of the parent that passed one colour form one communicator,
/// ordered by key, then by parent rank. A parent split several times is
/// split by every rank in the same order (NCCL requires it), so each
/// rank's splits of it, in creation order, pair up call by call (a rank
/// that passed `NCCL_SPLIT_NOCOLOR` has a record with no communicator, so
/// its calls count too); where the ranks made different numbers of splits
/// of it (one has not returned yet) nothing is computed for that parent.
fn local_split_ranks(
    splits: &[Split<'_>],
    out: &BTreeMap<RankKey, RankState>,
) -> Vec<(RankKey, (i32, i32))> {
    // Parent communicator id → its ranks here, (pid, handle, rank, size).
    let mut members: BTreeMap<&str, Vec<(u32, u64, i32, i32)>> = BTreeMap::new();
    for (&(pid, h), r) in out {
        members
            .entry(r.comm.as_str())
            .or_default()
            .push((pid, h, r.rank, r.nranks));
    }
    let parents: BTreeSet<&str> = splits
        .iter()
        .filter_map(|(k, _)| out.get(k).map(|r| r.parent.as_str()))
        .collect();
    let mut computed = Vec::new();
    for p in parents {
        let Some(m) = members.get(p) else { continue };
        let n = m.first().map_or(0, |x| x.3);
        let mut ranks: Vec<i32> = m.iter().map(|x| x.2).collect();
        ranks.sort_unstable();
        if n <= 0 || m.iter().any(|x| x.3 != n) || ranks != (0..n).collect::<Vec<i32>>() {
            continue;
        }
        // Each parent rank's splits of it, oldest first.
        let per: Vec<(i32, Vec<Split<'_>>)> = m
            .iter()
            .map(|&(pid, h, rank, _)| {
                let mut v: Vec<Split<'_>> = splits
                    .iter()
                    .filter(|((spid, _), i)| *spid == pid && i.parent == h)
                    .copied()
                    .collect();
                v.sort_by_key(|((_, sh), i)| (i.created_ns, *sh));
                (rank, v)
            })
            .collect();
        let calls = per.first().map_or(0, |x| x.1.len());
        if calls == 0 || per.iter().any(|x| x.1.len() != calls) {
            continue;
        }
        for call in 0..calls {
            // colour → (key, parent rank, rank's key in `out`).
            let mut by_color: BTreeMap<i32, Vec<(i32, i32, RankKey)>> = BTreeMap::new();
            for (prank, v) in &per {
                let Some(&(k, info)) = v.get(call) else {
                    continue;
                };
                if init::is_nocolor(info.kind, info.color) {
                    continue;
                }
                by_color
                    .entry(info.color)
                    .or_default()
                    .push((info.key, *prank, k));
            }
            for group in by_color.values_mut() {
                group.sort_unstable();
                let size = group.len() as i32;
                for (i, (_, _, k)) in group.iter().enumerate() {
                    computed.push((*k, (i as i32, size)));
                }
            }
        }
    }
    computed
}
