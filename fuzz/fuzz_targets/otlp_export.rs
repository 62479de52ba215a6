//! An OTLP metrics export as the receiver gets it, protobuf or JSON (first
//! byte even: protobuf; odd: JSON), through the receiver's own path
//! (`Shared::export`, twice, so cumulative series take their delta path),
//! then the window taken as the window loop takes it. What leaves for the
//! correlator is bounded by the caps and holds only finite numbers.
#![no_main]
use collector::otlp::{json, OtlpSection, Shared};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message as _;

const MAX_SERIES: usize = 16;
const MAX_POINTS: usize = 256;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let req = if sel & 1 == 0 {
        ExportMetricsServiceRequest::decode(body).ok()
    } else {
        json::decode_request(body).ok()
    };
    let Some(req) = req else {
        return;
    };
    let cfg = OtlpSection {
        max_series_per_window: MAX_SERIES,
        max_points_per_request: MAX_POINTS,
        ..OtlpSection::default()
    };
    let shared = Shared::new(&cfg);
    for _ in 0..2 {
        let resp = shared.export(&req, "fuzz");
        if let Some(p) = resp.partial_success {
            assert!(p.rejected_data_points > 0, "{p:?}");
        }
    }
    let (steps, workload) = shared.take_window(|_| None);
    assert!(steps.len() <= MAX_SERIES, "{} step rows", steps.len());
    assert!(
        workload.len() <= MAX_SERIES,
        "{} workload rows",
        workload.len()
    );
    for s in &steps {
        assert!(s.seconds.is_finite() && s.seconds >= 0.0, "{s:?}");
        assert!(s.max_seconds.is_finite() && s.max_seconds >= 0.0, "{s:?}");
    }
    for w in &workload {
        for v in [w.sum, w.p50, w.p99, w.max] {
            assert!(v.is_finite(), "{w:?}");
        }
    }
    let perf = shared.nccl_perf.take();
    assert!(perf.len() <= MAX_SERIES, "{} nccl_perf rows", perf.len());
    for p in &perf {
        for v in [p.exec_us, p.busbw_gbs, p.algobw_gbs] {
            assert!(v.is_finite() && v >= 0.0, "{p:?}");
        }
    }
});
