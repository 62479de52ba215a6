//! Prometheus text for InfiniBand ports. Every series node_exporter's
//! infiniband collector exports for a sysfs tree appears here with the same
//! name (`node_` → `faultline_`), labels and value: the `counters/`
//! families, the `counters_ext/` `legacy_*` ones, the `hw_counters/` ones it
//! names, `lifespan_seconds` and `info`. What node_exporter lacks gets
//! `faultline_infiniband_*` names of its own. The counter families are
//! declared from the table in [`vocab::ib`] (one [`Family`] per row); the
//! rest below.
use std::collections::BTreeSet;

use proto::metric::Family;

use super::{rates::RateTracker, sysfs::PortSnapshot};
use crate::prom_text::Text;
use vocab::ib::{self as counters, CounterSpec, ExtCounterSpec};

const DP: &[&str] = &["device", "port"];
const DPC: &[&str] = &["device", "port", "counter"];

pub const IB_INFO: Family = Family::gauge(
    "faultline_infiniband_info",
    &["device", "board_id", "firmware_version", "hca_type"],
    "Non-numeric data from /sys/class/infiniband/<device>, value is always 1",
);
pub const IB_STATE_ID: Family = Family::gauge(
    "faultline_infiniband_state_id",
    DP,
    "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)",
);
pub const IB_PHYSICAL_STATE_ID: Family = Family::gauge(
    "faultline_infiniband_physical_state_id",
    DP,
    "Physical state of the InfiniBand port (1: sleep, 2: polling, 3: disabled, 4: training, 5: link up, 6: link error recovery, 7: phy test)",
);
pub const IB_RATE: Family = Family::gauge(
    "faultline_infiniband_rate_bytes_per_second",
    DP,
    "Maximum signal transfer rate",
);
pub const IB_SATURATED: Family = Family::gauge(
    "faultline_infiniband_saturated",
    DPC,
    "1 when a legacy port counter sits at its maximum and has stopped counting (faultline)",
);
pub const IB_PORT_OTHER: Family = Family::counter(
    "faultline_infiniband_port_other_total",
    DPC,
    "Other counters/ files, raw value (faultline)",
);
pub const IB_EXT_OTHER: Family = Family::counter(
    "faultline_infiniband_ext_other_total",
    DPC,
    "Other counters_ext/ files, raw value (faultline)",
);
pub const IB_HW_OTHER: Family = Family::counter(
    "faultline_infiniband_hw_other_total",
    DPC,
    "Other driver hw_counters/ files, raw value (faultline)",
);
pub const IB_LIFESPAN: Family = Family::gauge(
    "faultline_infiniband_lifespan_seconds",
    DP,
    "Aging period of the hw_counters reads: two reads within it may return the same values (whole seconds)",
);
pub const IB_LINK_LAYER_INFO: Family = Family::gauge(
    "faultline_infiniband_link_layer_info",
    &["device", "port", "link_layer"],
    "Link layer of the port (faultline)",
);
pub const IB_LID: Family = Family::gauge(
    "faultline_infiniband_lid",
    DP,
    "Local identifier of the port (faultline)",
);
pub const IB_READ_ERRORS: Family = Family::gauge(
    "faultline_infiniband_read_errors",
    DP,
    "Files of this port that were missing or unreadable in the last read (faultline)",
);
pub const IB_COUNTERS_UNAVAILABLE: Family = Family::gauge(
    "faultline_infiniband_counters_unavailable",
    DP,
    "Counter files of this port that read \"N/A (no PMA)\": no performance management agent (faultline)",
);
pub const IB_RESETS: Family = Family::counter(
    "faultline_infiniband_resets_total",
    DP,
    "Counter resets (value went down) seen on this port (faultline)",
);

/// The families above, for `crate::agent::describe::all` (with [`families`]).
const NAMED: &[&Family] = &[
    &IB_INFO,
    &IB_STATE_ID,
    &IB_PHYSICAL_STATE_ID,
    &IB_RATE,
    &IB_SATURATED,
    &IB_PORT_OTHER,
    &IB_EXT_OTHER,
    &IB_HW_OTHER,
    &IB_LIFESPAN,
    &IB_LINK_LAYER_INFO,
    &IB_LID,
    &IB_READ_ERRORS,
    &IB_COUNTERS_UNAVAILABLE,
    &IB_RESETS,
];

/// A `{device, port}` counter family per row of a [`vocab::ib`] table,
/// in the table's order.
macro_rules! table_families {
    ($table:expr, $n:expr) => {{
        let mut out = [Family::counter("", DP, ""); $n];
        let mut i = 0;
        while i < $n {
            out[i] = Family::counter($table[i].metric, DP, $table[i].help);
            i += 1;
        }
        out
    }};
}

/// The `counters/` families, one per [`vocab::ib::COUNTERS`] row.
pub static COUNTER_FAMILIES: [Family; counters::COUNTERS.len()] =
    table_families!(counters::COUNTERS, counters::COUNTERS.len());
/// The `counters_ext/` families, one per [`vocab::ib::EXT_COUNTERS`] row.
pub static EXT_FAMILIES: [Family; counters::EXT_COUNTERS.len()] =
    table_families!(counters::EXT_COUNTERS, counters::EXT_COUNTERS.len());
/// The `hw_counters/` families, one per [`vocab::ib::HW_COUNTERS`] row.
pub static HW_FAMILIES: [Family; counters::HW_COUNTERS.len()] =
    table_families!(counters::HW_COUNTERS, counters::HW_COUNTERS.len());

