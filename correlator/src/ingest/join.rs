//! Incidents that span shards, joined under one identity in the fleet view.
//!
//! A shard judges its own hosts, so one fault can be raised by several
//! shards: a communicator or job whose ranks sit behind several leaves, a
//! spine switch whose uplinks are reported by each leaf's hosts, a host
//! that moved to another shard while its incident was open. The fleet view
//! joins updates of one (cluster, kind family, entity) from different
//! shards (a member is a shard's incident: its source, the shard's
//! consumer, and its id, since two shards can number an incident alike)
//! into one incident: the id of the first shard's incident, the
//! members' evidence and jobs together, the highest confidence; it
//! resolves when the last member resolves. With one member, an update goes
//! through unchanged (the shard's id and text).
use std::collections::{BTreeMap, HashMap};

use proto::v1::CandidateUpdate;

use crate::engine::incidents::family_of;

/// (cluster, kind family, entity).
type Key = (String, String, String);

fn key(u: &CandidateUpdate) -> Key {
    (
        u.cluster.clone(),
        family_of(&u.kind).to_string(),
        u.entity.clone(),
    )
}

/// A shard's incident: (source, incident id).
type Member = (String, String);

#[derive(Debug)]
struct Joined {
    id: String,
    /// The member whose id it is.
    first: Member,
    /// Each member's latest update.
    members: BTreeMap<Member, CandidateUpdate>,
}

/// The open joined incidents; bounded by `cap` members (the fleet's open
/// incidents), beyond which a new member's updates pass unjoined (counted).
#[derive(Debug)]
pub struct Joins {
    open: HashMap<Key, Joined>,
    member_of: HashMap<Member, Key>,
    /// The source whose incident each open joined id is.
    owner: HashMap<String, String>,
    cap: usize,
    /// Members not joined at the cap.
    pub unjoined: u64,
    /// Updates that joined another shard's incident.
    pub joined: u64,
}

impl Joins {
    pub fn new(cap: usize) -> Self {
        Self {
            open: HashMap::new(),
            member_of: HashMap::new(),
            owner: HashMap::new(),
            cap: cap.max(1),
            unjoined: 0,
            joined: 0,
        }
    }

    /// Open joined incidents.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Whether `u` from `source` names an open incident of another shard
    /// it is no member of: a shard may update and resolve only its own
    /// incidents, never resolve or rewrite another's by its id. The caller
    /// drops such an update. Two shards that judged the same entity in the
    /// same second number their incidents alike (the id hashes cluster,
    /// kind, entity and start): an update opening or updating that same
    /// (cluster, kind family, entity) is a member joining, not a forgery.
    pub fn owned_elsewhere(&self, source: &str, u: &CandidateUpdate) -> bool {
        let m: Member = (source.to_string(), u.incident_id.clone());
        if self.member_of.contains_key(&m) {
            return false;
        }
        let Some(owner) = self.owner.get(&u.incident_id) else {
            return false;
        };
        let joins_it = u.state != vocab::UpdateState::Resolved.as_str()
            && self
                .open
                .get(&key(u))
                .is_some_and(|j| j.id == u.incident_id);
        owner != source && !joins_it
    }

    /// One shard's update in (`source`: the shard, as its incident subject
    /// names it); the fleet's update out (under the joined id).
    pub fn apply(&mut self, source: &str, u: CandidateUpdate) -> CandidateUpdate {
        let resolved = u.state == vocab::UpdateState::Resolved.as_str();
        let m: Member = (source.to_string(), u.incident_id.clone());
        let k = match self.member_of.get(&m) {
            Some(k) => k.clone(),
            None if resolved => return u,
            None => {
                if self.member_of.len() >= self.cap {
                    self.unjoined += 1;
                    return u;
                }
                let k = key(&u);
                self.member_of.insert(m.clone(), k.clone());
                k
            }
        };
        let owner = &mut self.owner;
        let j = self.open.entry(k.clone()).or_insert_with(|| {
            owner.insert(u.incident_id.clone(), m.0.clone());
            Joined {
                id: u.incident_id.clone(),
                first: m.clone(),
                members: BTreeMap::new(),
            }
        });
        let first = j.members.is_empty();
        if !first && !j.members.contains_key(&m) {
            self.joined += 1;
        }
        if resolved {
            j.members.remove(&m);
            self.member_of.remove(&m);
        } else {
            j.members.insert(m.clone(), u.clone());
        }
        if j.members.is_empty() {
            let id = j.id.clone();
            self.open.remove(&k);
            self.owner.remove(&id);
            return CandidateUpdate {
                incident_id: id,
                ..u
            };
        }
        if let (1, Some(own)) = (j.members.len(), j.members.get(&j.first)) {
            // Alone under its own id: as the shard said it; after another
            // member left, its latest update restated.
            return if m == j.first {
                u
            } else {
                CandidateUpdate {
                    state: vocab::UpdateState::Updated.as_str().into(),
                    ts_unix_ms: u.ts_unix_ms,
                    ..own.clone()
                }
            };
        }
        let state = if first { "opened" } else { "updated" };
        merged(&j.id, state, &u, &j.members)
    }
}

