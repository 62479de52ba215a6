//! The GPU detectors' scenario tests: ECC and row remapping,
//! thermal throttles shared by a host, NVLink errors against the fleet.
use super::*;
use proto::v1::{GpuSample, NvLinkCounters, Origin};

/// A window of `host` ending at `end_ms` (10 s long) with these GPUs.
fn window(host: &str, end_ms: i64, gpus: Vec<GpuSample>) -> Window {
    Window {
        origin: Some(Origin {
            hostname: host.into(),
            ..Origin::default()
        }),
        start_unix_ms: end_ms - 10_000,
        end_unix_ms: end_ms,
        gpus,
        ..Window::default()
    }
}

/// A healthy GPU: full clock, no throttle.
fn gpu(index: u32) -> GpuSample {
    GpuSample {
        index,
        uuid: format!("GPU-{index}"),
        temp_c: Some(60),
        sm_clock_mhz: Some(1980),
        sm_clock_max_mhz: Some(1980),
        throttle_reasons: Some(0),
        ..GpuSample::default()
    }
}

/// 18 links whose flit CRC errors (each one replayed) are `errors[link]`.
fn links(errors: &[u64; 18]) -> Vec<NvLinkCounters> {
    errors
        .iter()
        .enumerate()
        .map(|(l, &e)| NvLinkCounters {
            link: l as u32,
            replay: Some(e),
            recovery: Some(0),
            crc_flit: Some(e),
            crc_data: Some(0),
        })
        .collect()
}

/// A fleet of 8 hosts × 8 GPUs × 18 links, 10 s windows, where every
/// window 3 links somewhere count one error each (deterministic LCG);
/// `bad` adds `per_window` errors to one (host, gpu, link). Returns every
/// finding with the window it came in.
fn nvlink_fleet(
    windows: i64,
    bad: Option<(usize, u32, usize, u64)>,
    reset_at: Option<i64>,
) -> Vec<(i64, Finding)> {
    let mut d = GpuDetector::default();
    let mut counts = vec![[[0u64; 18]; 8]; 8];
    let mut x: u64 = 12345;
    let mut out = Vec::new();
    for k in 1..=windows {
        for _ in 0..3 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) as usize;
            counts[r % 8][(r / 8) % 8][(r / 64) % 18] += 1;
        }
        if let Some((h, g, l, n)) = bad {
            counts[h][g as usize][l] += n;
        }
        if reset_at == Some(k) {
            if let Some((h, g, _, _)) = bad {
                counts[h][g as usize] = [0; 18];
            }
        }
        for (h, host) in counts.iter().enumerate() {
            let name = format!("h{h}");
            let gpus = (0..8)
                .map(|g| GpuSample {
                    nvlink: links(&host[g]),
                    ..gpu(g as u32)
                })
                .collect();
            for f in d.observe(&name, &window(&name, k * 10_000, gpus), &[]) {
                out.push((k, f));
            }
        }
    }
    out
}

#[test]
fn one_bad_nvlink_in_a_fleet_with_sporadic_single_errors_is_flagged_alone() {
    // 2 errors a second on h3/gpu2 link 5 (20 per 10 s window) from the start.
    let got = nvlink_fleet(30, Some((3, 2, 5, 20)), None);
    assert!(!got.is_empty(), "the bad link was not flagged");
    assert!(
        got.iter()
            .all(|(_, f)| f.kind.as_str() == "gpu_nvlink_errors" && f.entity == "h3/gpu2"),
        "{got:#?}"
    );
    // Flagged in the first judged window (window 2: window 1 is the
    // counters' first reading): 20 errors in 10 s where the floor expects
    // 10/3600 = 0.0028.
    let (k, f) = &got[0];
    assert_eq!(*k, 2);
    assert_eq!(f.marks, vec!["nvlink:5".to_string()]);
    assert!(
        f.evidence[1].starts_with("NVLink 5: replay 20 errors in 10 s = 2.00e0 per s"),
        "{:?}",
        f.evidence
    );
    assert!(
        f.evidence.iter().any(|e| e.starts_with(
            "reference 2.8e-4 errors per link-second (floor; fleet median 0.0e0 over 1152 links)"
        )),
        "{:?}",
        f.evidence
    );
    assert!(
        f.runbook.contains("`nvidia-smi nvlink -e -i 2`"),
        "{}",
        f.runbook
    );
    assert!(f.runbook.contains("WORKFLOW_NVLINK_ERR"), "{}", f.runbook);
    // Every window from then on.
    assert_eq!(got.len(), 29);
}

