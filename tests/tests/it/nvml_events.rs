//! The XID listener on a partly failing NVML (stand-in library): one GPU
//! whose event registration fails must not silence the others (it stopped
//! every XID before), and an event is placed on its GPU by the device's
//! index even when UUIDs are unknown (it got index u32::MAX or another
//! GPU's before).
use std::{sync::mpsc, time::Duration};

use collector::nvml::{self, GpuEventKind};

const SCENARIO: &str = "\
# t gpu key=value...
0 gpu=0 regfail=1
0 gpu=1 nouuid=1
0 gpu=2 nouuid=1
0.1 gpu=1 xid=48
0.1 gpu=0 xid=13
";

#[test]
fn a_gpu_failing_registration_leaves_the_others_and_events_find_their_gpu() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::nvml_scenario("nvml-ev", SCENARIO, 3);

    let (tx, rx) = mpsc::channel();
    let listener = nvml::spawn_event_listener(Some(tests::fake_nvml()), tx).expect("event thread");
    let xid = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("GPU 1's XID arrives although GPU 0's registration failed");
    assert_eq!(xid.index, Some(1), "{xid:?}");
    assert_eq!(
        xid.kind,
        GpuEventKind::Xid {
            code: 48,
            meaning: nvml::xid_meaning(48)
        }
    );
    // GPU 0 is not registered: its XID never comes.
    assert!(rx.recv_timeout(Duration::from_millis(1500)).is_err());
    drop(listener);
    let _ = std::fs::remove_dir_all(&dir);
}
