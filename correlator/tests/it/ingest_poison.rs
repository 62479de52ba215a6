//! Ingest that cannot be poisoned: a spoofed sequence number of 2^64−1, a
//! window dated an hour ahead or a week behind, a host past the cap, and a
//! flood split over 8 streams are refused with a clear status, counted by
//! reason, and never change what the real collector's windows do.
use crate::common;

use common::{now_ms, serve_ingest, window};
use correlator::ingest::{IngestState, MAX_SEQ};
use correlator::limits::LimitsConfig;
use proto::v1::{ingest_client::IngestClient, Window};

/// Accepted as a new window (panics with the status otherwise).
fn new(r: Result<bool, tonic::Status>) -> bool {
    r.unwrap_or_else(|s| panic!("refused: {s}"))
}

#[test]
fn spoofed_sequence_is_refused_counted_and_the_real_host_keeps_streaming() {
    let _turn = tests::one_file_at_a_time(file!());
    let st = IngestState::new(LimitsConfig::default());
    let now = now_ms();
    for seq in 1..=5 {
        assert!(new(st.accept(&window("n1", seq, now))));
    }
    let err = st
        .accept(&window("n1", u64::MAX, now))
        .expect_err("spoof refused");
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");
    assert!(err.message().contains("max_seq_jump"), "{err}");
    assert_eq!(st.last_seq(&window("n1", 1, now).origin.unwrap()), 5);
    // The real collector's next windows are new, not duplicates.
    assert!(new(st.accept(&window("n1", 6, now))));
    assert!(new(st.accept(&window("n1", 7, now))));
    // A jump within the bound is a gap (counted), far past it a refusal.
    assert!(new(st.accept(&window("n1", 1_000_007, now))));
    assert!(st.accept(&window("n1", 3_000_000, now)).is_err());
    let (accepted, duplicates, missing) = st.counters();
    assert_eq!((accepted, duplicates, missing), (8, 0, 999_999));
    assert_eq!(st.rejected().get("seq_jump"), Some(&2));
    // A first window far above any real sequence is refused too.
    assert!(st.accept(&window("fresh", MAX_SEQ + 1, now)).is_err());
    assert_eq!(st.rejected().get("seq_jump"), Some(&3));
}

/// With the default limits, a jump of 999,999 (just under `max_seq_jump`)
/// is accepted once, a second chained one is refused (`seq_budget`,
/// RESOURCE_EXHAUSTED) however far under `max_seq_jump` it is, and the real
/// collector's windows 6…20, which the jump skipped, are all new: before
/// the budget, every chained jump was accepted and each real window
/// counted as a duplicate.
#[test]
fn chained_sequence_jumps_spend_a_budget_and_real_windows_keep_being_accepted() {
    let _turn = tests::one_file_at_a_time(file!());
    let st = IngestState::new(LimitsConfig::default());
    let now = now_ms();
    for seq in 1..=5 {
        assert!(new(st.accept(&window("n1", seq, now))));
    }
    assert!(new(st.accept(&window("n1", 1_000_004, now))));
    for jump in [999_999, 500_000, 10_000] {
        let err = st
            .accept(&window("n1", 1_000_004 + jump, now))
            .expect_err("a chained jump past the budget");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
        assert!(err.message().contains("max_seq_skip_per_min"), "{err}");
    }
    assert_eq!(st.rejected().get("seq_budget"), Some(&3));
    assert_eq!(st.rejected().get("seq_jump"), None);
    let origin = window("n1", 1, now).origin.unwrap();
    assert_eq!(st.last_seq(&origin), 1_000_004);
    // The real collector goes on from 6: new windows, each once.
    for seq in 6..=20 {
        assert!(new(st.accept(&window("n1", seq, now))), "window {seq}");
    }
    assert!(matches!(st.accept(&window("n1", 6, now)), Ok(false)));
    // The next number after the jump never needs budget.
    assert!(new(st.accept(&window("n1", 1_000_005, now))));
    let (accepted, duplicates, _) = st.counters();
    assert_eq!((accepted, duplicates), (5 + 1 + 15 + 1, 1));
}

#[test]
fn windows_far_from_the_correlators_clock_are_refused() {
    let _turn = tests::one_file_at_a_time(file!());
    let st = IngestState::new(LimitsConfig::default());
    let now = now_ms();
    assert!(new(st.accept(&window("n1", 1, now))));
    let err = st
        .accept(&window("n1", 2, now + 3_600_000))
        .expect_err("an hour ahead");
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");
    assert!(
        err.message().contains("ahead of the correlator's clock"),
        "{err}"
    );
    let err = st
        .accept(&window("n1", 2, now - 8 * 86_400_000))
        .expect_err("8 days behind");
    assert!(
        err.message().contains("before the correlator's clock"),
        "{err}"
    );
    // An hour-old window (a spool drained after an outage) is fine, and so
    // is a minute of skew.
    assert!(new(st.accept(&window("n1", 2, now - 3_600_000))));
    assert!(new(st.accept(&window("n1", 3, now + 60_000))));
    let r = st.rejected();
    assert_eq!(
        (r.get("clock_future"), r.get("clock_past")),
        (Some(&1), Some(&1))
    );
    assert_eq!(st.last_seq(&window("n1", 1, now).origin.unwrap()), 3);
}