/// Every InfiniBand port family, for `crate::agent::describe::all`.
pub fn families() -> Vec<&'static Family> {
    let mut all = NAMED.to_vec();
    all.extend(COUNTER_FAMILIES.iter());
    all.extend(EXT_FAMILIES.iter());
    all.extend(HW_FAMILIES.iter());
    all
}

/// A `counters/` file's row and family.
fn counter(file: &str) -> Option<(&'static CounterSpec, &'static Family)> {
    let i = counters::COUNTERS.iter().position(|s| s.file == file)?;
    Some((&counters::COUNTERS[i], &COUNTER_FAMILIES[i]))
}

/// A `counters_ext/` file's row and family.
fn ext_counter(file: &str) -> Option<(&'static ExtCounterSpec, &'static Family)> {
    let i = counters::EXT_COUNTERS.iter().position(|s| s.file == file)?;
    Some((&counters::EXT_COUNTERS[i], &EXT_FAMILIES[i]))
}

/// A `hw_counters/` file's family.
fn hw_counter(file: &str) -> Option<&'static Family> {
    let i = counters::HW_COUNTERS.iter().position(|s| s.file == file)?;
    Some(&HW_FAMILIES[i])
}

/// Renders the current snapshot. `tracker` (optional) adds reset counts.
pub fn render(ports: &[PortSnapshot], tracker: Option<&RateTracker>) -> String {
    let mut t = Text::new();
    let mut infos = BTreeSet::new();
    for p in ports {
        let port = p.port.to_string();
        let dp: &[(&str, &str)] = &[("device", &p.device), ("port", &port)];
        if infos.insert(&p.device) {
            t.add(
                &IB_INFO,
                &[
                    ("device", &p.device),
                    ("board_id", &p.hca.board_id),
                    ("firmware_version", &p.hca.firmware_version),
                    ("hca_type", &p.hca.hca_type),
                ],
                1,
            );
        }
        link(&mut t, p, dp);
        port_counters(&mut t, p, &port, dp);
        ext_counters(&mut t, p, &port, dp);
        hw_counters(&mut t, p, &port, dp);
        facts(&mut t, p, &port, dp, tracker);
    }
    t.render()
}

/// State, physical state and rate.
fn link(t: &mut Text, p: &PortSnapshot, dp: &[(&str, &str)]) {
    if let Some(s) = p.state {
        t.add(&IB_STATE_ID, dp, u64::from(s));
    }
    if let Some(s) = p.phys_state {
        t.add(&IB_PHYSICAL_STATE_ID, dp, u64::from(s));
    }
    if let Some(r) = p.rate_bytes_per_sec {
        t.add(&IB_RATE, dp, r);
    }
}

/// The `counters/` files: node_exporter's families, saturation, the rest raw.
fn port_counters(t: &mut Text, p: &PortSnapshot, port: &str, dp: &[(&str, &str)]) {
    for (file, &v) in &p.counters {
        let c: &[(&str, &str)] = &[("device", &p.device), ("port", port), ("counter", file)];
        match counter(file) {
            Some((spec, f)) => {
                t.add(f, dp, v.saturating_mul(spec.scale));
                if counters::is_saturated(file, v) {
                    t.add(&IB_SATURATED, c, 1);
                }
            }
            None => t.add(&IB_PORT_OTHER, c, v),
        }
    }
}

/// The `counters_ext/` files.
fn ext_counters(t: &mut Text, p: &PortSnapshot, port: &str, dp: &[(&str, &str)]) {
    for (file, &v) in &p.counters_ext {
        match ext_counter(file) {
            Some((spec, f)) => t.add(f, dp, v.saturating_mul(spec.scale)),
            None => t.add(
                &IB_EXT_OTHER,
                &[("device", &p.device), ("port", port), ("counter", file)],
                v,
            ),
        }
    }
}

/// The driver's `hw_counters/` files and their lifespan.
fn hw_counters(t: &mut Text, p: &PortSnapshot, port: &str, dp: &[(&str, &str)]) {
    for (file, &v) in &p.hw_counters {
        if file == counters::HW_LIFESPAN {
            t.add(&IB_LIFESPAN, dp, v / 1000);
            continue;
        }
        match hw_counter(file) {
            Some(f) => t.add(f, dp, v),
            None => t.add(
                &IB_HW_OTHER,
                &[("device", &p.device), ("port", port), ("counter", file)],
                v,
            ),
        }
    }
}

/// faultline's own: link layer, LID, read problems, resets.
fn facts(
    t: &mut Text,
    p: &PortSnapshot,
    port: &str,
    dp: &[(&str, &str)],
    tracker: Option<&RateTracker>,
) {
    if let Some(ll) = &p.link_layer {
        t.add(
            &IB_LINK_LAYER_INFO,
            &[("device", &p.device), ("port", port), ("link_layer", ll)],
            1,
        );
    }
    if let Some(lid) = p.lid {
        t.add(&IB_LID, dp, u64::from(lid));
    }
    t.add(&IB_READ_ERRORS, dp, p.read_errors.len() as u64);
    t.add(&IB_COUNTERS_UNAVAILABLE, dp, p.unavailable.len() as u64);
    if let Some(tr) = tracker {
        t.add(&IB_RESETS, dp, tr.resets(&p.device, p.port));
    }
}
