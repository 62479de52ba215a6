//! Decoding, cumulative → delta, aggregation, quantiles, bounds and
//! attribution, through [`Shared::export`] and [`Shared::take_window`] as the
//! receivers and the window loop call them.
use std::collections::BTreeMap;

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{any_value::Value, AnyValue, KeyValue},
    metrics::v1::{
        exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
        AggregationTemporality, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge,
        Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    },
    resource::v1::Resource,
};
use proto::v1::{StepTime, WorkloadSample};

use super::{OtlpSection, Shared};
use crate::identity::{ProcessIdentity, Workload};

fn kv(k: &str, v: impl Into<Val>) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(v.into().0),
        }),
        ..Default::default()
    }
}

struct Val(Value);
impl From<&str> for Val {
    fn from(s: &str) -> Self {
        Self(Value::StringValue(s.into()))
    }
}
impl From<i64> for Val {
    fn from(i: i64) -> Self {
        Self(Value::IntValue(i))
    }
}

fn request(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn metric(name: &str, unit: &str, data: Data) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(data),
        ..Default::default()
    }
}

fn number(v: f64, start: u64, attrs: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: start + 1,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    }
}

fn gauge(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    metric(
        name,
        unit,
        Data::Gauge(Gauge {
            data_points: points,
        }),
    )
}

fn hist_point(
    bounds: &[f64],
    counts: &[u64],
    sum: f64,
    start: u64,
    attrs: Vec<KeyValue>,
) -> HistogramDataPoint {
    HistogramDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: start + 1,
        count: counts.iter().sum(),
        sum: Some(sum),
        bucket_counts: counts.to_vec(),
        explicit_bounds: bounds.to_vec(),
        ..Default::default()
    }
}

fn histogram(
    name: &str,
    unit: &str,
    t: AggregationTemporality,
    points: Vec<HistogramDataPoint>,
) -> Metric {
    metric(
        name,
        unit,
        Data::Histogram(Histogram {
            data_points: points,
            aggregation_temporality: t as i32,
        }),
    )
}

fn now_ns() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

fn shared() -> Shared {
    Shared::new(&OtlpSection::default())
}

