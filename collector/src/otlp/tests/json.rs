//! OTLP/JSON decoding ([`crate::otlp::json`]): the same request as protobuf,
//! the specification's value rules, and what is refused.
use opentelemetry_proto::tonic::{
    collector::metrics::v1::{ExportMetricsPartialSuccess, ExportMetricsServiceResponse},
    common::v1::{ArrayValue, KeyValueList},
    metrics::v1::{Summary, SummaryDataPoint},
};

use super::*;
use crate::otlp::{
    http::{encode_json_response as encode_response, encode_json_status as encode_status},
    json::decode_request,
};

fn any(v: Value) -> Option<AnyValue> {
    Some(AnyValue { value: Some(v) })
}

fn raw_kv(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.into(),
        value,
        ..Default::default()
    }
}

/// Every metric type and attribute value kind, 64-bit integers as strings
/// and as numbers, doubles as numbers and as the special strings, `null`
/// defaults, unknown and snake_case keys (ignored), and skipped fields.
const FULL: &str = r#"{
  "resourceMetrics": [{
    "resource": {
      "attributes": [
        {"key": "service.name", "value": {"stringValue": "trainer"}},
        {"key": "rank", "value": {"intValue": "3"}},
        {"key": "big", "value": {"intValue": -9007199254740993}},
        {"key": "ok", "value": {"boolValue": true}},
        {"key": "ratio", "value": {"doubleValue": "Infinity"}},
        {"key": "raw", "value": {"bytesValue": "AAEC/w=="}},
        {"key": "urlsafe", "value": {"bytesValue": "_-8"}},
        {"key": "list", "value": {"arrayValue": {"values": [{"intValue": 1}, {"stringValue": "a"}]}}},
        {"key": "empty", "value": {"arrayValue": {}}},
        {"key": "map", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"doubleValue": 0.5}}]}}},
        {"value": {"stringValue": "no key"}},
        {"key": "unset", "value": {}},
        {"key": "nothing"},
        {"key": "nulls", "value": {"stringValue": null}}
      ],
      "droppedAttributesCount": 0,
      "entityRefs": [{"type": "host", "idKeys": ["host.id"]}]
    },
    "schemaUrl": "https://opentelemetry.io/schemas/1.26.0",
    "scopeMetrics": [{
      "scope": {"name": "train_loop", "version": "1.0", "attributes": []},
      "metrics": [
        {"name": "g", "unit": "ms", "description": "d", "metadata": [],
         "gauge": {"dataPoints": [
           {"asDouble": 1.5, "timeUnixNano": "1700000000000000001", "startTimeUnixNano": 1700000000000000000, "flags": "1",
            "exemplars": [{"asDouble": 2, "spanId": "0102030405060708", "traceId": "0102030405060708090a0b0c0d0e0f10", "timeUnixNano": "5"}]},
           {"asInt": "-7", "attributes": null},
           {"asInt": 8, "asDouble": null},
           {"asDouble": "NaN", "unknown": {"deep": [1, {"x": null}]}},
           {"asDouble": 3}
         ]}},
        {"name": "s", "sum": {"aggregationTemporality": 2, "isMonotonic": true,
         "dataPoints": [{"asInt": "18446744073709551", "startTimeUnixNano": "10"}]}},
        {"name": "s2", "sum": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_DELTA", "isMonotonic": null, "dataPoints": [{"asDouble": "2.5e1"}]}},
        {"name": "h", "histogram": {"aggregationTemporality": 1, "dataPoints": [
          {"count": "3", "sum": 0.6, "bucketCounts": ["0", 3, "0"], "explicitBounds": [0.1, 0.25],
           "min": 0.2, "max": 0.2, "startTimeUnixNano": "20", "timeUnixNano": "21",
           "attributes": [{"key": "a", "value": {"stringValue": "b"}}]},
          {"count": 0, "sum": null, "min": "-Infinity"}
        ]}},
        {"name": "e", "exponentialHistogram": {"aggregationTemporality": 2, "dataPoints": [
          {"count": "4", "sum": 1.0, "scale": -1, "zeroCount": "1", "zeroThreshold": 0,
           "positive": {"offset": -2, "bucketCounts": ["1", 2]}, "negative": {"bucketCounts": []},
           "startTimeUnixNano": "30"}
        ]}},
        {"name": "q", "summary": {"dataPoints": [{"count": "1", "sum": 2, "quantileValues": [{"quantile": 0.5, "value": 2}]}, {}]}},
        {"name": "nodata"},
        {"name": "nulldata", "gauge": null}
      ]
    }],
    "resource_metrics": "snake_case keys are not OTLP/JSON: ignored"
  }],
  "extra": true
}"#;

