//! Kinds: of the collector's discrete events (`Event.kind` on the wire) and
//! of the correlator's incidents (`CandidateUpdate.kind`). One enum each,
//! spelled once; the wire keeps strings so older peers and subscribers'
//! `--kind` filters stay readable.

/// Defines a string-backed enum with `as_str`, `parse`, `ALL` and `Display`.
macro_rules! names {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v,)* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            /// The name on the wire.
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
            /// The variant a wire name stands for, `None` for names this
            /// version does not know.
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$v),)* _ => None }
            }
        }
        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use names;

names! {
    /// A discrete event a collector reports (`Event.kind`).
    EventKind {
        /// An NVIDIA XID error (`code` = the XID).
        GpuXid = "gpu_xid",
        /// A GPU fell off the bus.
        GpuLost = "gpu_lost",
        /// An RDMA asynchronous event (port error, QP fatal, …).
        RdmaAsync = "rdma_async",
        /// An InfiniBand port changed state between two windows.
        IbState = "ib_state",
        /// An NVSwitch error (SXid) the driver wrote to the kernel log
        /// (`code` = the SXid), on `host/nvswitch/<pci>`.
        NvswitchSxid = "nvswitch_sxid",
    }
}

names! {
    /// What an incident says is wrong (`CandidateUpdate.kind`).
    IncidentKind {
        IbLinkDegraded = "ib_link_degraded",
        IbLinkDown = "ib_link_down",
        IbLinkFlapping = "ib_link_flapping",
        GpuXid = "gpu_xid",
        /// An application-class XID judged the application's (it follows
        /// one job or executable, or names no process): tell the job's
        /// owner; never a GPU reset. Becomes `gpu_xid` (same incident)
        /// when the GPU fails unrelated jobs.
        AppXid = "app_xid",
        /// An NVSwitch error (SXid) on `host/nvswitch/<pci>`, naming the
        /// GPUs behind the switch tray.
        NvswitchSxid = "nvswitch_sxid",
        GpuEcc = "gpu_ecc",
        GpuThermalThrottle = "gpu_thermal_throttle",
        GpuPowerThrottle = "gpu_power_throttle",
        /// NVLink data-link errors (CRC, replays, recoveries) on a GPU's
        /// links at a rate above the fleet's and the floor.
        GpuNvlinkErrors = "gpu_nvlink_errors",
        StorageLatency = "storage_latency",
        /// An NFS target's RPC latency (on the target when its hosts are
        /// slow together, on one host's mount when only it is).
        NfsLatency = "nfs_latency",
        /// A Lustre target's (OST or MDT) RPC time, from the clients' OSC
        /// and MDC statistics: on the target when its clients are slow
        /// together, on one client's view when only it is.
        LustreLatency = "lustre_latency",
        NodeLost = "node_lost",
        Straggler = "straggler",
        JobSlowdown = "job_slowdown",
        InferenceLatency = "inference_latency",
        /// One tenant's job saturating a shared resource (storage device,
        /// HCA port or link, time-sliced GPU) and slowing another's.
        Interference = "interference",
        /// A collective that stopped making progress on every rank.
        CollectiveHang = "collective_hang",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_distinct() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::parse(k.as_str()), Some(*k));
        }
        for k in IncidentKind::ALL {
            assert_eq!(IncidentKind::parse(&k.to_string()), Some(*k));
        }
        let mut names: Vec<_> = IncidentKind::ALL.iter().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), IncidentKind::ALL.len());
        assert_eq!(EventKind::parse("gpu_lost "), None);
    }
}
