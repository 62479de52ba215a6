use super::*;

fn who_of(pid: u32) -> Who {
    match pid {
        10 => Who {
            job: "1001".into(),
            team: "alpha".into(),
            hca: Some("mlx5_0".into()),
        },
        20 => Who {
            job: "1002".into(),
            team: String::new(),
            hca: None,
        },
        _ => Who::default(),
    }
}

fn gpu(index: u32, util: u32, energy_mj: u64, procs: &[(u32, Option<u32>, u64)]) -> GpuReading {
    GpuReading {
        index,
        lost: false,
        util_pct: Some(util),
        energy_mj: Some(energy_mj),
        procs: procs
            .iter()
            .map(|&(pid, sm, mem)| GpuProc {
                pid,
                sm_pct: sm,
                mem_bytes: Some(mem),
            })
            .collect(),
    }
}

fn find<'a>(rows: &'a [pb::JobUsage], job: &str, kind: &str, res: &str) -> &'a pb::JobUsage {
    rows.iter()
        .find(|r| r.job == job && r.resource_kind == kind && r.resource == res)
        .unwrap_or_else(|| panic!("no {job}/{kind}/{res} row in {rows:#?}"))
}

#[test]
fn gpu_time_and_energy_split_by_per_process_utilisation_and_add_up() {
    let mut a = Accountant::new(BTreeMap::from([("1002".into(), "beta".into())]), 16);
    let g0 = [gpu(
        0,
        80,
        1_000_000,
        &[(10, Some(60), 4 << 30), (20, Some(20), 1 << 30)],
    )];
    // First window: the energy counter's baseline only.
    let inp = Inputs {
        seconds: 2.0,
        gpus: &g0,
        ..Inputs::default()
    };
    let rows = a.window(&inp, who_of);
    assert_eq!(rows.iter().map(|r| r.energy_joules).sum::<f64>(), 0.0);
    let g1 = [gpu(
        0,
        80,
        1_600_000,
        &[(10, Some(60), 4 << 30), (20, Some(20), 1 << 30)],
    )];
    let inp = Inputs {
        seconds: 2.0,
        gpus: &g1,
        ..Inputs::default()
    };
    let rows = a.window(&inp, who_of);
    let (r1, r2) = (
        find(&rows, "1001", "gpu", "0"),
        find(&rows, "1002", "gpu", "0"),
    );
    // 600 J split 60:20; 1.6 busy seconds split the same way; both held it 2 s.
    assert!((r1.energy_joules - 450.0).abs() < 1e-9, "{r1:?}");
    assert!((r2.energy_joules - 150.0).abs() < 1e-9, "{r2:?}");
    assert!((r1.gpu_busy_seconds - 1.2).abs() < 1e-9 && (r2.gpu_busy_seconds - 0.4).abs() < 1e-9);
    assert_eq!((r1.gpu_alloc_seconds, r2.gpu_alloc_seconds), (2.0, 2.0));
    assert_eq!((r1.peak_mem_bytes, r2.peak_mem_bytes), (4 << 30, 1 << 30));
    assert_eq!(r1.method, method::NVML_PROCESS);
    // Teams: the process's account for 1001, the configured mapping for 1002.
    assert_eq!((r1.team.as_str(), r2.team.as_str()), ("alpha", "beta"));
    assert!((r1.resource_util - 0.8).abs() < 1e-9);

    // Nobody on the GPU: its energy is reported unattributed, not dropped.
    let g2 = [gpu(0, 0, 1_900_000, &[])];
    let inp = Inputs {
        seconds: 2.0,
        gpus: &g2,
        ..Inputs::default()
    };
    let rows = a.window(&inp, who_of);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].job, "");
    assert!((rows[0].energy_joules - 300.0).abs() < 1e-9);
    let total: f64 = a.totals().values().map(|t| t.energy_joules).sum();
    assert!((total - 900.0).abs() < 1e-9, "{total}");
}

#[test]
fn without_per_process_utilisation_the_device_splits_by_launches() {
    let mut a = Accountant::new(BTreeMap::new(), 16);
    let cuda = [
        pb::CudaProc {
            pid: 10,
            device: 1,
            job: "1001".into(),
            launches: 300,
            copy_bytes: 4096,
            sync_wait_ns: 5_000,
            ..Default::default()
        },
        pb::CudaProc {
            pid: 20,
            device: 1,
            job: "1002".into(),
            launches: 100,
            ..Default::default()
        },
    ];
    let g = [gpu(1, 100, 0, &[(10, None, 0), (20, None, 0)])];
    let rows = a.window(
        &Inputs {
            seconds: 1.0,
            gpus: &g,
            cuda: &cuda,
            ..Inputs::default()
        },
        who_of,
    );
    let r1 = find(&rows, "1001", "gpu", "1");
    assert_eq!(r1.method, method::DEVICE_SHARE);
    assert!((r1.gpu_busy_seconds - 0.75).abs() < 1e-9, "{r1:?}");
    assert_eq!(
        (r1.launches, r1.copy_bytes, r1.sync_wait_ns),
        (300, 4096, 5_000)
    );
    assert_eq!(find(&rows, "1002", "gpu", "1").launches, 100);
}

