//! OTLP metrics (the `opentelemetry-proto` generated types) → [`Point`]s:
//! one per data point of a known metric name, with its signal, where it came
//! from (the attribution attributes of its resource and of the point), its
//! temporality and its raw value(s) in the metric's unit. Cumulative → delta
//! and the aggregation happen in [`super::aggregate`].
use std::hash::{DefaultHasher, Hash, Hasher};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{any_value::Value, KeyValue},
    metrics::v1::{
        metric::Data, number_data_point, AggregationTemporality, ExponentialHistogramDataPoint,
        HistogramDataPoint, NumberDataPoint,
    },
};

use super::names::{seconds_per_unit, Names, Signal};

/// Where a point came from: the attribution attributes (point over resource).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Source {
    pub pid: Option<u32>,
    pub slurm_job: Option<String>,
    pub pod_uid: Option<String>,
    pub pod_name: Option<String>,
    pub service: Option<String>,
    pub rank: Option<i32>,
}

/// What a point is aggregated under within a window.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub signal: Signal,
    pub source: Source,
    pub model: String,
    pub provider: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temporality {
    /// A gauge (or a non-monotonic cumulative sum): the value as is.
    Gauge,
    /// The point covers only its own interval.
    Delta,
    /// The point covers everything since `start_time_unix_nano`.
    Cumulative,
}

/// A point's values in the metric's unit.
#[derive(Clone, Debug, PartialEq)]
pub enum Raw {
    Number(f64),
    Explicit {
        count: u64,
        sum: f64,
        bounds: Vec<f64>,
        counts: Vec<u64>,
        min: Option<f64>,
        max: Option<f64>,
    },
    Exponential {
        count: u64,
        sum: f64,
        scale: i32,
        zero_count: u64,
        positive: Buckets,
        negative: Buckets,
        min: Option<f64>,
        max: Option<f64>,
    },
}

/// Exponential-histogram buckets: `counts[i]` is index `offset + i`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buckets {
    pub offset: i32,
    pub counts: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Identity of the OTLP series (name, resource and point attributes),
    /// the key of the cumulative → delta state.
    pub series: u64,
    pub start_ns: u64,
    pub temporality: Temporality,
    pub target: Target,
    pub raw: Raw,
    /// Multiplier to the signal's unit (seconds for time signals, else 1).
    pub factor: f64,
}

/// Why a point is not used; the `reason` label of `faultline_otlp_dropped_total`.
pub mod reason {
    pub const REQUEST_CAP: &str = "request_cap";
    pub const SERIES_CAP: &str = "series_cap";
    pub const STATE_CAP: &str = "state_cap";
    pub const UNIT: &str = "unit";
    pub const UNSUPPORTED_TYPE: &str = "unsupported_type";
    pub const INVALID_VALUE: &str = "invalid_value";
}

#[derive(Debug, Default, PartialEq)]
pub struct Decoded {
    pub points: Vec<Point>,
    /// Points of metrics whose name maps to no signal.
    pub ignored: u64,
    /// Points not used, by reason.
    pub dropped: Vec<(&'static str, u64)>,
}

impl Decoded {
    fn drop_point(&mut self, why: &'static str) {
        match self.dropped.iter_mut().find(|(r, _)| *r == why) {
            Some((_, n)) => *n += 1,
            None => self.dropped.push((why, 1)),
        }
    }

    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().map(|(_, n)| n).sum()
    }
}

/// The attributes read from a resource, then overridden by a point's.
#[derive(Clone, Debug, Default)]
struct Attrs {
    source: Source,
    model: Option<String>,
    provider_name: Option<String>,
    system: Option<String>,
}

impl Attrs {
    /// Reads the attribution attributes of `attrs` (overriding what is set).
    fn read(&mut self, attrs: &[KeyValue]) {
        for kv in attrs {
            let Some(v) = kv.value.as_ref().and_then(|v| v.value.as_ref()) else {
                continue;
            };
            let text = match v {
                Value::StringValue(s) if !s.is_empty() => Some(s.clone()),
                Value::IntValue(i) => Some(i.to_string()),
                _ => None,
            };
            let int = match v {
                Value::IntValue(i) => Some(*i),
                Value::StringValue(s) => s.trim().parse().ok(),
                Value::DoubleValue(d) if d.fract() == 0.0 => Some(*d as i64),
                _ => None,
            };
            let src = &mut self.source;
            let slot = match kv.key.as_str() {
                "process.pid" => {
                    src.pid = int.and_then(|p| u32::try_from(p).ok()).or(src.pid);
                    continue;
                }
                "rank" | "RANK" | "training.rank" => {
                    src.rank = int
                        .and_then(|r| i32::try_from(r).ok())
                        .filter(|r| *r >= 0)
                        .or(src.rank);
                    continue;
                }
                "slurm.job.id" | "SLURM_JOB_ID" => &mut src.slurm_job,
                "k8s.pod.uid" => &mut src.pod_uid,
                "k8s.pod.name" => &mut src.pod_name,
                "service.name" => &mut src.service,
                "gen_ai.request.model" => &mut self.model,
                "gen_ai.provider.name" => &mut self.provider_name,
                "gen_ai.system" => &mut self.system,
                _ => continue,
            };
            if text.is_some() {
                *slot = text;
            }
        }
    }

