//! HTTP/protobuf `POST /v1/metrics` (OTLP/HTTP, binary protobuf) on hyper's
//! HTTP/1.1 server. Errors answer with a protobuf `google.rpc.Status` body,
//! as OTLP/HTTP asks: 400 malformed, 413 over `otlp.max_body_bytes`, 415 not
//! `application/x-protobuf` (JSON is not supported), 404/405 otherwise.
use std::{net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::{
    body::Incoming, header, server::conn::http1, service::service_fn, Method, Request, Response,
    StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message as _;
use tokio::{net::TcpListener, sync::Semaphore};

use super::Shared;

/// Connections served at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 64;
/// A request's head and body must arrive within this.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// `google.rpc.Status`, the OTLP/HTTP error body.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-protobuf"),
    );
    r
}

fn reject(
    status: StatusCode,
    code: tonic::Code,
    reason: &'static str,
    message: String,
) -> Response<Full<Bytes>> {
    metrics::counter!("faultline_otlp_rejected_requests_total", "transport" => "http", "reason" => reason).increment(1);
    let body = RpcStatus {
        code: code as i32,
        message,
    }
    .encode_to_vec();
    reply(status, body)
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Response<Full<Bytes>> {
    if req.uri().path() != "/v1/metrics" {
        return reject(
            StatusCode::NOT_FOUND,
            tonic::Code::NotFound,
            "not_found",
            format!("no route {}", req.uri().path()),
        );
    }
    if req.method() != Method::POST {
        return reject(
            StatusCode::METHOD_NOT_ALLOWED,
            tonic::Code::Unimplemented,
            "method",
            format!("{} not allowed; POST", req.method()),
        );
    }
    let ctype = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ctype.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/x-protobuf") {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            tonic::Code::InvalidArgument,
            "content_type",
            format!("content type {ctype:?} not supported; send application/x-protobuf"),
        );
    }
    let encoding = req
        .headers()
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    if !encoding.eq_ignore_ascii_case("identity") {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            tonic::Code::InvalidArgument,
            "content_encoding",
            format!("content encoding {encoding:?} not supported; send uncompressed"),
        );
    }
    let max = shared.max_body_bytes;
    let too_large = || {
        reject(
            StatusCode::PAYLOAD_TOO_LARGE,
            tonic::Code::ResourceExhausted,
            "too_large",
            format!("request body over {max} bytes (otlp.max_body_bytes)"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return too_large();
    }
    let body = match tokio::time::timeout(
        READ_TIMEOUT,
        Limited::new(req.into_body(), max).collect(),
    )
    .await
    {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Ok(Err(e)) => {
            return reject(
                StatusCode::BAD_REQUEST,
                tonic::Code::InvalidArgument,
                "body",
                format!("reading the body: {e}"),
            )
        }
        Err(_) => {
            return reject(
                StatusCode::REQUEST_TIMEOUT,
                tonic::Code::DeadlineExceeded,
                "timeout",
                "body not received in time".into(),
            )
        }
    };
    match ExportMetricsServiceRequest::decode(body) {
        Ok(r) => reply(StatusCode::OK, shared.export(&r, "http").encode_to_vec()),
        Err(e) => reject(
            StatusCode::BAD_REQUEST,
            tonic::Code::InvalidArgument,
            "malformed",
            format!("malformed protobuf: {e}"),
        ),
    }
}

/// Binds `addr` and serves until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let task = tokio::spawn(async move {
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let (sock, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "OTLP HTTP accept");
                    continue;
                }
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(req, shared).await) }
                });
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(READ_TIMEOUT)
                    .serve_connection(TokioIo::new(sock), svc);
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "OTLP HTTP connection");
                }
                drop(permit);
            });
        }
    });
    Ok((local, task))
}
