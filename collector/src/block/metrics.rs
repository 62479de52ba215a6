//! Prometheus text for the block metrics, summed over cgroups (bounded by
//! devices × ops): `faultline_block_requests_total{device,op}`,
//! `faultline_block_bytes_total{device,op}`,
//! `faultline_block_latency_seconds{device,op}` (histogram with the
//! probes' log2 buckets) and `faultline_block_inflight{device}`.
use std::collections::BTreeMap;

use collector_common::block::BlockStats;

use super::window::{op_name, BlockSnapshot, Names};
use crate::prom_text::Text;

use proto::metric::Family;

pub const BLOCK_REQUESTS: Family = Family::counter(
    "faultline_block_requests_total",
    &["device", "op"],
    "Completed block requests",
);
pub const BLOCK_BYTES: Family = Family::counter(
    "faultline_block_bytes_total",
    &["device", "op"],
    "Completed block bytes",
);
pub const BLOCK_INFLIGHT: Family = Family::gauge(
    "faultline_block_inflight",
    &["device"],
    "Timed block requests in flight",
);
pub const BLOCK_LATENCY_SECONDS: Family = Family::histogram(
    "faultline_block_latency_seconds",
    &["device", "op"],
    "Block request latency, submit to completion",
);

/// The families above, for `crate::metrics_catalog`.
pub const FAMILIES: &[&Family] = &[
    &BLOCK_REQUESTS,
    &BLOCK_BYTES,
    &BLOCK_INFLIGHT,
    &BLOCK_LATENCY_SECONDS,
];

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
        t.add(&BLOCK_REQUESTS, l, v.requests);
        t.add(&BLOCK_BYTES, l, v.bytes);
        t.add_log2_ns_histogram(
            &BLOCK_LATENCY_SECONDS,
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
        t.add(&BLOCK_INFLIGHT, &[("device", d)], n);
    }
    t.render()
}
