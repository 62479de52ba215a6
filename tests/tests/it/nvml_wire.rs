//! NVLink error counters and row remapping read through the real
//! nvml-wrapper code path from the stand-in libnvidia-ml.so.1 and turned
//! into the wire's GPU rows (`collector::nvml::wire::gpus`), as the collector
//! sends them to the correlator.
use collector::nvml::NvmlSource;

/// Every value from nvmlInit on: GPU 0 has 4 NVLink links (link L counts
/// (L + 1) × the per-link values) and a pending row remap; GPU 1's remap
/// failed; GPU 2 has no row remapper (before Ampere); GPU 3 is clean.
const SCENARIO: &str = "\
0 gpu=0 nvlinks=4 nvl_replay=3 nvl_recovery=1 nvl_crc_flit=2 nvl_crc_data=1 remap_cor=2 remap_unc=1 remap_pending=1
0 gpu=1 remap_unc=5 remap_cor=7 remap_fail=1
0 gpu=2 noremap=1
";

#[test]
fn nvlink_counters_and_remapped_rows_reach_the_wire_rows() {
    let _turn = tests::one_file_at_a_time(file!());
    let dir = tests::nvml_scenario("nvml-wire", SCENARIO, 4);

    let lib = tests::fake_nvml();
    let mut src = NvmlSource::open(Some(&lib)).expect("open the stand-in through nvml-wrapper");
    let (samples, events) = src.sample();
    assert!(events.is_empty());
    let rows = collector::nvml::wire::gpus(src.gpus(), &samples);
    assert_eq!(rows.len(), 4);

    let links: Vec<[Option<u64>; 5]> = rows[0]
        .nvlink
        .iter()
        .map(|l| {
            [
                Some(u64::from(l.link)),
                l.replay,
                l.recovery,
                l.crc_flit,
                l.crc_data,
            ]
        })
        .collect();
    // Link L: (L + 1) × replay 3, recovery 1, crc_flit 2, crc_data 1.
    let want: Vec<[Option<u64>; 5]> = (0..4u64)
        .map(|l| {
            [
                Some(l),
                Some(3 * (l + 1)),
                Some(l + 1),
                Some(2 * (l + 1)),
                Some(l + 1),
            ]
        })
        .collect();
    assert_eq!(links, want);
    assert!(rows[1].nvlink.is_empty(), "no NVLink on GPU 1");

    let remap = |i: usize| {
        let r = &rows[i];
        (
            r.remapped_rows_corr,
            r.remapped_rows_unc,
            r.remap_pending,
            r.remap_failure,
        )
    };
    assert_eq!(remap(0), (Some(2), Some(1), Some(true), Some(false)));
    assert_eq!(remap(1), (Some(7), Some(5), Some(false), Some(true)));
    assert_eq!(
        remap(2),
        (None, None, None, None),
        "unsupported: unset, not 0"
    );
    assert_eq!(remap(3), (Some(0), Some(0), Some(false), Some(false)));
    assert!(src.unsupported().contains(&(2, "remapped_rows")));

    // The same reading in the collector's Prometheus text.
    let text = collector::nvml::render_prometheus(src.gpus(), &samples, &Default::default());
    for line in [
        "faultline_gpu_row_remap_pending{gpu=\"0\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000000\",pci_bus_id=\"00000000:18:00.0\"} 1",
        "faultline_gpu_row_remap_failure{gpu=\"1\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000001\",pci_bus_id=\"00000000:19:00.0\"} 1",
        "faultline_gpu_remapped_rows_uncorrectable_total{gpu=\"1\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000001\",pci_bus_id=\"00000000:19:00.0\"} 5",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
