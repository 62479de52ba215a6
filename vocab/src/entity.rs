//! Entity names: what a window row, an event and an incident are about,
//! built the same way by the collector, the correlator and the simulator.

/// An InfiniBand/RoCE port: `host/hca/port`, e.g. `n017/mlx5_2/1`.
pub fn port(host: &str, hca: &str, port: u32) -> String {
    format!("{host}/{hca}/{port}")
}

/// The prefix every port of one HCA shares: `host/hca/`.
pub fn hca_prefix(host: &str, hca: &str) -> String {
    format!("{host}/{hca}/")
}

/// The prefix every entity of one host shares: `host/`.
pub fn host_prefix(host: &str) -> String {
    format!("{host}/")
}

/// A GPU by its index on the host: `host/gpuN`.
pub fn gpu(host: &str, index: impl core::fmt::Display) -> String {
    format!("{host}/gpu{index}")
}

/// An NVSwitch by its PCI address as the driver's kernel log names it:
/// `host/nvswitch/0000:07:00.0`.
pub fn nvswitch(host: &str, pci: &str) -> String {
    format!("{host}/nvswitch/{pci}")
}

/// A block device: `host/nvme0n1`.
pub fn device(host: &str, dev: &str) -> String {
    format!("{host}/{dev}")
}

/// A rank of a job: `job/rank`.
pub fn rank(job: &str, rank: impl core::fmt::Display) -> String {
    format!("{job}/{rank}")
}

/// An NCCL communicator as seen from one of its hosts: `host/nccl/comm`
/// (a hang's entity: the first host, by name, of the ranks holding the
/// others up, and the communicator they hold up).
pub fn nccl_comm(host: &str, comm: &str) -> String {
    format!("{host}/nccl/{comm}")
}

/// A model served by a job (an inference latency incident): `job/model`.
pub fn model(job: &str, model: &str) -> String {
    format!("{job}/{model}")
}

/// A switch of the fabric (a leaf, from the topology): `switch:<name>`.
/// Not under any host: the incidents of the ports behind it, on many
/// hosts, become one on it.
pub fn switch(name: &str) -> String {
    format!("switch:{name}")
}

/// One port of a switch (its counters read from the fabric by the
/// collector's `[switches]` source): `switch:<name>/<port>`, under the
/// switch as a host's ports are under the host.
pub fn switch_port(name: &str, port: u32) -> String {
    format!("{}/{port}", switch(name))
}

/// An NFS target shared by the hosts that mount it: `nfs:server:/export`.
/// Not under any host (an export path has slashes, so [`host_of`] returns
/// the whole name, like a host's).
pub fn nfs_target(server: &str, export: &str) -> String {
    format!("{NFS_PREFIX}{server}:{export}")
}

/// One host's mount of an NFS target (a host-side NFS problem):
/// `host/nfs:server:/export`.
pub fn nfs_mount(host: &str, server: &str, export: &str) -> String {
    format!("{host}/{}", nfs_target(server, export))
}

const NFS_PREFIX: &str = "nfs:";

/// A Lustre target (an OST or MDT) shared by the clients that mount its
/// file system: `lustre:lustrefs-OST0003`. Not under any host.
pub fn lustre_target(name: &str) -> String {
    format!("{LUSTRE_PREFIX}{name}")
}

const LUSTRE_PREFIX: &str = "lustre:";

/// The host an entity belongs to (the whole name for a host entity, and
/// for an entity of no host such as an NFS target).
pub fn host_of(entity: &str) -> &str {
    if entity.starts_with(NFS_PREFIX) || entity.starts_with(LUSTRE_PREFIX) {
        return entity;
    }
    entity.split('/').next().unwrap_or(entity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_nest_under_their_host() {
        assert_eq!(port("n017", "mlx5_2", 1), "n017/mlx5_2/1");
        assert!(port("n017", "mlx5_2", 1).starts_with(&hca_prefix("n017", "mlx5_2")));
        assert_eq!(gpu("n003", 5), "n003/gpu5");
        assert_eq!(device("n009", "nvme0n1"), "n009/nvme0n1");
        assert_eq!(rank("job7", 12), "job7/12");
        assert!(gpu("n003", 5).starts_with(&host_prefix("n003")));
        assert_eq!(model("chat-serve", "llama-3-70b"), "chat-serve/llama-3-70b");
        assert_eq!(nccl_comm("n004", "a1b2c3"), "n004/nccl/a1b2c3");
        assert_eq!(host_of(&nccl_comm("n004", "a1b2c3")), "n004");
        assert_eq!(host_of("n003/gpu5"), "n003");
        assert_eq!(host_of("n003"), "n003");
        assert_eq!(nfs_target("filer1", "/home"), "nfs:filer1:/home");
        assert_eq!(
            host_of(&nfs_target("[fd00::5]", "/a/b")),
            "nfs:[fd00::5]:/a/b"
        );
        assert_eq!(
            nfs_mount("n003", "filer1", "/home"),
            "n003/nfs:filer1:/home"
        );
        assert_eq!(host_of(&nfs_mount("n003", "filer1", "/home")), "n003");
        assert_eq!(switch("leaf07"), "switch:leaf07");
        assert_eq!(lustre_target("fs-OST0003"), "lustre:fs-OST0003");
        assert_eq!(switch_port("leaf07", 33), "switch:leaf07/33");
        assert_eq!(host_of(&switch_port("leaf07", 33)), "switch:leaf07");
        assert_eq!(host_of("lustre:fs-OST0003"), "lustre:fs-OST0003");
        assert_eq!(host_of("n003/lustre:fs-OST0003"), "n003");
        assert_eq!(host_of(&switch("leaf07")), "switch:leaf07");
    }
}
