//! The cluster label: a collector's `cluster` (in its windows' origin), or
//! else the correlator's, is on every incident the engine raises from the
//! host's windows; the history stores it, filters by it and gives it back
//! to the incidents it restores after a restart.
use std::path::{Path, PathBuf};

use correlator::{
    engine::Engine,
    history::{self, HistoryConfig, IncidentFilter, Store},
};
use proto::v1::{GpuSample, Origin, Window};

fn dir(tag: &str) -> PathBuf {
    tests::fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("cluster_label_{tag}_{}", std::process::id())),
    )
}

/// A window of `host` (labelled `cluster`) whose GPU 0 fell off the bus:
/// an incident at once.
fn lost_gpu(host: &str, cluster: &str, end_ms: i64) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            boot_id: "b".into(),
            instance: format!("{host}-1"),
            cluster: cluster.into(),
            ..Origin::default()
        }),
        seq: 1,
        start_unix_ms: end_ms - 1000,
        end_unix_ms: end_ms,
        gpus: vec![GpuSample {
            index: 0,
            uuid: format!("GPU-{host}"),
            lost: true,
            ..Default::default()
        }],
        ..Window::default()
    }
}

#[test]
fn incidents_carry_their_hosts_cluster_into_history_and_back() {
    let _turn = tests::one_file_at_a_time(file!());
    let mut e = Engine::default();
    e.set_cluster("lab");
    let t = 1_700_000_000_000;
    let mut ups = e.ingest(&lost_gpu("n001", "", t));
    ups.extend(e.ingest(&lost_gpu("n001", "east", t + 1000)));
    ups.extend(e.ingest(&lost_gpu("m001", "west", t)));
    let label = |entity: &str| {
        ups.iter()
            .find(|u| u.state == "opened" && u.entity.starts_with(entity))
            .map(|u| u.cluster.clone())
    };
    // Unnamed by its collector: the correlator's; named: the collector's.
    assert_eq!(label("n001/"), Some("lab".to_string()));
    assert_eq!(label("m001/"), Some("west".to_string()));

    let d = dir("history");
    let db = d.join("h.db");
    let mut st = Store::open(&db, &HistoryConfig::default()).expect("history");
    st.write(&ups, &[]).expect("write");
    let west = st
        .incidents(&IncidentFilter {
            cluster: "west".into(),
            ..IncidentFilter::default()
        })
        .expect("query");
    assert_eq!(west.len(), 1);
    assert!(west[0].entity.starts_with("m001/"), "{west:?}");
    drop(st);

    // A restart: the open incidents come back with their labels, and the
    // updates they go on to make carry them.
    let mut again = Engine::default();
    let o = history::open(&db, &HistoryConfig::default(), &mut again).expect("reopen");
    assert_eq!(o.restored, 2);
    let mut open: Vec<(String, String)> = again
        .open()
        .into_iter()
        .map(|u| (u.entity, u.cluster))
        .collect();
    open.sort();
    assert_eq!(
        open,
        vec![
            ("m001/gpu0".to_string(), "west".to_string()),
            ("n001/gpu0".to_string(), "lab".to_string())
        ]
    );
}
