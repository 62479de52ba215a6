//! `[detect.storage]`: block device latency (`storage_latency`). Each
//! default's anchor is in docs/detection.md.
use proto::config_key::Key;
use serde::{Deserialize, Serialize};

use crate::setting::{in_bounds, pos, InvalidSetting};

/// Seconds an open incident is held while its entity goes unobserved
/// (0 = no hold): up to a week.
pub const UNOBSERVED_HOLD_S: Key<f64> = Key {
    min: Some(0.0),
    max: Some(7.0 * 86_400.0),
    ..Key::new(
        "storage.unobserved_hold_s",
        3600.0,
        "Seconds an open incident is held while unobserved",
    )
};

/// Latency floors of one device class, in milliseconds: below them nothing
/// is slow, whatever its peers do.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassFloor {
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// Block device latency judgement.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// Requests per window below which a device's latency is not judged.
    pub min_requests: u64,
    /// Timed requests per window below which its p99 is not judged (the
    /// p99 of fewer requests is little more than their maximum).
    pub min_requests_p99: u64,
    /// A device is slow when its p50 or p99 is this many times its class
    /// peers' median …
    pub peer_ratio: f64,
    /// … and this many times its own history (once it has one).
    pub own_ratio: f64,
    /// Devices of a class needed for a peer comparison; with fewer, a device
    /// is judged against its own history only.
    pub min_peers: usize,
    /// Consecutive slow windows before an incident opens.
    pub persist_windows: u32,
    pub nvme: ClassFloor,
    pub ssd: ClassFloor,
    pub hdd: ClassFloor,
    pub network: ClassFloor,
    /// Loop, device-mapper, zram and unknown devices.
    pub other: ClassFloor,
    /// Seconds an open incident of a device is held, neither resolved nor
    /// counting quiet windows, while the device serves fewer than
    /// `min_requests` a window; past it the quiet period runs (0 = no hold).
    pub unobserved_hold_s: f64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            min_requests: 10,
            min_requests_p99: 200,
            peer_ratio: 2.0,
            own_ratio: 2.5,
            min_peers: 4,
            persist_windows: 2,
            nvme: ClassFloor {
                p50_ms: 0.2,
                p99_ms: 2.0,
            },
            ssd: ClassFloor {
                p50_ms: 0.5,
                p99_ms: 5.0,
            },
            hdd: ClassFloor {
                p50_ms: 10.0,
                p99_ms: 100.0,
            },
            network: ClassFloor {
                p50_ms: 2.0,
                p99_ms: 50.0,
            },
            other: ClassFloor {
                p50_ms: 1.0,
                p99_ms: 20.0,
            },
            unobserved_hold_s: UNOBSERVED_HOLD_S.default,
        }
    }
}

impl StorageConfig {
    /// Floors of a wire device class ("nvme", "ssd", "hdd", "network", …).
    pub fn floor(&self, class: &str) -> ClassFloor {
        match class {
            "nvme" => self.nvme,
            "ssd" => self.ssd,
            "hdd" => self.hdd,
            "network" => self.network,
            _ => self.other,
        }
    }
}

impl StorageConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        pos("storage.peer_ratio", self.peer_ratio)?;
        pos("storage.own_ratio", self.own_ratio)?;
        in_bounds(&UNOBSERVED_HOLD_S, self.unobserved_hold_s)?;
        if self.persist_windows == 0 {
            return Err(InvalidSetting::new(
                "storage.persist_windows",
                0,
                "must be at least 1",
            ));
        }
        for (p50, p99, f) in [
            ("storage.nvme.p50_ms", "storage.nvme.p99_ms", self.nvme),
            ("storage.ssd.p50_ms", "storage.ssd.p99_ms", self.ssd),
            ("storage.hdd.p50_ms", "storage.hdd.p99_ms", self.hdd),
            (
                "storage.network.p50_ms",
                "storage.network.p99_ms",
                self.network,
            ),
            ("storage.other.p50_ms", "storage.other.p99_ms", self.other),
        ] {
            pos(p50, f.p50_ms)?;
            pos(p99, f.p99_ms)?;
        }
        Ok(())
    }
}