#[test]
fn hosts_past_the_cap_are_refused_and_origins_per_host_bounded() {
    let _turn = tests::one_file_at_a_time(file!());
    let st = IngestState::new(LimitsConfig {
        max_hosts: 2,
        max_origins_per_host: 3,
        ..LimitsConfig::default()
    });
    let now = now_ms();
    assert!(new(st.accept(&window("a", 1, now))));
    assert!(new(st.accept(&window("b", 1, now))));
    let err = st.accept(&window("c", 1, now)).expect_err("third host");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
    assert_eq!(st.rejected().get("host_cap"), Some(&1));
    assert_eq!(st.hosts(), 2);
    // Ten restarts of host a: only the latest three runs are remembered.
    for run in 0..10 {
        let mut w = window("a", 1, now);
        if let Some(o) = w.origin.as_mut() {
            o.instance = format!("a-run{run}");
        }
        assert!(new(st.accept(&w)));
    }
    let mut old = window("a", 1, now);
    if let Some(o) = old.origin.as_mut() {
        o.instance = "a-run9".into();
    }
    assert_eq!(st.last_seq(old.origin.as_ref().unwrap()), 1);
    if let Some(o) = old.origin.as_mut() {
        o.instance = "a-run0".into();
    }
    assert_eq!(st.last_seq(old.origin.as_ref().unwrap()), 0, "forgotten");
}

#[test]
fn a_poisoned_ingest_log_line_is_not_restored() {
    let _turn = tests::one_file_at_a_time(file!());
    let p = std::env::temp_dir().join(format!("faultline-poison-{}.jsonl", std::process::id()));
    std::fs::write(
        &p,
        "{\"hostname\":\"n1\",\"boot_id\":\"b\",\"instance\":\"n1-1\",\"seq\":4}\n\
         {\"hostname\":\"n1\",\"boot_id\":\"b\",\"instance\":\"n1-1\",\"seq\":18446744073709551615}\n",
    )
    .expect("write");
    let st = IngestState::with_log(&p, LimitsConfig::default()).expect("log");
    let now = now_ms();
    assert_eq!(st.last_seq(&window("n1", 1, now).origin.unwrap()), 4);
    assert!(new(st.accept(&window("n1", 5, now))));
    let _ = std::fs::remove_file(&p);
}

/// Over gRPC: the spoofing stream gets OUT_OF_RANGE; a flood split over 8
/// streams of one host shares that host's rate limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_status_and_per_host_rate_limit_over_many_streams() {
    let _turn = tests::one_file_at_a_time(file!());
    let state = IngestState::new(LimitsConfig::default());
    let chan = serve_ingest(&state, 20).await;
    let now = now_ms();
    let mut c = IngestClient::new(chan.clone());
    c.stream(tokio_stream::iter(vec![window("real", 1, now)]))
        .await
        .expect("real window");
    let err = c
        .stream(tokio_stream::iter(vec![window("real", u64::MAX, now)]))
        .await
        .expect_err("spoof");
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");
    let err = c
        .stream(tokio_stream::iter(vec![window("real", 2, now + 3_600_000)]))
        .await
        .expect_err("future");
    assert_eq!(err.code(), tonic::Code::OutOfRange, "{err}");

    // 8 streams × 100 windows of one host, each stream its own instance.
    let mut calls = Vec::new();
    for k in 0..8 {
        let mut c = IngestClient::new(chan.clone());
        let ws: Vec<Window> = (1..=100)
            .map(|s| {
                let mut w = window("loud", s, now);
                if let Some(o) = w.origin.as_mut() {
                    o.instance = format!("loud-{k}");
                }
                w
            })
            .collect();
        calls.push(tokio::spawn(async move {
            c.stream(tokio_stream::iter(ws)).await
        }));
    }
    for call in calls {
        let r = call.await.expect("join");
        assert_eq!(
            r.expect_err("each stream hits the host's limit").code(),
            tonic::Code::ResourceExhausted
        );
    }
    let (accepted, _, _) = state.counters();
    // 1 real window + the host's one-second burst of 20 (+ refill while the
    // streams ran), not 8 × 20.
    assert!(
        (21..=40).contains(&accepted),
        "accepted {accepted} windows of a host limited to 20/s"
    );
    assert_eq!(state.rejected().get("rate"), Some(&8));
    assert_eq!(
        state.rejected().get("seq_jump").copied().unwrap_or(0)
            + state.rejected().get("clock_future").copied().unwrap_or(0),
        2
    );
}
