//! Fault and confounder injection for the simulator: the `--inject` syntax
//! over the kinds of [`crate::cluster::fault`] (what can go wrong, with which
//! physical parameters), on which entity of a [`Cluster`], and the incident
//! each one should raise there.
//!
//! Syntax (`--inject` and scenario files): `KIND[@ENTITY][:KEY=VALUE,...]`,
//! e.g. `ib-link-degrade@n017/mlx5_2/1:ber=1e-9,ramp=600` or
//! `storage-stall@n003/sda:factor=8,at=120`; an NFS target keeps its
//! colons (`nfs-slow@filer01:/datasets:factor=10`). Every kind takes `at=SECONDS`
//! (its onset; default: the run's `--onset`); the other keys are listed in
//! [`PARAMS`]. Unknown keys and out-of-range values are errors that name the
//! spec.
use crate::cluster::{nccl, topology, xid, Cluster, GPUS, JOB, SERVE_JOB, SERVE_MODEL};

mod parse;

pub use crate::cluster::fault::{
    fmt_value, Class, Fault, Kind, Target, APP_XID, PARAMS, SXID_INCIDENT,
};
pub use parse::{parse_all, parse_one, parse_scenario};

impl Fault {
    /// The incident kind and entity this fault should raise (`None` for
    /// confounders). A hang's is known for sure only once the others wait
    /// ([`crate::cluster::Truth::hang_entity`]); before, the ring on the
    /// target's host. A slow host's straggler is its first rank.
    pub fn expected(&self, c: &Cluster) -> Option<(&'static str, String)> {
        let k = self.kind.expected_kind()?;
        let rank = |t: &Target| match *t {
            Target::Gpu { node, gpu } => Some((node, node * GPUS + gpu)),
            Target::Node(n) => Some((n, n * GPUS)),
            _ => None,
        };
        let ring = || c.comm_id(nccl::RING);
        let e = match (&self.kind, rank(&self.target)) {
            (Kind::NcclHang | Kind::NcclHangDeadPeer, Some((node, _))) => {
                vocab::entity::nccl_comm(&c.node_name(node), &ring())
            }
            // Every rank waits: the culprit's host, else the first host.
            (Kind::NcclHangPortDown, _) => match self.target {
                Target::Port { node, .. } => vocab::entity::nccl_comm(&c.node_name(node), &ring()),
                _ => vocab::entity::nccl_comm(&c.node_name(0), &ring()),
            },
            (Kind::NcclHangUnknown, _) => vocab::entity::nccl_comm(&c.node_name(0), &ring()),
            (Kind::NcclSlowRank { .. }, Some((_, r))) => vocab::entity::rank(JOB, r),
            (Kind::NvswitchSxid { switch, .. }, _) => match self.target {
                Target::Node(n) => xid::switch_entity(&c.node_name(n), *switch),
                _ => target_name(c, &self.target),
            },
            _ => target_name(c, &self.target),
        };
        Some((k, e))
    }
}

pub fn target_name(c: &Cluster, t: &Target) -> String {
    match t {
        Target::Port { node, hca } => {
            vocab::entity::port(&c.node_name(*node), &format!("mlx5_{hca}"), 1)
        }
        Target::Gpu { node, gpu } => vocab::entity::gpu(&c.node_name(*node), *gpu),
        Target::Switch(l) => vocab::entity::switch(&topology::leaf_name(*l)),
        Target::Device { node, dev } => vocab::entity::device(
            &c.node_name(*node),
            c.device_name(*node, *dev).unwrap_or("?"),
        ),
        Target::Node(n) => c.node_name(*n),
        Target::Nfs { node } => {
            crate::cluster::nfs::entity(node.map(|n| c.node_name(n)).as_deref())
        }
        Target::Cluster => "cluster".into(),
        Target::Job => JOB.into(),
        Target::Model => vocab::entity::model(SERVE_JOB, SERVE_MODEL),
    }
}
