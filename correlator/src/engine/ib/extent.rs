//! The fault's extent: port findings that co-occur under one switch (from
//! the topology) become one finding on the switch, which lists the members
//! and stands for their incidents (one fault, one incident). A leaf's
//! members are the HCA ports behind it (reported by the hosts or by the
//! leaf's own port counters); a spine's are its uplinks (reported by the
//! switch counters of either end). A member counts once however many ends
//! report it.
//!
//! A port counts as flagged for `extent_window_s` after its latest finding.
//! Behind a switch with `n` ports, `k` ports of one family (errors, or
//! state: down/flapping) flagged in two windows running are the switch's
//! when `k ≥ extent_min_ports` and `k` is unlikely at the rate the rest of
//! the fabric's ports are flagged (binomial tail below
//! `extent_significance`): one bad cable, or two, stay port incidents; a
//! fabric-wide rise is not pinned on a switch. Two windows, because hosts
//! report one after another: by a port's second finding every host has
//! reported the first window of the fault, so "the rest of the fabric" is
//! known. The port incidents opened in that first window are then resolved
//! into the switch's.
use std::collections::HashMap;

use super::{
    super::{fleet::IbSummary, stats::binomial_upper_sf},
    topology::Topology,
    Finding, IbConfig,
};

/// Members listed one per evidence line (the rest counted).
const MAX_LISTED: usize = 16;

/// The grouping family of a link kind: errors, or state.
fn family(kind: &str) -> Option<&'static str> {
    match kind {
        "ib_link_degraded" => Some("errors"),
        "ib_link_down" | "ib_link_flapping" => Some("state"),
        _ => None,
    }
}

/// A port's latest finding, while it is current.
#[derive(Debug)]
struct Flag {
    family: &'static str,
    /// First window end of this run of findings.
    since_ms: i64,
    at_ms: i64,
    line: String,
    jobs: Vec<String>,
}

/// Flagged ports behind switches.
#[derive(Debug, Default)]
pub(super) struct Extent {
    /// Member (the topology's canonical name of the reporting port) → its
    /// latest finding (only members the topology puts under a switch;
    /// bounded by the ports tracked).
    flagged: HashMap<String, Flag>,
}

impl Extent {
    pub(super) fn forget(&mut self, gone: impl Fn(&str) -> bool) {
        self.flagged.retain(|p, _| !gone(p));
    }

    /// Ports flagged now, per family (a shard's summary for the others).
    pub(super) fn flagged_counts(&self) -> std::collections::BTreeMap<String, u64> {
        let mut m = std::collections::BTreeMap::new();
        for f in self.flagged.values() {
            *m.entry(f.family.to_string()).or_insert(0) += 1;
        }
        m
    }

    /// Records this window's port findings and rewrites those whose switch
    /// has become the fault into one finding on the switch. `ports` is the
    /// number of ports tracked in the fabric; `remote`, the other shards'
    /// part of it (their ports and flagged ports all count as elsewhere: a
    /// switch's members are on one shard when shards are leaves).
    pub(super) fn group(
        &mut self,
        topo: &Topology,
        (cfg, remote): (&IbConfig, Option<&IbSummary>),
        end_ms: i64,
        ports: usize,
        findings: &mut Vec<Finding>,
    ) {
        let window_ms = (cfg.extent_window_s * 1000.0) as i64;
        self.flagged.retain(|_, f| end_ms - f.at_ms <= window_ms);
        for f in findings.iter() {
            if let (Some(family), Some(_)) = (family(f.kind.as_str()), topo.parent_of(&f.entity)) {
                let member = topo.canonical(&f.entity).to_string();
                let line = f.evidence.first().cloned().unwrap_or_default();
                let jobs = f.jobs.clone();
                let since_ms = self
                    .flagged
                    .get(&member)
                    .filter(|old| old.family == family)
                    .map_or(end_ms, |old| old.since_ms);
                let flag = Flag {
                    family,
                    since_ms,
                    at_ms: end_ms,
                    line,
                    jobs,
                };
                self.flagged.insert(member, flag);
            }
        }
        let mut out: Vec<Finding> = Vec::with_capacity(findings.len());
        for f in findings.drain(..) {
            let verdict = family(f.kind.as_str())
                .zip(topo.parent_of(&f.entity))
                .and_then(|(fam, sw)| self.switch_finding(topo, (cfg, remote), sw, fam, ports, &f));
            let f = verdict.unwrap_or(f);
            // One finding per (kind, switch) per window.
            if !out.iter().any(|o| o.kind == f.kind && o.entity == f.entity) {
                out.push(f);
            }
        }
        *findings = out;
    }

