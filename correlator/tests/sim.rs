//! The simulated cluster end to end (real streaming code, real gRPC on
//! loopback, the real engine): every injected fault raises exactly its
//! incident on the right entity; confounders raise none.
use correlator::sim::{run, SimArgs};

fn args(inject: &[&str]) -> SimArgs {
    SimArgs {
        nodes: 16,
        inject: inject.iter().map(|s| s.to_string()).collect(),
        seed: 7,
        speed: 10.0,
        duration: 24.0,
        onset: 8.0,
        json: true,
        ..SimArgs::default()
    }
}

async fn opened(inject: &[&str]) -> Vec<(String, String)> {
    let seen = run(args(inject)).await.expect("sim runs");
    let mut o: Vec<(String, String)> = seen
        .iter()
        .filter(|u| u.state == "opened")
        .map(|u| (u.kind.clone(), u.entity.clone()))
        .collect();
    o.sort();
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_raises_its_incident_and_nothing_else() {
    let faults = [
        (
            "ib-link-degrade@n005/mlx5_3/1",
            "ib_link_degraded",
            "n005/mlx5_3/1",
        ),
        (
            "ib-link-down@n002/mlx5_0/1",
            "ib_link_down",
            "n002/mlx5_0/1",
        ),
        (
            "ib-link-flap@n011/mlx5_7/1",
            "ib_link_flapping",
            "n011/mlx5_7/1",
        ),
        ("gpu-thermal@n009/gpu4", "gpu_thermal_throttle", "n009/gpu4"),
        ("gpu-power@n001/gpu2", "gpu_power_throttle", "n001/gpu2"),
        ("xid@n003/gpu6", "gpu_xid", "n003/gpu6"),
        ("ecc-dbe@n014/gpu0", "gpu_ecc", "n014/gpu0"),
        ("storage-stall@n007", "storage_latency", "n007/nvme0n1"),
        ("node-loss@n012", "node_lost", "n012"),
    ];
    let specs: Vec<&str> = faults.iter().map(|f| f.0).collect();
    let got = opened(&specs).await;
    let mut want: Vec<(String, String)> = faults
        .iter()
        .map(|f| (f.1.to_string(), f.2.to_string()))
        .collect();
    // A flapping link's first down opens `ib_link_down` before the flapping is
    // recognised (and then absorbed).
    want.push(("ib_link_down".into(), "n011/mlx5_7/1".into()));
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confounders_raise_nothing() {
    let got = opened(&[
        "job-end",
        "counter-reset@n004/mlx5_1/1",
        "collector-restart@n006",
        "congestion",
        "single-errors",
    ])
    .await;
    assert_eq!(got, Vec::<(String, String)>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_injections_are_clear_errors() {
    let e = run(args(&["meteor-strike"])).await.unwrap_err().to_string();
    assert!(e.contains("unknown fault kind \"meteor-strike\""), "{e}");
    let e = run(args(&["gpu-thermal@n999/gpu1"]))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown node \"n999\""), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_file_with_onsets() {
    let dir = std::env::temp_dir().join(format!("faultline-scn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("s.txt");
    std::fs::write(
        &f,
        "# two faults at different times\ngpu-thermal@n003/gpu1 at=4\nstorage-stall@n010 at=12\n",
    )
    .unwrap();
    let mut a = args(&[]);
    a.scenario = Some(f.clone());
    a.duration = 20.0;
    let seen = run(a).await.expect("sim runs");
    let opened: Vec<(i64, String, String)> = seen
        .iter()
        .filter(|u| u.state == "opened")
        .map(|u| (u.ts_unix_ms, u.kind.clone(), u.entity.clone()))
        .collect();
    assert_eq!(opened.len(), 2, "{opened:?}");
    let thermal = opened
        .iter()
        .find(|o| o.1 == "gpu_thermal_throttle" && o.2 == "n003/gpu1")
        .expect("thermal");
    let storage = opened
        .iter()
        .find(|o| o.1 == "storage_latency" && o.2 == "n010/nvme0n1")
        .expect("storage");
    assert!(thermal.0 < storage.0, "onsets respected: {opened:?}");
    std::fs::write(&f, "gpu-thermal@n003/gpu1 at=soon\n").unwrap();
    let mut a = args(&[]);
    a.scenario = Some(f.clone());
    let e = format!("{:#}", run(a).await.unwrap_err());
    assert!(e.contains("scenario line 1: expected `at=SECONDS`"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
