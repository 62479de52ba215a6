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

mod extremes;
mod histograms;
mod json;
mod series;

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
