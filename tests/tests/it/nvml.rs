//! NVML enrichment through the real nvml-wrapper code path, loading the
//! stand-in libnvidia-ml.so.1 through the library-path option, driven by a
//! scenario: a thermal throttle, an XID, a GPU falling off the bus, ECC
//! errors, and an unsupported field.
use std::{
    sync::mpsc,
    time::{Duration, Instant, SystemTime},
};

use collector::nvml::{self, GpuEventKind, NvmlSource};

const SCENARIO: &str = "\
# t gpu key=value...
0 gpu=1 temp=60 sm_clock=1980 power_mw=300000 mem_temp=71
0.3 gpu=1 temp=93 sm_clock=1200 throttle=0x40 power_mw=350000
0.2 gpu=2 xid=79
0.4 gpu=3 lost=1
0.5 gpu=0 ecc_dbe=2 ecc_sbe=17
";

#[test]
fn scripted_throttle_xid_loss_and_ecc_appear_with_the_right_gpu_and_time() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::nvml_scenario("nvml", SCENARIO, 4);

    let lib = tests::fake_nvml();
    let t0 = SystemTime::now();
    let start = Instant::now();
    let mut src = NvmlSource::open(Some(&lib)).expect("open the stand-in through nvml-wrapper");
    let gpus = src.gpus().to_vec();
    assert_eq!(gpus.len(), 4);
    assert_eq!(gpus[1].uuid, "GPU-fa0171e0-0000-4000-8000-000000000001");
    assert_eq!(gpus[1].pci_bus_id, "00000000:19:00.0");
    assert_eq!(gpus[1].minor, Some(1));
    assert_eq!(gpus[1].name, "Fake H100 80GB HBM3");

    let (tx, rx) = mpsc::channel();
    let listener = nvml::spawn_event_listener(Some(lib.clone()), tx).expect("event thread");

    let (first, ev) = src.sample();
    assert!(ev.is_empty());
    let g1 = &first[1];
    assert_eq!(
        (g1.temp_c, g1.sm_clock_mhz, g1.sm_clock_max_mhz, g1.throttle),
        (Some(60), Some(1980), Some(1980), Some(0))
    );
    assert_eq!(g1.power_w, Some(300.0));
    assert_eq!(g1.power_limit_w, Some(700.0));
    assert_eq!(g1.mem_total_bytes, Some(85_899_345_920));
    assert!(g1.nvlink.is_empty() && g1.nvlink_bandwidth.is_none());
    assert_eq!(g1.prof, None, "no GPM on these GPUs");
    assert_eq!(
        (g1.mem_used_bytes, g1.mem_reserved_bytes, g1.mem_free_bytes),
        (
            Some(1 << 30),
            Some(512 << 20),
            Some(85_899_345_920 - (1 << 30) - (512 << 20))
        ),
        "NVML v2 memory: used without the reserved part"
    );
    assert_eq!(
        g1.memory_temp_c,
        Some(71),
        "HBM temperature through NVML field values"
    );
    assert_eq!(first[0].memory_temp_c, Some(50));
    let unsupported = src.unsupported().clone();
    assert_eq!(
        unsupported
            .iter()
            .filter(|(_, f)| *f == "nvlink_errors")
            .count(),
        4,
        "NVLink recorded unsupported once per GPU: {unsupported:?}"
    );
    assert_eq!(
        unsupported.iter().filter(|(_, f)| *f == "gpm").count(),
        4,
        "no GPM: recorded once per GPU, its DCGM_FI_PROF_* series absent: {unsupported:?}"
    );

    // Sample like the collector does until the scenario has played out.
    let mut throttle_seen = None;
    let mut lost_events = Vec::new();
    let mut last = first;
    while start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        let (s, ev) = src.sample();
        lost_events.extend(ev);
        if throttle_seen.is_none() && s[1].throttle.is_some_and(|m| m & 0x40 != 0) {
            throttle_seen = Some((start.elapsed(), s[1].clone()));
        }
        last = s;
        if start.elapsed() > Duration::from_millis(700) && throttle_seen.is_some() {
            break;
        }
    }
    let (when, g1) = throttle_seen.expect("thermal throttle observed");
    assert!(
        when >= Duration::from_millis(300),
        "throttle seen at {when:?}, scripted at 0.3 s"
    );
    assert_eq!(
        nvml::throttle_names(g1.throttle.unwrap()),
        ["hw_thermal_slowdown"]
    );
    assert_eq!(
        (g1.temp_c, g1.sm_clock_mhz, g1.power_w),
        (Some(93), Some(1200), Some(350.0))
    );
    assert_eq!(
        src.unsupported(),
        &unsupported,
        "no new unsupported fields, no repeats"
    );

    // GPU 3 fell off the bus: exactly one event, then lost samples, no crash.
    assert_eq!(lost_events.len(), 1, "{lost_events:?}");
    assert_eq!(lost_events[0].index, Some(3));
    assert_eq!(lost_events[0].kind, GpuEventKind::Lost);
    assert!(last[3].lost && last[3].temp_c.is_none());
    assert!(!last[1].lost);
    assert_eq!(
        (last[0].ecc_dbe_volatile, last[0].ecc_sbe_volatile),
        (Some(2), Some(17))
    );

    // The XID arrives through the event API with the right GPU and time.
    let xid = rx.recv_timeout(Duration::from_secs(5)).expect("XID event");
    assert_eq!(xid.index, Some(2));
    assert_eq!(xid.uuid, "GPU-fa0171e0-0000-4000-8000-000000000002");
    assert_eq!(
        xid.kind,
        GpuEventKind::Xid {
            code: 79,
            meaning: "GPU has fallen off the bus"
        }
    );
    let after = xid.at.duration_since(t0).unwrap();
    assert!(
        after >= Duration::from_millis(200) && after < Duration::from_secs(5),
        "{after:?}"
    );
    drop(listener);

    let xids = std::collections::BTreeMap::from([((2u32, 79u64), 1u64)]);
    let text = nvml::render_prometheus(&gpus, &last, &xids);
    for line in [
        "faultline_gpu_throttle_reason{gpu=\"1\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000001\",pci_bus_id=\"00000000:19:00.0\",reason=\"hw_thermal_slowdown\"} 1",
        "faultline_gpu_temperature_celsius{gpu=\"1\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000001\",pci_bus_id=\"00000000:19:00.0\"} 93",
        "faultline_gpu_memory_temperature_celsius{gpu=\"1\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000001\",pci_bus_id=\"00000000:19:00.0\"} 71",
        "faultline_gpu_xid_errors_total{gpu=\"2\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000002\",pci_bus_id=\"00000000:1A:00.0\",xid=\"79\"} 1",
        "faultline_gpu_lost{gpu=\"3\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000003\",pci_bus_id=\"00000000:1B:00.0\"} 1",
        "faultline_gpu_ecc_dbe_volatile_total{gpu=\"0\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000000\",pci_bus_id=\"00000000:18:00.0\"} 2",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
