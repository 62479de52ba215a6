//! The OTLP metrics receiver: workload signals (training step times,
//! checkpoint durations, throughput, GenAI inference latencies and tokens)
//! pushed by the host's processes over OTLP gRPC (`:4317`) or HTTP
//! (`:4318`, protobuf or JSON), gzip-compressed or not, both on loopback by
//! default.
//!
//! Path: [`grpc`]/[`http`] receive (HTTP JSON through [`json`] into the same
//! request type) → [`decode`] maps names to signals
//! ([`names`]) and reads attribution attributes → [`aggregate`] turns
//! cumulative series into deltas and aggregates per window (bounded, behind
//! a short mutex) → the window loop takes the window and [`attribution`]
//! joins it to jobs, ranks and placement; [`source`] puts it on the wire
//! each window with `faultline_job_step_seconds`. The NCCL Inspector's metrics take
//! their own path ([`inspector`]) into `Window.nccl_perf`. `docs/otlp.md`
//! documents it.
pub mod names;
pub mod section;

#[cfg(feature = "otlp")]
pub mod aggregate;
#[cfg(feature = "otlp")]
pub mod attribution;
#[cfg(feature = "otlp")]
pub mod decode;
#[cfg(feature = "otlp")]
pub mod grpc;
#[cfg(feature = "otlp")]
pub mod http;
#[cfg(feature = "otlp")]
pub mod inspector;
#[cfg(feature = "otlp")]
pub mod json;
#[cfg(agent)]
pub mod source;

pub use section::{OtlpSection, SectionError};
#[cfg(agent)]
pub use source::OtlpSource;

#[cfg(feature = "otlp")]
pub use receiver::*;

#[cfg(feature = "otlp")]
mod receiver {
    use std::{net::SocketAddr, sync::Arc};

    use opentelemetry_proto::tonic::collector::metrics::v1::{
        ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    };

    use super::{
        aggregate::{Aggregator, Limits},
        decode::{decode, reason},
        names::Names,
        section::OtlpSection,
    };
    use crate::identity::ProcessIdentity;

    /// What both transports share: the name mapping, the bounds and the aggregator.
    pub struct Shared {
        pub names: Names,
        pub max_points_per_request: usize,
        pub max_body_bytes: usize,
        pub aggregator: Aggregator,
        /// The NCCL Inspector's series of the window.
        pub nccl_perf: super::inspector::Store,
    }

    impl Shared {
        pub fn new(cfg: &OtlpSection) -> Self {
            Self {
                names: Names::new(&cfg.names),
                max_points_per_request: cfg.max_points_per_request,
                max_body_bytes: cfg.max_body_bytes,
                aggregator: Aggregator::new(Limits::new(cfg.max_series_per_window)),
                nccl_perf: super::inspector::Store::new(cfg.max_series_per_window),
            }
        }

        /// Counts one decoded request by transport, encoding (`protobuf`,
        /// `json`) and compression (`none`, `gzip`).
        pub fn count_request(
            transport: &'static str,
            encoding: &'static str,
            compression: &'static str,
        ) {
            metrics::counter!(crate::metrics_catalog::OTLP_REQUESTS.name, "transport" => transport, "encoding" => encoding, "compression" => compression).increment(1);
        }

        /// Decodes and aggregates one request and counts what happened.
        /// Points dropped by a bound are reported as OTLP partial success
        /// (`rejected_data_points`); points of unknown metric names are
        /// accepted and only counted (`faultline_otlp_ignored_points_total`).
        pub fn export(
            &self,
            req: &ExportMetricsServiceRequest,
            transport: &'static str,
        ) -> ExportMetricsServiceResponse {
            let d = decode(req, &self.names, self.max_points_per_request);
            let mut dropped = d.dropped;
            // The NCCL Inspector's points are not signals: they are read
            // here, not ignored.
            let nccl = self.nccl_perf.ingest(req);
            let ignored = d.ignored.saturating_sub(nccl.total());
            let ing = self.aggregator.ingest(d.points);
            let nccl_dropped = [
                ("nccl_perf_cap", nccl.over_cap),
                (reason::INVALID_VALUE, nccl.invalid),
            ];
            for (r, n) in ing.dropped.into_iter().chain(nccl_dropped) {
                if n == 0 {
                    continue;
                }
                match dropped.iter_mut().find(|(x, _)| *x == r) {
                    Some((_, m)) => *m += n,
                    None => dropped.push((r, n)),
                }
            }
            metrics::counter!(crate::metrics_catalog::OTLP_ACCEPTED_POINTS.name, "transport" => transport)
                .increment(ing.accepted + nccl.accepted);
            metrics::counter!(crate::metrics_catalog::OTLP_IGNORED_POINTS.name, "transport" => transport)
                .increment(ignored);
            let mut rejected = 0u64;
            let mut why = Vec::new();
            for &(r, n) in &dropped {
                metrics::counter!(crate::metrics_catalog::OTLP_DROPPED.name, "reason" => r)
                    .increment(n);
                rejected += n;
                why.push(format!("{r}={n}"));
            }
            if rejected > 0 {
                tracing::debug!(transport, rejected, reasons = %why.join(","), "OTLP points dropped");
            }
            ExportMetricsServiceResponse {
                partial_success: (rejected > 0).then(|| ExportMetricsPartialSuccess {
                    rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
                    error_message: format!("dropped data points: {}", why.join(", ")),
                }),
            }
        }

