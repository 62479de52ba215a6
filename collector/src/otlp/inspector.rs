//! The NCCL Inspector's OTLP export → `Window.nccl_perf`.
//!
//! NCCL's Inspector profiler plugin (`NCCL_INSPECTOR_OTEL_EXPORT=1`) posts
//! OTLP/HTTP JSON gauges to `http://localhost:4318/v1/metrics`, this
//! collector's default OTLP HTTP address: per GPU, communicator name, size,
//! collective (or point-to-point op), message-size bucket and algorithm,
//! the mean execution time (µs) and the geometric-mean bus bandwidth (GB/s)
//! of the operations it completed since its last export; in its verbose mode
//! one point per operation with the communicator's hash, the sequence
//! number, the exact size and the algorithm bandwidth too. Every attribute
//! is a string. The points are kept per series until the window closes,
//! then averaged the way the Inspector averages (time arithmetically,
//! bandwidth geometrically). Bounded: series past the cap are dropped and
//! counted (`faultline_otlp_dropped_total{reason="nccl_perf_cap"}`).
use std::{
    collections::BTreeMap,
    sync::{Mutex, PoisonError},
};

use opentelemetry_proto::tonic::{
    collector::metrics::v1::ExportMetricsServiceRequest,
    common::v1::{any_value::Value, KeyValue},
    metrics::v1::{metric::Data, number_data_point, NumberDataPoint},
};
use proto::v1 as pb;

/// What an Inspector metric measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Measure {
    ExecUs,
    BusBw,
    AlgoBw,
}

/// The Inspector's metric names (collective and point-to-point).
fn measure(name: &str) -> Option<(Measure, bool)> {
    Some(match name {
        "nccl_collective_exec_time_microseconds" => (Measure::ExecUs, false),
        "nccl_bus_bandwidth_gbs" => (Measure::BusBw, false),
        "nccl_collective_algobw_gbs" | "nccl_algorithm_bandwidth_gbs" => (Measure::AlgoBw, false),
        "nccl_p2p_exec_time_microseconds" => (Measure::ExecUs, true),
        "nccl_p2p_bus_bandwidth_gbs" => (Measure::BusBw, true),
        "nccl_p2p_algobw_gbs" => (Measure::AlgoBw, true),
        _ => return None,
    })
}

/// Whether `name` is one of the Inspector's metrics this module reads.
pub fn is_inspector_metric(name: &str) -> bool {
    measure(name).is_some()
}

/// A series: the Inspector's labels that tell its rows apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    job: String,
    device: i32,
    comm_name: String,
    comm_id: String,
    nranks: i32,
    nnodes: i32,
    op: String,
    p2p: bool,
    message_size: String,
    algo_proto: String,
}

#[derive(Clone, Debug, Default)]
struct Acc {
    points: u32,
    exec_sum: f64,
    exec_n: u32,
    bus_log: f64,
    bus_n: u32,
    algo_log: f64,
    algo_n: u32,
    last_ns: u64,
    last_sn: u64,
}

/// One decoded point.
#[derive(Clone, Debug)]
struct InPoint {
    key: Key,
    measure: Measure,
    value: f64,
    time_ns: u64,
    sn: u64,
}

