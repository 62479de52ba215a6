//! The NCCL Inspector's OTLP export against the real receiver, over a real
//! socket. The request is framed byte for byte as the Inspector's exporter
//! (NVIDIA/nccl `plugins/profiler/inspector/inspector_otel.cc`) frames it:
//! an HTTP/1.1 POST with `Connection: close`, a JSON body of one resource
//! (`service.name`, `slurm.job.id`), scope `nccl-inspector`, one gauge per
//! metric, every attribute a `stringValue`, `timeUnixNano` a string and the
//! value `asDouble`; it reads only the status line of the answer. Both its
//! default (aggregated per bucket) and verbose (per operation) modes.
#![cfg(feature = "otlp")]

use collector::otlp::{self, OtlpSection};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

fn attrs(kv: &[(&str, &str)]) -> String {
    let items: Vec<String> = kv
        .iter()
        .map(|(k, v)| format!(r#"{{"key":"{k}","value":{{"stringValue":"{v}"}}}}"#))
        .collect();
    format!(r#""attributes":[{}]"#, items.join(","))
}

/// One metric of `points` (attributes, time ns, value), as the exporter
/// writes it.
/// A data point: its attributes, time (ns) and value.
type DataPoint<'a> = (Vec<(&'a str, &'a str)>, u64, f64);

fn metric(name: &str, unit: &str, points: &[DataPoint<'_>]) -> String {
    let dps: Vec<String> = points
        .iter()
        .map(|(a, t, v)| format!(r#"{{{},"timeUnixNano":"{t}","asDouble":{v}}}"#, attrs(a)))
        .collect();
    format!(
        r#"{{"name":"{name}","description":"NCCL","unit":"{unit}","gauge":{{"dataPoints":[{}]}}}}"#,
        dps.join(",")
    )
}

fn body(metrics: &[String]) -> String {
    format!(
        r#"{{"resourceMetrics":[{{"resource":{{{}}},"scopeMetrics":[{{"scope":{{"name":"nccl-inspector"}},"metrics":[{}]}}]}}]}}"#,
        attrs(&[("service.name", "nccl-inspector"), ("slurm.job.id", "4242")]),
        metrics.join(",")
    )
}

/// The Inspector's POST; returns the status line of the answer.
async fn post(addr: std::net::SocketAddr, body: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("send");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("answer");
    let text = String::from_utf8_lossy(&out).into_owned();
    text.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn the_inspector_s_aggregated_and_verbose_exports_land_in_nccl_perf() {
    let _turn = tests::one_file_at_a_time(file!());
    let rx = otlp::start(&OtlpSection {
        grpc_addr: "127.0.0.1:0".into(),
        http_addr: "127.0.0.1:0".into(),
        ..OtlpSection::default()
    })
    .await;
    let addr = rx.http.clone().expect("bound").expect("enabled");

    // Default mode: one point per bucket (GPU, comm name, size, collective,
    // message-size range, algorithm), the mean time and the geometric-mean
    // bus bandwidth of the bucket's operations.
    let t0 = 1_764_900_000_000_000_000u64;
    let bucket = |gpu: &'static str, coll: &'static str| {
        vec![
            ("gpu", gpu),
            ("comm_name", "DP Group 0"),
            ("version", "v5.1"),
            ("node", "n001"),
            ("n_nodes", "2"),
            ("nranks", "16"),
            ("message_size", "4-5GB"),
            ("collective", coll),
            ("algo_proto", "Ring_LL"),
        ]
    };
    let p2p = vec![
        ("gpu", "GPU1"),
        ("comm_name", "PP"),
        ("version", "v5.1"),
        ("node", "n001"),
        ("n_nodes", "2"),
        ("nranks", "2"),
        ("message_size", "512-513MB"),
        ("p2p_operation", "Send"),
    ];
    let agg = body(&[
        metric(
            "nccl_bus_bandwidth_gbs",
            "GB/s",
            &[
                (bucket("GPU0", "AllReduce"), t0, 678.263),
                (bucket("GPU1", "AllReduce"), t0 + 5, 301.5),
            ],
        ),
        metric(
            "nccl_collective_exec_time_microseconds",
            "us",
            &[
                (bucket("GPU0", "AllReduce"), t0, 9498.47),
                (bucket("GPU1", "AllReduce"), t0 + 5, 21370.0),
            ],
        ),
        metric(
            "nccl_p2p_bus_bandwidth_gbs",
            "GB/s",
            &[(p2p.clone(), t0, 464.9)],
        ),
        metric(
            "nccl_p2p_exec_time_microseconds",
            "us",
            &[(p2p, t0, 1154.87)],
        ),
    ]);
    let status = post(addr, &agg).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");

    let rows = rx.shared.nccl_perf.take();
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let gpu1 = rows
        .iter()
        .find(|r| r.device == 1 && !r.p2p)
        .expect("GPU1 all-reduce");
    assert_eq!(
        (
            gpu1.op.as_str(),
            gpu1.comm_name.as_str(),
            gpu1.nranks,
            gpu1.nnodes
        ),
        ("AllReduce", "DP Group 0", 16, 2)
    );
    assert_eq!(
        (
            gpu1.message_size.as_str(),
            gpu1.algo_proto.as_str(),
            gpu1.job.as_str()
        ),
        ("4-5GB", "Ring_LL", "4242")
    );
    assert_eq!((gpu1.exec_us, gpu1.points), (21370.0, 2));
    assert!((gpu1.busbw_gbs - 301.5).abs() < 1e-9, "{}", gpu1.busbw_gbs);
    assert_eq!(gpu1.last_unix_ms, (t0 / 1_000_000) as i64);
    let send = rows.iter().find(|r| r.p2p).expect("send");
    assert_eq!((send.op.as_str(), send.device), ("Send", 1));
    assert!((send.busbw_gbs - 464.9).abs() < 1e-9, "{}", send.busbw_gbs);
    // Not workload signals: no step times, nothing ignored.
    let (steps, workload) = rx.shared.take_window(|_| None);
    assert!(steps.is_empty() && workload.is_empty());

    // Verbose mode: one point per completed operation, with NCCL's comm
    // hash, the sequence number, the exact size and the algorithm bandwidth.
    let op = |sn: &'static str| {
        vec![
            ("version", "v5.2"),
            ("node", "n001"),
            ("gpu", "GPU3"),
            ("comm_name", "unknown"),
            ("comm_id", "0xd152c00f111816"),
            ("n_nodes", "1"),
            ("nranks", "8"),
            ("coll_msg_size_bytes", "2147483648"),
            ("collective", "ReduceScatter"),
            ("coll_sn", sn),
            ("algo_proto", "Ring_Simple"),
        ]
    };
    let verbose = body(&[
        metric(
            "nccl_bus_bandwidth_gbs",
            "GB/s",
            &[(op("1230"), t0, 300.0), (op("1231"), t0 + 1_000_000, 400.0)],
        ),
        metric(
            "nccl_collective_exec_time_microseconds",
            "us",
            &[
                (op("1230"), t0, 40_000.0),
                (op("1231"), t0 + 1_000_000, 42_000.0),
            ],
        ),
        metric(
            "nccl_collective_algobw_gbs",
            "GB/s",
            &[(op("1230"), t0, 418.0), (op("1231"), t0 + 1_000_000, 418.0)],
        ),
    ]);
    let status = post(addr, &verbose).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let rows = rx.shared.nccl_perf.take();
    assert_eq!(rows.len(), 1, "the operations of one series: {rows:#?}");
    let r = &rows[0];
    assert_eq!(
        (r.device, r.comm_id.as_str(), r.last_sn),
        (3, "0xd152c00f111816", 1231)
    );
    assert_eq!(r.exec_us, 41_000.0);
    assert!(
        (r.busbw_gbs - (300.0f64 * 400.0).sqrt()).abs() < 1e-9,
        "{}",
        r.busbw_gbs
    );
    assert!((r.algobw_gbs - 418.0).abs() < 1e-9);
    assert_eq!(r.message_size, "2147483648");
    assert_eq!(r.last_unix_ms, ((t0 + 1_000_000) / 1_000_000) as i64);
}
