//! `faultline_probe_enabled{probe}`: whether the collector means to attach
//! a probe, beside `faultline_probe_attached` (whether it is attached). An
//! alert on a detached probe (deploy/prometheus, `FaultlineProbeDetached`)
//! fires only where this is 1: a probe switched off in the configuration
//! (`[block] enabled = false`, `--no-verbs`, …) or not needed on this kernel
//! (another probe does its job) is 0 and is not a fault.
use crate::probes::{ProbeState, ProbeStatus};

/// 1 for a probe attached or configured but not attached (its reason is in
/// the log), 0 for one disabled by configuration or unused on this kernel.
pub fn enabled(state: &ProbeState) -> bool {
    match state {
        ProbeState::Attached | ProbeState::Inactive(_) => true,
        ProbeState::Disabled | ProbeState::Unused(_) => false,
    }
}

/// Sets the gauge for every probe of the attach pass.
pub fn export(status: &[ProbeStatus]) {
    for s in status {
        metrics::gauge!(crate::metrics_catalog::PROBE_ENABLED.name, "probe" => s.name)
            .set(f64::from(u8::from(enabled(&s.state))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_and_unused_probes_are_0_attached_and_inactive_are_1() {
        let status = [
            ("block_rq_issue", ProbeState::Disabled),
            (
                "block_io_done",
                ProbeState::Unused("block_rq_complete counts"),
            ),
            ("exec", ProbeState::Attached),
            (
                "ibv_post_send",
                ProbeState::Inactive("no libibverbs".into()),
            ),
            ("verbs", ProbeState::Disabled),
        ]
        .map(|(name, state)| ProbeStatus { name, state });
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || export(&status));
        let text = handle.render();
        let mut got: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("faultline_probe_enabled{"))
            .collect();
        got.sort_unstable();
        assert_eq!(
            got,
            [
                "faultline_probe_enabled{probe=\"block_io_done\"} 0",
                "faultline_probe_enabled{probe=\"block_rq_issue\"} 0",
                "faultline_probe_enabled{probe=\"exec\"} 1",
                "faultline_probe_enabled{probe=\"ibv_post_send\"} 1",
                "faultline_probe_enabled{probe=\"verbs\"} 0",
            ],
            "{text}"
        );
    }
}