fn text(kv: &KeyValue) -> Option<String> {
    match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        Value::IntValue(i) => Some(i.to_string()),
        Value::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

fn int<T: std::str::FromStr>(s: &str) -> Option<T> {
    s.trim().parse().ok()
}

/// Reads the Inspector's attributes into `k` (and the sequence number).
fn read(attrs: &[KeyValue], k: &mut Key, sn: &mut u64) {
    for kv in attrs {
        let Some(v) = text(kv) else { continue };
        match kv.key.as_str() {
            "slurm.job.id" => k.job = v,
            "gpu" => {
                k.device = v
                    .strip_prefix("GPU")
                    .and_then(int::<i32>)
                    .filter(|d| *d >= 0)
                    .unwrap_or(-1)
            }
            "comm_name" => k.comm_name = v,
            "comm_id" => k.comm_id = v,
            "nranks" => k.nranks = int(&v).unwrap_or(-1),
            "n_nodes" => k.nnodes = int(&v).unwrap_or(-1),
            "collective" | "p2p_operation" => k.op = v,
            "message_size" | "coll_msg_size_bytes" | "p2p_msg_size_bytes" => k.message_size = v,
            "algo_proto" => k.algo_proto = v,
            "coll_sn" | "p2p_sn" => *sn = int(&v).unwrap_or(0),
            _ => {}
        }
    }
}

/// The Inspector's points of a request (gauges and sums of its metric
/// names), and how many of its points were not numbers.
fn decode(req: &ExportMetricsServiceRequest) -> (Vec<InPoint>, u64) {
    let mut out = Vec::new();
    let mut bad = 0u64;
    for rm in &req.resource_metrics {
        let mut base = Key {
            device: -1,
            nranks: -1,
            nnodes: -1,
            ..Key::default()
        };
        let mut sn0 = 0;
        if let Some(r) = &rm.resource {
            read(&r.attributes, &mut base, &mut sn0);
        }
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let Some((measure, p2p)) = measure(&m.name) else {
                    continue;
                };
                let dps: &[NumberDataPoint] = match &m.data {
                    Some(Data::Gauge(g)) => &g.data_points,
                    Some(Data::Sum(s)) => &s.data_points,
                    _ => &[],
                };
                for dp in dps {
                    let value = match dp.value {
                        Some(number_data_point::Value::AsDouble(d)) => d,
                        Some(number_data_point::Value::AsInt(i)) => i as f64,
                        None => f64::NAN,
                    };
                    if !value.is_finite() || value < 0.0 {
                        bad += 1;
                        continue;
                    }
                    let mut key = base.clone();
                    key.p2p = p2p;
                    let mut sn = sn0;
                    read(&dp.attributes, &mut key, &mut sn);
                    out.push(InPoint {
                        key,
                        measure,
                        value,
                        time_ns: dp.time_unix_nano,
                        sn,
                    });
                }
            }
        }
    }
    (out, bad)
}

/// What [`Store::ingest`] did with a request's Inspector points.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ingested {
    pub accepted: u64,
    /// Points of series past the cap.
    pub over_cap: u64,
    /// Points whose value was not a finite, non-negative number.
    pub invalid: u64,
}

impl Ingested {
    /// All the request's Inspector points (accepted or dropped).
    pub fn total(&self) -> u64 {
        self.accepted + self.over_cap + self.invalid
    }
}

/// The window's Inspector series, at most `cap`.
pub struct Store {
    cap: usize,
    series: Mutex<BTreeMap<Key, Acc>>,
}

impl Store {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// Adds a request's Inspector points.
    pub fn ingest(&self, req: &ExportMetricsServiceRequest) -> Ingested {
        let (points, invalid) = decode(req);
        let mut done = Ingested {
            invalid,
            ..Ingested::default()
        };
        if points.is_empty() {
            return done;
        }
        let mut s = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        for p in points {
            let full = s.len() >= self.cap;
            let acc = match s.get_mut(&p.key) {
                Some(a) => a,
                None if full => {
                    done.over_cap += 1;
                    continue;
                }
                None => s.entry(p.key).or_default(),
            };
            done.accepted += 1;
            acc.points = acc.points.saturating_add(1);
            acc.last_ns = acc.last_ns.max(p.time_ns);
            acc.last_sn = acc.last_sn.max(p.sn);
            match p.measure {
                // Saturating: a sum past f64 would make the row's mean ∞.
                Measure::ExecUs => {
                    acc.exec_sum = (acc.exec_sum + p.value).min(f64::MAX);
                    acc.exec_n = acc.exec_n.saturating_add(1);
                }
                // A bandwidth of 0 carries no information (the Inspector
                // leaves it out of its own geometric mean).
                Measure::BusBw if p.value > 0.0 => {
                    acc.bus_log += p.value.ln();
                    acc.bus_n = acc.bus_n.saturating_add(1);
                }
                Measure::AlgoBw if p.value > 0.0 => {
                    acc.algo_log += p.value.ln();
                    acc.algo_n = acc.algo_n.saturating_add(1);
                }
                Measure::BusBw | Measure::AlgoBw => {}
            }
        }
        done
    }

