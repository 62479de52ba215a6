//! faultline's dcgm-exporter compatibility judged with dcgm-exporter's own
//! files (`tests/data/dcgm-exporter`): every series of its default counters
//! CSV that NVML can supply exists on the NVML stand-in with its name, type,
//! labels and unit, and every panel of its Grafana dashboard selects data.
//! GPU 0 of the stand-in has GPM (Hopper and later) and NVLink; GPU 1 has
//! neither, and the series NVML cannot give for it are absent.
use std::{collections::BTreeMap, time::Duration};

use collector::nvml::{self, NvmlSource};
use tests::dcgm_exporter::{self as de, Sample};

const SCENARIO: &str = "\
# t gpu key=value...
0 gpu=0 gpm=1 gr_active=87 tensor_active=42 dram_active=63 pcie_tx_mibs=1024 pcie_rx_mibs=3
0 gpu=0 nvlinks=4 nvl_replay=5 nvl_recovery=1 nvl_crc_flit=2 nvl_crc_data=3 nvl_tx_kibps=1000000 nvl_rx_kibps=1000000
0 gpu=0 mem_used=21474836480 mem_reserved=536870912 temp=64 sm_clock=1755 power_mw=312500 remap_cor=2 enc_util=7
0 gpu=1 temp=58 mem_used=1073741824 mem_reserved=268435456
";

const HOST: &str = "n17";
/// The scrape target's labels Prometheus adds.
const TARGET: &[(&str, &str)] = &[("instance", "n17:9477"), ("job", "faultline-collector")];

