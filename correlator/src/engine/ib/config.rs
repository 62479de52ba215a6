//! `[detect.ib]`: InfiniBand/RoCE link judgement (`ib_link_*`). Each
//! default's anchor is in docs/detection.md.
use serde::{Deserialize, Serialize};

use crate::setting::{pos, prob, InvalidSetting};

/// InfiniBand/RoCE link judgement.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct IbConfig {
    /// Reference bit error rate (errors per bit signalled) a healthy port is
    /// assumed not to exceed; the floor of the fabric baseline.
    pub reference_ber: f64,
    /// Absolute alarm line (errors per bit): a port significantly above it is
    /// degraded even when the whole fabric is that bad.
    pub alarm_ber: f64,
    /// Seconds of history the BER and retry tests sum over (at least one
    /// window, whatever the window length).
    pub horizon_s: f64,
    /// Longer horizons the BER is also judged over (seconds, each above
    /// `horizon_s`, at most 3600, at most 4), from per-minute sums: a slow
    /// rise below the alarm line shows over minutes before it shows in one.
    /// The tail probability is corrected for the number of horizons
    /// (Bonferroni over the window, `horizon_s` and these).
    pub long_horizons_s: Vec<f64>,
    /// One-sided Poisson tail probability below which a port's errors are
    /// significant (per port, per window, per test).
    pub significance: f64,
    /// Tail probability below which an already degraded port stays degraded
    /// (hysteresis: looser than `significance`).
    pub clear_significance: f64,
    /// Reference transport retries (hw_counters retransmit/timeout/sequence
    /// errors) per packet sent and received.
    pub retry_reference_per_packet: f64,
    /// A port's own history (median of recent normal windows) times this is
    /// its retry reference, for links that are noisy when healthy
    /// (emulated RoCE).
    pub own_history_factor: f64,
    /// Ports with an estimate needed before the fabric's median is used as a
    /// baseline.
    pub min_peers: usize,
    /// Downs of one port within this many seconds make it flapping.
    pub flap_horizon_s: f64,
    /// Downs (state transitions or `link_downed` increments) within
    /// `flap_horizon_s` that make a port flapping.
    pub flap_downs: usize,
    /// Ports behind one switch (from `--topology`) flagged together (same
    /// kind, within `extent_window_s`) from which they are one incident on
    /// the switch, listing them: two can be two bad cables, three at once
    /// on one switch are not chance while the rest of the fabric is clean.
    pub extent_min_ports: usize,
    /// … and only when that many flagged ports behind one switch would be
    /// this unlikely were the switch's ports flagged at the rate of the
    /// rest of the fabric (binomial tail): a fabric-wide problem is not
    /// pinned on one switch.
    pub extent_significance: f64,
    /// Seconds a port's finding counts as current for the grouping (its
    /// incident's quiet period).
    pub extent_window_s: f64,
}

impl Default for IbConfig {
    fn default() -> Self {
        Self {
            reference_ber: 1e-14,
            alarm_ber: 1e-12,
            horizon_s: 60.0,
            long_horizons_s: vec![300.0, 900.0],
            significance: 1e-9,
            clear_significance: 1e-3,
            retry_reference_per_packet: 1e-5,
            own_history_factor: 10.0,
            min_peers: 4,
            flap_horizon_s: 600.0,
            flap_downs: 2,
            extent_min_ports: 3,
            extent_significance: 1e-3,
            extent_window_s: 30.0,
        }
    }
}

impl IbConfig {
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        prob("ib.reference_ber", self.reference_ber)?;
        prob("ib.alarm_ber", self.alarm_ber)?;
        if self.alarm_ber < self.reference_ber {
            return Err(InvalidSetting::new(
                "ib.alarm_ber",
                self.alarm_ber,
                "must not be below ib.reference_ber",
            ));
        }
        pos("ib.horizon_s", self.horizon_s)?;
        if self.long_horizons_s.len() > 4
            || self
                .long_horizons_s
                .iter()
                .any(|&h| !(h > self.horizon_s && h <= 3600.0))
        {
            return Err(InvalidSetting::new(
                "ib.long_horizons_s",
                format!("{:?}", self.long_horizons_s),
                "at most 4 horizons, each above ib.horizon_s and at most 3600 s",
            ));
        }
        prob("ib.significance", self.significance)?;
        prob("ib.clear_significance", self.clear_significance)?;
        if self.clear_significance < self.significance {
            return Err(InvalidSetting::new(
                "ib.clear_significance",
                self.clear_significance,
                "must not be stricter (smaller) than ib.significance",
            ));
        }
        prob(
            "ib.retry_reference_per_packet",
            self.retry_reference_per_packet,
        )?;
        pos("ib.own_history_factor", self.own_history_factor)?;
        pos("ib.flap_horizon_s", self.flap_horizon_s)?;
        if self.flap_downs < 2 {
            return Err(InvalidSetting::new(
                "ib.flap_downs",
                self.flap_downs,
                "must be at least 2 (one down is ib_link_down)",
            ));
        }
        if self.extent_min_ports < 2 {
            return Err(InvalidSetting::new(
                "ib.extent_min_ports",
                self.extent_min_ports,
                "must be at least 2 (one port is a port incident)",
            ));
        }
        prob("ib.extent_significance", self.extent_significance)?;
        pos("ib.extent_window_s", self.extent_window_s)?;
        Ok(())
    }
}
