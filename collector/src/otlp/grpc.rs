//! gRPC `opentelemetry.proto.collector.metrics.v1.MetricsService/Export`.
//! Malformed protobuf → `InvalidArgument`; a message over
//! `otlp.max_body_bytes` → `ResourceExhausted` (see [`StatusMap`]).
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
    codegen::{http, BoxFuture, Service},
    server::NamedService,
    transport::server::TcpIncoming,
};

use super::Shared;

struct Export(Arc<Shared>);

#[tonic::async_trait]
impl MetricsService for Export {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        Ok(tonic::Response::new(
            self.0.export(request.get_ref(), "grpc"),
        ))
    }
}

/// Maps tonic's statuses for requests that never reach the handler to the
/// ones the OTLP specification names: `Internal` for a protobuf decode error
/// → `InvalidArgument`, `OutOfRange` for an oversized message →
/// `ResourceExhausted`. Both are counted.
#[derive(Clone)]
pub struct StatusMap<S>(S);

impl<S: NamedService> NamedService for StatusMap<S> {
    const NAME: &'static str = S::NAME;
}

/// (tonic's code, words in its message, the code to send, the `reason` label).
const REMAP: &[(&[u8], &str, &str, &str)] = &[
    (b"13", "decode", "3", "malformed"),
    (b"11", "too", "8", "too_large"),
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
                .and_then(|m| m.to_str().ok())
                .unwrap_or("")
                .to_string();
            for &(from, word, to, reason) in REMAP {
                if code.as_deref() == Some(from) && msg.contains(word) {
                    h.insert("grpc-status", http::HeaderValue::from_static(to));
                    metrics::counter!("faultline_otlp_rejected_requests_total", "transport" => "grpc", "reason" => reason).increment(1);
                }
            }
            Ok(resp)
        })
    }
}

/// Binds `addr` and serves until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let max = shared.max_body_bytes;
    let svc = StatusMap(
        MetricsServiceServer::new(Export(shared))
            .max_decoding_message_size(max)
            .max_encoding_message_size(1 << 20),
    );
    let task = tokio::spawn(async move {
        let server = tonic::transport::Server::builder()
            .concurrency_limit_per_connection(32)
            .serve_with_incoming(svc, TcpIncoming::from(listener));
        if let Err(e) = server.await {
            tracing::error!(error = %e, "OTLP gRPC receiver stopped");
        }
    });
    Ok((local, task))
}