fn full_expected() -> ExportMetricsServiceRequest {
    use number_data_point::Value as N;
    let np = |v: Option<N>, start: u64, time: u64| NumberDataPoint {
        value: v,
        start_time_unix_nano: start,
        time_unix_nano: time,
        ..Default::default()
    };
    let metrics = vec![
        gauge(
            "g",
            "ms",
            vec![
                np(
                    Some(N::AsDouble(1.5)),
                    1_700_000_000_000_000_000,
                    1_700_000_000_000_000_001,
                ),
                np(Some(N::AsInt(-7)), 0, 0),
                np(Some(N::AsInt(8)), 0, 0),
                np(Some(N::AsDouble(f64::NAN)), 0, 0),
                np(Some(N::AsDouble(3.0)), 0, 0),
            ],
        ),
        metric(
            "s",
            "",
            Data::Sum(Sum {
                data_points: vec![np(Some(N::AsInt(18_446_744_073_709_551)), 10, 0)],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                is_monotonic: true,
            }),
        ),
        metric(
            "s2",
            "",
            Data::Sum(Sum {
                data_points: vec![np(Some(N::AsDouble(25.0)), 0, 0)],
                aggregation_temporality: AggregationTemporality::Delta as i32,
                is_monotonic: false,
            }),
        ),
        histogram(
            "h",
            "",
            AggregationTemporality::Delta,
            vec![
                HistogramDataPoint {
                    min: Some(0.2),
                    max: Some(0.2),
                    ..hist_point(&[0.1, 0.25], &[0, 3, 0], 0.6, 20, vec![kv("a", "b")])
                },
                HistogramDataPoint {
                    min: Some(f64::NEG_INFINITY),
                    ..Default::default()
                },
            ],
        ),
        metric(
            "e",
            "",
            Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![ExponentialHistogramDataPoint {
                    count: 4,
                    sum: Some(1.0),
                    scale: -1,
                    zero_count: 1,
                    positive: Some(Buckets {
                        offset: -2,
                        bucket_counts: vec![1, 2],
                    }),
                    negative: Some(Buckets::default()),
                    start_time_unix_nano: 30,
                    ..Default::default()
                }],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        ),
        metric(
            "q",
            "",
            Data::Summary(Summary {
                data_points: vec![SummaryDataPoint::default(), SummaryDataPoint::default()],
            }),
        ),
        Metric {
            name: "nodata".into(),
            ..Default::default()
        },
        Metric {
            name: "nulldata".into(),
            ..Default::default()
        },
    ];
    let resource = vec![
        kv("service.name", "trainer"),
        kv("rank", 3),
        kv("big", -9_007_199_254_740_993),
        raw_kv("ok", any(Value::BoolValue(true))),
        raw_kv("ratio", any(Value::DoubleValue(f64::INFINITY))),
        raw_kv("raw", any(Value::BytesValue(vec![0, 1, 2, 255]))),
        raw_kv("urlsafe", any(Value::BytesValue(vec![0xff, 0xef]))),
        raw_kv(
            "list",
            any(Value::ArrayValue(ArrayValue {
                values: vec![
                    AnyValue {
                        value: Some(Value::IntValue(1)),
                    },
                    AnyValue {
                        value: Some(Value::StringValue("a".into())),
                    },
                ],
            })),
        ),
        raw_kv("empty", any(Value::ArrayValue(ArrayValue::default()))),
        raw_kv(
            "map",
            any(Value::KvlistValue(KeyValueList {
                values: vec![raw_kv("k", any(Value::DoubleValue(0.5)))],
            })),
        ),
        raw_kv("", any(Value::StringValue("no key".into()))),
        raw_kv("unset", Some(AnyValue::default())),
        raw_kv("nothing", None),
        raw_kv("nulls", Some(AnyValue::default())),
    ];
    request(resource, metrics)
}

#[test]
fn every_type_and_value_rule_decodes_to_the_protobuf_request() {
    let got = decode_request(FULL.as_bytes()).unwrap();
    // NaN ≠ NaN: compare the protobuf encodings (the same bits).
    assert_eq!(
        prost::Message::encode_to_vec(&got),
        prost::Message::encode_to_vec(&full_expected()),
        "{got:#?}"
    );
    // The schema URL and scope were skipped, not kept.
    assert_eq!(got.resource_metrics[0].schema_url, "");
    assert_eq!(got.resource_metrics[0].scope_metrics[0].scope, None);
}