fn take(s: &Shared) -> (Vec<StepTime>, Vec<WorkloadSample>) {
    s.take_window(|_| None)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn gauge_steps_in_milliseconds_become_step_times_per_job_and_rank() {
    let s = shared();
    let t = now_ns();
    let r = s.export(
        &request(
            vec![
                kv("service.name", "trainer"),
                kv("slurm.job.id", "4242"),
                kv("rank", 3),
            ],
            vec![gauge(
                "train.step.duration",
                "ms",
                vec![number(250.0, t, vec![]), number(350.0, t, vec![])],
            )],
        ),
        "test",
    );
    assert_eq!(r.partial_success, None);
    let (steps, work) = take(&s);
    assert!(work.is_empty());
    assert_eq!(steps.len(), 1);
    let st = &steps[0];
    assert_eq!((st.job.as_str(), st.rank, st.count), ("4242", 3, 2));
    assert!(close(st.seconds, 0.3), "{st:?}");
    assert!(close(st.max_seconds, 0.35), "{st:?}");
    assert_eq!(st.device, -1);
    // The take swapped the window out.
    assert_eq!(take(&s), (vec![], vec![]));
}

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

#[test]
fn an_up_down_counter_is_a_level_and_a_delta_sum_is_taken_as_is() {
    let s = shared();
    let t = now_ns();
    let sum = |v: f64, t_: AggregationTemporality, mono: bool| {
        request(
            vec![kv("service.name", "srv")],
            vec![metric(
                "faultline.inference.queue.depth",
                "{request}",
                Data::Sum(Sum {
                    data_points: vec![number(v, t, vec![])],
                    aggregation_temporality: t_ as i32,
                    is_monotonic: mono,
                }),
            )],
        )
    };
    s.export(&sum(7.0, AggregationTemporality::Cumulative, false), "test");
    s.export(&sum(5.0, AggregationTemporality::Cumulative, false), "test");
    s.export(&sum(4.0, AggregationTemporality::Delta, true), "test");
    let (_, work) = take(&s);
    assert_eq!(work.len(), 1);
    assert_eq!((work[0].signal.as_str(), work[0].count), ("queue_depth", 3));
    assert!(
        close(work[0].sum, 16.0) && close(work[0].max, 7.0),
        "{work:?}"
    );
}

#[test]
fn genai_grouping_by_model_and_provider_with_the_older_system_attribute() {
    let s = shared();
    let t = now_ns();
    let p = |model: &str, provider: (&str, &str), v: f64| {
        number(
            v,
            t,
            vec![
                kv("gen_ai.request.model", model),
                kv(provider.0, provider.1),
            ],
        )
    };
    s.export(
        &request(
            vec![kv("service.name", "gateway"), kv("process.pid", 77)],
            vec![gauge(
                "gen_ai.server.request.duration",
                "s",
                vec![
                    p("m1", ("gen_ai.provider.name", "openai"), 1.0),
                    p("m1", ("gen_ai.provider.name", "openai"), 3.0),
                    p("m2", ("gen_ai.system", "vllm"), 5.0),
                ],
            )],
        ),
        "test",
    );
    let (_, work) = take(&s);
    let got: Vec<_> = work
        .iter()
        .map(|w| {
            (
                w.model.as_str(),
                w.provider.as_str(),
                w.count,
                w.sum,
                w.pid,
                w.p50,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("m1", "openai", 2, 4.0, 77, 0.0),
            ("m2", "vllm", 1, 5.0, 77, 0.0)
        ]
    );
}

#[test]
fn bounds_drop_and_count_points_and_unknown_names_are_ignored() {
    let cfg = OtlpSection {
        max_points_per_request: 3,
        max_series_per_window: 2,
        ..OtlpSection::default()
    };
    let s = Shared::new(&cfg);
    let t = now_ns();
    let pts = |n: usize| {
        (0..n)
            .map(|i| number(1.0, t, vec![kv("rank", i as i64)]))
            .collect()
    };
    let r = s.export(
        &request(
            vec![kv("service.name", "x")],
            vec![
                gauge("http.server.active_requests", "", pts(5)),
                gauge("train.step.duration", "s", pts(4)),
            ],
        ),
        "test",
    );
    // 5 ignored (unknown name, not rejected); of 4 step points 3 are read
    // (request cap) and 2 aggregated (series cap: one series per rank).
    let ps = r.partial_success.expect("partial success");
    assert_eq!(ps.rejected_data_points, 2, "{}", ps.error_message);
    assert!(
        ps.error_message.contains("request_cap=1"),
        "{}",
        ps.error_message
    );
    assert!(
        ps.error_message.contains("series_cap=1"),
        "{}",
        ps.error_message
    );
    let (steps, _) = take(&s);
    assert_eq!(steps.iter().map(|s| s.rank).collect::<Vec<_>>(), vec![0, 1]);
    // A time metric with a unit that is not time, and NaN values, are dropped.
    let r = s.export(
        &request(
            vec![],
            vec![
                gauge("train.step.duration", "By", pts(1)),
                gauge(
                    "gen_ai.server.request.duration",
                    "s",
                    vec![number(f64::NAN, t, vec![])],
                ),
            ],
        ),
        "test",
    );
    let msg = r.partial_success.expect("partial success").error_message;
    assert!(
        msg.contains("unit=1") && msg.contains("invalid_value=1"),
        "{msg}"
    );
    assert_eq!(take(&s), (vec![], vec![]));
}

#[test]
fn attribution_joins_the_process_identity_and_lets_attributes_win() {
    let s = Shared::new(&OtlpSection {
        names: BTreeMap::from([("my.step".into(), "step_seconds".into())]),
        ..OtlpSection::default()
    });
    let t = now_ns();
    let id = ProcessIdentity {
        pid: 100,
        cgroup: "/system.slice/slurmstepd.scope/job_991/step_0/user/task_0".into(),
        workload: Workload::Slurm {
            job: "991".into(),
            step: Some("0".into()),
        },
        env: [
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("NCCL_IB_HCA", "mlx5_0:1,mlx5_1:1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec(),
    };
    let mk = |res: Vec<KeyValue>, pt: Vec<KeyValue>| {
        request(res, vec![gauge("my.step", "s", vec![number(0.5, t, pt)])])
    };
    // pid 100: job, rank, GPU and HCA from its identity.
    s.export(
        &mk(
            vec![kv("process.pid", 100), kv("service.name", "svc")],
            vec![],
        ),
        "test",
    );
    // pid 200 (unknown to the identity): the Slurm job attribute, rank from the point.
    s.export(
        &mk(
            vec![
                kv("process.pid", 200),
                kv("SLURM_JOB_ID", "992"),
                kv("RANK", "1"),
            ],
            vec![kv("training.rank", 7)],
        ),
        "test",
    );
    // Nothing but the pod: the pod UID, then the service name.
    s.export(
        &mk(
            vec![kv("k8s.pod.uid", "uid-1"), kv("service.name", "svc")],
            vec![],
        ),
        "test",
    );
    s.export(&mk(vec![kv("service.name", "svc")], vec![]), "test");
    // pid 100 seen from a container's pid namespace: the identity found on
    // the host names another pod, so it is not used.
    s.export(
        &mk(
            vec![kv("process.pid", 100), kv("k8s.pod.uid", "uid-2")],
            vec![],
        ),
        "test",
    );
    let (steps, _) = s.take_window(|pid| (pid == 100).then(|| id.clone()));
    let got: Vec<_> = steps
        .iter()
        .map(|s| (s.job.as_str(), s.rank, s.device, s.hca.as_str(), s.count))
        .collect();
    assert_eq!(
        got,
        vec![
            ("991", 5, 1, "mlx5_1", 1),
            ("992", 7, -1, "", 1),
            ("svc", 0, -1, "", 1),
            ("uid-1", 0, -1, "", 1),
            ("uid-2", 0, -1, "", 1),
        ]
    );
}
