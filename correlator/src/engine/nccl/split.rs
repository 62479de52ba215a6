//! `ncclCommSplit` communicators' real rank and size. NCCL defines them:
//! the parent's ranks that pass one colour form one communicator, ordered
//! by key, then by their rank in the parent. The probes see each member's
//! parent, colour, key and parent rank (its rank and size read −1); the
//! correlator sees every host, so once every rank of the parent is seen in
//! one of its splits the members' places follow.
use std::collections::{BTreeMap, BTreeSet, HashMap};

use proto::v1::NcclRank;

use super::Comm;

/// A rank of a split: (key, parent rank, its (host, pid)).
type Placed = (i32, i32, (String, u32));

/// What a split member passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Member {
    pub parent: String,
    pub color: i32,
    pub key: i32,
    /// Its rank in the parent (−1: unknown).
    pub parent_rank: i32,
}

impl Member {
    /// The row's split, if it is a split member.
    pub fn of(r: &NcclRank) -> Option<Self> {
        (!r.parent.is_empty()).then(|| Self {
            parent: r.parent.chars().take(32).collect(),
            color: r.color,
            key: r.key,
            parent_rank: r.parent_rank,
        })
    }
}

/// Sets rank and size of the ranks of every split of the parents of
/// `touched` whose members are complete: every rank of the parent (its
/// size from its own rows) appears the same number of times `k` over the
/// parent's splits (`k` splits of one parent each seen whole). Returns how
/// many ranks got their place.
pub(super) fn resolve(comms: &mut HashMap<String, Comm>, touched: &BTreeSet<String>) -> usize {
    let parents: BTreeSet<String> = touched
        .iter()
        .filter_map(|id| comms.get(id))
        .flat_map(|c| c.ranks.values().filter_map(|r| r.split.as_ref()))
        .map(|m| m.parent.clone())
        .collect();
    let mut places: Vec<(String, (String, u32), i32, i32)> = Vec::new();
    for p in parents {
        let Some(size) = comms
            .get(&p)
            .and_then(|c| c.ranks.values().map(|r| r.nranks).max())
            .filter(|n| *n > 0)
        else {
            continue;
        };
        // Every split of `p`: its members as (key, parent rank, rank id).
        let mut children: BTreeMap<&str, Vec<Placed>> = BTreeMap::new();
        for (id, c) in comms.iter() {
            for (k, r) in &c.ranks {
                if let Some(m) = r.split.as_ref().filter(|m| m.parent == p) {
                    children.entry(id.as_str()).or_default().push((
                        m.key,
                        m.parent_rank,
                        k.clone(),
                    ));
                }
            }
        }
        let mut seen: HashMap<i32, usize> = HashMap::new();
        for &(_, pr, _) in children.values().flatten() {
            *seen.entry(pr).or_default() += 1;
        }
        let k = seen.get(&0).copied().unwrap_or(0);
        let whole =
            k > 0 && seen.len() == size as usize && (0..size).all(|pr| seen.get(&pr) == Some(&k));
        if !whole {
            continue;
        }
        for (id, mut m) in children {
            m.sort_by_key(|x| (x.0, x.1));
            let n = m.len() as i32;
            for (i, (_, _, key)) in m.into_iter().enumerate() {
                places.push((id.to_string(), key, i as i32, n));
            }
        }
    }
    let placed = places.len();
    for (id, key, rank, n) in places {
        if let Some(r) = comms.get_mut(&id).and_then(|c| c.ranks.get_mut(&key)) {
            r.rank = rank;
            r.nranks = n;
        }
    }
    placed
}