/// The members' updates as one: `latest`'s time and kind, the highest
/// confidence and its runbook, every member's evidence (in member order,
/// each line once, naming the shard incidents joined) and jobs.
fn merged(
    id: &str,
    state: &str,
    latest: &CandidateUpdate,
    all: &BTreeMap<Member, CandidateUpdate>,
) -> CandidateUpdate {
    let members: Vec<&CandidateUpdate> = all.values().collect();
    let top = members
        .iter()
        .max_by(|a, b| a.confidence.total_cmp(&b.confidence))
        .copied()
        .unwrap_or(latest);
    let mut evidence = Vec::new();
    for m in &members {
        for e in &m.evidence {
            if !evidence.contains(e) {
                evidence.push(e.clone());
            }
        }
    }
    let ids: Vec<String> = all.keys().map(|(s, id)| format!("{id} of {s}")).collect();
    evidence.push(format!(
        "raised by {} shard incidents: {} (joined in the fleet view)",
        ids.len(),
        ids.join(", ")
    ));
    let mut jobs: Vec<String> = members
        .iter()
        .flat_map(|m| m.affected_jobs.iter().cloned())
        .collect();
    jobs.sort();
    jobs.dedup();
    CandidateUpdate {
        ts_unix_ms: latest.ts_unix_ms,
        incident_id: id.to_string(),
        state: state.into(),
        kind: latest.kind.clone(),
        entity: latest.entity.clone(),
        confidence: top.confidence,
        evidence,
        affected_jobs: jobs,
        runbook: top.runbook.clone(),
        cluster: latest.cluster.clone(),
        // The highest of the members' (a fleet incident is as severe as
        // its most severe shard's view).
        severity: members
            .iter()
            .map(|m| m.severity.as_str())
            .max_by_key(|s| crate::engine::incidents::severity::rank(s))
            .unwrap_or_default()
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(id: &str, state: &str, kind: &str, entity: &str, cluster: &str) -> CandidateUpdate {
        CandidateUpdate {
            ts_unix_ms: 1,
            incident_id: id.into(),
            state: state.into(),
            kind: kind.into(),
            entity: entity.into(),
            confidence: if id == "b1" { 0.9 } else { 0.7 },
            evidence: vec![format!("{id} saw it")],
            affected_jobs: vec![format!("job-{id}")],
            runbook: format!("runbook of {id}"),
            cluster: cluster.into(),
            severity: "warning".into(),
        }
    }

    const SRC: &str = "shard-a";

    #[test]
    fn two_shards_one_fault_are_one_incident_until_both_resolve() {
        let mut j = Joins::new(100);
        let e = "switch:spine01";
        let a = j.apply(SRC, up("a1", "opened", "ib_link_degraded", e, "east"));
        assert_eq!((a.incident_id.as_str(), a.state.as_str()), ("a1", "opened"));
        assert_eq!(a.evidence, ["a1 saw it"], "alone: unchanged");
        let b = j.apply(SRC, up("b1", "opened", "ib_link_degraded", e, "east"));
        assert_eq!(
            (b.incident_id.as_str(), b.state.as_str()),
            ("a1", "updated")
        );
        assert_eq!(b.confidence, 0.9);
        assert_eq!(b.runbook, "runbook of b1");
        assert_eq!(b.affected_jobs, ["job-a1", "job-b1"]);
        assert_eq!(&b.evidence[..2], ["a1 saw it", "b1 saw it"]);
        assert_eq!(j.joined, 1);
        // The same entity in another cluster is another fault.
        let w = j.apply(SRC, up("c1", "opened", "ib_link_degraded", e, "west"));
        assert_eq!(w.incident_id, "c1");
        assert_eq!(j.len(), 2);
        // The first member resolves: the joined incident stays, with b1's.
        let r = j.apply(SRC, up("a1", "resolved", "ib_link_degraded", e, "east"));
        assert_eq!(
            (r.incident_id.as_str(), r.state.as_str()),
            ("a1", "updated")
        );
        assert_eq!(r.evidence[0], "b1 saw it");
        let r = j.apply(SRC, up("b1", "resolved", "ib_link_degraded", e, "east"));
        assert_eq!(
            (r.incident_id.as_str(), r.state.as_str()),
            ("a1", "resolved")
        );
        assert_eq!(j.len(), 1);
        // The same id from another shard is another member.
        j.apply(SRC, up("s1", "opened", "gpu_lost", "n5/gpu0", ""));
        let o = j.apply("shard-b", up("s1", "opened", "gpu_lost", "n5/gpu0", ""));
        assert_eq!(o.state, "updated");
        let r = j.apply(SRC, up("s1", "resolved", "gpu_lost", "n5/gpu0", ""));
        assert_eq!(
            (r.incident_id.as_str(), r.state.as_str()),
            ("s1", "updated")
        );
        // Kinds of one family join (a down on one shard, flapping on another).
        j.apply(SRC, up("d1", "opened", "ib_link_down", "n1/mlx5_0/1", ""));
        let f = j.apply(
            SRC,
            up("d2", "opened", "ib_link_flapping", "n1/mlx5_0/1", ""),
        );
        assert_eq!(
            (f.incident_id.as_str(), f.kind.as_str()),
            ("d1", "ib_link_flapping")
        );
    }

    #[test]
    fn past_the_cap_updates_pass_unjoined_and_are_counted() {
        let mut j = Joins::new(1);
        j.apply(SRC, up("a1", "opened", "gpu_lost", "n1/gpu0", ""));
        let b = j.apply(SRC, up("b1", "opened", "gpu_lost", "n1/gpu0", ""));
        assert_eq!(b.incident_id, "b1");
        assert_eq!(j.unjoined, 1);
        // An unknown id resolving passes through.
        let r = j.apply(SRC, up("zz", "resolved", "gpu_lost", "n9/gpu0", ""));
        assert_eq!(r.incident_id, "zz");
    }

    #[test]
    fn a_shard_cannot_resolve_or_rewrite_anothers_incident() {
        let mut j = Joins::new(100);
        let e = "n1/mlx5_0/1";
        let a = j.apply(SRC, up("a1", "opened", "ib_link_down", e, "east"));
        assert_eq!(a.incident_id, "a1");
        for state in ["resolved", "updated"] {
            let forged = up("a1", state, "gpu_xid", "n9/gpu0", "east");
            assert!(j.owned_elsewhere("shard-b", &forged), "{state}");
        }
        // Its own shard may; an id nobody holds passes.
        assert!(!j.owned_elsewhere(SRC, &up("a1", "resolved", "ib_link_down", e, "east")));
        assert!(!j.owned_elsewhere("shard-b", &up("b1", "opened", "ib_link_down", e, "east")));
        // Joined: the second shard is a member, and may resolve its part.
        j.apply("shard-b", up("b1", "opened", "ib_link_down", e, "east"));
        assert!(!j.owned_elsewhere("shard-b", &up("b1", "resolved", "ib_link_down", e, "east")));
        j.apply(SRC, up("a1", "resolved", "ib_link_down", e, "east"));
        j.apply("shard-b", up("b1", "resolved", "ib_link_down", e, "east"));
        assert!(!j.owned_elsewhere("shard-b", &up("a1", "resolved", "ib_link_down", e, "east")));
    }

    /// Two shards that open the same entity's incident in the same second
    /// derive the same id (a host moved between shards mid-incident): the
    /// second joins as a member, and its resolve ends only its part.
    #[test]
    fn a_second_shard_with_the_same_id_for_the_same_entity_joins() {
        let mut j = Joins::new(100);
        let e = "n2/mlx5_0/1";
        j.apply(SRC, up("a1", "opened", "ib_link_down", e, "east"));
        let same = up("a1", "opened", "ib_link_down", e, "east");
        assert!(!j.owned_elsewhere("shard-b", &same));
        let b = j.apply("shard-b", same);
        assert_eq!(
            (b.incident_id.as_str(), b.state.as_str()),
            ("a1", "updated")
        );
        assert_eq!(j.joined, 1);
        // Not a member yet of another entity's incident under that id.
        assert!(j.owned_elsewhere(
            "shard-c",
            &up("a1", "updated", "gpu_xid", "n9/gpu0", "east")
        ));
        // Nor may a non-member resolve it.
        assert!(j.owned_elsewhere("shard-c", &up("a1", "resolved", "ib_link_down", e, "east")));
        // shard-b's resolve ends its part; the incident stays open.
        let r = j.apply("shard-b", up("a1", "resolved", "ib_link_down", e, "east"));
        assert_eq!(
            (r.incident_id.as_str(), r.state.as_str()),
            ("a1", "updated")
        );
        assert_eq!(j.len(), 1);
    }
}