#[test]
fn a_healthy_fleet_with_sporadic_single_errors_raises_nothing() {
    // 3 single errors a window over 1152 links for 60 windows (10 min):
    // 180 errors, none of them a pattern.
    assert_eq!(nvlink_fleet(60, None, None), Vec::new());
}

#[test]
fn an_nvlink_counter_reset_is_an_unknown_window_never_a_negative_count() {
    let got = nvlink_fleet(6, Some((3, 2, 5, 20)), Some(4));
    let at4: Vec<&Finding> = got
        .iter()
        .filter(|(k, _)| *k == 4)
        .map(|(_, f)| f)
        .collect();
    assert_eq!(at4.len(), 1, "{got:#?}");
    assert!(
        at4[0].evidence.iter().any(|e| e
            == "NVLink 5: replay, crc_flit went down this window (driver reload or GPU reset): that window is unknown, not counted"),
        "{:?}",
        at4[0].evidence
    );
    // The horizon keeps windows 2 and 3 (40 errors in 20 s) and skips 4.
    assert!(
        at4[0].evidence[1].starts_with("NVLink 5: replay 40 errors in 20 s"),
        "{:?}",
        at4[0].evidence
    );
    // Window 5 counts again from the reset value: 20 more.
    let at5 = &got.iter().find(|(k, _)| *k == 5).expect("window 5").1;
    assert!(
        at5.evidence[1].starts_with("NVLink 5: replay 60 errors in 30 s"),
        "{:?}",
        at5.evidence
    );
}

#[test]
fn a_failed_row_remap_asks_for_an_rma_and_a_pending_one_for_a_reset() {
    let mut d = GpuDetector::default();
    let gpus = vec![
        GpuSample {
            remapped_rows_unc: Some(3),
            remapped_rows_corr: Some(1),
            remap_failure: Some(true),
            remap_pending: Some(false),
            ..gpu(0)
        },
        GpuSample {
            remapped_rows_unc: Some(1),
            remapped_rows_corr: Some(0),
            remap_failure: Some(false),
            remap_pending: Some(true),
            ..gpu(1)
        },
        GpuSample {
            remapped_rows_unc: Some(0),
            remapped_rows_corr: Some(2),
            remap_failure: Some(false),
            remap_pending: Some(false),
            ..gpu(2)
        },
    ];
    let f = d.observe("n003", &window("n003", 10_000, gpus), &[]);
    assert_eq!(f.len(), 2, "{f:#?}");
    let (rma, reset) = (&f[0], &f[1]);
    assert_eq!(
        (rma.kind.as_str(), rma.entity.as_str()),
        ("gpu_ecc", "n003/gpu0")
    );
    assert_eq!(rma.confidence, 0.99);
    assert_eq!(rma.marks, vec!["ecc_action:RMA".to_string()]);
    assert_eq!(
        rma.evidence,
        vec!["GPU-0 row remapping failed: a memory bank has no spare row left (3 rows remapped for uncorrectable errors, 1 for correctable); NVIDIA's action: replace the GPU (RMA)".to_string()]
    );
    assert!(
        rma.runbook.starts_with("replace the GPU (RMA): drain n003"),
        "{}",
        rma.runbook
    );
    assert_eq!(
        (reset.kind.as_str(), reset.entity.as_str()),
        ("gpu_ecc", "n003/gpu1")
    );
    assert_eq!(reset.confidence, 0.9);
    assert_eq!(reset.marks, vec!["ecc_action:RESET_GPU".to_string()]);
    assert!(
        reset.evidence[0].starts_with(
            "GPU-1 row remap pending (1 rows remapped for uncorrectable errors, 0 for correctable)"
        ),
        "{:?}",
        reset.evidence
    );
    assert!(
        reset.runbook.starts_with("reset the GPU to apply the pending row remap: drain GPU 1's jobs on n003, `nvidia-smi -r -i 1`"),
        "{}",
        reset.runbook
    );
    // A row newly remapped for an uncorrectable error on a GPU with a
    // pending remap: still a reset, with the new row as evidence.
    let gpus = vec![GpuSample {
        remapped_rows_unc: Some(2),
        remapped_rows_corr: Some(0),
        remap_failure: Some(false),
        remap_pending: Some(true),
        ..gpu(1)
    }];
    let f = d.observe("n003", &window("n003", 20_000, gpus), &[]);
    assert_eq!(f[0].marks, vec!["ecc_action:RESET_GPU".to_string()]);
    assert_eq!(
        f[0].evidence[1],
        "GPU-1 rows newly remapped for uncorrectable errors: +1 this window"
    );
}

