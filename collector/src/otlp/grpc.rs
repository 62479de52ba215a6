//! gRPC `opentelemetry.proto.collector.metrics.v1.MetricsService/Export`,
//! messages plain or gzip-compressed (`grpc-encoding: gzip`). Malformed
//! protobuf or gzip → `InvalidArgument`; a message over `otlp.max_body_bytes`,
//! compressed or once decompressed → `ResourceExhausted`; another
//! `grpc-encoding` → `UNIMPLEMENTED` (see [`StatusMap`]). Connections are
//! capped and timed out by `[otlp.limits]` ([`proto::listen`]; a request
//! slower than `body_timeout_s` ends `CANCELLED`).
use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::Arc,
    task::{Context, Poll},
};

use opentelemetry_proto::tonic::collector::metrics::v1::{
    metrics_service_server::{MetricsService, MetricsServiceServer},
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use tokio::net::TcpListener;
use tonic::{
    body::Body,
    codec::CompressionEncoding,
    codegen::{http, BoxFuture, Service},
    server::NamedService,
};

use super::Shared;

struct Export(Arc<Shared>);

#[tonic::async_trait]
impl MetricsService for Export {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        // tonic decompressed the message if it was; counted by the
        // request's declared `grpc-encoding`.
        let gzip = request
            .metadata()
            .get("grpc-encoding")
            .is_some_and(|v| v.as_encoded_bytes().eq_ignore_ascii_case(b"gzip"));
        Shared::count_request("grpc", "protobuf", if gzip { "gzip" } else { "none" });
        Ok(tonic::Response::new(
            self.0.export(request.get_ref(), "grpc"),
        ))
    }
}

/// Maps tonic's statuses for requests that never reach the handler to the
/// ones the OTLP specification names, and counts them: `Internal` for a
/// protobuf decode error or a message that does not decompress →
/// `InvalidArgument`, `OutOfRange` for an oversized message →
/// `ResourceExhausted`; tonic's own `ResourceExhausted` (a message over the
/// limit once decompressed) and `Unimplemented` (an unsupported
/// `grpc-encoding`) stay as they are.
#[derive(Clone)]
pub struct StatusMap<S>(S);

impl<S: NamedService> NamedService for StatusMap<S> {
    const NAME: &'static str = S::NAME;
}

/// (tonic's code, words in its message, the code to send, the `reason` label).
const REMAP: &[(&[u8], &str, &str, &str)] = &[
    (b"13", "decode", "3", "malformed"),
    (b"11", "too", "8", "too_large"),
    (b"13", "decompressing", "3", "compression"),
    (b"13", "compressed-flag", "3", "compression"),
    (b"8", "decompressing", "8", "too_large"),
    (b"12", "compressed with", "12", "content_encoding"),
];

impl<S> Service<http::Request<Body>> for StatusMap<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let fut = self.0.call(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            let h = resp.headers_mut();
            let code = h.get("grpc-status").map(|v| v.as_bytes().to_vec());
            let msg = h
                .get("grpc-message")
                .map(|m| percent_decode(m.as_bytes()))
                .unwrap_or_default();
            for &(from, word, to, reason) in REMAP {
                if code.as_deref() == Some(from) && msg.contains(word) {
                    h.insert("grpc-status", http::HeaderValue::from_static(to));
                    metrics::counter!(crate::metrics_catalog::OTLP_REJECTED_REQUESTS.name, "transport" => "grpc", "reason" => reason).increment(1);
                    break;
                }
            }
            Ok(resp)
        })
    }
}

/// A `grpc-message` as text (tonic percent-encodes spaces and more).
fn percent_decode(b: &[u8]) -> String {
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let pair = (b[i] == b'%')
            .then(|| Some((hex(*b.get(i + 1)?)?, hex(*b.get(i + 2)?)?)))
            .flatten();
        match pair {
            Some((hi, lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Binds `addr` and serves within `limits` until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
    limits: &proto::listen::HttpLimitsConfig,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let max = shared.max_body_bytes;
    // The limit bounds a compressed message and, separately, what it
    // decompresses to (tonic stops inflating past it).
    let svc = StatusMap(
        MetricsServiceServer::new(Export(shared))
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(max)
            .max_encoding_message_size(1 << 20),
    );
    // The HTTP/2 preface (24 bytes) is the first thing a client sends.
    let conns = proto::listen::Listener::new("otlp_grpc", limits.limits(), 24);
    let request_timeout = limits.http().body;
    let task = tokio::spawn(async move {
        let server = tonic::transport::Server::builder()
            .concurrency_limit_per_connection(32)
            .timeout(request_timeout)
            .layer(proto::listen::ActivityLayer(conns.clone()))
            .serve_with_incoming(svc, proto::listen::incoming(listener, conns));
        if let Err(e) = server.await {
            tracing::error!(error = %e, "OTLP gRPC receiver stopped");
        }
    });
    Ok((local, task))
}