    /// The window's rows; the store starts empty again.
    pub fn take(&self) -> Vec<pb::NcclPerf> {
        let s = std::mem::take(&mut *self.series.lock().unwrap_or_else(PoisonError::into_inner));
        s.into_iter()
            .map(|(k, a)| {
                let gmean = |log: f64, n: u32| {
                    if n == 0 {
                        0.0
                    } else {
                        (log / f64::from(n)).exp()
                    }
                };
                pb::NcclPerf {
                    device: k.device,
                    comm_name: k.comm_name,
                    comm_id: k.comm_id,
                    nranks: k.nranks,
                    nnodes: k.nnodes,
                    op: k.op,
                    p2p: k.p2p,
                    message_size: k.message_size,
                    algo_proto: k.algo_proto,
                    job: k.job,
                    points: a.points,
                    exec_us: if a.exec_n == 0 {
                        0.0
                    } else {
                        a.exec_sum / f64::from(a.exec_n)
                    },
                    busbw_gbs: gmean(a.bus_log, a.bus_n),
                    algobw_gbs: gmean(a.algo_log, a.algo_n),
                    last_unix_ms: i64::try_from(a.last_ns / 1_000_000).unwrap_or(i64::MAX),
                    last_sn: a.last_sn,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::{
        common::v1::AnyValue,
        metrics::v1::{Gauge, Metric, ResourceMetrics, ScopeMetrics},
        resource::v1::Resource,
    };

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    fn gauge(name: &str, attrs: &[KeyValue], vals: &[f64]) -> Metric {
        Metric {
            name: name.into(),
            data: Some(Data::Gauge(Gauge {
                data_points: vals
                    .iter()
                    .enumerate()
                    .map(|(i, v)| NumberDataPoint {
                        attributes: attrs.to_vec(),
                        time_unix_nano: 1_700_000_000_000_000_000 + i as u64,
                        value: Some(number_data_point::Value::AsDouble(*v)),
                        ..Default::default()
                    })
                    .collect(),
            })),
            ..Default::default()
        }
    }

    fn req(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", "nccl-inspector"),
                        kv("slurm.job.id", "77"),
                    ],
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

    #[test]
    fn points_of_a_series_average_as_the_inspector_averages() {
        let a = [
            kv("gpu", "GPU3"),
            kv("comm_name", "DP Group 0"),
            kv("nranks", "16"),
            kv("n_nodes", "2"),
            kv("collective", "AllReduce"),
            kv("message_size", "4-5GB"),
            kv("algo_proto", "Ring_LL"),
        ];
        let st = Store::new(8);
        let got = st.ingest(&req(vec![
            gauge("nccl_bus_bandwidth_gbs", &a, &[100.0, 400.0]),
            gauge(
                "nccl_collective_exec_time_microseconds",
                &a,
                &[1000.0, 3000.0],
            ),
            gauge("unrelated", &a, &[1.0]),
        ]));
        assert_eq!(got.accepted, 4);
        let rows = st.take();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.device, r.nranks, r.nnodes), (3, 16, 2));
        assert_eq!((r.op.as_str(), r.job.as_str()), ("AllReduce", "77"));
        assert!(
            (r.busbw_gbs - 200.0).abs() < 1e-9,
            "geometric: {}",
            r.busbw_gbs
        );
        assert_eq!(r.exec_us, 2000.0);
        assert_eq!(r.points, 4);
        assert!(st.take().is_empty(), "taken once");
    }

    #[test]
    fn series_past_the_cap_and_bad_values_are_dropped_and_counted() {
        let st = Store::new(2);
        let mk = |op: &str| [kv("gpu", "GPU0"), kv("collective", op)];
        let got = st.ingest(&req(vec![
            gauge("nccl_bus_bandwidth_gbs", &mk("AllReduce"), &[1.0]),
            gauge("nccl_bus_bandwidth_gbs", &mk("AllGather"), &[1.0]),
            gauge(
                "nccl_bus_bandwidth_gbs",
                &mk("Broadcast"),
                &[1.0, f64::NAN, -2.0],
            ),
            gauge("nccl_bus_bandwidth_gbs", &mk("AllReduce"), &[3.0]),
        ]));
        assert_eq!(
            got,
            Ingested {
                accepted: 3,
                over_cap: 1,
                invalid: 2
            }
        );
        assert_eq!(st.take().len(), 2);
    }

    #[test]
    fn exec_time_sums_past_f64_max_stay_finite() {
        let st = Store::new(8);
        let a = [kv("gpu", "GPU0"), kv("collective", "AllReduce")];
        let got = st.ingest(&req(vec![gauge(
            "nccl_collective_exec_time_microseconds",
            &a,
            &[1e308, 1e308],
        )]));
        assert_eq!(got.accepted, 2);
        let rows = st.take();
        assert_eq!(rows.len(), 1);
        // The sum saturates at f64::MAX: the mean is half of it, not ∞.
        assert_eq!(rows[0].exec_us, f64::MAX / 2.0);
    }
}