/// Two windows of a fleet of `hosts` 8-GPU hosts where `hot(host, gpu)`
/// throttle thermally (HW slowdown, 91 C, 1200/1980 MHz); the findings of
/// the second window.
fn thermal_fleet(hosts: usize, hot: impl Fn(usize, u32) -> bool) -> Vec<Finding> {
    let mut d = GpuDetector::default();
    let mut last = Vec::new();
    for k in 1..=2 {
        last.clear();
        for h in 0..hosts {
            let name = format!("n{h:03}");
            let gpus = (0..8)
                .map(|g| {
                    if hot(h, g) {
                        GpuSample {
                            temp_c: Some(91),
                            sm_clock_mhz: Some(1200),
                            throttle_reasons: Some(0x40),
                            ..gpu(g)
                        }
                    } else {
                        gpu(g)
                    }
                })
                .collect();
            last.extend(d.observe(&name, &window(&name, k * 10_000, gpus), &[]));
        }
    }
    last
}

#[test]
fn four_of_eight_gpus_throttling_on_one_host_are_one_host_incident() {
    // n003's GPUs 0-3 and n005's GPU 6 throttle; 14 other hosts are cool.
    let f = thermal_fleet(16, |h, g| (h == 3 && g < 4) || (h == 5 && g == 6));
    assert_eq!(f.len(), 2, "{f:#?}");
    let host = &f[0];
    assert_eq!(
        (host.kind.as_str(), host.entity.as_str()),
        ("gpu_thermal_throttle", "n003")
    );
    assert_eq!(
        host.absorbs,
        vec!["n003/gpu0", "n003/gpu1", "n003/gpu2", "n003/gpu3"]
    );
    assert_eq!(
        host.evidence[0],
        "4 of 8 GPUs of n003 throttling thermally at once (gpu0, gpu1, gpu2, gpu3): shared cooling (fans, air path, inlet temperature), not one GPU"
    );
    // P(≥4 of 8 | 2 %) = 1.05e-5: the rest of the fleet (one GPU of 120,
    // 0.8 %) is below the 2 % floor.
    assert_eq!(
        host.evidence[1],
        "4 or more of 8 GPUs throttling at once by chance: binomial tail 1.1e-5 (0.8% of the rest of the fleet's GPUs throttle thermally, floored at 2%)"
    );
    assert_eq!(
        host.evidence[2],
        "n003/gpu0: GPU-0 thermal slowdown (HW), temperature 91 C; SM clock 1200/1980 MHz (61% of max)"
    );
    assert_eq!(host.evidence.len(), 6);
    assert!(
        host.runbook.contains("GPUs 0, 1, 2, 3 share"),
        "{}",
        host.runbook
    );
    // One GPU alone stays a GPU incident.
    assert_eq!(
        (f[1].kind.as_str(), f[1].entity.as_str()),
        ("gpu_thermal_throttle", "n005/gpu6")
    );
    assert!(f[1].absorbs.is_empty());
}

#[test]
fn two_throttling_gpus_or_a_fleet_wide_heat_problem_stay_gpu_incidents() {
    // 2 of 8: P(≥2 of 8 | 2 %) = 1.0e-2, within chance.
    let f = thermal_fleet(16, |h, g| h == 3 && g < 2);
    let entities: Vec<&str> = f.iter().map(|f| f.entity.as_str()).collect();
    assert_eq!(entities, ["n003/gpu0", "n003/gpu1"]);
    // Half of every host's GPUs throttle: the fleet's share is 50 %, so
    // 4 of 8 on one host is no surprise; 64 GPU incidents, no host one.
    let f = thermal_fleet(16, |_, g| g % 2 == 0);
    assert_eq!(f.len(), 64);
    assert!(f.iter().all(|f| f.entity.contains("/gpu")));
}