#[test]
fn block_rows_take_the_team_learned_from_the_jobs_processes() {
    let mut a = Accountant::new(BTreeMap::new(), 16);
    let cuda = [pb::CudaProc {
        pid: 10,
        device: 0,
        job: "1001".into(),
        launches: 1,
        ..Default::default()
    }];
    let block = [
        pb::BlockStat {
            device: "nvme0n1".into(),
            op: "write".into(),
            job: "1001".into(),
            requests: 10,
            bytes: 40960,
            latency_sum_ns: 500_000_000,
            ..Default::default()
        },
        pb::BlockStat {
            device: "nvme0n1".into(),
            op: "read".into(),
            job: String::new(),
            requests: 2,
            bytes: 8192,
            latency_sum_ns: 500_000_000,
            ..Default::default()
        },
    ];
    let rows = a.window(
        &Inputs {
            seconds: 2.0,
            block: &block,
            cuda: &cuda,
            ..Inputs::default()
        },
        who_of,
    );
    let s = find(&rows, "1001", "storage", "nvme0n1");
    assert_eq!(
        (s.team.as_str(), s.io_requests, s.io_bytes),
        ("alpha", 10, 40960)
    );
    // 1 s of request time over a 2 s window: half a request in flight on average.
    assert!((s.resource_util - 0.5).abs() < 1e-9);
    let u = find(&rows, "", "storage", "nvme0n1");
    assert_eq!((u.io_requests, u.io_bytes), (2, 8192));
}

#[test]
fn port_bytes_are_split_by_gpu_share_only_without_verbs_probes() {
    let port = |words: u64| pb::IbPort {
        hca: "mlx5_0".into(),
        port: 1,
        rate_bytes_per_sec: 1_000_000,
        counters: [("port_xmit_data".to_string(), words)].into(),
        ..Default::default()
    };
    let g = [
        gpu(0, 50, 0, &[(10, None, 0)]),
        gpu(1, 50, 0, &[(20, None, 0)]),
        gpu(2, 50, 0, &[(20, None, 0)]),
    ];
    let mut a = Accountant::new(BTreeMap::new(), 16);
    for (words, verbs) in [(1000u64, false), (1000 + 250_001, false), (2_000_000, true)] {
        let ports = [port(words)];
        let posted = [(10u32, 777u64)];
        let rows = a.window(
            &Inputs {
                seconds: 1.0,
                gpus: &g,
                ib_ports: &ports,
                verbs_active: verbs,
                verbs_posted: if verbs { &posted } else { &[] },
                ..Inputs::default()
            },
            who_of,
        );
        let fabric: Vec<_> = rows
            .iter()
            .filter(|r| r.resource_kind == "fabric")
            .collect();
        if words == 1000 {
            assert!(
                fabric.is_empty(),
                "first reading is the baseline: {fabric:?}"
            );
        } else if !verbs {
            // 1,000,004 bytes: one GPU of three to 1001, two to 1002, exactly.
            let sum: u64 = fabric.iter().map(|r| r.fabric_bytes).sum();
            assert_eq!(sum, 250_001 * 4);
            assert_eq!(
                find(&rows, "1001", "fabric", "mlx5_0/1").fabric_bytes,
                333_334
            );
            assert!(fabric.iter().all(|r| r.method == method::PORT_SHARE));
            assert!((fabric[0].resource_util - 1.000004).abs() < 1e-9);
        } else {
            assert_eq!(fabric.len(), 1, "{fabric:?}");
            assert_eq!(
                (fabric[0].resource.as_str(), fabric[0].fabric_bytes),
                ("mlx5_0", 777)
            );
            assert_eq!(fabric[0].method, method::VERBS);
        }
    }
}

#[test]
fn jobs_beyond_the_bound_fold_into_overflow() {
    let mut a = Accountant::new(BTreeMap::new(), 2);
    let block: Vec<pb::BlockStat> = (0..5)
        .map(|i| pb::BlockStat {
            device: "sda".into(),
            job: format!("j{i}"),
            requests: 1,
            bytes: 512,
            ..Default::default()
        })
        .collect();
    let rows = a.window(
        &Inputs {
            seconds: 1.0,
            block: &block,
            ..Inputs::default()
        },
        who_of,
    );
    assert_eq!(rows.len(), 5, "the wire keeps every job");
    assert_eq!(a.totals().len(), 3);
    assert_eq!(a.folded, 3);
    assert_eq!(
        a.totals()[&(OVERFLOW_JOB.to_string(), String::new())].io_requests,
        3
    );
    let text = a.render_prometheus();
    assert!(
        text.contains("faultline_usage_storage_requests_total{hpc_job=\"_overflow\",team=\"\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("faultline_usage_folded_rows_total 3"),
        "{text}"
    );
}
