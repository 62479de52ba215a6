//! The export requests the bench sends, as real exporters build them:
//! training ranks (a cumulative 8-bucket step-duration histogram and a
//! throughput gauge) and model servers (GenAI TTFT, request duration and
//! token usage histograms for 4 models).
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{any_value::Value, AnyValue, InstrumentationScope, KeyValue},
    metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, Gauge, Histogram,
        HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    },
    resource::v1::Resource,
};

/// Step durations (s): 8 buckets.
const STEP_BOUNDS: &[f64] = &[0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0];
/// The GenAI semantic conventions' advised bucket boundaries.
const TTFT_BOUNDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const REQUEST_BOUNDS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
const TOKEN_BOUNDS: &[f64] = &[
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];
pub(super) const MODELS: usize = 4;
fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn kv_int(k: &str, v: i64) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::IntValue(v)),
        }),
        ..Default::default()
    }
}

pub(super) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// A cumulative explicit-bucket histogram series.
struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    attrs: Vec<KeyValue>,
}

impl Hist {
    fn new(bounds: &'static [f64], attrs: Vec<KeyValue>) -> Self {
        Self {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            attrs,
        }
    }

    /// `n` observations in buckets `centre - 1 ..= centre + 1`.
    fn observe(&mut self, rng: &mut u64, n: u64, centre: usize) {
        for _ in 0..n {
            let b = (centre + (next_rand(rng) % 3) as usize)
                .saturating_sub(1)
                .min(self.bounds.len());
            let v = match b {
                0 => self.bounds[0] * 0.5,
                b if b == self.bounds.len() => self.bounds[b - 1] * 1.5,
                b => (self.bounds[b - 1] + self.bounds[b]) / 2.0,
            };
            self.counts[b] += 1;
            self.sum += v;
        }
    }

    fn point(&self, start: u64, now: u64) -> HistogramDataPoint {
        HistogramDataPoint {
            attributes: self.attrs.clone(),
            start_time_unix_nano: start,
            time_unix_nano: now,
            count: self.counts.iter().sum(),
            sum: Some(self.sum),
            bucket_counts: self.counts.clone(),
            explicit_bounds: self.bounds.to_vec(),
            ..Default::default()
        }
    }
}

