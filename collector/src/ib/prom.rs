//! Prometheus text for InfiniBand ports. Every series node_exporter's
//! infiniband collector exports for a sysfs tree appears here with the same
//! name (`node_` → `faultline_`), labels and value: the `counters/`
//! families, the `counters_ext/` `legacy_*` ones, the `hw_counters/` ones it
//! names, `lifespan_seconds` and `info`. What node_exporter lacks gets
//! `faultline_infiniband_*` names of its own.
use std::collections::BTreeSet;

use super::{rates::RateTracker, sysfs::PortSnapshot};
use crate::prom_text::{Kind, Text};
use vocab::ib as counters;

const P: &str = "faultline_infiniband_";

/// Adds `faultline_infiniband_<name>` samples to a text.
struct Families<'t>(&'t mut Text);

impl Families<'_> {
    fn add(&mut self, name: &str, help: &str, kind: Kind, labels: &[(&str, &str)], v: u64) {
        self.0.sample(&format!("{P}{name}"), help, kind, labels, v);
    }
}

/// Renders the current snapshot. `tracker` (optional) adds reset counts.
pub fn render(ports: &[PortSnapshot], tracker: Option<&RateTracker>) -> String {
    let mut t = Text::new();
    let mut out = Families(&mut t);
    let mut infos = BTreeSet::new();
    for p in ports {
        let port = p.port.to_string();
        let dp: &[(&str, &str)] = &[("device", &p.device), ("port", &port)];
        if infos.insert(&p.device) {
            out.add(
                "info",
                "Non-numeric data from /sys/class/infiniband/<device>, value is always 1",
                Kind::Gauge,
                &[
                    ("device", &p.device),
                    ("board_id", &p.hca.board_id),
                    ("firmware_version", &p.hca.firmware_version),
                    ("hca_type", &p.hca.hca_type),
                ],
                1,
            );
        }
        link(&mut out, p, dp);
        port_counters(&mut out, p, &port, dp);
        ext_counters(&mut out, p, &port, dp);
        hw_counters(&mut out, p, &port, dp);
        facts(&mut out, p, &port, dp, tracker);
    }
    t.render()
}

/// State, physical state and rate.
fn link(out: &mut Families<'_>, p: &PortSnapshot, dp: &[(&str, &str)]) {
    if let Some(s) = p.state {
        out.add("state_id", "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)", Kind::Gauge, dp, u64::from(s));
    }
    if let Some(s) = p.phys_state {
        out.add("physical_state_id", "Physical state of the InfiniBand port (1: sleep, 2: polling, 3: disabled, 4: training, 5: link up, 6: link error recovery, 7: phy test)", Kind::Gauge, dp, u64::from(s));
    }
    if let Some(r) = p.rate_bytes_per_sec {
        out.add(
            "rate_bytes_per_second",
            "Maximum signal transfer rate",
            Kind::Gauge,
            dp,
            r,
        );
    }
}

/// The `counters/` files: node_exporter's families, saturation, the rest raw.
fn port_counters(out: &mut Families<'_>, p: &PortSnapshot, port: &str, dp: &[(&str, &str)]) {
    for (file, &v) in &p.counters {
        let c: &[(&str, &str)] = &[("device", &p.device), ("port", port), ("counter", file)];
        match counters::spec(file) {
            Some(spec) => {
                out.add(
                    spec.metric,
                    spec.help,
                    Kind::Counter,
                    dp,
                    v.saturating_mul(spec.scale),
                );
                if counters::is_saturated(file, v) {
                    out.add("saturated", "1 when a legacy port counter sits at its maximum and has stopped counting (faultline)", Kind::Gauge, c, 1);
                }
            }
            None => out.add(
                "port_other_total",
                "Other counters/ files, raw value (faultline)",
                Kind::Counter,
                c,
                v,
            ),
        }
    }
}

/// The `counters_ext/` files.
fn ext_counters(out: &mut Families<'_>, p: &PortSnapshot, port: &str, dp: &[(&str, &str)]) {
    for (file, &v) in &p.counters_ext {
        match counters::ext_spec(file) {
            Some(spec) => out.add(
                spec.metric,
                spec.help,
                Kind::Counter,
                dp,
                v.saturating_mul(spec.scale),
            ),
            None => out.add(
                "ext_other_total",
                "Other counters_ext/ files, raw value (faultline)",
                Kind::Counter,
                &[("device", &p.device), ("port", port), ("counter", file)],
                v,
            ),
        }
    }
}

/// The driver's `hw_counters/` files and their lifespan.
fn hw_counters(out: &mut Families<'_>, p: &PortSnapshot, port: &str, dp: &[(&str, &str)]) {
    for (file, &v) in &p.hw_counters {
        if file == counters::HW_LIFESPAN {
            out.add("lifespan_seconds", "Aging period of the hw_counters reads: two reads within it may return the same values (whole seconds)", Kind::Gauge, dp, v / 1000);
            continue;
        }
        match counters::hw_spec(file) {
            Some(spec) => out.add(spec.metric, spec.help, Kind::Counter, dp, v),
            None => out.add(
                "hw_other_total",
                "Other driver hw_counters/ files, raw value (faultline)",
                Kind::Counter,
                &[("device", &p.device), ("port", port), ("counter", file)],
                v,
            ),
        }
    }
}

/// faultline's own: link layer, LID, read problems, resets.
fn facts(
    out: &mut Families<'_>,
    p: &PortSnapshot,
    port: &str,
    dp: &[(&str, &str)],
    tracker: Option<&RateTracker>,
) {
    if let Some(ll) = &p.link_layer {
        out.add(
            "link_layer_info",
            "Link layer of the port (faultline)",
            Kind::Gauge,
            &[("device", &p.device), ("port", port), ("link_layer", ll)],
            1,
        );
    }
    if let Some(lid) = p.lid {
        out.add(
            "lid",
            "Local identifier of the port (faultline)",
            Kind::Gauge,
            dp,
            u64::from(lid),
        );
    }
    out.add(
        "read_errors",
        "Files of this port that were missing or unreadable in the last read (faultline)",
        Kind::Gauge,
        dp,
        p.read_errors.len() as u64,
    );
    out.add(
        "counters_unavailable",
        "Counter files of this port that read \"N/A (no PMA)\": no performance management agent (faultline)",
        Kind::Gauge,
        dp,
        p.unavailable.len() as u64,
    );
    if let Some(tr) = tracker {
        out.add(
            "resets_total",
            "Counter resets (value went down) seen on this port (faultline)",
            Kind::Counter,
            dp,
            tr.resets(&p.device, p.port),
        );
    }
}
