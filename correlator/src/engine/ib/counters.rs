//! From a port's counter snapshots to one window's [`Sample`]: deltas
//! between snapshots, where a counter going down is a reset (that window of
//! that counter is unknown, never a negative or huge count) and a legacy
//! counter at its maximum is saturated (its delta into the maximum is a
//! lower bound, afterwards it is unknown, never "no errors").
use std::collections::{BTreeMap, HashMap};

use proto::v1::IbPort;
use vocab::ib::saturation;

use super::{history::Sample, PortState, ERROR_COUNTERS, HW_ERROR_COUNTERS};

/// Delta of one counter between snapshots: `None` when either side is
/// missing or it went down (reset).
pub(super) fn delta(
    prev: &BTreeMap<String, u64>,
    cur: &HashMap<String, u64>,
    name: &str,
) -> Option<u64> {
    let (c, p) = (cur.get(name)?, prev.get(name)?);
    c.checked_sub(*p)
}

/// Makes `prev` this window's counters. A port reports the same counter
/// names every window, so the values are overwritten in place (no key
/// allocated); a changed name set is copied whole.
pub(super) fn remember(prev: &mut BTreeMap<String, u64>, cur: &HashMap<String, u64>) {
    if prev.len() == cur.len() {
        let mut hit = 0;
        for (k, v) in cur {
            if let Some(p) = prev.get_mut(k) {
                *p = *v;
                hit += 1;
            }
        }
        if hit == cur.len() {
            return;
        }
    }
    *prev = cur.iter().map(|(k, v)| (k.clone(), *v)).collect();
}

/// Sum of the deltas of `names` present on both sides; `None` on a reset
/// of any of them or when none is present.
fn delta_sum(
    prev: &BTreeMap<String, u64>,
    cur: &HashMap<String, u64>,
    names: &[&str],
) -> Option<u64> {
    let mut total = None;
    for n in names {
        if let (Some(c), Some(p)) = (cur.get(*n), prev.get(*n)) {
            total = Some(total.unwrap_or(0) + c.checked_sub(*p)?);
        }
    }
    total
}

impl PortState {
    /// This window's sample (`secs` long) from the deltas since the last
    /// snapshot; `signalling` when the link was ACTIVE throughout (windows
    /// with a down are the down's, not the BER's). Counts a reset.
    pub(super) fn sample(&mut self, p: &IbPort, secs: f64, signalling: bool) -> Sample {
        let mut sample = Sample {
            secs,
            ..Sample::default()
        };
        // Bits signalled while ACTIVE.
        let rate_bits = p.rate_bytes_per_sec as f64 * 8.0;
        if signalling && rate_bits > 0.0 {
            sample.bits = rate_bits * secs;
        }
        let physical_reset = self.physical_errors(p, &mut sample);
        let transport_reset = self.transport_retries(p, &mut sample);
        if physical_reset || transport_reset {
            self.resets += 1;
        }
        // Traffic (data counters are in 4-byte words), for evidence;
        // unknown when a 32-bit legacy data counter (no extended counters
        // on this HCA) stopped at its maximum.
        let stuck = ["port_xmit_data", "port_rcv_data"]
            .iter()
            .any(|n| p.counters.get(*n) == Some(&u64::from(u32::MAX)));
        sample.bytes = delta_sum(
            &self.counters,
            &p.counters,
            &["port_xmit_data", "port_rcv_data"],
        )
        .filter(|_| !stuck)
        .map(|words| words.saturating_mul(4));
        sample.rate_bytes = p.rate_bytes_per_sec;
        sample
    }

    /// The physical families' errors into `sample`, tracking saturated
    /// counters; whether a counter was reset.
    fn physical_errors(&mut self, p: &IbPort, sample: &mut Sample) -> bool {
        let mut reset = false;
        for (f, name) in ERROR_COUNTERS.iter().enumerate() {
            let (Some(&c), Some(&prev)) = (p.counters.get(*name), self.counters.get(*name)) else {
                continue;
            };
            let max = saturation(name);
            if c < prev {
                reset = true;
                self.saturated.remove(*name);
                continue;
            }
            if max == Some(c) {
                let newly = self.saturated.insert((*name).to_string());
                // Into the maximum: a lower bound, still evidence.
                // Stuck at it: unknown.
                if newly && c > prev {
                    sample.errors[f] = Some(c - prev);
                }
                continue;
            }
            self.saturated.remove(*name);
            sample.errors[f] = Some(c - prev);
        }
        reset
    }

    /// Transport retries per packet into `sample`, and the retry counters
    /// that moved; whether a counter was reset.
    fn transport_retries(&mut self, p: &IbPort, sample: &mut Sample) -> bool {
        let retries = delta_sum(&self.hw, &p.hw_counters, HW_ERROR_COUNTERS);
        self.moved_hw = HW_ERROR_COUNTERS
            .iter()
            .filter_map(|n| {
                delta(&self.hw, &p.hw_counters, n)
                    .filter(|&d| d > 0)
                    .map(|d| ((*n).to_string(), d))
            })
            .collect();
        let packets = delta_sum(
            &self.counters,
            &p.counters,
            &["port_xmit_packets", "port_rcv_packets"],
        )
        .filter(|&n| n > 0)
        .or_else(|| delta_sum(&self.hw, &p.hw_counters, &["sent_pkts", "rcvd_pkts"]));
        match (retries, packets) {
            (Some(r), Some(pk)) if pk > 0 => {
                sample.retries = Some((r, pk));
                false
            }
            (None, _) => !p.hw_counters.is_empty() && !self.hw.is_empty(),
            _ => false,
        }
    }
}
