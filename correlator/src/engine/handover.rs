//! What a shard's standby takes over besides the open incidents: the
//! detectors' own-history baselines (an IB port's retries per packet, a
//! block device's p50 and p99, an NFS or Lustre series' round-trip time),
//! per host. Without them a standby re-learns each for a few windows
//! (`baseline::WARMUP`), during which the own-history tests are quiet; a
//! baseline learnt from a fault's windows would even take the fault for
//! normal. Taken from the engine every minute; given back to a new engine
//! host by host, after its first window of each host (the detectors create
//! an entity's state from its window, so a host that never reports again
//! leaves nothing behind).
use serde::{Deserialize, Serialize};

use super::{baseline::OwnBaseline, nfs::Target};

/// One host's baselines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostBaselines {
    pub host: String,
    /// (entity, signal, baseline): a port's `retry`, a device's `p50` and
    /// `p99`.
    pub own: Vec<(String, String, OwnBaseline)>,
    /// The host's network file system series: (target, procedure,
    /// baseline).
    pub nfs: Vec<(Target, String, OwnBaseline)>,
}
