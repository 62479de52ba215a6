//! What an authenticated host can do with the content of its own windows:
//! it raises incidents only on its own entities, and however many findings
//! it produces it fills only its own share of the open-incident cap, so
//! other hosts' real incidents still open.
use crate::common;

use correlator::engine::{config::LimitsConfig, gpu::GpuConfig, DetectConfig, Engine};
use proto::v1::{CandidateUpdate, Event, GpuSample, Window};

const T0: i64 = 1_800_000_000_000;

fn xid(entity: &str) -> Event {
    Event {
        unix_ms: T0,
        kind: "gpu_xid".into(),
        entity: entity.into(),
        detail: "GPU-x".into(),
        code: 79,
        ..Default::default()
    }
}

fn opened(ups: &[CandidateUpdate]) -> Vec<(&str, &str)> {
    ups.iter()
        .filter(|u| u.state == "opened")
        .map(|u| (u.kind.as_str(), u.entity.as_str()))
        .collect()
}

/// `evil` sends XIDs naming `victim`'s GPU, the bare host `victim`, and a
/// host whose name starts with its own (`evil2`): none is raised, each is
/// counted as `foreign`; its XID on its own GPU is raised as before.
#[test]
fn a_host_cannot_raise_an_incident_on_another_hosts_entity() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    e.ingest(&common::window("victim", 1, T0));
    let mut w = common::window("evil", 1, T0);
    w.events = vec![
        xid("victim/gpu3"),
        xid("victim"),
        xid("evil2/gpu0"),
        xid("evil/gpu1"),
    ];
    let ups = e.ingest(&w);
    assert_eq!(opened(&ups), [("gpu_xid", "evil/gpu1")]);
    assert_eq!(e.dropped().get("foreign"), Some(&3), "{:?}", e.dropped());
    assert!(e.open().iter().all(|u| !u.entity.starts_with("victim")));
}

/// One host flooding lost GPUs (1,000 new GPUs a window for 12 windows:
/// 12,000 findings, past the whole cap of 10,000) keeps only its share of
/// 256 open incidents; another host's real XID and a third host's lost node
/// still open. Before the share, the flood filled the cap and both were
/// dropped. (A flood of XIDs no longer gets this far: XID state is bounded
/// at 64 GPUs per host, `engine::gpu::xid`.)
#[test]
fn a_flood_of_findings_from_one_host_fills_only_its_own_share() {
    let _turn = tests::one_file_at_a_time(file!());
    let cfg = DetectConfig {
        limits: LimitsConfig {
            // Above the flood's 1,000 a window: the per-window cap is not
            // what stops it.
            max_events_per_window: 4096,
            max_entities_per_window: 4096,
            max_entities_per_host: 16_384,
            ..LimitsConfig::default()
        },
        // The real XID's episode ends within the test's 40 s.
        gpu: GpuConfig {
            xid_hold_s: 5.0,
            ..GpuConfig::default()
        },
        ..DetectConfig::default()
    };
    assert_eq!(cfg.limits.max_open_incidents, 10_000);
    assert_eq!(cfg.limits.max_open_incidents_per_host, 256);
    let mut e = Engine::new(&cfg, Default::default());
    let mut ups = Vec::new();
    // Three hosts report; "gone" then falls silent.
    for h in ["real", "gone"] {
        ups.extend(e.ingest(&common::window(h, 1, T0)));
    }
    for s in 1..=12u64 {
        let mut w = common::window("evil", s, T0 + s as i64 * 1000);
        w.gpus = (0..1000u32)
            .map(|g| GpuSample {
                index: s as u32 * 1000 + g,
                lost: true,
                ..GpuSample::default()
            })
            .collect();
        ups.extend(e.ingest(&w));
    }
    let flood = opened(&ups)
        .iter()
        .filter(|(_, e)| e.starts_with("evil/"))
        .count();
    assert_eq!(flood, 256);
    assert_eq!(e.incidents.open_of("evil"), 256);
    assert_eq!(
        e.dropped().get("host_incidents"),
        Some(&(12_000 - 256)),
        "{:?}",
        e.dropped()
    );
    // The real host's XID opens, and so does the silent host's node_lost
    // (charged to the lost host, not to "real", whose window noticed it).
    for s in 2..=40u64 {
        let mut w = common::window("real", s, T0 + 12_000 + s as i64 * 1000);
        if s == 2 {
            w.events = vec![xid("real/gpu0")];
        }
        ups.extend(e.ingest(&w));
    }
    let got: Vec<_> = opened(&ups)
        .into_iter()
        .filter(|(_, e)| !e.starts_with("evil/"))
        .collect();
    assert!(got.contains(&("gpu_xid", "real/gpu0")), "{got:?}");
    assert!(got.contains(&("node_lost", "gone")), "{got:?}");
    // The XID resolved in the quiet windows since; the node_lost that
    // "real"'s window raised is "gone"'s.
    assert_eq!(e.incidents.open_of("real"), 0);
    assert_eq!(e.incidents.open_of("gone"), 1);
}

/// Rows past every per-window cap are dropped and counted by kind; a
/// window's events beyond `max_events_per_window` are not judged.
#[test]
fn events_have_a_per_window_cap() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::new(&DetectConfig::default(), Default::default());
    let mut w: Window = common::window("n1", 1, T0);
    w.events = (0..3000).map(|g| xid(&format!("n1/gpu{g}"))).collect();
    e.ingest(&w);
    assert_eq!(e.dropped().get("events"), Some(&(3000 - 1024)));
    assert!(e.incidents.open_of("n1") <= 256);
}
