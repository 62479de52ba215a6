//! The per-entity signals the detectors use, taken from each window after
//! the engine has seen it, and the fleet bands (median and p10/p90 spread)
//! an entity is judged against.
//!
//! Entities and signals (docs/history.md):
//! - IB port `host/hca/port` (or its link's name with `--topology`): `ber`
//!   (horizon estimate), `errors` (physical error counter increase in the
//!   window), `retry_ratio`;
//! - GPU `host/gpuN`: `temp_c`, `sm_clock_mhz`, `power_w`, `throttle` (1 when
//!   any throttle reason is set);
//! - block device `host/dev`: `p50_s`, `p99_s`;
//! - job: `step_s` (slowest rank of the host in the window);
//! - model server `job/model`: `ttft_s`, `request_s`;
//! - bands: `fabric` (`ber.median`, `ber.p10`, `ber.p90`), `fleet-gpu`
//!   (`temp_c.*`), `fleet-storage` (`p99_s.*`), once per second of event time.
use std::collections::HashMap;

use proto::v1::Window;

use crate::engine::{ib::ERROR_COUNTERS, workload::model_entity, Engine};

/// One value of one signal of one entity at one time (unix ms).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub entity: String,
    pub signal: &'static str,
    pub ts: i64,
    pub value: f64,
}

/// Entities whose latest values the bands (and ports whose counters the
/// error deltas) keep: bounded; more are left out and counted.
pub const MAX_BANDED: usize = 1 << 20;

/// The bands: (band entity, signal, the `.median`, `.p10`, `.p90` names).
const BANDS: [(&str, &str, [&str; 3]); 3] = [
    ("fabric", "ber", ["ber.median", "ber.p10", "ber.p90"]),
    (
        "fleet-gpu",
        "temp_c",
        ["temp_c.median", "temp_c.p10", "temp_c.p90"],
    ),
    (
        "fleet-storage",
        "p99_s",
        ["p99_s.median", "p99_s.p10", "p99_s.p90"],
    ),
];

/// The band entity an entity of this kind is drawn against, and the signal.
pub fn band_of(entity_signals: &[String]) -> Option<(&'static str, &'static str)> {
    BANDS
        .iter()
        .find(|(_, s, _)| entity_signals.iter().any(|x| x == s))
        .map(|(b, s, _)| (*b, *s))
}

/// Turns windows into samples; keeps what deltas and bands need.
#[derive(Debug, Default)]
pub struct Sampler {
    /// Sum of a port's physical error counters at its previous window.
    errors: HashMap<String, u64>,
    /// Latest value per band and entity.
    latest: [HashMap<String, f64>; 3],
    /// Event time of the latest band emission.
    band_at: i64,
    /// Values left out of bands and deltas because the bound was reached.
    pub unbanded: u64,
}

impl Sampler {
    fn keep(&mut self, band: usize, entity: &str, v: f64) {
        let m = &mut self.latest[band];
        if m.len() >= MAX_BANDED && !m.contains_key(entity) {
            self.unbanded += 1;
            return;
        }
        m.insert(entity.to_string(), v);
    }

    /// Samples of one window (the engine has already ingested it).
    pub fn window(&mut self, w: &Window, engine: &Engine) -> Vec<Sample> {
        let host = w.origin.as_ref().map_or("", |o| o.hostname.as_str());
        let ts = w.end_unix_ms;
        let mut out = Vec::with_capacity(8 * w.ib_ports.len() + 4 * w.gpus.len() + 8);
        let mut push = |entity: &str, signal: &'static str, value: f64| {
            out.push(Sample {
                entity: entity.to_string(),
                signal,
                ts,
                value,
            });
        };
        for p in &w.ib_ports {
            let port = crate::engine::ib::port_entity(host, p);
            // With a fabric topology both ends of a link are one entity
            // (the incident's), and their samples merge into its series.
            let e = engine.ib.entity_of(&port);
            let sum: u64 = ERROR_COUNTERS
                .iter()
                .filter_map(|c| p.counters.get(*c))
                .fold(0u64, |a, b| a.saturating_add(*b));
            if self.errors.len() >= MAX_BANDED && !self.errors.contains_key(&port) {
                self.unbanded += 1;
            } else if let Some(prev) = self.errors.insert(port.clone(), sum) {
                // A reset (smaller now) counts as no increase.
                push(&e, "errors", sum.saturating_sub(prev) as f64);
            }
            if let Some((ber, retry)) = engine.ib.port_signals(&port) {
                if let Some(b) = ber {
                    push(&e, "ber", b);
                    self.keep(0, &e, b);
                }
                if let Some(r) = retry {
                    push(&e, "retry_ratio", r);
                }
            }
        }
        for g in &w.gpus {
            let e = format!("{host}/gpu{}", g.index);
            if let Some(t) = g.temp_c {
                push(&e, "temp_c", f64::from(t));
                self.keep(1, &e, f64::from(t));
            }
            if let Some(c) = g.sm_clock_mhz {
                push(&e, "sm_clock_mhz", f64::from(c));
            }
            if let Some(p) = g.power_w {
                push(&e, "power_w", p);
            }
            if let Some(m) = g.throttle_reasons {
                push(&e, "throttle", if m != 0 { 1.0 } else { 0.0 });
            }
        }
        let mut devs: Vec<&str> = w.block.iter().map(|b| b.device.as_str()).collect();
        devs.sort_unstable();
        devs.dedup();
        for d in devs {
            let e = format!("{host}/{d}");
            if let Some((p50, p99)) = engine.storage.latency(&e) {
                if let Some(v) = p50 {
                    push(&e, "p50_s", v);
                }
                if let Some(v) = p99 {
                    push(&e, "p99_s", v);
                    self.keep(2, &e, v);
                }
            }
        }
        let mut jobs: Vec<(&str, f64)> = Vec::new();
        for s in &w.steps {
            match jobs.iter_mut().find(|(j, _)| *j == s.job) {
                Some((_, v)) => *v = v.max(s.seconds),
                None => jobs.push((&s.job, s.seconds)),
            }
        }
        for (j, v) in jobs {
            push(j, "step_s", v);
        }
        for s in &w.workload {
            let signal = match s.signal.as_str() {
                "ttft_seconds" => "ttft_s",
                "request_seconds" => "request_s",
                _ => continue,
            };
            if s.count > 0 {
                push(
                    &model_entity(&s.job, &s.model),
                    signal,
                    s.sum / s.count as f64,
                );
            }
        }
        if ts >= self.band_at + 1000 {
            self.band_at = ts;
            for (i, (band, _, names)) in BANDS.iter().enumerate() {
                let mut v: Vec<f64> = self.latest[i].values().copied().collect();
                if v.is_empty() {
                    continue;
                }
                v.sort_by(f64::total_cmp);
                let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
                for (name, p) in names.iter().zip([0.5, 0.1, 0.9]) {
                    out.push(Sample {
                        entity: (*band).to_string(),
                        signal: name,
                        ts,
                        value: q(p),
                    });
                }
            }
        }
        out
    }
}
