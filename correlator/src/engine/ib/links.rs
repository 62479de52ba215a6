//! `ib_link_down` and `ib_link_flapping`: a port that was ACTIVE is not, or
//! `link_downed` moved while both samples saw ACTIVE (a down and up shorter
//! than the window); `flap_downs` downs within `flap_horizon_s` make it
//! flapping.
use proto::v1::IbPort;
use vocab::ib::state_name;
use vocab::kind::IncidentKind;

use super::IbConfig;
use super::{counters::delta, PortState, ACTIVE};
use crate::engine::incidents::Finding;

/// Bound of a port's remembered downs.
const MAX_DOWNS: usize = 64;

/// The downs one window showed.
pub(super) struct Downs {
    /// Downs counted this window (state transition or `link_downed` moves).
    pub count: u64,
    /// `link_downed`'s increment.
    pub downed: u64,
    /// 1 when state sampling saw ACTIVE → not ACTIVE.
    pub transition: u64,
    pub was_active: bool,
    pub is_active: bool,
}

impl PortState {
    /// Counts this window's downs (ending at `end_ms`) into the port's
    /// remembered downs, dropping those past the flap horizon.
    pub(super) fn count_downs(
        &mut self,
        cfg: &IbConfig,
        p: &IbPort,
        first: bool,
        end_ms: i64,
    ) -> Downs {
        // A transition seen by state sampling, or link_downed moving
        // (which also reveals downs shorter than the window).
        let was_active = self.state == Some(ACTIVE);
        let is_active = p.state == ACTIVE;
        let transition = u64::from(was_active && !is_active);
        let downed = if first {
            0
        } else {
            delta(&self.counters, &p.counters, "link_downed").unwrap_or(0)
        };
        let count = transition.max(downed.min(MAX_DOWNS as u64));
        if is_active {
            self.down_since_ms = None;
        } else if transition > 0 {
            self.down_since_ms.get_or_insert(end_ms);
        }
        for _ in 0..count {
            if self.downs.len() == MAX_DOWNS {
                self.downs.pop_front();
            }
            self.downs.push_back(end_ms);
        }
        let horizon_ms = (cfg.flap_horizon_s * 1000.0) as i64;
        while self.downs.front().is_some_and(|&d| end_ms - d > horizon_ms) {
            self.downs.pop_front();
        }
        Downs {
            count,
            downed,
            transition,
            was_active,
            is_active,
        }
    }

    /// The port's down or flapping finding, if any. An `ib_link_down`
    /// stays open while the port is down, however long, and through the
    /// flap horizon after the link is up again, so that a second down is
    /// the same incident.
    pub(super) fn link_finding(
        &self,
        cfg: &IbConfig,
        entity: &str,
        p: &IbPort,
        d: &Downs,
        jobs: &[String],
    ) -> Option<Finding> {
        let hca = crate::shell::quote(&p.hca);
        let runbook_cable = || {
            format!("check the cable and switch port of {hca} port {}: `ibstat {hca} {}`, `mlxlink -d {hca} -p {}`, switch logs", p.port, p.port, p.port)
        };
        if self.downs.len() >= cfg.flap_downs {
            return Some(
                Finding::new(IncidentKind::IbLinkFlapping, entity, 0.9)
                    .with_evidence(format!(
                        "{} downs in the last {:.0} s (link_downed and state sampling); state now {}",
                        self.downs.len(), cfg.flap_horizon_s, state_name(p.state)
                    ))
                    .with_jobs(jobs)
                    .with_runbook(format!("a flapping link usually means a bad cable or transceiver: `mlxlink -d {hca} -p {} -m`, replace the cable", p.port)),
            );
        }
        let down_for_good = self.down_since_ms.is_some();
        if !d.is_active
            && (d.transition > 0 || !self.downs.is_empty() || d.was_active || down_for_good)
        {
            // Unchanged from window to window while the port stays down (no
            // update per window); the time it went down says how long.
            let since = self
                .down_since_ms
                .map(|t| format!(", down since {} UTC", vocab::time::utc(t)))
                .unwrap_or_default();
            let was = if d.transition > 0 || down_for_good {
                ", was ACTIVE"
            } else {
                ""
            };
            return Some(
                Finding::new(IncidentKind::IbLinkDown, entity, 0.95)
                    .with_evidence(format!(
                        "state {} (phys_state {}){was}{since}",
                        state_name(p.state),
                        p.phys_state,
                    ))
                    .with_jobs(jobs)
                    .with_runbook(runbook_cable()),
            );
        }
        if self.downs.is_empty() {
            return None;
        }
        // Up again (or down and up within the window).
        let evidence = if d.count > 0 && d.is_active {
            format!(
                "link_downed +{} while both samples saw ACTIVE: down and up within the window",
                d.downed
            )
        } else {
            format!(
                "ACTIVE again; {} down(s) in the last {:.0} s, watching for flaps",
                self.downs.len(),
                cfg.flap_horizon_s
            )
        };
        Some(
            Finding::new(IncidentKind::IbLinkDown, entity, 0.7)
                .with_evidence(evidence)
                .with_jobs(jobs)
                .with_runbook(runbook_cable()),
        )
    }
}
