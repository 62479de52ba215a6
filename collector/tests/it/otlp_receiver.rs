//! The OTLP receiver over real sockets: gRPC through opentelemetry-proto's
//! generated client (plain and gzip), HTTP as a raw HTTP/1.1 POST (protobuf
//! and JSON, plain and gzip); the window take; the error statuses for
//! malformed, oversized (gzip bombs included), wrong-content-type and
//! wrong-encoding requests, each counted, and that both transports keep
//! serving afterwards.
#![cfg(feature = "otlp")]

use std::net::SocketAddr;

use collector::otlp::{self, OtlpSection, Receiver};
use opentelemetry_proto::tonic::{
    collector::metrics::v1::{
        metrics_service_client::MetricsServiceClient, ExportMetricsServiceRequest,
        ExportMetricsServiceResponse,
    },
    common::v1::{any_value::Value, AnyValue, KeyValue},
    metrics::v1::{
        metric::Data, AggregationTemporality, Histogram, HistogramDataPoint, Metric,
        ResourceMetrics, ScopeMetrics,
    },
    resource::v1::Resource,
};
use otlp_counters as counters;
use prost::Message as _;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

use crate::otlp_counters;

const MAX_BODY: usize = 64 << 10;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

/// A delta step-duration histogram of `job`/`rank`: `n` steps of 0.2 s
/// (bucket (0.1, 0.25]), and a padding attribute of `pad` bytes.
fn steps(job: &str, rank: &str, n: u64, pad: usize) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "trainer"),
                    kv("slurm.job.id", job),
                    kv("RANK", rank),
                    kv("padding", &"x".repeat(pad)),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "training.step_time".into(),
                    unit: "ms".into(),
                    data: Some(Data::Histogram(Histogram {
                        data_points: vec![HistogramDataPoint {
                            count: n,
                            sum: Some(200.0 * n as f64),
                            bucket_counts: vec![0, n, 0],
                            explicit_bounds: vec![100.0, 250.0],
                            max: Some(200.0),
                            ..Default::default()
                        }],
                        aggregation_temporality: AggregationTemporality::Delta as i32,
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

async fn start(cfg: OtlpSection) -> (Receiver, SocketAddr, SocketAddr) {
    let rx = otlp::start(&cfg).await;
    let grpc = rx.grpc.clone().expect("gRPC bound").expect("gRPC enabled");
    let http = rx.http.clone().expect("HTTP bound").expect("HTTP enabled");
    (rx, grpc, http)
}

fn test_config() -> OtlpSection {
    OtlpSection {
        grpc_addr: "127.0.0.1:0".into(),
        http_addr: "127.0.0.1:0".into(),
        max_body_bytes: MAX_BODY,
        ..OtlpSection::default()
    }
}

/// One HTTP/1.1 request on a fresh connection: (status code, body).
async fn http(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let (code, _, body) = http_full(addr, head, body).await;
    (code, body)
}

/// One HTTP/1.1 request on a fresh connection: (status code, head, body).
async fn http_full(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(head.as_bytes()).await.expect("write the head");
    s.write_all(body).await.expect("write the body");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read the response");
    let text = String::from_utf8_lossy(&out);
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(out.len(), |p| p + 4);
    let head = String::from_utf8_lossy(&out[..split]).into_owned();
    (code, head, out[split..].to_vec())
}

async fn post(addr: SocketAddr, ctype: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let head = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    http(addr, &head, body).await
}

/// A message whose field 1 has the wrong wire type for `resource_metrics`.
#[derive(Clone, PartialEq, prost::Message)]
struct Bogus {
    #[prost(uint64, tag = "1")]
    x: u64,
}

#[tokio::test]
async fn grpc_and_http_exports_land_in_the_window_and_errors_get_their_statuses() {
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = counters::serial().await;
    let (rx, grpc, http_addr) = start(test_config()).await;
    let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();

    // gRPC: 5 steps of rank 0; HTTP: 3 steps of rank 1.
    let r = client.export(steps("77", "0", 5, 0)).await.unwrap();
    assert_eq!(r.get_ref().partial_success, None);
    let (code, body) = post(
        http_addr,
        "application/x-protobuf",
        &steps("77", "1", 3, 0).encode_to_vec(),
    )
    .await;
    assert_eq!(code, 200);
    let resp = ExportMetricsServiceResponse::decode(body.as_slice()).unwrap();
    assert_eq!(resp.partial_success, None);

    let (st, work) = rx.shared.take_window(|_| None);
    assert!(work.is_empty());
    let got: Vec<_> = st
        .iter()
        .map(|s| (s.job.as_str(), s.rank, s.count))
        .collect();
    assert_eq!(got, vec![("77", 0, 5), ("77", 1, 3)]);
    for s in &st {
        // 200 ms → 0.2 s (unit "ms"), mean and max.
        assert!((s.seconds - 0.2).abs() < 1e-12, "{s:?}");
        assert!((s.max_seconds - 0.2).abs() < 1e-12, "{s:?}");
    }

    // gRPC: malformed → InvalidArgument, oversized → ResourceExhausted.
    let mut raw = tonic::client::Grpc::new(
        tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    raw.ready().await.unwrap();
    let e = raw
        .unary::<_, ExportMetricsServiceResponse, _>(
            tonic::Request::new(Bogus { x: 1 }),
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
                .parse()
                .unwrap(),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let e = client
        .export(steps("77", "0", 1, MAX_BODY + 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");

    // HTTP: malformed → 400, oversized (declared, or streamed chunked) → 413,
    // another content type → 415, another path → 404.
    assert_eq!(
        post(http_addr, "application/x-protobuf", &[0x0a, 0xff])
            .await
            .0,
        400
    );
    let head = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        MAX_BODY + 1
    );
    assert_eq!(http(http_addr, &head, b"").await.0, 413);
    let chunk = vec![0u8; MAX_BODY + 100];
    let mut body = format!("{:x}\r\n", chunk.len()).into_bytes();
    body.extend_from_slice(&chunk);
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let head = "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    assert_eq!(http(http_addr, head, &body).await.0, 413);
    assert_eq!(post(http_addr, "text/plain", b"{}").await.0, 415);
    let head = "GET /v1/traces HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_eq!(http(http_addr, head, b"").await.0, 404);

    // Nothing of the rejected requests reached the window; both still serve.
    assert_eq!(rx.shared.take_window(|_| None), (vec![], vec![]));
    client.export(steps("78", "0", 2, 0)).await.unwrap();
    let (code, _) = post(
        http_addr,
        "application/x-protobuf; charset=binary",
        &steps("78", "1", 4, 0).encode_to_vec(),
    )
    .await;
    assert_eq!(code, 200);
    let (st, _) = rx.shared.take_window(|_| None);
    let got: Vec<_> = st
        .iter()
        .map(|s| (s.job.as_str(), s.rank, s.count))
        .collect();
    assert_eq!(got, vec![("78", 0, 2), ("78", 1, 4)]);
}

#[tokio::test]
async fn a_port_in_use_is_reported_with_its_key_and_the_other_transport_runs() {
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = counters::serial().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = OtlpSection {
        grpc_addr: taken.local_addr().unwrap().to_string(),
        ..test_config()
    };
    let rx = otlp::start(&cfg).await;
    let e = rx.grpc.clone().unwrap_err().to_string();
    assert!(
        e.contains("otlp.grpc_addr") && e.contains("--no-otlp-grpc"),
        "{e}"
    );
    let http_addr = rx.http.clone().unwrap().unwrap();
    let (code, _) = post(
        http_addr,
        "application/x-protobuf",
        &steps("9", "0", 1, 0).encode_to_vec(),
    )
    .await;
    assert_eq!(code, 200);
    // Disabled transports are not started.
    let rx = otlp::start(&OtlpSection {
        http_enabled: false,
        ..test_config()
    })
    .await;
    assert!(matches!(rx.http, Ok(None)));
    assert!(matches!(rx.grpc, Ok(Some(_))));
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("compressing");
    e.finish().expect("compressing")
}

/// A POST with a `Content-Encoding`: (status code, head, body).
async fn post_encoded(
    addr: SocketAddr,
    ctype: &str,
    encoding: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let head = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\nContent-Encoding: {encoding}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    http_full(addr, &head, body).await
}

/// OTLP/JSON as an SDK sends it: a gauge (2 points), a delta sum and a
/// delta step histogram (`n` steps of 200 ms) of job `job`, rank 0; 64-bit
/// integers as strings, the enum as an integer.
fn json_request(job: &str, n: u64) -> Vec<u8> {
    format!(
        r#"{{"resourceMetrics":[{{
  "resource":{{"attributes":[
    {{"key":"service.name","value":{{"stringValue":"trainer"}}}},
    {{"key":"slurm.job.id","value":{{"stringValue":"{job}"}}}},
    {{"key":"RANK","value":{{"intValue":"0"}}}}]}},
  "scopeMetrics":[{{"scope":{{"name":"test"}},"metrics":[
    {{"name":"faultline.inference.queue.depth","unit":"{{request}}","gauge":{{"dataPoints":[
      {{"timeUnixNano":"1700000000000000000","asInt":"4"}},
      {{"timeUnixNano":"1700000000000000000","asDouble":6.0}}]}}}},
    {{"name":"faultline.train.throughput","unit":"{{token}}/s","sum":{{"aggregationTemporality":1,"isMonotonic":false,"dataPoints":[
      {{"startTimeUnixNano":"1","timeUnixNano":"2","asDouble":1200.5}}]}}}},
    {{"name":"training.step_time","unit":"ms","histogram":{{"aggregationTemporality":1,"dataPoints":[
      {{"startTimeUnixNano":"1","timeUnixNano":"2","count":"{n}","sum":{sum},"bucketCounts":["0","{n}","0"],"explicitBounds":[100,250],"min":200,"max":200}}]}}}}]}}]}}]}}"#,
        sum = 200 * n
    )
    .into_bytes()
}

/// One gRPC `Export` whose message frame and headers are given as they go
/// on the wire (to send what tonic's client would not); its `grpc-status`.
async fn grpc_raw(addr: SocketAddr, headers: &[(&str, &str)], frame: Vec<u8>) -> tonic::Code {
    use tonic::codegen::{http, Service as _};
    let mut ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("the raw gRPC request")
        .connect()
        .await
        .expect("the raw gRPC request");
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{addr}/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(tonic::body::Body::new(http_body_util::Full::new(
            bytes::Bytes::from(frame),
        )))
        .expect("the raw gRPC request");
    std::future::poll_fn(|cx| ch.poll_ready(cx))
        .await
        .expect("the raw gRPC request");
    let (parts, body) = ch
        .call(req)
        .await
        .expect("the raw gRPC request")
        .into_parts();
    let collected = http_body_util::BodyExt::collect(body)
        .await
        .expect("the raw gRPC request");
    let status = parts
        .headers
        .get("grpc-status")
        .or_else(|| collected.trailers()?.get("grpc-status"))
        .expect("a grpc-status")
        .clone();
    tonic::Code::from_bytes(status.as_bytes())
}

/// A gRPC message frame: compressed flag, big-endian length, bytes.
fn frame(compressed: bool, msg: &[u8]) -> Vec<u8> {
    let mut f = vec![u8::from(compressed)];
    f.extend_from_slice(
        &u32::try_from(msg.len())
            .expect("the raw gRPC request")
            .to_be_bytes(),
    );
    f.extend_from_slice(msg);
    f
}

#[tokio::test]
async fn json_and_gzip_are_accepted_counted_and_bombs_and_bad_encodings_refused() {
    let _turn = tests::one_file_at_a_time(file!());
    let _serial = counters::serial().await;
    let (rx, grpc, http_addr) = start(test_config()).await;
    let before = counters::snapshot();
    let accepted = |t: &str| {
        counters::since(
            &before,
            "faultline_otlp_accepted_points_total",
            &[("transport", t)],
        )
    };
    let requests = |t: &str, e: &str, c: &str| {
        counters::since(
            &before,
            "faultline_otlp_requests_total",
            &[("transport", t), ("encoding", e), ("compression", c)],
        )
    };
    let rejected = |t: &str, r: &str| {
        counters::since(
            &before,
            "faultline_otlp_rejected_requests_total",
            &[("transport", t), ("reason", r)],
        )
    };

    // OTLP/JSON: 200, `{}` as application/json; every point lands.
    let (code, head, body) = post_encoded(
        http_addr,
        "application/json",
        "identity",
        &json_request("55", 6),
    )
    .await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    assert_eq!(body, b"{}");
    assert_eq!(accepted("http"), 4, "2 gauge points, 1 sum, 1 histogram");
    let (st, work) = rx.shared.take_window(|_| None);
    let got: Vec<_> = st
        .iter()
        .map(|s| (s.job.as_str(), s.rank, s.count))
        .collect();
    assert_eq!(got, vec![("55", 0, 6)]);
    assert!((st[0].seconds - 0.2).abs() < 1e-12, "{st:?}");
    let sig = |name: &str| {
        let v: Vec<_> = work.iter().filter(|w| w.signal == name).collect();
        assert_eq!(v.len(), 1, "{name}: {work:?}");
        (v[0].job.as_str(), v[0].count, v[0].sum)
    };
    assert_eq!(sig("queue_depth"), ("55", 2, 10.0));
    assert_eq!(sig("throughput"), ("55", 1, 1200.5));
    assert_eq!(work.len(), 2, "{work:?}");

    // gzip protobuf and gzip JSON over HTTP.
    let (code, head, body) = post_encoded(
        http_addr,
        "application/x-protobuf",
        "gzip",
        &gzip(&steps("56", "1", 3, 0).encode_to_vec()),
    )
    .await;
    assert_eq!(code, 200);
    assert!(head.contains("application/x-protobuf"), "{head}");
    assert_eq!(
        ExportMetricsServiceResponse::decode(body.as_slice())
            .unwrap()
            .partial_success,
        None
    );
    let (code, _, body) = post_encoded(
        http_addr,
        "application/json",
        "GZIP",
        &gzip(&json_request("56", 2)),
    )
    .await;
    assert_eq!((code, body.as_slice()), (200, b"{}".as_slice()));

    // gzip over gRPC (tonic's client compresses each message).
    let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap()
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let r = client.export(steps("56", "2", 5, 0)).await.unwrap();
    assert_eq!(r.get_ref().partial_success, None);

    let (st, work) = rx.shared.take_window(|_| None);
    let got: Vec<_> = st
        .iter()
        .map(|s| (s.job.as_str(), s.rank, s.count))
        .collect();
    assert_eq!(got, vec![("56", 0, 2), ("56", 1, 3), ("56", 2, 5)]);
    assert_eq!(work.len(), 2, "{work:?}");
    assert_eq!(accepted("http"), 4 + 1 + 4);
    assert_eq!(accepted("grpc"), 1);
    assert_eq!(requests("http", "json", "none"), 1);
    assert_eq!(requests("http", "json", "gzip"), 1);
    assert_eq!(requests("http", "protobuf", "gzip"), 1);
    assert_eq!(requests("grpc", "protobuf", "gzip"), 1);

    // gzip bombs: small on the wire, over max_body_bytes once inflated → 413
    // (the JSON one answered in JSON) / ResourceExhausted.
    let bomb = gzip(&vec![0u8; 16 * MAX_BODY]);
    assert!(bomb.len() < MAX_BODY / 16, "{}", bomb.len());
    let (code, _, _) = post_encoded(http_addr, "application/x-protobuf", "gzip", &bomb).await;
    assert_eq!(code, 413);
    let json_bomb = gzip(&[b"{\"x\":\"".as_slice(), &vec![b'a'; 16 * MAX_BODY], b"\"}"].concat());
    let (code, head, body) = post_encoded(http_addr, "application/json", "gzip", &json_bomb).await;
    assert_eq!(code, 413);
    assert!(head.contains("application/json"), "{head}");
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["code"], tonic::Code::ResourceExhausted as i32);
    let e = client
        .export(steps("57", "0", 1, 16 * MAX_BODY))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
    assert_eq!(rejected("http", "too_large"), 2);
    assert_eq!(rejected("grpc", "too_large"), 1);

    // Broken gzip (not gzip; a truncated stream) → 400 / InvalidArgument.
    let good = gzip(&steps("57", "0", 1, 0).encode_to_vec());
    for broken in [b"not gzip at all".to_vec(), good[..good.len() / 2].to_vec()] {
        let (code, _, _) = post_encoded(http_addr, "application/x-protobuf", "gzip", &broken).await;
        assert_eq!(code, 400);
    }
    let (code, _, body) = post_encoded(http_addr, "application/json", "gzip", b"{}").await;
    assert_eq!(code, 400);
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["code"], tonic::Code::InvalidArgument as i32);
    let gz = &[("grpc-encoding", "gzip")];
    assert_eq!(
        grpc_raw(grpc, gz, frame(true, b"not gzip at all")).await,
        tonic::Code::InvalidArgument
    );
    // The compressed flag without a grpc-encoding.
    assert_eq!(
        grpc_raw(grpc, &[], frame(true, &good)).await,
        tonic::Code::InvalidArgument
    );
    assert_eq!(rejected("http", "compression"), 3);
    assert_eq!(rejected("grpc", "compression"), 2);

    // Malformed JSON → 400 with a JSON status.
    let (code, head, body) = post_encoded(
        http_addr,
        "application/json",
        "identity",
        b"{\"resourceMetrics\":[",
    )
    .await;
    assert_eq!(code, 400);
    assert!(head.contains("application/json"), "{head}");
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["code"], tonic::Code::InvalidArgument as i32);
    assert!(
        status["message"].as_str().unwrap().contains("OTLP/JSON"),
        "{status}"
    );
    assert_eq!(rejected("http", "malformed"), 1);

    // Another encoding → 415 / UNIMPLEMENTED.
    let pb = steps("57", "0", 1, 0).encode_to_vec();
    for enc in ["br", "deflate", "gzip, br"] {
        let (code, _, _) = post_encoded(http_addr, "application/x-protobuf", enc, &pb).await;
        assert_eq!(code, 415, "{enc}");
    }
    assert_eq!(
        grpc_raw(grpc, &[("grpc-encoding", "snappy")], frame(false, &pb)).await,
        tonic::Code::Unimplemented
    );
    assert_eq!(rejected("http", "content_encoding"), 3);
    assert_eq!(rejected("grpc", "content_encoding"), 1);

    // Nothing refused reached the window; both transports still serve.
    assert_eq!(rx.shared.take_window(|_| None), (vec![], vec![]));
    assert_eq!(
        grpc_raw(grpc, gz, frame(true, &good)).await,
        tonic::Code::Ok
    );
    let (code, _, _) = post_encoded(
        http_addr,
        "application/json",
        "gzip",
        &gzip(&json_request("58", 1)),
    )
    .await;
    assert_eq!(code, 200);
    let (st, _) = rx.shared.take_window(|_| None);
    let got: Vec<_> = st
        .iter()
        .map(|s| (s.job.as_str(), s.rank, s.count))
        .collect();
    assert_eq!(got, vec![("57", 0, 1), ("58", 0, 1)]);
}
