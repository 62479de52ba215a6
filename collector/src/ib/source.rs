//! InfiniBand/RoCE ports from sysfs → port rows, state-change events, the
//! node_exporter-compatible families.
use std::path::PathBuf;

use anyhow::Result;
use proto::v1 as pb;

use crate::{
    ib::{self, rates::CounterChange, PortRates, RateTracker},
    sources::{Ctx, Fact, Source},
    window::unix_ms,
};

pub struct IbSource {
    sysfs_root: PathBuf,
    filter: ib::DeviceFilter,
    tracker: RateTracker,
    issues: ib::ReadIssues,
    /// Write the port families to `/metrics` (`[ib] export`).
    export: bool,
}

impl IbSource {
    /// Primes the port counters now, so the first window shows what changed
    /// since start. Only the devices `filter` accepts are read; `export`
    /// says whether their families go to `/metrics` (the wire rows always
    /// do).
    pub fn new(sysfs_root: PathBuf, filter: ib::DeviceFilter, export: bool) -> Self {
        let mut tracker = RateTracker::new();
        if let Ok(s) = ib::scan(&sysfs_root, &filter) {
            let _ = tracker.update(s.ports);
        }
        Self {
            sysfs_root,
            filter,
            tracker,
            issues: ib::ReadIssues::default(),
            export,
        }
    }
}

impl Source for IbSource {
    fn collect(&mut self, cx: &mut Ctx<'_>, wire: &mut pb::Window) -> Result<Option<Fact>> {
        let scan = match ib::scan(&self.sysfs_root, &self.filter) {
            Ok(s) => s,
            Err(e) => {
                metrics::counter!(crate::metrics_catalog::SYSFS_READ_ERRORS.name, "file" => "class/infiniband").increment(1);
                tracing::warn!(error = %e, "reading InfiniBand sysfs");
                return Ok(None);
            }
        };
        self.issues.account(cx.host, &scan);
        let ports = scan.ports;
        if self.export {
            cx.expo
                .set_section("ib", ib::prom::render(&ports, Some(&self.tracker)));
        }
        wire.ib_ports = ib::wire::ports(&ports);
        for r in self.tracker.update(ports) {
            if let Some(line) = port_line(cx.host, &r) {
                cx.console.detail(line);
            }
            if let Some((a, b)) = r.state_change {
                wire.events.push(pb::Event {
                    unix_ms: unix_ms(cx.now),
                    kind: vocab::EventKind::IbState.to_string(),
                    entity: vocab::entity::port(cx.host, &r.device, r.port),
                    detail: format!("{}->{}", vocab::ib::state_name(a), vocab::ib::state_name(b)),
                    code: i64::from(b),
                    ..Default::default()
                });
            }
        }
        Ok(None)
    }
}

/// One console line for a port with traffic, errors or a state change.
pub fn port_line(host: &str, r: &PortRates) -> Option<String> {
    let rx = r.bytes_per_sec("port_rcv_data").unwrap_or(0.0);
    let tx = r.bytes_per_sec("port_xmit_data").unwrap_or(0.0);
    let errors: Vec<String> = r
        .counters
        .iter()
        .filter(|(f, _)| !f.contains("data") && !f.contains("packets") && *f != "port_xmit_wait")
        .filter_map(|(f, c)| match c {
            CounterChange::Delta { delta, .. } if *delta > 0 => Some(format!("{f}+{delta}")),
            CounterChange::Reset { .. } => Some(format!("{f}:reset")),
            CounterChange::Saturated => Some(format!("{f}:saturated")),
            _ => None,
        })
        .collect();
    let hw: u64 = r
        .hw_counters
        .values()
        .filter_map(CounterChange::delta)
        .sum();
    if rx == 0.0 && tx == 0.0 && errors.is_empty() && r.state_change.is_none() && hw == 0 {
        return None;
    }
    let mut line = format!(
        "ib {} rx={rx:.0}B/s tx={tx:.0}B/s",
        vocab::entity::port(host, &r.device, r.port)
    );
    if !errors.is_empty() {
        line.push_str(&format!(" errors=[{}]", errors.join(" ")));
    }
    if let Some(ber) = r.symbol_error_ratio {
        line.push_str(&format!(" symbol_error_ratio={ber:.2e}"));
    }
    if let Some((a, b)) = r.state_change {
        line.push_str(&format!(
            " state {}→{}",
            vocab::ib::state_name(a),
            vocab::ib::state_name(b)
        ));
    }
    Some(line)
}
