//! OTLP/HTTP `POST /v1/metrics` on hyper's HTTP/1.1 server: binary protobuf
//! (`application/x-protobuf`) or OTLP/JSON (`application/json`, [`super::json`]),
//! the body plain or `Content-Encoding: gzip`. The response has the request's
//! content type; errors answer with a `google.rpc.Status` in it, as OTLP/HTTP
//! asks: 400 malformed (or a body that does not decompress), 413 over
//! `otlp.max_body_bytes` (before or after decompression), 415 another content
//! type or encoding, 404/405 otherwise, 408 for a body slower than
//! `otlp.limits.body_timeout_s`. Connections are capped and timed out by
//! `[otlp.limits]` ([`proto::listen`]): a slow or idle client is displaced by
//! a new one, so it cannot delay a real export.
use std::{io::Read as _, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, header, Method, Request, Response, StatusCode};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message as _;
use proto::listen::{BodyError, HttpLimitsConfig, Listener};
use tokio::net::TcpListener;

use super::Shared;

/// The listener's name in the connection metrics.
const LISTENER: &str = "otlp_http";

/// `google.rpc.Status`, the OTLP/HTTP error body.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// The request's (and so the response's) encoding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Encoding::Protobuf => "protobuf",
            Encoding::Json => "json",
        }
    }
}

/// An `ExportMetricsServiceResponse` in OTLP/JSON: `{}` on full success,
/// else `partialSuccess` (its int64 as a decimal string).
pub fn encode_json_response(r: &ExportMetricsServiceResponse) -> Vec<u8> {
    let v = match &r.partial_success {
        None => serde_json::json!({}),
        Some(p) => serde_json::json!({
            "partialSuccess": {
                "rejectedDataPoints": p.rejected_data_points.to_string(),
                "errorMessage": p.error_message,
            }
        }),
    };
    v.to_string().into_bytes()
}

/// A `google.rpc.Status` in OTLP/JSON, the error body of a JSON request.
pub fn encode_json_status(code: i32, message: &str) -> Vec<u8> {
    serde_json::json!({ "code": code, "message": message })
        .to_string()
        .into_bytes()
}

fn reply(status: StatusCode, enc: Encoding, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(enc.content_type()),
    );
    r
}

/// Why a request is refused: the status, the `google.rpc.Status` code and
/// message in the request's encoding, and the metric's reason.
struct Rejection {
    status: StatusCode,
    enc: Encoding,
    code: tonic::Code,
    reason: &'static str,
    message: String,
}

impl Rejection {
    fn new(
        status: StatusCode,
        enc: Encoding,
        code: tonic::Code,
        reason: &'static str,
        message: String,
    ) -> Self {
        Self {
            status,
            enc,
            code,
            reason,
            message,
        }
    }

    /// `what` (a body) over `otlp.max_body_bytes`.
    fn too_large(enc: Encoding, what: &str, max: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            enc,
            tonic::Code::ResourceExhausted,
            "too_large",
            format!("{what} over {max} bytes (otlp.max_body_bytes)"),
        )
    }

    /// The response, counted under its reason.
    fn respond(self) -> Response<Full<Bytes>> {
        metrics::counter!(crate::metrics_catalog::OTLP_REJECTED_REQUESTS.name, "transport" => "http", "reason" => self.reason).increment(1);
        let body = match self.enc {
            Encoding::Protobuf => RpcStatus {
                code: self.code as i32,
                message: self.message,
            }
            .encode_to_vec(),
            Encoding::Json => encode_json_status(self.code as i32, &self.message),
        };
        reply(self.status, self.enc, body)
    }
}

/// Why a gzip body was not taken.
enum Inflate {
    TooLarge,
    Corrupt(std::io::Error),
}

/// Decompresses a gzip body (one or more members) to at most `max` bytes.
fn gunzip(body: &[u8], max: usize) -> Result<Vec<u8>, Inflate> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(max));
    flate2::read::MultiGzDecoder::new(body)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(Inflate::Corrupt)?;
    if out.len() > max {
        return Err(Inflate::TooLarge);
    }
    Ok(out)
}

fn header_str(req: &Request<Incoming>, name: header::HeaderName) -> Option<&str> {
    req.headers()
        .get(name)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"))
}

async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    body_timeout: Duration,
) -> Response<Full<Bytes>> {
    match accept(req, &shared, body_timeout).await {
        Ok((enc, gzip, r)) => {
            Shared::count_request("http", enc.label(), if gzip { "gzip" } else { "none" });
            let resp = shared.export(&r, "http");
            let body = match enc {
                Encoding::Protobuf => resp.encode_to_vec(),
                Encoding::Json => encode_json_response(&resp),
            };
            reply(StatusCode::OK, enc, body)
        }
        Err(rejection) => rejection.respond(),
    }
}