    /// Source, model and provider (`gen_ai.provider.name`, else the older `gen_ai.system`).
    fn finish(self) -> (Source, String, String) {
        (
            self.source,
            self.model.unwrap_or_default(),
            self.provider_name.or(self.system).unwrap_or_default(),
        )
    }
}

/// Order-independent hash of attributes (sorted by key, values as encoded).
fn hash_attrs(h: &mut DefaultHasher, attrs: &[KeyValue]) {
    let mut sorted: Vec<&KeyValue> = attrs.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    for kv in sorted {
        kv.key.hash(h);
        kv.value
            .as_ref()
            .map(prost::Message::encode_to_vec)
            .unwrap_or_default()
            .hash(h);
    }
}

/// Decodes a request; at most `max_points` points are read (the rest are
/// dropped with reason `request_cap`).
pub fn decode(req: &ExportMetricsServiceRequest, names: &Names, max_points: usize) -> Decoded {
    let mut out = Decoded::default();
    let mut seen = 0usize;
    for rm in &req.resource_metrics {
        let rattrs = rm
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or_default();
        let mut rsrc = Attrs::default();
        rsrc.read(rattrs);
        let mut rh = DefaultHasher::new();
        hash_attrs(&mut rh, rattrs);
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let n_points = match &m.data {
                    Some(Data::Gauge(g)) => g.data_points.len(),
                    Some(Data::Sum(s)) => s.data_points.len(),
                    Some(Data::Histogram(h)) => h.data_points.len(),
                    Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                    Some(Data::Summary(s)) => s.data_points.len(),
                    None => 0,
                };
                let Some(signal) = names.signal(&m.name) else {
                    out.ignored += n_points as u64;
                    continue;
                };
                let factor = if signal.is_time() {
                    match seconds_per_unit(&m.unit) {
                        Some(f) => f,
                        None => {
                            for _ in 0..n_points {
                                out.drop_point(reason::UNIT);
                            }
                            continue;
                        }
                    }
                } else {
                    1.0
                };
                let mut mh = rh.clone();
                m.name.hash(&mut mh);
                let ctx = Ctx {
                    signal,
                    factor,
                    resource: &rsrc,
                    hasher: &mh,
                };
                let temporality = |t: i32, monotonic: bool| {
                    if t == AggregationTemporality::Delta as i32 {
                        Temporality::Delta
                    } else if monotonic {
                        Temporality::Cumulative
                    } else {
                        Temporality::Gauge
                    }
                };
                let mut take = |out: &mut Decoded, p: Option<Point>| {
                    if seen >= max_points {
                        out.drop_point(reason::REQUEST_CAP);
                        return;
                    }
                    seen += 1;
                    match p {
                        Some(p) => out.points.push(p),
                        None => out.drop_point(reason::INVALID_VALUE),
                    }
                };
                match &m.data {
                    Some(Data::Gauge(g)) => {
                        for dp in &g.data_points {
                            take(&mut out, ctx.number(dp, Temporality::Gauge));
                        }
                    }
                    Some(Data::Sum(s)) => {
                        let t = temporality(s.aggregation_temporality, s.is_monotonic);
                        for dp in &s.data_points {
                            take(&mut out, ctx.number(dp, t));
                        }
                    }
                    Some(Data::Histogram(h)) => {
                        let t = temporality(h.aggregation_temporality, true);
                        for dp in &h.data_points {
                            take(&mut out, ctx.explicit(dp, t));
                        }
                    }
                    Some(Data::ExponentialHistogram(h)) => {
                        let t = temporality(h.aggregation_temporality, true);
                        for dp in &h.data_points {
                            take(&mut out, ctx.exponential(dp, t));
                        }
                    }
                    Some(Data::Summary(_)) => {
                        for _ in 0..n_points {
                            out.drop_point(reason::UNSUPPORTED_TYPE);
                        }
                    }
                    None => {}
                }
            }
        }
    }
    out
}

/// `start` plus every count, or `None` past `u64` (counts that wrap could
/// otherwise pass as adding up).
fn checked_total(counts: &[u64], start: u64) -> Option<u64> {
    counts.iter().try_fold(start, |t, &c| t.checked_add(c))
}

