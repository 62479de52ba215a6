//! `faultline-correlator`: ingests collector windows and streams root-cause candidates.
use std::{net::SocketAddr, process::ExitCode};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use proto::v1::{
    ingest_server::{Ingest, IngestServer},
    Ack, Heartbeat,
};
use tonic::{Request, Response, Status, Streaming};

/// faultline's correlator.
#[derive(Debug, Parser)]
#[command(name = "faultline-correlator", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the ingest API.
    Serve {
        /// Address to listen on. Binding a non-loopback address exposes the
        /// service to the network; the log says so.
        #[arg(long, default_value = "127.0.0.1:50051")]
        listen: SocketAddr,
    },
}

#[derive(Default)]
struct IngestService;

#[tonic::async_trait]
impl Ingest for IngestService {
    async fn stream(&self, req: Request<Streaming<Heartbeat>>) -> Result<Response<Ack>, Status> {
        let mut s = req.into_inner();
        let mut n = 0u64;
        while let Some(hb) = s.message().await? {
            tracing::debug!(host = %hb.host, seq = hb.seq, "heartbeat");
            n += 1;
        }
        Ok(Response::new(Ack { received: n }))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::stderr)
        .try_init();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("faultline-correlator: error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("faultline-correlator: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve { listen } => {
            if !listen.ip().is_loopback() {
                tracing::warn!(%listen, "listening on a non-loopback address: reachable from the network");
            }
            tracing::info!(%listen, "serving");
            tonic::transport::Server::builder()
                .add_service(IngestServer::new(IngestService))
                .serve_with_shutdown(listen, async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
                .with_context(|| format!("serving on {listen}"))?;
        }
    }
    Ok(())
}
