//! Prometheus text for the block metrics, summed over cgroups (bounded by
//! devices × ops): `faultline_block_requests_total{device,op}`,
//! `faultline_block_bytes_total{device,op}`,
//! `faultline_block_latency_seconds{device,op}` (histogram with the
//! probes' log2 buckets) and `faultline_block_inflight{device}`.
use std::collections::BTreeMap;

use collector_common::block::BlockStats;

use super::window::{op_name, BlockSnapshot, Names};
use crate::prom_text::{Kind, Text};

pub fn render_prometheus(snap: &BlockSnapshot, names: &mut Names) -> String {
    let mut by: BTreeMap<(String, &'static str), BlockStats> = BTreeMap::new();
    for (k, v) in &snap.stats {
        let Some(op) = op_name(k.op) else { continue };
        by.entry((names.device(k.dev), op))
            .or_insert(BlockStats::ZERO)
            .merge(v);
    }
    let mut t = Text::new();
    for ((d, o), v) in &by {
        let l: &[(&str, &str)] = &[("device", d), ("op", o)];
        t.sample(
            "faultline_block_requests_total",
            "Completed block requests",
            Kind::Counter,
            l,
            v.requests,
        );
        t.sample(
            "faultline_block_bytes_total",
            "Completed block bytes",
            Kind::Counter,
            l,
            v.bytes,
        );
        t.log2_ns_histogram(
            "faultline_block_latency_seconds",
            "Block request latency, submit to completion",
            l,
            &v.hist,
            v.latency_sum_ns,
            v.timed,
        );
    }
    let mut inflight: BTreeMap<String, u64> = BTreeMap::new();
    for (dev, n) in &snap.inflight {
        *inflight.entry(names.device(*dev)).or_default() += n;
    }
    for (d, n) in &inflight {
        t.sample(
            "faultline_block_inflight",
            "Timed block requests in flight",
            Kind::Gauge,
            &[("device", d)],
            n,
        );
    }
    t.render()
}
