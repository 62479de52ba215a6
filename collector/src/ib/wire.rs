//! The window's `IbPort` rows from the ports read from sysfs.
use proto::v1 as pb;

use super::PortSnapshot;

/// One row per port, as read (the `switch` field is the switches family's).
pub fn ports(ports: &[PortSnapshot]) -> Vec<pb::IbPort> {
    ports
        .iter()
        .map(|p| pb::IbPort {
            hca: p.device.clone(),
            port: p.port,
            state: p.state.unwrap_or(0),
            phys_state: p.phys_state.unwrap_or(0),
            rate_bytes_per_sec: p.rate_bytes_per_sec.unwrap_or(0),
            counters: p.counters.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            hw_counters: p.hw_counters.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            link_layer: p.link_layer.clone().unwrap_or_default(),
            switch: String::new(),
        })
        .collect()
}
