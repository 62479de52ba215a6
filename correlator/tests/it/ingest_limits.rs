//! The ingest service over real gRPC on loopback: a stream over the per-stream
//! rate limit is ended with RESOURCE_EXHAUSTED while another collector's
//! stream is unaffected; a malformed window gets INVALID_ARGUMENT.
use crate::common;

use common::serve_ingest;
use correlator::ingest::IngestState;
use proto::v1::{ingest_client::IngestClient, Origin, Window};
use tokio_stream::wrappers::ReceiverStream;

fn window(host: &str, seq: u64) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            boot_id: "b".into(),
            instance: format!("{host}-1"),
            ..Origin::default()
        }),
        seq,
        ..Window::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_and_bad_input_only_affect_their_own_stream() {
    let _turn = tests::one_file_at_a_time(file!());
    let state = IngestState::default();
    let chan = serve_ingest(&state, 20).await;

    // A well-behaved collector streaming slowly, concurrently.
    let mut polite = IngestClient::new(chan.clone());
    let (ptx, prx) = tokio::sync::mpsc::channel(8);
    let polite_call = tokio::spawn(async move { polite.stream(ReceiverStream::new(prx)).await });
    let polite_feed = tokio::spawn(async move {
        for seq in 1..=5 {
            ptx.send(window("calm", seq)).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });

    // A flood: 200 windows at once against a 20/s limit.
    let mut flood = IngestClient::new(chan.clone());
    let windows: Vec<Window> = (1..=200).map(|s| window("loud", s)).collect();
    let err = flood
        .stream(tokio_stream::iter(windows))
        .await
        .expect_err("rate limited");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    assert!(err.message().contains("exceeds 20 windows/s"), "{err}");

    polite_feed.await.unwrap();
    let summary = polite_call
        .await
        .unwrap()
        .expect("the polite stream is unaffected")
        .into_inner();
    assert_eq!((summary.accepted, summary.last_seq), (5, 5));
    let got = state.last_seq(&window("loud", 1).origin.unwrap());
    assert!(
        (20..=25).contains(&got),
        "the flood got its burst through: {got}"
    );

    // Malformed: no origin.
    let mut bad = IngestClient::new(chan);
    let err = bad
        .stream(tokio_stream::iter(vec![Window {
            seq: 1,
            ..Window::default()
        }]))
        .await
        .expect_err("invalid");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(err.message(), "window without origin");
}

/// From a JetStream durable consumer, an origin's first window continues
/// the stream (its earlier windows went to the consumer's previous
/// holder); later gaps still count. Through gRPC a first window counts
/// the numbers before it.
#[test]
fn a_streams_first_window_continues_and_later_gaps_count() {
    let _turn = tests::one_file_at_a_time(file!());
    // Windows without times: no clock checks.
    let limits = correlator::limits::LimitsConfig {
        max_future_s: 0.0,
        max_past_s: 0.0,
        ..Default::default()
    };
    let grpc = IngestState::new(limits.clone());
    assert_eq!(grpc.accept(&window("h", 7)).ok(), Some(true));
    assert_eq!(grpc.counters().2, 6);
    let stream = IngestState::new(limits);
    assert_eq!(stream.admit_stream(&window("h", 7)).ok(), Some(true));
    assert_eq!(stream.counters().2, 0);
    assert_eq!(stream.admit_stream(&window("h", 7)).ok(), Some(false));
    assert_eq!(stream.admit_stream(&window("h", 10)).ok(), Some(true));
    assert_eq!(stream.counters(), (2, 1, 2));
}
