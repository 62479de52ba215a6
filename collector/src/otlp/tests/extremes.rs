//! Values at the edges of `f64` and `u64` (found by the `otlp_export` fuzz
//! target): what leaves for the correlator stays finite, durations never go
//! negative, and counts saturate instead of wrapping.
use super::*;

fn rejected(
    r: &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse,
) -> (i64, String) {
    r.partial_success.as_ref().map_or((0, String::new()), |p| {
        (p.rejected_data_points, p.error_message.clone())
    })
}

fn exponential(scale: i32, offset: i32, counts: &[u64], sum: f64) -> Metric {
    metric(
        "gen_ai.server.time_to_first_token",
        "s",
        Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![ExponentialHistogramDataPoint {
                count: counts.iter().sum(),
                sum: Some(sum),
                scale,
                positive: Some(Buckets {
                    offset,
                    bucket_counts: counts.to_vec(),
                }),
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Delta as i32,
        }),
    )
}

#[test]
fn a_sum_past_f64_max_saturates_instead_of_becoming_infinite() {
    let s = shared();
    let req = request(
        vec![],
        vec![gauge(
            "faultline.inference.queue.depth",
            "",
            vec![number(1e308, 0, vec![])],
        )],
    );
    // The correlator drops a row whose sum is not finite: 1e308 twice must
    // not lose the series.
    s.export(&req, "test");
    s.export(&req, "test");
    let (_, work) = take(&s);
    assert_eq!(work.len(), 1, "{work:?}");
    assert_eq!(work[0].count, 2);
    assert_eq!(work[0].sum, f64::MAX);
    assert_eq!(work[0].max, 1e308);
}

#[test]
fn negative_durations_are_invalid_values() {
    let s = shared();
    let r = s.export(
        &request(
            vec![kv("slurm.job.id", "7")],
            vec![gauge(
                "training.step_time",
                "s",
                vec![number(-5.0, 0, vec![]), number(2.0, 0, vec![])],
            )],
        ),
        "test",
    );
    let (n, msg) = rejected(&r);
    assert_eq!(n, 1, "{msg}");
    assert!(msg.contains("invalid_value=1"), "{msg}");
    let (steps, _) = take(&s);
    assert_eq!(steps.len(), 1);
    assert_eq!((steps[0].count, steps[0].seconds), (1, 2.0));
    assert_eq!(steps[0].max_seconds, 2.0);
}

#[test]
fn a_duration_past_f64_in_seconds_is_invalid() {
    let s = shared();
    let mut hist = hist_point(&[1e306], &[0, 3], 1.0, 0, vec![]);
    hist.max = Some(1e307);
    let r = s.export(
        &request(
            vec![],
            vec![
                // 1e306 h is 3.6e309 s: past f64.
                gauge("training.step_time", "h", vec![number(1e306, 0, vec![])]),
                histogram(
                    "gen_ai.server.time_to_first_token",
                    "h",
                    AggregationTemporality::Delta,
                    vec![hist],
                ),
            ],
        ),
        "test",
    );
    let (n, msg) = rejected(&r);
    assert_eq!(n, 2, "{msg}");
    assert_eq!(take(&s), (vec![], vec![]));
}

#[test]
fn exponential_buckets_past_f64_are_invalid() {
    let s = shared();
    // Scale -10: a bucket spans 2^1024; index 2 000 000 is far past f64.
    let r = s.export(
        &request(
            vec![],
            vec![
                exponential(-10, 2_000_000, &[3], 1.0),
                exponential(0, 6, &[4], 400.0),
            ],
        ),
        "test",
    );
    let (n, msg) = rejected(&r);
    assert_eq!(n, 1, "{msg}");
    let (_, work) = take(&s);
    assert_eq!(work.len(), 1);
    let w = &work[0];
    // Only the sane point: 4 observations in (64, 128] s.
    assert_eq!((w.count, w.sum), (4, 400.0));
    assert!(close(w.p50, 96.0), "{w:?}");
    assert_eq!(w.max, 128.0);
}

#[test]
fn bucket_counts_overflowing_u64_are_invalid() {
    let s = shared();
    // Counts wrap to 1 = count in a u64 sum: they must not pass as valid.
    let mut p = hist_point(&[1.0], &[0, 0], 1.0, 0, vec![]);
    p.bucket_counts = vec![u64::MAX, 2];
    p.count = 1;
    let r = s.export(
        &request(
            vec![],
            vec![histogram(
                "gen_ai.server.time_to_first_token",
                "s",
                AggregationTemporality::Delta,
                vec![p],
            )],
        ),
        "test",
    );
    let (n, msg) = rejected(&r);
    assert_eq!(n, 1, "{msg}");
    assert_eq!(take(&s), (vec![], vec![]));
}

#[test]
fn counts_past_u64_saturate() {
    let s = shared();
    let req = request(
        vec![],
        vec![histogram(
            "gen_ai.server.time_to_first_token",
            "s",
            AggregationTemporality::Delta,
            vec![hist_point(&[1.0], &[0, u64::MAX], 2.0, 0, vec![])],
        )],
    );
    s.export(&req, "test");
    s.export(&req, "test");
    let (_, work) = take(&s);
    assert_eq!(work.len(), 1);
    assert_eq!((work[0].count, work[0].sum), (u64::MAX, 4.0));
    assert_eq!(work[0].max, 1.0);
}

#[test]
fn a_cumulative_duration_sum_that_goes_down_is_a_reset() {
    let s = shared();
    // Started before the receiver: the first point is only a baseline.
    let p = |count: u64, sum: f64| hist_point(&[10.0], &[count, 0], sum, 1, vec![]);
    s.export(
        &request(
            vec![kv("slurm.job.id", "7")],
            vec![histogram(
                "training.step_time",
                "s",
                AggregationTemporality::Cumulative,
                vec![p(1, 10.0), p(2, 1.0)],
            )],
        ),
        "test",
    );
    // One more step but 9 s less in total: not a continuation (the delta
    // would be a step of -9 s); the point counts in full.
    let (steps, _) = take(&s);
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!((steps[0].count, steps[0].seconds), (2, 0.5));
}
