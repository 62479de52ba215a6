//! Usage per job and team on real probes: two processes in two cgroups (two
//! Slurm jobs of two teams) write to the same loop device with direct I/O
//! and launch kernels through the CUDA stand-in on the same GPU of the NVML
//! stand-in. The collector's usage rows must give each job exactly the
//! bytes its process wrote (and all rows together the device's own
//! `/sys/block/*/stat` delta), each job the launches its process made, and
//! split the GPU's energy delta between them by NVML's per-process
//! utilisation without losing a joule.
use std::{
    collections::BTreeMap,
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// A cgroup v2 directory removed on drop (after its processes are gone).
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(path: PathBuf) -> Self {
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        Self(path)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `sh -c SCRIPT` placed in `cgroup` before it runs (it writes its own pid
/// to `cgroup.procs` between fork and exec), stdin and stdout piped.
fn in_cgroup(cgroup: &Path, script: &str, env: &[(&str, &str)]) -> tests::KillOnDrop {
    use std::os::unix::ffi::OsStrExt as _;
    let procs = std::ffi::CString::new(cgroup.join("cgroup.procs").as_os_str().as_bytes())
        .expect("path without NUL");
    let mut c = Command::new("sh");
    c.args(["-c", script])
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // SAFETY: between fork and exec the closure only calls open(2),
    // write(2) and close(2) on a path built before the fork: no allocation,
    // no lock another thread of the parent could hold.
    unsafe {
        c.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if n == 1 {
                Ok(())
            } else {
                Err(err)
            }
        });
    }
    tests::KillOnDrop(
        c.spawn()
            .unwrap_or_else(|e| panic!("spawn in {}: {e}", cgroup.display())),
    )
}

#[test]
fn usage_per_job_equals_what_each_process_did() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("usage_probe") {
        return;
    }
    let tag = std::process::id();
    let dir = std::env::temp_dir().join(format!("faultline-usage-{tag}"));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let lo = tests::LoopDevice::new(64 << 20).expect("loop device");
    // In the cgroup v2 hierarchy (its mount on hybrid hosts too).
    let parent =
        Cgroup::new(collector::block::cgroup2_root().join(format!("faultline-usage-{tag}")));
    let cg_a = Cgroup::new(parent.0.join("job_7001"));
    let cg_b = Cgroup::new(parent.0.join("job_7002"));

    // Each worker waits for a line, writes with O_DIRECT (bytes known
    // exactly), then becomes the CUDA workload (same pid), which launches
    // and waits for a second line before it exits.
    let lib = tests::fake_libcuda();
    let cw = tests::cuda_workload();
    let script = |bs: u32, count: u32, seek: u32, launches: u32, kernel: &str| {
        format!(
            "read go; dd if=/dev/zero of={} bs={bs} count={count} seek={seek} oflag=direct status=none || exit 9; exec {} {} device:0 func:{kernel} launch:{launches}:1,1,1:32,1,1:0 wait",
            lo.path.display(),
            cw.display(),
            lib.display()
        )
    };
    let (a_bytes, b_bytes) = (64u64 * 4096, 24u64 * 16384);
    let mut a = in_cgroup(
        &cg_a.0,
        &script(4096, 64, 0, 300, "alpha_gemm"),
        &[("SLURM_JOB_ACCOUNT", "alpha")],
    );
    let mut b = in_cgroup(&cg_b.0, &script(16384, 24, 1024, 100, "beta_conv"), &[]);
    let (pa, pb) = (a.0.id(), b.0.id());

    // GPU 0: 80 % busy, the two processes at 60 % and 20 % SM, and an energy
    // counter that steps by 600 J at 3 s and 300 J at 5 s after nvmlInit.
    let scenario = dir.join("nvml.txt");
    std::fs::write(
        &scenario,
        format!(
            "0 gpu=0 util_gpu=80 energy_mj=1000000\n0 gpu=0 proc={pa} sm=60 mem=4294967296\n0 gpu=0 proc={pb} sm=20 mem=1073741824\n3 gpu=0 energy_mj=1600000\n5 gpu=0 energy_mj=1900000\n"
        ),
    )
    .expect("scenario");
    let cfg = dir.join("collector.toml");
    std::fs::write(&cfg, "[usage]\nteams = { \"7002\" = \"beta\" }\n").expect("config");
    let record = dir.join("windows.jsonl");
    let before = lo.stat().expect("stat");
    let mut col = Command::new(tests::bin("faultline-collector"))
        .arg("--config")
        .arg(&cfg)
        .args([
            "--window",
            "0.5",
            "--duration",
            "60",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(["--no-verbs", "--no-otlp"])
        .arg("--cuda-library")
        .arg(&lib)
        .arg("--nvml-library")
        .arg(tests::fake_nvml())
        .arg("--record")
        .arg(&record)
        .env("FAKE_NVML_SCENARIO", &scenario)
        .env("FAKE_NVML_GPUS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("collector");
    let lines = tests::lines_of(&mut col);
    let mut col = tests::KillOnDrop(col);
    let mut addr = String::new();
    let mut seen = Vec::new();
    loop {
        let l = lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("collector stalled ({e}); saw {seen:#?}"));
        if let Some(a) = l.strip_prefix("metrics on http://") {
            addr = a.trim_end_matches("/metrics").to_string();
        }
        let first_window = l.starts_with("window 1:");
        seen.push(l);
        if first_window {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l == "probe cuLaunchKernel: attached"),
        "{seen:#?}"
    );
    assert!(!addr.is_empty(), "{seen:#?}");
    let started = Instant::now();

    for w in [&mut a, &mut b] {
        w.0.stdin
            .as_mut()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("go");
    }
    // Done when both jobs' launches are counted and the last energy step
    // (5 s after the collector's nvmlInit) has been apportioned.
    let launches = "faultline_usage_cuda_launches_total";
    let energy = "faultline_usage_gpu_energy_joules_total";
    let alpha: &[(&str, &str)] = &[("hpc_job", "7001"), ("team", "alpha")];
    let beta: &[(&str, &str)] = &[("hpc_job", "7002"), ("team", "beta")];
    // A sample's value, 0 while it is absent.
    let value = |m: &str, name: &str, labels: &[(&str, &str)]| {
        tests::metrics::value(m, name, labels).unwrap_or(0.0)
    };
    let m = loop {
        // Empty while the endpoint does not answer yet: polled again.
        let m = tests::metrics::scrape(&addr).unwrap_or_default();
        if value(&m, launches, alpha) == 300.0
            && value(&m, launches, beta) == 100.0
            && value(&m, energy, alpha) + value(&m, energy, beta) >= 899.999
        {
            break m;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "usage counters never reached the workload's: {m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        (value(&m, energy, alpha) - 675.0).abs() < 1e-6
            && (value(&m, energy, beta) - 225.0).abs() < 1e-6,
        "energy split 60:20: {m}"
    );
    for mut w in [a, b] {
        w.0.stdin
            .as_mut()
            .expect("stdin")
            .write_all(b"done\n")
            .expect("done");
        let st = w.0.wait().expect("worker");
        assert!(st.success(), "worker failed: {st}");
    }
    // SIGTERM: the collector closes its last window and exits.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(col.0.id() as i32, libc::SIGTERM) };
    let st = col.0.wait().expect("collector exit");
    assert!(st.success(), "{st}");
    let k = lo.stat().expect("stat").since(&before);

    // Sum the recorded windows' usage rows.
    let text = std::fs::read_to_string(&record).expect("record");
    let mut io: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    let mut launches: BTreeMap<String, u64> = BTreeMap::new();
    let mut energy: BTreeMap<String, f64> = BTreeMap::new();
    let mut methods = std::collections::BTreeSet::new();
    for line in text.lines() {
        let w: serde_json::Value = serde_json::from_str(line).expect("JSON window");
        for u in w["usage"].as_array().into_iter().flatten() {
            let s = |k: &str| u[k].as_str().unwrap_or_default().to_string();
            let n = |k: &str| u[k].as_u64().unwrap_or(0);
            match s("resource_kind").as_str() {
                "storage" if s("resource") == lo.name => {
                    let e = io.entry((s("job"), s("team"))).or_default();
                    e.0 += n("io_requests");
                    e.1 += n("io_bytes");
                }
                "gpu" if s("resource") == "0" => {
                    *launches.entry(s("job")).or_default() += n("launches");
                    *energy.entry(s("job")).or_default() +=
                        u["energy_joules"].as_f64().unwrap_or(0.0);
                    methods.insert(s("method"));
                }
                _ => {}
            }
        }
    }
    eprintln!("io {io:?}\nlaunches {launches:?}\nenergy {energy:?}\nkernel {k:?}");
    // Per job: exactly what its process wrote, under its team.
    assert_eq!(io[&("7001".into(), "alpha".into())].1, a_bytes);
    assert_eq!(io[&("7002".into(), "beta".into())].1, b_bytes);
    assert_eq!(io[&("7001".into(), "alpha".into())].0, 64);
    assert_eq!(io[&("7002".into(), "beta".into())].0, 24);
    // All rows of the device (attributed or not) = the kernel's accounting.
    let (req, bytes) = io.values().fold((0, 0), |s, v| (s.0 + v.0, s.1 + v.1));
    assert_eq!(
        bytes,
        (k.read_sectors + k.write_sectors + k.discard_sectors) * 512
    );
    assert_eq!(req, k.read_ios + k.write_ios + k.discard_ios + k.flush_ios);
    // Launches: the stand-in's counts per job.
    assert_eq!((launches["7001"], launches["7002"]), (300, 100));
    // Energy: the stand-in's 900 J delta, split 3:1, nothing lost.
    let total: f64 = energy.values().sum();
    assert!((total - 900.0).abs() < 1e-6, "{energy:?}");
    assert!((energy["7001"] - 675.0).abs() < 1e-6, "{energy:?}");
    assert!(methods.contains("nvml_process"), "{methods:?}");
    drop(cg_a);
    drop(cg_b);
    drop(parent);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