#[test]
fn default_counters_and_dashboard_panels_against_the_nvml_stand_in() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::nvml_scenario("dcgm-files", SCENARIO, 2);
    let gpm_log = dir.join("gpm.log");
    std::env::set_var("FAKE_NVML_GPM_LOG", &gpm_log);

    let mut src = NvmlSource::open(Some(&tests::fake_nvml())).expect("the stand-in");
    // Two windows: GPM metrics and the NVLink bandwidth compare two readings.
    let (first, _) = src.sample();
    assert_eq!(first[0].prof, None, "no GPM metrics before a second sample");
    assert_eq!(first[0].nvlink_bandwidth, Some(0), "DCGM's first reading");
    std::thread::sleep(Duration::from_millis(200));
    let (samples, _) = src.sample();
    assert!(
        src.unsupported().contains(&(1, "gpm")),
        "GPU 1 has no GPM: {:?}",
        src.unsupported()
    );
    let gpus = src.gpus().to_vec();
    let ex = nvml::Export {
        hostname: HOST,
        driver_version: src.driver_version(),
        dcgm_compat: true,
        ..nvml::Export::default()
    };
    let text = nvml::render_with(&gpus, &samples, &BTreeMap::new(), &ex);
    let all = de::samples(&text);
    let of = |name: &str, gpu: &str| -> Vec<&Sample> {
        all.iter()
            .filter(|s| s.name == name && s.label("gpu") == Some(gpu))
            .collect()
    };

    // The CSV: name, type, labels, unit.
    let counters = de::default_counters();
    assert!(counters.len() >= 25, "{} enabled fields", counters.len());
    let mut checked = 0;
    let gpu_only_with = |n: &str| n.starts_with("DCGM_FI_PROF_") || n.contains("NVLINK");
    for c in &counters {
        if c.kind == "label" {
            // A label on every series instead of a series.
            for s in all.iter().filter(|s| s.name.starts_with("DCGM_FI_")) {
                assert_eq!(s.label(&c.name), Some("550.54.15"), "{} on {s:?}", c.name);
            }
            continue;
        }
        if de::NOT_FROM_NVML.iter().any(|(n, _)| *n == c.name) {
            assert!(of(&c.name, "0").is_empty(), "{} is not NVML's", c.name);
            continue;
        }
        assert!(
            text.contains(&format!("\n# TYPE {} {}\n", c.name, c.kind)),
            "{} is not a {} in:\n{text}",
            c.name,
            c.kind
        );
        if let Some(unit) = c.unit() {
            let help = text
                .lines()
                .find(|l| l.starts_with(&format!("# HELP {} ", c.name)))
                .unwrap_or_default();
            assert!(
                help.contains(&format!("(in {unit}")),
                "{} unit {unit}: {help}",
                c.name
            );
        }
        for gpu in ["0", "1"] {
            let got = of(&c.name, gpu);
            let expected = usize::from(gpu == "0" || !gpu_only_with(&c.name));
            assert_eq!(got.len(), expected, "{} on GPU {gpu}: {got:?}", c.name);
            for s in got {
                let keys: Vec<&str> = s.labels.iter().map(|(k, _)| k.as_str()).collect();
                assert_eq!(&keys[..de::DEVICE_LABELS.len()], de::DEVICE_LABELS, "{s:?}");
                assert_eq!(s.label("Hostname"), Some(HOST));
                assert_eq!(s.label("device"), Some(format!("nvidia{gpu}").as_str()));
                assert_eq!(s.label("modelName"), Some("Fake H100 80GB HBM3"));
            }
        }
        checked += 1;
    }
    assert_eq!(
        checked,
        counters.len() - 2,
        "all but the label and the vGPU license"
    );

    // Values in dcgm-exporter's units.
    let v = |name: &str, gpu: &str| {
        of(name, gpu)
            .first()
            .unwrap_or_else(|| panic!("no {name} for GPU {gpu}:\n{text}"))
            .value
    };
    assert_eq!(
        v("DCGM_FI_DEV_FB_USED", "0"),
        20480.0,
        "MiB, reserved excluded"
    );
    assert_eq!(v("DCGM_FI_DEV_FB_RESERVED", "0"), 512.0);
    assert_eq!(v("DCGM_FI_DEV_FB_FREE", "0"), 81920.0 - 20480.0 - 512.0);
    assert_eq!(v("DCGM_FI_DEV_FB_RESERVED", "1"), 256.0);
    assert_eq!(v("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0"), 0.87, "a ratio");
    assert_eq!(v("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "0"), 0.42);
    assert_eq!(v("DCGM_FI_PROF_DRAM_ACTIVE", "0"), 0.63);
    assert_eq!(
        v("DCGM_FI_PROF_PCIE_TX_BYTES", "0"),
        1024.0 * 1048576.0,
        "bytes/s"
    );
    assert_eq!(v("DCGM_FI_PROF_PCIE_RX_BYTES", "0"), 3.0 * 1048576.0);
    // 4 links × (1 000 000 + 1 000 000) KiB/s, ÷ 1000 as DCGM reports it;
    // the last KiB may fall either side of the truncation.
    let bw = v("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "0");
    assert!((7999.0..=8000.0).contains(&bw), "{bw}");
    // Links 0..3 count 1×..4× the scenario's errors: × 10 in total.
    for (name, total) in [
        ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 50.0),
        ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 10.0),
        ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 20.0),
        ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 30.0),
    ] {
        assert_eq!(v(name, "0"), total, "{name}");
        assert!(of(name, "1").is_empty(), "{name}: GPU 1 has no NVLink");
    }
    assert_eq!(v("DCGM_FI_DEV_POWER_USAGE", "0"), 312.5, "W");
    assert_eq!(v("DCGM_FI_DEV_SM_CLOCK", "0"), 1755.0, "MHz");

    // The dashboard: every panel selects data, with its variables at "All".
    let (panels, vars) = de::dashboard();
    assert_eq!(panels.len(), 8, "{panels:?}");
    let mut empty = Vec::new();
    for p in &panels {
        assert!(!p.exprs.is_empty(), "{}", p.title);
        for e in &p.exprs {
            let sels = de::selectors(&de::all_values(e));
            assert!(!sels.is_empty(), "{e}");
            if !sels
                .iter()
                .all(|sel| all.iter().any(|s| sel.selects(s, TARGET)))
            {
                empty.push(format!("{}: {e}", p.title));
            }
        }
    }
    assert!(empty.is_empty(), "panels without data: {empty:#?}");
    // The Tensor Core panel's data is GPU 0's alone (GPU 1 has no GPM).
    let tensor = panels
        .iter()
        .find(|p| p.title == "Tensor Core Utilization")
        .expect("tensor panel");
    let sel = &de::selectors(&de::all_values(&tensor.exprs[0]))[0];
    let gpus: Vec<_> = all
        .iter()
        .filter(|s| sel.selects(s, TARGET))
        .filter_map(|s| s.label("gpu"))
        .collect();
    assert_eq!(gpus, ["0"]);
    assert_eq!(vars.len(), 2, "{vars:?}");
    for (name, q) in &vars {
        let (metric, label) = de::label_values(q).expect("label_values");
        let values: Vec<_> = all
            .iter()
            .filter(|s| s.name == metric)
            .filter_map(|s| {
                s.label(&label)
                    .or_else(|| TARGET.iter().find(|(k, _)| *k == label).map(|(_, v)| *v))
            })
            .collect();
        assert!(!values.is_empty(), "variable {name}: {q}");
    }

    // The GPM samples kept between windows go back to NVML: none live
    // once the sampler is gone (the stand-in logs at every free and at
    // nvmlShutdown).
    drop(src);
    let log = std::fs::read_to_string(&gpm_log).expect("GPM log");
    assert_eq!(log.lines().last(), Some("live=0"), "{log}");
    std::fs::remove_dir_all(&dir).unwrap();
}
