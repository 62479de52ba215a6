//! The OTLP receiver over real sockets: gRPC through opentelemetry-proto's
//! generated client, HTTP/protobuf as a raw HTTP/1.1 POST; the window take;
//! the error statuses for malformed, oversized and wrong-content-type
//! requests, and that both transports keep serving afterwards.
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
use prost::Message as _;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

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
    (code, out[split..].to_vec())
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
    // JSON → 415, another path → 404.
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
    assert_eq!(post(http_addr, "application/json", b"{}").await.0, 415);
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
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = OtlpSection {
        grpc_addr: taken.local_addr().unwrap().to_string(),
        ..test_config()
    };
    let rx = otlp::start(&cfg).await;
    let e = rx.grpc.clone().unwrap_err();
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
