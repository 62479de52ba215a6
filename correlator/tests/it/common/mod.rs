//! Shared by the correlator's integration tests: a window of a host, and an
//! ingest service (no auth layer) on a loopback port.
#![allow(dead_code)]

use correlator::ingest::{IngestService, IngestState};
use proto::v1::{ingest_server::IngestServer, Origin, Window};

/// The wall clock in ms since the epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A 1-second window of `host` (instance `<host>-1`) ending at `end_ms`.
pub fn window(host: &str, seq: u64, end_ms: i64) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            boot_id: "b".into(),
            instance: format!("{host}-1"),
            ..Origin::default()
        }),
        seq,
        start_unix_ms: end_ms - 1000,
        end_unix_ms: end_ms,
        ..Window::default()
    }
}

/// Serves ingest over `state` with a per-host limit of `rate` windows/s;
/// returns a connected channel.
pub async fn serve_ingest(state: &IngestState, rate: u32) -> tonic::transport::Channel {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let svc = IngestService {
        state: state.clone(),
        engine: None,
        max_windows_per_sec: rate,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(IngestServer::new(svc))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect")
}