fn histogram(name: &str, unit: &str, data_points: Vec<HistogramDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(Data::Histogram(Histogram {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    }
}

enum Kind {
    /// Step durations and a tokens/s gauge.
    Rank { steps: Hist },
    /// Per model: TTFT, request duration, input tokens, output tokens.
    Server { models: Vec<[Hist; 4]> },
}

/// One exporting process: its resource and cumulative series.
pub(super) struct Exporter {
    resource: Vec<KeyValue>,
    scope: &'static str,
    kind: Kind,
    start: u64,
    rng: u64,
}

fn sdk_attrs(service: String, instance: String) -> Vec<KeyValue> {
    vec![
        kv("service.name", &service),
        kv("service.instance.id", &instance),
        kv("telemetry.sdk.language", "python"),
        kv("telemetry.sdk.name", "opentelemetry"),
        kv("telemetry.sdk.version", "1.45.2"),
    ]
}

impl Exporter {
    /// Rank `rank` of Slurm job `job`; `tag` keeps otherwise equal series apart.
    pub(super) fn rank(job: u32, rank: u32, tag: &str, start: u64) -> Self {
        let mut resource = sdk_attrs("trainer".into(), format!("{tag}-{job}-{rank}"));
        resource.extend([
            kv("host.name", &format!("gpu{:04}", rank / 8)),
            kv("slurm.job.id", &job.to_string()),
            kv_int("RANK", i64::from(rank)),
        ]);
        Self {
            resource,
            scope: "trainer",
            kind: Kind::Rank {
                steps: Hist::new(STEP_BOUNDS, vec![]),
            },
            start,
            rng: 0x9e37_79b9_7f4a_7c15 ^ (u64::from(job) << 20 | u64::from(rank)),
        }
    }

    fn server(i: u32, tag: &str, start: u64) -> Self {
        let mut resource = sdk_attrs(format!("model-server-{i}"), format!("{tag}-{i}"));
        resource.extend([
            kv("k8s.namespace.name", "inference"),
            kv("k8s.pod.name", &format!("vllm-{tag}-{i}")),
            kv("k8s.pod.uid", &format!("5f0c{i:08x}-{tag}")),
        ]);
        let models = (0..MODELS)
            .map(|m| {
                let base = vec![
                    kv("gen_ai.request.model", &format!("model-{m}")),
                    kv("gen_ai.provider.name", "vllm"),
                    kv("gen_ai.operation.name", "chat"),
                ];
                let with = |t: &str| {
                    let mut a = base.clone();
                    a.push(kv("gen_ai.token.type", t));
                    a
                };
                [
                    Hist::new(TTFT_BOUNDS, base.clone()),
                    Hist::new(REQUEST_BOUNDS, base.clone()),
                    Hist::new(TOKEN_BOUNDS, with("input")),
                    Hist::new(TOKEN_BOUNDS, with("output")),
                ]
            })
            .collect();
        Self {
            resource,
            scope: "vllm",
            kind: Kind::Server { models },
            start,
            rng: 0x2545_f491_4f6c_dd1d ^ u64::from(i + 1),
        }
    }

    /// Data points per export.
    pub(super) fn points(&self) -> u64 {
        match &self.kind {
            Kind::Rank { .. } => 2,
            Kind::Server { models } => 4 * models.len() as u64,
        }
    }

    /// The next export: an interval's observations added to the cumulative series.
    pub(super) fn next(&mut self) -> ExportMetricsServiceRequest {
        let now = now_ns();
        let rng = &mut self.rng;
        let metrics = match &mut self.kind {
            Kind::Rank { steps } => {
                steps.observe(rng, 10, 2);
                let tps = 180_000.0 + (next_rand(rng) % 20_000) as f64;
                vec![
                    histogram(
                        "training.step.duration",
                        "s",
                        vec![steps.point(self.start, now)],
                    ),
                    Metric {
                        name: "train.tokens_per_second".into(),
                        unit: "{token}/s".into(),
                        data: Some(Data::Gauge(Gauge {
                            data_points: vec![NumberDataPoint {
                                time_unix_nano: now,
                                value: Some(number_data_point::Value::AsDouble(tps)),
                                ..Default::default()
                            }],
                        })),
                        ..Default::default()
                    },
                ]
            }
            Kind::Server { models } => {
                for [ttft, req, tin, tout] in models.iter_mut() {
                    ttft.observe(rng, 20, 8);
                    req.observe(rng, 20, 6);
                    tin.observe(rng, 20, 7);
                    tout.observe(rng, 20, 6);
                }
                let pts = |i: usize| -> Vec<HistogramDataPoint> {
                    models.iter().map(|m| m[i].point(self.start, now)).collect()
                };
                let mut tokens = pts(2);
                tokens.extend(pts(3));
                vec![
                    histogram("gen_ai.server.time_to_first_token", "s", pts(0)),
                    histogram("gen_ai.server.request.duration", "s", pts(1)),
                    histogram("gen_ai.client.token.usage", "{token}", tokens),
                ]
            }
        };
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: self.resource.clone(),
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: self.scope.into(),
                        version: "1.0.0".into(),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }
}

/// Exporters for about `series` OTLP series: a quarter as many ranks (jobs
/// of 64 ranks), a 32nd as many model servers.
pub(super) fn exporters(series: usize, tag: &str, start: u64) -> Vec<Exporter> {
    let ranks = (series / 4).max(1) as u32;
    let servers = (series / 32).max(1) as u32;
    let mut v: Vec<Exporter> = (0..ranks)
        .map(|r| Exporter::rank(1000 + r / 64, r % 64, tag, start))
        .collect();
    v.extend((0..servers).map(|i| Exporter::server(i, tag, start)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::otlp::{self, OtlpSection};

    #[test]
    fn every_point_of_the_bench_requests_lands_in_the_window() {
        let shared = otlp::Shared::new(&OtlpSection::default());
        let mut ex = exporters(64, "t", now_ns());
        assert_eq!(ex.len(), 16 + 2);
        for _ in 0..2 {
            for e in &mut ex {
                let r = shared.export(&e.next(), "t");
                assert_eq!(r.partial_success, None);
            }
        }
        let (steps, work) = shared.take_window(|_| None);
        // 16 ranks: 2 exports × 10 steps each.
        assert_eq!(steps.len(), 16);
        assert!(steps
            .iter()
            .all(|s| s.job.starts_with("1000") && s.count == 20));
        // A throughput sample per rank; TTFT, request duration and tokens per
        // model of each of the 2 servers.
        let count = |sig: &str| work.iter().filter(|w| w.signal == sig).count();
        assert_eq!(count("throughput"), 16);
        for sig in ["ttft_seconds", "request_seconds", "tokens"] {
            assert_eq!(count(sig), 2 * MODELS, "{sig}: {work:?}");
        }
    }
}