/// The request as an export: its encoding, whether it was gzipped, and
/// the decoded request; or why it is refused.
async fn accept(
    req: Request<Incoming>,
    shared: &Shared,
    body_timeout: Duration,
) -> Result<(Encoding, bool, ExportMetricsServiceRequest), Rejection> {
    route(&req)?;
    let (enc, gzip) = encodings(&req)?;
    let body = read(req, enc, gzip, shared.max_body_bytes, body_timeout).await?;
    let malformed = |message: String| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            enc,
            tonic::Code::InvalidArgument,
            "malformed",
            message,
        )
    };
    let r = match enc {
        Encoding::Protobuf => ExportMetricsServiceRequest::decode(body)
            .map_err(|e| malformed(format!("malformed protobuf: {e}")))?,
        Encoding::Json => super::json::decode_request(&body)
            .map_err(|e| malformed(format!("malformed OTLP/JSON: {e}")))?,
    };
    Ok((enc, gzip, r))
}

/// `POST /v1/metrics` only.
fn route(req: &Request<Incoming>) -> Result<(), Rejection> {
    let pb = Encoding::Protobuf;
    if req.uri().path() != "/v1/metrics" {
        return Err(Rejection::new(
            StatusCode::NOT_FOUND,
            pb,
            tonic::Code::NotFound,
            "not_found",
            format!("no route {}", req.uri().path()),
        ));
    }
    if req.method() != Method::POST {
        return Err(Rejection::new(
            StatusCode::METHOD_NOT_ALLOWED,
            pb,
            tonic::Code::Unimplemented,
            "method",
            format!("{} not allowed; POST", req.method()),
        ));
    }
    Ok(())
}

/// The content type (protobuf or JSON) and whether the body is gzipped.
fn encodings(req: &Request<Incoming>) -> Result<(Encoding, bool), Rejection> {
    let ctype = header_str(req, header::CONTENT_TYPE).unwrap_or("");
    let essence = ctype.split(';').next().unwrap_or("").trim();
    let enc = if essence.eq_ignore_ascii_case("application/x-protobuf") {
        Encoding::Protobuf
    } else if essence.eq_ignore_ascii_case("application/json") {
        Encoding::Json
    } else {
        return Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Encoding::Protobuf,
            tonic::Code::InvalidArgument,
            "content_type",
            format!(
                "content type {ctype:?} not supported; send application/x-protobuf or application/json"
            ),
        ));
    };
    let encoding = header_str(req, header::CONTENT_ENCODING)
        .unwrap_or("identity")
        .trim();
    if encoding.eq_ignore_ascii_case("gzip") {
        Ok((enc, true))
    } else if encoding.is_empty() || encoding.eq_ignore_ascii_case("identity") {
        Ok((enc, false))
    } else {
        Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            enc,
            tonic::Code::InvalidArgument,
            "content_encoding",
            format!("content encoding {encoding:?} not supported; send gzip or uncompressed"),
        ))
    }
}

/// The body, within `max` bytes and `body_timeout`, decompressed.
async fn read(
    req: Request<Incoming>,
    enc: Encoding,
    gzip: bool,
    max: usize,
    body_timeout: Duration,
) -> Result<Bytes, Rejection> {
    let declared = header_str(&req, header::CONTENT_LENGTH).and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(Rejection::too_large(enc, "request body", max));
    }
    let body = match proto::listen::read_body(req.into_body(), max, body_timeout, LISTENER).await {
        Ok(b) => b,
        Err(BodyError::TooLarge) => return Err(Rejection::too_large(enc, "request body", max)),
        Err(BodyError::Read(e)) => {
            return Err(Rejection::new(
                StatusCode::BAD_REQUEST,
                enc,
                tonic::Code::InvalidArgument,
                "body",
                format!("reading the body: {e}"),
            ))
        }
        Err(BodyError::Timeout) => {
            return Err(Rejection::new(
                StatusCode::REQUEST_TIMEOUT,
                enc,
                tonic::Code::DeadlineExceeded,
                "timeout",
                format!(
                    "body not received within {:.1} s (otlp.limits.body_timeout_s)",
                    body_timeout.as_secs_f64()
                ),
            ))
        }
    };
    if !gzip {
        return Ok(body);
    }
    match gunzip(&body, max) {
        Ok(b) => Ok(Bytes::from(b)),
        Err(Inflate::TooLarge) => Err(Rejection::too_large(enc, "decompressed request body", max)),
        Err(Inflate::Corrupt(e)) => Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            enc,
            tonic::Code::InvalidArgument,
            "compression",
            format!("malformed gzip body: {e}"),
        )),
    }
}

/// Binds `addr` and serves within `limits` until the task is aborted.
pub async fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
    limits: &HttpLimitsConfig,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let timeouts = limits.http();
    let handler = move |req| handle(req, shared.clone(), timeouts.body);
    let task = tokio::spawn(proto::listen::serve_http1(
        listener,
        Listener::new(LISTENER, limits.limits(), 1),
        timeouts,
        handler,
        std::future::pending(),
    ));
    Ok((local, task))
}
