//! Prometheus text for InfiniBand ports. Names follow node_exporter's
//! infiniband collector with `node_` replaced by `faultline_`; what
//! node_exporter lacks gets `faultline_infiniband_*` names of its own.
use std::{collections::BTreeMap, fmt::Write as _};

use super::{rates::RateTracker, sysfs::PortSnapshot};
use vocab::ib as counters;

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    help: String,
    kind: &'static str,
    samples: Vec<String>,
}

/// Renders the current snapshot. `tracker` (optional) adds reset counts.
pub fn render(ports: &[PortSnapshot], tracker: Option<&RateTracker>) -> String {
    let mut fams: BTreeMap<String, Family> = BTreeMap::new();
    let mut add = |name: &str, help: &str, kind: &'static str, labels: String, value: String| {
        fams.entry(format!("faultline_infiniband_{name}"))
            .or_insert_with(|| Family {
                help: help.to_string(),
                kind,
                samples: Vec::new(),
            })
            .samples
            .push(format!("{{{labels}}} {value}"));
    };
    for p in ports {
        let dp = format!("device=\"{}\",port=\"{}\"", esc(&p.device), p.port);
        if let Some(s) = p.state {
            add("state_id", "State of the InfiniBand port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer)", "gauge", dp.clone(), s.to_string());
        }
        if let Some(s) = p.phys_state {
            add("physical_state_id", "Physical state of the InfiniBand port (1: sleep, 2: polling, 3: disabled, 4: training, 5: link up, 6: link error recovery, 7: phy test)", "gauge", dp.clone(), s.to_string());
        }
        if let Some(r) = p.rate_bytes_per_sec {
            add(
                "rate_bytes_per_second",
                "Maximum signal transfer rate",
                "gauge",
                dp.clone(),
                r.to_string(),
            );
        }
        for (file, &v) in &p.counters {
            match counters::spec(file) {
                Some(spec) => {
                    add(
                        spec.metric,
                        spec.help,
                        "counter",
                        dp.clone(),
                        v.saturating_mul(spec.scale).to_string(),
                    );
                    if counters::saturation(file).is_some_and(|m| v >= m) {
                        add("counter_saturated", "1 when a legacy port counter sits at its maximum and has stopped counting (faultline)", "gauge", format!("{dp},counter=\"{}\"", esc(file)), "1".into());
                    }
                }
                None => add(
                    "counter_total",
                    "Other counters/ files, raw value (faultline)",
                    "counter",
                    format!("{dp},counter=\"{}\"", esc(file)),
                    v.to_string(),
                ),
            }
        }
        for (file, &v) in &p.hw_counters {
            add(
                "hw_counter_total",
                "Driver hw_counters/ files, raw value (faultline)",
                "counter",
                format!("{dp},counter=\"{}\"", esc(file)),
                v.to_string(),
            );
        }
        if let Some(ll) = &p.link_layer {
            add(
                "link_layer_info",
                "Link layer of the port (faultline)",
                "gauge",
                format!("{dp},link_layer=\"{}\"", esc(ll)),
                "1".into(),
            );
        }
        if let Some(lid) = p.lid {
            add(
                "lid",
                "Local identifier of the port (faultline)",
                "gauge",
                dp.clone(),
                lid.to_string(),
            );
        }
        add(
            "read_errors",
            "Files of this port that were missing or unreadable in the last read (faultline)",
            "gauge",
            dp.clone(),
            p.read_errors.len().to_string(),
        );
        if let Some(t) = tracker {
            add(
                "counter_resets_total",
                "Counter resets (value went down) seen on this port (faultline)",
                "counter",
                dp.clone(),
                t.resets(&p.device, p.port).to_string(),
            );
        }
    }
    let mut s = String::new();
    for (name, f) in fams {
        let _ = writeln!(s, "# HELP {name} {}", f.help);
        let _ = writeln!(s, "# TYPE {name} {}", f.kind);
        for sample in f.samples {
            let _ = writeln!(s, "{name}{sample}");
        }
    }
    s
}