#[test]
fn json_points_are_counted_like_protobuf_points() {
    let json = shared();
    let pb = shared();
    let t = now_ns();
    let body = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[
            {{"key":"slurm.job.id","value":{{"stringValue":"7"}}}},
            {{"key":"RANK","value":{{"intValue":"2"}}}}]}},
          "scopeMetrics":[{{"metrics":[
            {{"name":"training.step_time","unit":"ms","histogram":{{"aggregationTemporality":1,"dataPoints":[
              {{"startTimeUnixNano":"{t}","timeUnixNano":"{t}","count":"4","sum":800,"bucketCounts":["0","4","0"],"explicitBounds":[100,250],"max":200}}]}}}},
            {{"name":"faultline.inference.queue.depth","gauge":{{"dataPoints":[{{"asInt":"5","timeUnixNano":"{t}"}}]}}}},
            {{"name":"not.ours","sum":{{"dataPoints":[{{"asDouble":1}}]}}}}]}}]}}]}}"#
    );
    let r = json.export(&decode_request(body.as_bytes()).unwrap(), "test");
    assert_eq!(r.partial_success, None);
    let req = request(
        vec![kv("slurm.job.id", "7"), kv("RANK", 2)],
        vec![
            histogram(
                "training.step_time",
                "ms",
                AggregationTemporality::Delta,
                vec![HistogramDataPoint {
                    time_unix_nano: t,
                    max: Some(200.0),
                    ..hist_point(&[100.0, 250.0], &[0, 4, 0], 800.0, t, vec![])
                }],
            ),
            gauge(
                "faultline.inference.queue.depth",
                "",
                vec![NumberDataPoint {
                    time_unix_nano: t,
                    value: Some(number_data_point::Value::AsInt(5)),
                    ..Default::default()
                }],
            ),
            gauge("not.ours", "", vec![number(1.0, 0, vec![])]),
        ],
    );
    pb.export(&req, "test");
    let (steps, work) = take(&json);
    assert_eq!((steps.clone(), work.clone()), take(&pb));
    assert_eq!(
        (steps[0].job.as_str(), steps[0].rank, steps[0].count),
        ("7", 2, 4)
    );
    assert!(close(steps[0].seconds, 0.2), "{steps:?}");
    assert_eq!(work.len(), 1);
    assert_eq!((work[0].signal.as_str(), work[0].sum), ("queue_depth", 5.0));
}

#[test]
fn malformed_json_and_wrong_value_types_are_errors() {
    for bad in [
        "",
        "{",
        "[]",
        "5",
        r#"{"resourceMetrics": {}}"#,
        r#"{"resourceMetrics": [5]}"#,
        r#"{} trailing"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":5}}]}]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[{"asInt":"1.5"}]}}]}]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":{"dataPoints":[{"asInt":"x"}]}}]}]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"count":-1}]}}]}]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"bucketCounts":["1",true]}]}}]}]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":{"dataPoints":[{"sum":"lots"}]}}]}]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"s","sum":{"aggregationTemporality":"SIDEWAYS"}}]}]}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"e","exponentialHistogram":{"dataPoints":[{"scale":4294967296}]}}]}]}]}"#,
        r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"b","value":{"bytesValue":"A"}}]}}]}"#,
        r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":"b","value":{"bytesValue":"a*b="}}]}}]}"#,
        r#"{"resourceMetrics":[{"resource":{"attributes":[{"key":5}]}}]}"#,
        r#"{"resourceMetrics":[{"scopeMetrics":[{"scope":{"name":"unterminated}]}]}"#,
        "{\"resourceMetrics\":[{\"resource\":{\"attributes\":[{\"key\":\"\u{0}\"}]}}]}",
    ] {
        assert!(decode_request(bad.as_bytes()).is_err(), "accepted: {bad}");
    }
    // Invalid UTF-8 in a string that is kept.
    assert!(decode_request(
        b"{\"resourceMetrics\":[{\"scopeMetrics\":[{\"metrics\":[{\"name\":\"\xff\"}]}]}]}"
    )
    .is_err());
    // Nesting past serde_json's depth limit is an error, not a stack overflow.
    let deep = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"d","value":{}}}]}}}}]}}"#,
        r#"{"arrayValue":{"values":["#.repeat(200) + &"]}}".repeat(200)
    );
    assert!(decode_request(deep.as_bytes()).is_err());
}

#[test]
fn null_and_empty_documents_are_empty_requests() {
    for ok in ["null", "{}", r#"{"resourceMetrics":null}"#, " { } "] {
        assert_eq!(
            decode_request(ok.as_bytes()).unwrap(),
            ExportMetricsServiceRequest::default(),
            "{ok}"
        );
    }
}

#[test]
fn responses_and_errors_are_otlp_json() {
    let ok = encode_response(&ExportMetricsServiceResponse::default());
    assert_eq!(ok, b"{}");
    let partial = encode_response(&ExportMetricsServiceResponse {
        partial_success: Some(ExportMetricsPartialSuccess {
            rejected_data_points: 3,
            error_message: "dropped data points: unit=3".into(),
        }),
    });
    let v: serde_json::Value = serde_json::from_slice(&partial).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"partialSuccess": {"rejectedDataPoints": "3", "errorMessage": "dropped data points: unit=3"}})
    );
    let v: serde_json::Value = serde_json::from_slice(&encode_status(3, "bad \"x\"")).unwrap();
    assert_eq!(v, serde_json::json!({"code": 3, "message": "bad \"x\""}));
}
