//! The simulator run the end-to-end fault tests share: 16 nodes on hard
//! disks, seed 7, the fault at 8 s of a 24 s run, and the incidents it
//! raised.
#![allow(dead_code)]
use proto::v1::CandidateUpdate;
use sim::{cluster::StorageMix, run, SimArgs};

pub fn args(inject: &[&str]) -> SimArgs {
    SimArgs {
        nodes: 16,
        inject: inject.iter().map(|s| s.to_string()).collect(),
        seed: 7,
        speed: 10.0,
        duration: 24.0,
        onset: 8.0,
        json: true,
        // Hard disks: a stalled one is slow by any engine's standard.
        storage: StorageMix::Hdd,
        ..SimArgs::default()
    }
}

/// Every incident of the updates, as (kind, entity) with its latest kind
/// (an `ib_link_down` incident that became `ib_link_flapping` is one
/// incident of kind `ib_link_flapping`), sorted.
pub fn kinds_and_entities(seen: &[CandidateUpdate]) -> Vec<(String, String)> {
    let mut by_id: std::collections::BTreeMap<&str, (String, String)> = Default::default();
    for u in seen {
        by_id.insert(&u.incident_id, (u.kind.clone(), u.entity.clone()));
    }
    let mut o: Vec<(String, String)> = by_id.into_values().collect();
    o.sort();
    o
}

/// Every incident of a run by id, latest update of each.
pub async fn latest_updates(a: SimArgs) -> Vec<CandidateUpdate> {
    let seen = run(a).await.expect("sim runs");
    let mut by_id: std::collections::BTreeMap<String, CandidateUpdate> = Default::default();
    for u in seen {
        by_id.insert(u.incident_id.clone(), u);
    }
    by_id.into_values().collect()
}