/// The bound between exponential buckets `index - 1` and `index` at `scale`
/// (in the metric's unit): `2^(index · 2^-scale)`.
pub fn exp_bound(scale: i32, index: i64) -> f64 {
    2f64.powf(index as f64 * 2f64.powi(-scale))
}

struct Ctx<'a> {
    signal: Signal,
    factor: f64,
    resource: &'a Attrs,
    hasher: &'a DefaultHasher,
}

impl Ctx<'_> {
    fn point(
        &self,
        attrs: &[KeyValue],
        start_ns: u64,
        temporality: Temporality,
        raw: Raw,
    ) -> Point {
        let mut a = self.resource.clone();
        a.read(attrs);
        let (source, model, provider) = a.finish();
        let mut h = self.hasher.clone();
        hash_attrs(&mut h, attrs);
        Point {
            series: h.finish(),
            start_ns,
            temporality,
            target: Target {
                signal: self.signal,
                source,
                model,
                provider,
            },
            raw,
            factor: self.factor,
        }
    }

    fn number(&self, dp: &NumberDataPoint, t: Temporality) -> Option<Point> {
        let v = match dp.value? {
            number_data_point::Value::AsDouble(d) => d,
            number_data_point::Value::AsInt(i) => i as f64,
        };
        self.usable(v)
            .then(|| self.point(&dp.attributes, dp.start_time_unix_nano, t, Raw::Number(v)))
    }

    /// Whether `v` (in the metric's unit) is a value of the signal: finite
    /// once in the signal's unit (`1e306 h` is not), and not negative for a
    /// duration.
    fn usable(&self, v: f64) -> bool {
        (v * self.factor).is_finite() && !(self.signal.is_time() && v < 0.0)
    }

    fn explicit(&self, dp: &HistogramDataPoint, t: Temporality) -> Option<Point> {
        let sum = dp.sum.unwrap_or(0.0);
        // A bucket of a duration cannot end below 0 (no observation is).
        let ok = self.usable(sum)
            && dp.explicit_bounds.iter().all(|&b| self.usable(b))
            && dp.explicit_bounds.windows(2).all(|w| w[0] < w[1])
            && (dp.bucket_counts.is_empty()
                || (dp.bucket_counts.len() == dp.explicit_bounds.len() + 1
                    && checked_total(&dp.bucket_counts, 0) == Some(dp.count)));
        ok.then(|| {
            self.point(
                &dp.attributes,
                dp.start_time_unix_nano,
                t,
                Raw::Explicit {
                    count: dp.count,
                    sum,
                    bounds: if dp.bucket_counts.is_empty() {
                        Vec::new()
                    } else {
                        dp.explicit_bounds.clone()
                    },
                    counts: dp.bucket_counts.clone(),
                    min: dp.min.filter(|&v| self.usable(v)),
                    max: dp.max.filter(|&v| self.usable(v)),
                },
            )
        })
    }

    fn exponential(&self, dp: &ExponentialHistogramDataPoint, t: Temporality) -> Option<Point> {
        let sum = dp.sum.unwrap_or(0.0);
        let buckets = |b: &Option<_>| {
            b.as_ref()
                .map(
                    |b: &opentelemetry_proto::tonic::metrics::v1::exponential_histogram_data_point::Buckets| {
                        Buckets {
                            offset: b.offset,
                            counts: b.bucket_counts.clone(),
                        }
                    },
                )
                .unwrap_or_default()
        };
        let positive = buckets(&dp.positive);
        let negative = buckets(&dp.negative);
        let total = checked_total(&positive.counts, dp.zero_count)
            .and_then(|t| checked_total(&negative.counts, t));
        // Every non-empty bucket's bounds are finite in the signal's unit
        // (at scale -10 a bucket spans 2^1024), and a duration has no
        // observation below 0.
        let in_range = |b: &Buckets| {
            b.counts.iter().enumerate().all(|(i, &c)| {
                c == 0 || self.usable(exp_bound(dp.scale, i64::from(b.offset) + i as i64 + 1))
            })
        };
        let no_negative = !self.signal.is_time() || negative.counts.iter().all(|&c| c == 0);
        let ok = self.usable(sum)
            && (-10..=20).contains(&dp.scale)
            && total == Some(dp.count)
            && no_negative
            && in_range(&positive)
            && in_range(&negative);
        ok.then(|| {
            self.point(
                &dp.attributes,
                dp.start_time_unix_nano,
                t,
                Raw::Exponential {
                    count: dp.count,
                    sum,
                    scale: dp.scale,
                    zero_count: dp.zero_count,
                    positive,
                    negative,
                    min: dp.min.filter(|&v| self.usable(v)),
                    max: dp.max.filter(|&v| self.usable(v)),
                },
            )
        })
    }
}
