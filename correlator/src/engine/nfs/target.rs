//! What a network file system row is judged on: an NFS export
//! (`server:/export`) or a Lustre target (`lustrefs-OST0003`), with the
//! names, kind and runbooks that differ between the two.
use proto::v1::NfsOp;

#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Target {
    Nfs {
        server: String,
        export: String,
    },
    /// A Lustre OST or MDT of file system `fsname`.
    Lustre {
        name: String,
        fsname: String,
    },
}

impl Target {
    pub fn of(r: &NfsOp) -> Self {
        if r.fstype == "lustre" {
            Self::Lustre {
                name: r.server.clone(),
                fsname: r.export.clone(),
            }
        } else {
            Self::Nfs {
                server: r.server.clone(),
                export: r.export.clone(),
            }
        }
    }

    pub fn kind(&self) -> vocab::kind::IncidentKind {
        match self {
            Self::Nfs { .. } => vocab::kind::IncidentKind::NfsLatency,
            Self::Lustre { .. } => vocab::kind::IncidentKind::LustreLatency,
        }
    }

    /// The target's incident entity (`nfs:filer1:/home`, `lustre:fs-OST0003`).
    pub fn entity(&self) -> String {
        match self {
            Self::Nfs { server, export } => vocab::entity::nfs_target(server, export),
            Self::Lustre { name, .. } => vocab::entity::lustre_target(name),
        }
    }

    /// One host's view of the target (a host-side problem).
    pub fn host_entity(&self, host: &str) -> String {
        format!("{host}/{}", self.entity())
    }

    /// As the evidence names it.
    pub fn label(&self) -> String {
        match self {
            Self::Nfs { server, export } => format!("{server}:{export}"),
            Self::Lustre { name, fsname } => format!("{name} of {fsname}"),
        }
    }

    /// The latency an op's mean is of.
    pub fn latency(&self) -> &'static str {
        match self {
            Self::Nfs { .. } => "RTT",
            Self::Lustre { .. } => "RPC time",
        }
    }

    /// What the failure count in the evidence counts.
    pub fn failures(&self) -> &'static str {
        match self {
            Self::Nfs { .. } => "retransmissions",
            Self::Lustre { .. } => "import timeouts",
        }
    }

    /// The row's count of failed attempts for this kind of target.
    pub fn failed(&self, r: &NfsOp) -> u64 {
        match self {
            Self::Nfs { .. } => r.retrans,
            Self::Lustre { .. } => r.timeouts,
        }
    }

    /// The runbook of a slow target (`server` names the server NIDs seen).
    pub fn runbook(&self, servers: &str) -> String {
        let q = crate::shell::quote;
        match self {
            Self::Nfs { server, export } => format!("NFS server {s} export {e}: its load and disk latency (`nfsstat -s`, the array's own latency), `nfsiostat 1` on an affected host (avg RTT against avg exe per op), the network path to it (retransmits, `ss -ti dport = :2049`)", s = q(server), e = q(export)),
            Self::Lustre { name, .. } => format!("Lustre target {n} (served from {servers}): on the OSS/MDS its I/O latency and queue (`lctl get_param obdfilter.{n}.brw_stats` or `mdt.{n}.md_stats`, `iostat -x 1` on its device), its service threads (`lctl get_param ost.OSS.ost_io.stats`); from an affected client `lctl get_param osc.{n}-osc-*.import` (state, timeouts, avg_waittime) and `lnetctl stats show` for the LNet path", n = name),
        }
    }

    /// The runbook of one host slow on the target while its peers are not.
    pub fn host_runbook(&self, host: &str, mountpoint: &str) -> String {
        let (h, mp) = (crate::shell::quote(host), crate::shell::quote(mountpoint));
        match self {
            Self::Nfs { .. } => format!("NFS on {h}: `nfsiostat 1 {mp}` (avg RTT against avg exe per op), the client's NIC errors and TCP retransmits (`nstat -az TcpRetransSegs`, `ss -ti dport = :2049`), its CPU and memory pressure; the other hosts on {t} are fine", t = self.label()),
            Self::Lustre { name, .. } => format!("Lustre client {h}: `lctl get_param osc.{name}-osc-*.import osc.{name}-osc-*.stats` (state, timeouts, RPC times), its LNet NIs and peers (`lnetctl net show -v`, `lnetctl peer show -v`), its HCA port errors, CPU and memory pressure; the other clients of {name} are fine"),
        }
    }
}
