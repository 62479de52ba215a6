//! Turning successive port snapshots into per-second rates that are never
//! negative and never invented: a counter that went down was reset (driver
//! reload, `perfquery -x`), so the window counts from zero; a legacy counter
//! pinned at its maximum has stopped counting, so its rate is unknown.
use std::collections::BTreeMap;

use super::sysfs::PortSnapshot;
use vocab::ib as counters;

/// What one counter did in one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CounterChange {
    /// Normal increase: delta in metric units (bytes for data counters) and per second.
    Delta { delta: u64, per_sec: f64 },
    /// The value went down: the counter was reset during the window; `delta`
    /// is what it counted since the reset (a lower bound of the window's increase).
    Reset { delta: u64, per_sec: f64 },
    /// The value sits at the counter's maximum: increments are being lost.
    Saturated,
}

impl CounterChange {
    /// The known increase in this window (resets count from zero), `None` when saturated.
    pub fn delta(&self) -> Option<u64> {
        match *self {
            Self::Delta { delta, .. } | Self::Reset { delta, .. } => Some(delta),
            Self::Saturated => None,
        }
    }

    pub fn per_sec(&self) -> Option<f64> {
        match *self {
            Self::Delta { per_sec, .. } | Self::Reset { per_sec, .. } => Some(per_sec),
            Self::Saturated => None,
        }
    }
}

/// One port's window.
#[derive(Clone, Debug)]
pub struct PortRates {
    pub device: String,
    pub port: u32,
    pub seconds: f64,
    /// `counters/*` by file name.
    pub counters: BTreeMap<String, CounterChange>,
    /// `hw_counters/*` by file name.
    pub hw_counters: BTreeMap<String, CounterChange>,
    /// Symbol errors per received bit in this window (an estimate of the
    /// link's bit-error rate), when both counters moved sanely and bits > 0.
    pub symbol_error_ratio: Option<f64>,
    /// (previous, current) state ids when the logical state changed.
    pub state_change: Option<(u32, u32)>,
}

impl PortRates {
    pub fn bytes_per_sec(&self, file: &str) -> Option<f64> {
        self.counters.get(file).and_then(CounterChange::per_sec)
    }
}

/// Keeps the previous snapshot of every port; bounded by the ports present.
#[derive(Debug, Default)]
pub struct RateTracker {
    prev: BTreeMap<(String, u32), PortSnapshot>,
    /// Resets seen per port since start.
    resets: BTreeMap<(String, u32), u64>,
}

fn change(file: &str, prev: u64, cur: u64, scale: u64, secs: f64) -> CounterChange {
    if counters::is_saturated(file, cur) {
        return CounterChange::Saturated;
    }
    if cur < prev {
        let delta = cur.saturating_mul(scale);
        return CounterChange::Reset {
            delta,
            per_sec: delta as f64 / secs,
        };
    }
    let delta = (cur - prev).saturating_mul(scale);
    CounterChange::Delta {
        delta,
        per_sec: delta as f64 / secs,
    }
}

impl RateTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a new read of all ports; returns the windows of the ports seen
    /// before (a port's first read only primes the tracker).
    pub fn update(&mut self, ports: Vec<PortSnapshot>) -> Vec<PortRates> {
        let mut out = Vec::new();
        let mut next = BTreeMap::new();
        for cur in ports {
            let key = (cur.device.clone(), cur.port);
            if let Some(prev) = self.prev.get(&key) {
                let r = Self::window(prev, &cur);
                let n_resets = r
                    .counters
                    .values()
                    .chain(r.hw_counters.values())
                    .filter(|c| matches!(c, CounterChange::Reset { .. }))
                    .count() as u64;
                *self.resets.entry(key.clone()).or_default() += n_resets;
                out.push(r);
            }
            next.insert(key, cur);
        }
        self.resets.retain(|k, _| next.contains_key(k));
        self.prev = next;
        out
    }

    /// Counter resets seen on a port since start.
    pub fn resets(&self, device: &str, port: u32) -> u64 {
        self.resets
            .get(&(device.to_string(), port))
            .copied()
            .unwrap_or(0)
    }

    fn window(prev: &PortSnapshot, cur: &PortSnapshot) -> PortRates {
        let secs = cur
            .taken
            .saturating_duration_since(prev.taken)
            .as_secs_f64()
            .max(1e-6);
        let mut cs = BTreeMap::new();
        for (file, &v) in &cur.counters {
            let Some(&p) = prev.counters.get(file) else {
                continue;
            };
            let scale = counters::spec(file).map_or(1, |s| s.scale);
            cs.insert(file.clone(), change(file, p, v, scale, secs));
        }
        // `counters_ext/` holds the 64-bit versions of the data and packet
        // counters on older kernels: they replace the 32-bit ones.
        for (file, &v) in &cur.counters_ext {
            let (Some(&p), Some(spec)) = (prev.counters_ext.get(file), counters::ext_spec(file))
            else {
                continue;
            };
            cs.insert(
                spec.widens.to_string(),
                change(file, p, v, spec.scale, secs),
            );
        }
        let mut hw = BTreeMap::new();
        for (file, &v) in &cur.hw_counters {
            let Some(&p) = prev.hw_counters.get(file) else {
                continue;
            };
            // hw_counters are 64-bit driver counters: no saturation width.
            let ch = if v < p {
                CounterChange::Reset {
                    delta: v,
                    per_sec: v as f64 / secs,
                }
            } else {
                CounterChange::Delta {
                    delta: v - p,
                    per_sec: (v - p) as f64 / secs,
                }
            };
            hw.insert(file.clone(), ch);
        }
        let symbol_error_ratio = match (
            cs.get("symbol_error").and_then(CounterChange::delta),
            cs.get("port_rcv_data").and_then(CounterChange::delta),
        ) {
            (Some(errors), Some(bytes)) if bytes > 0 => Some(errors as f64 / (bytes as f64 * 8.0)),
            _ => None,
        };
        let state_change = match (prev.state, cur.state) {
            (Some(a), Some(b)) if a != b => Some((a, b)),
            _ => None,
        };
        PortRates {
            device: cur.device.clone(),
            port: cur.port,
            seconds: secs,
            counters: cs,
            hw_counters: hw,
            symbol_error_ratio,
            state_change,
        }
    }
}
