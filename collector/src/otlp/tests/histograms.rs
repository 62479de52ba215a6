//! Histograms: delta and cumulative explicit-bucket histograms, exponential
//! histograms (with a scale change), their counts, sums and quantiles.
use super::*;

#[test]
fn delta_histogram_count_sum_and_quantiles_from_explicit_bounds() {
    let s = shared();
    let t = now_ns();
    let bounds = [0.1, 0.2, 0.5, 1.0];
    s.export(
        &request(
            vec![kv("service.name", "vllm")],
            vec![histogram(
                "gen_ai.server.time_to_first_token",
                "s",
                AggregationTemporality::Delta,
                vec![hist_point(
                    &bounds,
                    &[0, 10, 0, 0, 0],
                    1.5,
                    t,
                    vec![
                        kv("gen_ai.request.model", "llama-3-8b"),
                        kv("gen_ai.provider.name", "vllm"),
                    ],
                )],
            )],
        ),
        "test",
    );
    let (_, work) = take(&s);
    assert_eq!(work.len(), 1);
    let w = &work[0];
    assert_eq!(
        (
            w.job.as_str(),
            w.rank,
            w.signal.as_str(),
            w.model.as_str(),
            w.provider.as_str()
        ),
        ("vllm", -1, "ttft_seconds", "llama-3-8b", "vllm")
    );
    assert_eq!(w.count, 10);
    assert!(close(w.sum, 1.5));
    // Ten observations spread over (0.1, 0.2]: the median is 0.15, p99 0.199.
    assert!(close(w.p50, 0.15), "{w:?}");
    assert!(close(w.p99, 0.199), "{w:?}");
    assert!(close(w.max, 0.2), "{w:?}");
    // Two buckets of five: the median is the bound between them; the first
    // bucket starts at 0, the overflow bucket ends at the point's max.
    let mut p = hist_point(&bounds, &[5, 0, 0, 0, 5], 6.0, t, vec![]);
    p.max = Some(2.0);
    s.export(
        &request(
            vec![],
            vec![histogram(
                "gen_ai.server.request.duration",
                "s",
                AggregationTemporality::Delta,
                vec![p],
            )],
        ),
        "test",
    );
    let (_, work) = take(&s);
    assert!(close(work[0].p50, 0.1), "{work:?}");
    assert!(close(work[0].p99, 1.0 + 0.98 * 1.0), "{work:?}");
    assert!(close(work[0].max, 2.0));
}

#[test]
fn cumulative_histogram_and_sum_become_deltas_and_old_series_start_as_baseline() {
    let s = shared();
    let t = now_ns();
    let bounds = [0.25, 0.5];
    let step = |counts: &[u64], sum: f64, start: u64| {
        request(
            vec![kv("service.name", "trainer")],
            vec![
                histogram(
                    "faultline.train.step.duration",
                    "s",
                    AggregationTemporality::Cumulative,
                    vec![hist_point(&bounds, counts, sum, start, vec![])],
                ),
                metric(
                    "gen_ai.client.token.usage",
                    "{token}",
                    Data::Sum(Sum {
                        data_points: vec![number(sum * 1000.0, start, vec![])],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    }),
                ),
            ],
        )
    };
    // A series that started after the receiver counts from its first point.
    s.export(&step(&[0, 4, 0], 1.6, t), "test");
    let (steps, work) = take(&s);
    assert_eq!(
        (steps[0].count, steps[0].job.as_str(), steps[0].rank),
        (4, "trainer", 0)
    );
    assert!(close(steps[0].seconds, 0.4));
    assert!(close(work[0].sum, 1600.0), "{work:?}");
    s.export(&step(&[1, 6, 0], 2.6, t), "test");
    let (steps, work) = take(&s);
    assert_eq!(steps[0].count, 3);
    assert!(close(steps[0].seconds, 1.0 / 3.0), "{steps:?}");
    assert!(close(work[0].sum, 1000.0), "{work:?}");
    assert_eq!(work[0].signal, "tokens");
    // A reset (new start time): the point is all new.
    s.export(&step(&[0, 1, 0], 0.3, t + 10), "test");
    let (steps, _) = take(&s);
    assert_eq!(steps[0].count, 1);
    // A series older than the receiver: its first point is history, a baseline.
    let s = shared();
    s.export(&step(&[0, 100, 0], 40.0, 1), "test");
    assert_eq!(take(&s), (vec![], vec![]));
    s.export(&step(&[0, 102, 0], 40.8, 1), "test");
    let (steps, work) = take(&s);
    assert_eq!(steps[0].count, 2);
    assert!(close(steps[0].seconds, 0.4));
    assert!(close(work[0].sum, 800.0), "{work:?}");
}

#[test]
fn exponential_histograms_with_quantiles_and_a_scale_change() {
    let s = shared();
    let t = now_ns();
    let point = |scale: i32, offset: i32, counts: &[u64], sum: f64| ExponentialHistogramDataPoint {
        start_time_unix_nano: t,
        time_unix_nano: t + 1,
        count: counts.iter().sum(),
        sum: Some(sum),
        scale,
        positive: Some(Buckets {
            offset,
            bucket_counts: counts.to_vec(),
        }),
        ..Default::default()
    };
    let req = |p, temporality: AggregationTemporality| {
        request(
            vec![kv("service.name", "srv")],
            vec![metric(
                "gen_ai.server.time_per_output_token",
                "ms",
                Data::ExponentialHistogram(ExponentialHistogram {
                    data_points: vec![p],
                    aggregation_temporality: temporality as i32,
                }),
            )],
        )
    };
    // Scale 0: bucket index 6 is (64, 128] ms.
    s.export(
        &req(point(0, 6, &[4], 400.0), AggregationTemporality::Delta),
        "test",
    );
    let (_, work) = take(&s);
    let w = &work[0];
    assert_eq!((w.signal.as_str(), w.count), ("tpot_seconds", 4));
    assert!(close(w.sum, 0.4));
    assert!(close(w.p50, 0.096), "{w:?}");
    assert!(close(w.max, 0.128), "{w:?}");
    // Cumulative at scale 1 (indexes 12, 13 = (64, 90.5], (90.5, 128]), then
    // scale 0 after the SDK downscaled: the delta is 3 observations in (64, 128].
    s.export(
        &req(
            point(1, 12, &[2, 2], 400.0),
            AggregationTemporality::Cumulative,
        ),
        "test",
    );
    let (_, work) = take(&s);
    assert_eq!(work[0].count, 4);
    assert!(work[0].p50 > 0.064 && work[0].p50 <= 0.0906, "{work:?}");
    s.export(
        &req(point(0, 6, &[7], 700.0), AggregationTemporality::Cumulative),
        "test",
    );
    let (_, work) = take(&s);
    assert_eq!(work[0].count, 3);
    assert!(close(work[0].sum, 0.3));
    assert!(close(work[0].p50, 0.096), "{work:?}");
}
