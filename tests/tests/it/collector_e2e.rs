//! The collector binary end to end: real probes (CUDA stand-in), NVML
//! stand-in, fake InfiniBand sysfs, console output joined across layers, and
//! the Prometheus endpoint.
use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    process::{Command, Stdio},
    sync::mpsc,
    time::Duration,
};

fn collector_bin() -> std::path::PathBuf {
    tests::bin("faultline-collector")
}

fn http_get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap_or_else(|e| panic!("send to {addr}: {e}"));
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}

#[test]
fn collector_joins_cuda_launches_with_gpu_state_and_serves_metrics() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("collector_e2e") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("faultline-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("nvml.txt");
    std::fs::write(&scenario, "0 gpu=1 temp=91 sm_clock=1100 throttle=0x40\n").unwrap();
    let ib = tests::FakeIb::new("e2e");
    ib.active_port("mlx5_0", 1);

    let mut child = Command::new(collector_bin())
        .args([
            "--duration",
            "20",
            "--window",
            "0.5",
            "--metrics-addr",
            "127.0.0.1:0",
            "--no-verbs",
        ])
        .arg("--cuda-library")
        .arg(tests::fake_libcuda())
        .arg("--nvml-library")
        .arg(tests::fake_nvml())
        .arg("--sysfs-root")
        .arg(ib.root())
        .env("FAKE_NVML_SCENARIO", &scenario)
        .env("FAKE_NVML_GPUS", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the collector");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let errlog = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let errlog2 = errlog.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                return;
            }
            if let Ok(mut l) = errlog2.lock() {
                l.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    });
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Lines already read stay searchable: the order of sections within a
    // window is not part of the contract.
    let seen = std::cell::RefCell::new(Vec::<String>::new());
    let wait_for = |pred: &dyn Fn(&str) -> bool, what: &str| -> String {
        if let Some(l) = seen.borrow().iter().find(|l| pred(l)) {
            return l.clone();
        }
        loop {
            match rx.recv_timeout(Duration::from_secs(15)) {
                Ok(l) => {
                    seen.borrow_mut().push(l.clone());
                    if pred(&l) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "collector never printed {what}: {e}; saw {:#?}",
                    seen.borrow()
                ),
            }
        }
    };
    let metrics_line = wait_for(
        &|l| l.starts_with("metrics on http://"),
        "the metrics address",
    );
    let addr = metrics_line
        .trim_start_matches("metrics on http://")
        .trim_end_matches("/metrics")
        .to_string();
    wait_for(
        &|l| l == "probe cuLaunchKernel: attached",
        "the CUDA attach",
    );
    let gpu = wait_for(&|l| l.starts_with("gpu 1:"), "the GPU list");
    assert!(
        gpu.contains("GPU-fa0171e0-0000-4000-8000-000000000001"),
        "{gpu}"
    );

    // A CUDA process started after the collector, on device 1.
    let out = Command::new(tests::cuda_workload())
        .arg(tests::fake_libcuda())
        .args(["device:1", "func:gemm_e2e", "launch:25:2,1,1:64,1,1:0"])
        .output()
        .expect("workload");
    assert!(out.status.success());
    ib.counter("mlx5_0", 1, "symbol_error", 5);
    ib.counter("mlx5_0", 1, "port_rcv_data", 1_000_000);

    let line = wait_for(&|l| l.contains("kernel=gemm_e2e"), "the CUDA window line");
    assert!(
        line.contains("gpu=1") && line.contains("launches=25"),
        "{line}"
    );
    assert!(
        line.contains("uuid=GPU-fa0171e0-0000-4000-8000-000000000001")
            && line.contains("temp=91C")
            && line.contains("throttle=hw_thermal_slowdown"),
        "CUDA line joined with the GPU's NVML state: {line}"
    );
    let ibl = wait_for(
        &|l| l.contains("ib ") && l.contains("/mlx5_0/1"),
        "the IB window line",
    );
    assert!(ibl.contains("symbol_error+5"), "{ibl}");

    if let Ok(Some(st)) = child.try_wait() {
        panic!(
            "collector exited early ({st}); stderr: {}",
            errlog.lock().map(|l| l.clone()).unwrap_or_default()
        );
    }
    let health = http_get(&addr, "/healthz");
    assert!(
        health.starts_with("HTTP/1.1 200") && health.ends_with("ok\n"),
        "{health}"
    );
    let ready = http_get(&addr, "/readyz");
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let needles = [
        "faultline_cuda_kernel_launches_total{hpc_job=\"\",rank=\"\",gpu=\"1\"} 25",
        "faultline_gpu_throttle_reason{gpu=\"1\",uuid=\"GPU-fa0171e0-0000-4000-8000-000000000001\",pci_bus_id=\"00000000:19:00.0\",reason=\"hw_thermal_slowdown\"} 1",
        "faultline_infiniband_symbol_error_total{device=\"mlx5_0\",port=\"1\"} 5",
        "faultline_probe_attached{probe=\"cuLaunchKernel\"} 1",
        "faultline_block_requests_total",
    ];
    // Sections are exported before the console lines are printed; allow a
    // little slack for a loaded machine all the same.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let m = http_get(&addr, "/metrics");
        let missing: Vec<&str> = needles.iter().copied().filter(|n| !m.contains(n)).collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "metrics lack {missing:?}:\n{m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(http_get(&addr, "/nope").starts_with("HTTP/1.1 404"));

    // SIGTERM stops it cleanly.
    // SAFETY: plain kill(2) on our child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
    std::fs::remove_dir_all(&dir).unwrap();
}