    /// The switch's finding in place of `f`, when the switch is the fault.
    fn switch_finding(
        &self,
        topo: &Topology,
        (cfg, remote): (&IbConfig, Option<&IbSummary>),
        switch: &str,
        family: &'static str,
        ports: usize,
        f: &Finding,
    ) -> Option<Finding> {
        let members = topo.members(switch);
        let flagged: Vec<(&String, &Flag)> = members
            .iter()
            .filter_map(|p| self.flagged.get_key_value(p))
            .filter(|(_, fl)| fl.family == family && fl.since_ms < fl.at_ms)
            .collect();
        let k = flagged.len();
        if k < cfg.extent_min_ports {
            return None;
        }
        let n = members.len();
        let remote_flagged = remote
            .and_then(|r| r.flagged.get(family))
            .map_or(0, |n| *n as usize);
        let elsewhere = self
            .flagged
            .iter()
            .filter(|(p, fl)| fl.family == family && topo.parent_of(p) != Some(switch))
            .count()
            + remote_flagged;
        let ports = ports + remote.map_or(0, |r| r.ports as usize);
        let others = ports.saturating_sub(n).max(elsewhere).max(1);
        let rate = elsewhere as f64 / others as f64;
        let p = binomial_upper_sf(k as u64, n as u64, rate);
        if p >= cfg.extent_significance {
            return None;
        }
        let what = if family == "errors" {
            "degraded"
        } else {
            "down or flapping"
        };
        let names: Vec<&str> = flagged.iter().map(|(p, _)| p.as_str()).collect();
        let under = if names.iter().any(|m| topo.is_uplink(m)) {
            "uplinks of"
        } else {
            "ports behind"
        };
        let mut evidence = vec![format!(
            "{k} of the {n} {under} switch {switch} {what} at once ({}); the rest of the fabric: {elsewhere} of {others} ports, so {k} here by chance has p {}",
            names.join(", "),
            if p > 0.0 { format!("= {p:.1e}") } else { "< 1e-300".to_string() }
        )];
        for (port, fl) in flagged.iter().take(MAX_LISTED) {
            evidence.push(format!("member {port}: {}", fl.line));
        }
        if k > MAX_LISTED {
            evidence.push(format!("and {} more members", k - MAX_LISTED));
        }
        let mut jobs: Vec<String> = flagged.iter().flat_map(|(_, fl)| fl.jobs.clone()).collect();
        jobs.sort();
        jobs.dedup();
        let absorbs = names
            .iter()
            .map(|p| topo.link_of(p).cloned().unwrap_or_else(|| p.to_string()))
            .collect();
        let mut g = Finding::new(
            f.kind,
            &vocab::entity::switch(switch),
            f.confidence.max(0.9),
        )
        .with_evidence_list(evidence)
        .with_jobs(&jobs)
        .with_runbook(format!(
            "one element, several cables: check switch {switch} itself first (power supplies, fans and temperature, firmware and its log; `ibqueryerrors` and `iblinkinfo` for all its ports and uplinks), then whether the cables share an optics batch; move the jobs behind it (`ibnetdiscover` lists them) before a reset"
        ));
        g.absorbs = absorbs;
        Some(g)
    }
}
