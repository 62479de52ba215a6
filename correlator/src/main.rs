//! `faultline-correlator`: ingests collector windows and streams root-cause candidates.
use std::{net::SocketAddr, process::ExitCode};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use proto::v1::ingest_server::IngestServer;

mod ingest;

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
        /// Append every accepted window to this JSON-lines ingest log; on
        /// start the log restores each collector's last sequence number.
        #[arg(long, value_name = "FILE")]
        record: Option<std::path::PathBuf>,
    },
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
        Command::Serve { listen, record } => {
            let state = match &record {
                Some(p) => ingest::IngestState::with_log(p)?,
                None => ingest::IngestState::default(),
            };
            if !listen.ip().is_loopback() {
                tracing::warn!(%listen, "listening on a non-loopback address: reachable from the network");
            }
            tracing::info!(%listen, "serving");
            tonic::transport::Server::builder()
                .add_service(
                    IngestServer::new(ingest::IngestService { state: state.clone() })
                        .max_decoding_message_size(16 << 20),
                )
                .serve_with_shutdown(listen, async {
                    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                    tokio::select! {
                        _ = tokio::signal::ctrl_c() => {}
                        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
                    }
                })
                .await
                .with_context(|| format!("serving on {listen}"))?;
            let (accepted, duplicates, missing) = state.counters();
            tracing::info!(accepted, duplicates, missing, "stopped");
        }
    }
    Ok(())
}
