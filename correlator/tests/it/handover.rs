//! A standby's engine given the previous holder's baselines
//! (`Engine::baselines` → JSON, as kept in NATS → `restore_baselines`)
//! judges a device against what it learnt before the takeover: a stall
//! that starts right after the takeover is an incident. A standby without
//! them learns the stalled latency as the device's normal and raises
//! nothing.
use correlator::engine::{handover::HostBaselines, Engine};
use proto::v1::{BlockStat, CandidateUpdate, Origin, Window};

/// Host h1's window `seq` (1 s) with its NVMe at `lat_us` per request.
fn window(seq: u64, lat_us: u64) -> Window {
    let lat = lat_us * 1000;
    Window {
        origin: Some(Origin {
            hostname: "h1".into(),
            boot_id: "b".into(),
            instance: "h1-1".into(),
            ..Origin::default()
        }),
        seq,
        start_unix_ms: 1_700_000_000_000 + (seq as i64 - 1) * 1000,
        end_unix_ms: 1_700_000_000_000 + seq as i64 * 1000,
        block: vec![BlockStat {
            device: "nvme0n1".into(),
            op: "write".into(),
            requests: 400,
            bytes: 400 << 20,
            latency_sum_ns: 400 * lat,
            latency_max_ns: 2 * lat,
            device_class: "nvme".into(),
            ..BlockStat::default()
        }],
        ..Window::default()
    }
}

/// The storage incidents `e` raises over windows 41–60 of a 40 ms stall.
fn stalled(e: &mut Engine) -> Vec<CandidateUpdate> {
    (41..=60)
        .flat_map(|s| e.ingest(&window(s, 40_000)))
        .filter(|u| u.kind == "storage_latency" && u.state == "opened")
        .collect()
}

#[test]
fn baselines_taken_over_judge_a_stall_that_starts_at_takeover() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut active = Engine::default();
    for s in 1..=40 {
        assert!(active.ingest(&window(s, 80)).is_empty());
    }
    let kept: Vec<HostBaselines> = active.baselines();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].host, "h1");
    // Without a latency histogram the device is judged on its mean: p50.
    let signals: Vec<(&str, &str)> = kept[0]
        .own
        .iter()
        .map(|o| (o.0.as_str(), o.1.as_str()))
        .collect();
    assert_eq!(signals, [("h1/nvme0n1", "p50")]);
    let json = serde_json::to_vec(&kept).expect("json");
    let back: Vec<HostBaselines> = serde_json::from_slice(&json).expect("parse");
    assert_eq!(back, kept);

    let mut standby = Engine::default();
    standby.restore_baselines(back);
    let found = stalled(&mut standby);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].entity, "h1/nvme0n1");
    // Opened within the storage detector's persistence (2 windows) of the
    // stall, the first window of the host being the one that hands over.
    assert!(
        found[0].ts_unix_ms <= 1_700_000_000_000 + 43_000,
        "{found:?}"
    );

    let mut fresh = Engine::default();
    assert!(stalled(&mut fresh).is_empty());
}
