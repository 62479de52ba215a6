//! The bench's OTLP clients: gRPC through opentelemetry-proto's client,
//! HTTP/protobuf as keep-alive HTTP/1.1; closed loops for throughput and a
//! 1 Hz rank for the footprint.
use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context as _, Result};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    metrics_service_client::MetricsServiceClient, ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
};
use prost::Message as _;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

use super::export::Exporter;

/// Keep-alive HTTP/1.1 client for `POST /v1/metrics`.
struct HttpClient {
    addr: SocketAddr,
    rd: tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    wr: tokio::net::tcp::OwnedWriteHalf,
}

impl HttpClient {
    async fn connect(addr: SocketAddr) -> Result<Self> {
        let s = tokio::net::TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok(Self {
            addr,
            rd: tokio::io::BufReader::new(r),
            wr: w,
        })
    }

    async fn export(
        &mut self,
        req: &ExportMetricsServiceRequest,
    ) -> Result<ExportMetricsServiceResponse> {
        let body = req.encode_to_vec();
        let mut msg = format!(
            "POST /v1/metrics HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        )
        .into_bytes();
        msg.extend_from_slice(&body);
        self.wr.write_all(&msg).await?;
        let mut line = String::new();
        self.rd.read_line(&mut line).await?;
        let code: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("no HTTP status line: {line:?}"))?;
        let mut len = None;
        loop {
            line.clear();
            ensure!(self.rd.read_line(&mut line).await? > 0, "connection closed");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = Some(v.trim().parse::<usize>()?);
                }
            }
        }
        let mut body = vec![0; len.context("response without Content-Length")?];
        self.rd.read_exact(&mut body).await?;
        ensure!(code == 200, "HTTP {code}");
        Ok(ExportMetricsServiceResponse::decode(body.as_slice())?)
    }
}

enum Client {
    Grpc(MetricsServiceClient<tonic::transport::Channel>),
    Http(HttpClient),
}

impl Client {
    async fn connect(grpc: bool, addr: SocketAddr) -> Result<Self> {
        Ok(if grpc {
            Self::Grpc(MetricsServiceClient::connect(format!("http://{addr}")).await?)
        } else {
            Self::Http(HttpClient::connect(addr).await?)
        })
    }

    /// One export; the points the receiver rejected.
    async fn export(&mut self, req: ExportMetricsServiceRequest) -> Result<u64> {
        let r = match self {
            Self::Grpc(c) => c.export(req).await?.into_inner(),
            Self::Http(c) => c.export(&req).await?,
        };
        Ok(r.partial_success
            .map_or(0, |p| u64::try_from(p.rejected_data_points).unwrap_or(0)))
    }
}

#[derive(Default)]
pub(super) struct Stats {
    pub requests: u64,
    pub points: u64,
    pub rejected: u64,
    pub latency_s: Vec<f64>,
}

impl Stats {
    pub(super) fn merge(&mut self, o: Self) {
        self.requests += o.requests;
        self.points += o.points;
        self.rejected += o.rejected;
        self.latency_s.extend(o.latency_s);
    }
}

/// Sends `ex`'s exports back to back until `until`.
pub(super) async fn closed_loop(
    grpc: bool,
    addr: SocketAddr,
    mut ex: Vec<Exporter>,
    until: Instant,
) -> Result<(Stats, Vec<Exporter>)> {
    let mut st = Stats::default();
    let n = ex.len();
    if n == 0 {
        return Ok((st, ex));
    }
    let mut c = Client::connect(grpc, addr).await?;
    let mut i = 0;
    while Instant::now() < until {
        let e = &mut ex[i % n];
        i += 1;
        let req = e.next();
        let t = Instant::now();
        st.rejected += c.export(req).await?;
        st.latency_s.push(t.elapsed().as_secs_f64());
        st.requests += 1;
        st.points += e.points();
    }
    Ok((st, ex))
}

/// A training rank exporting once per second until `stop` is set: points
/// sent (every export acknowledged before this returns).
pub(super) async fn rank_at_1hz(
    mut ex: Exporter,
    grpc: bool,
    addr: SocketAddr,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<u64> {
    let mut c = Client::connect(grpc, addr).await?;
    let mut iv = tokio::time::interval(Duration::from_secs(1));
    let mut sent = 0;
    loop {
        tokio::select! {
            _ = iv.tick() => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return Ok(sent);
        }
        let rejected = c.export(ex.next()).await?;
        ensure!(rejected == 0, "the collector rejected {rejected} points");
        sent += ex.points();
    }
}