        /// The window's `steps` and `workload` (the aggregator's take, attributed).
        pub fn take_window(
            &self,
            identity: impl FnMut(u32) -> Option<ProcessIdentity>,
        ) -> (Vec<proto::v1::StepTime>, Vec<proto::v1::WorkloadSample>) {
            let entries = self.aggregator.take();
            let lost: u64 = entries.iter().map(|(_, a)| a.buckets_dropped).sum();
            if lost > 0 {
                metrics::counter!(crate::metrics_catalog::OTLP_DROPPED.name, "reason" => "bucket_cap")
                    .increment(lost);
            }
            let cap = self.aggregator.limits().max_buckets_per_series;
            super::attribution::resolve(entries, identity, cap)
        }
    }

    /// Why a transport is not serving; the message names the key and the
    /// flag that change it.
    #[derive(Clone, Debug, thiserror::Error)]
    pub enum BindError {
        #[error("{key}: {addr:?}: {source}")]
        Address {
            key: &'static str,
            addr: String,
            #[source]
            source: std::net::AddrParseError,
        },
        #[error("cannot bind the OTLP gRPC receiver on {addr} ({source}); choose another address with otlp.grpc_addr / --otlp-grpc-addr or turn it off with otlp.grpc_enabled = false / --no-otlp-grpc")]
        Grpc {
            addr: SocketAddr,
            #[source]
            source: Arc<std::io::Error>,
        },
        #[error("cannot bind the OTLP HTTP receiver on {addr} ({source}); choose another address with otlp.http_addr / --otlp-http-addr or turn it off with otlp.http_enabled = false / --no-otlp-http")]
        Http {
            addr: SocketAddr,
            #[source]
            source: Arc<std::io::Error>,
        },
    }

    /// A running receiver: aborting its tasks on drop.
    pub struct Receiver {
        pub shared: Arc<Shared>,
        /// Bound gRPC address, `None` when disabled, or why it is not serving.
        pub grpc: Result<Option<SocketAddr>, BindError>,
        pub http: Result<Option<SocketAddr>, BindError>,
        tasks: Vec<tokio::task::JoinHandle<()>>,
    }

    impl Drop for Receiver {
        fn drop(&mut self) {
            for t in &self.tasks {
                t.abort();
            }
        }
    }

    /// The address of a transport that is on, or why it cannot be read.
    fn address(on: bool, addr: &str, key: &'static str) -> Result<Option<SocketAddr>, BindError> {
        if !on {
            return Ok(None);
        }
        addr.parse::<SocketAddr>()
            .map(Some)
            .map_err(|source| BindError::Address {
                key,
                addr: addr.to_string(),
                source,
            })
    }

    /// Starts the enabled transports. A transport that cannot bind is
    /// reported in its field (naming the config key) and the other still runs.
    pub async fn start(cfg: &OtlpSection) -> Receiver {
        let shared = Arc::new(Shared::new(cfg));
        let mut tasks = Vec::new();
        let grpc = match address(
            cfg.enabled && cfg.grpc_enabled,
            &cfg.grpc_addr,
            "otlp.grpc_addr",
        ) {
            Ok(Some(a)) => match super::grpc::serve(a, shared.clone(), &cfg.limits).await {
                Ok((bound, t)) => {
                    tasks.push(t);
                    Ok(Some(bound))
                }
                Err(e) => Err(BindError::Grpc {
                    addr: a,
                    source: Arc::new(e),
                }),
            },
            other => other,
        };
        let http = match address(
            cfg.enabled && cfg.http_enabled,
            &cfg.http_addr,
            "otlp.http_addr",
        ) {
            Ok(Some(a)) => match super::http::serve(a, shared.clone(), &cfg.limits).await {
                Ok((bound, t)) => {
                    tasks.push(t);
                    Ok(Some(bound))
                }
                Err(e) => Err(BindError::Http {
                    addr: a,
                    source: Arc::new(e),
                }),
            },
            other => other,
        };
        Receiver {
            shared,
            grpc,
            http,
            tasks,
        }
    }
}

#[cfg(test)]
#[cfg(feature = "otlp")]
mod tests;
