//! `deploy/slurm/prolog.sh` and `epilog.sh` under a real Slurm: Debian's
//! `slurm-wlm` (slurmctld, slurmd) and munge, started by the test on a
//! throwaway configuration (one node `localhost` with two gres/gpu devices
//! backed by character device nodes, `proctrack/linuxproc`, `task/none`, no
//! cgroups), with the hooks as its `Prolog=` and `Epilog=`, and the real
//! collector (CUDA probes on the CUDA stand-in, the NVML stand-in with two
//! GPUs).
//!
//! - A real `sbatch` job, two tasks through `srun` (ranks 0 and 1, each
//!   on the GPU of its rank): the prolog's dcgm-exporter mapping files (one
//!   per GPU index, the job id a line) and job file appear before the job
//!   script runs; the collector, reading only the mapping directory, labels
//!   both GPUs' series with the job as `hpc_job`; the ranks' CUDA launches
//!   are counted under their job and rank, and while they run each GPU's
//!   series also name the rank on it; after the job the epilog has
//!   removed the files and the GPUs' series lose the job.
//! - A prolog whose directories cannot be created still exits 0: the job
//!   runs and the node stays IDLE, not DRAIN (`sinfo`, `scontrol`). The
//!   same check sees a prolog that fails drain the node (the control that
//!   shows it can fail).
//!
//! Needs root (slurmd runs the hooks as root) and BPF for the CUDA probes;
//! under CI=true missing Slurm or munge binaries fail the test, elsewhere
//! it is skipped with a message. setup.sh installs `slurmctld slurmd
//! slurm-client munge`.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use tests::{metrics, KillOnDrop};

const BINS: [&str; 8] = [
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "sinfo",
    "scontrol",
    "squeue",
    "scancel",
];

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// `name` on PATH or in the sbin directories Debian installs daemons to.
fn find_bin(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"])
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file());
    found
}

/// The Slurm and munge binaries, or why the test cannot run (a panic under
/// CI, a loud skip elsewhere).
fn prerequisites() -> Option<Vec<PathBuf>> {
    let missing: Vec<&str> = BINS
        .iter()
        .copied()
        .filter(|b| find_bin(b).is_none())
        .collect();
    let why = if !missing.is_empty() {
        Some(format!(
            "{} not installed (apt-get install slurmctld slurmd slurm-client munge)",
            missing.join(", ")
        ))
    } else {
        tests::bpf_missing()
    };
    match why {
        None => Some(BINS.iter().filter_map(|b| find_bin(b)).collect()),
        Some(why) if tests::in_ci() => panic!("slurm_real: CI=true but {why}"),
        Some(why) => {
            eprintln!("\n!!!!!!!! SKIPPED slurm_real: {why} !!!!!!!!\n");
            None
        }
    }
}

fn write(p: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn hook(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .join("deploy/slurm")
        .join(name)
}

/// munged, slurmctld and slurmd on a throwaway configuration under `dir`,
/// killed on drop.
struct Slurm {
    dir: PathBuf,
    bins: Vec<PathBuf>,
    _daemons: Vec<KillOnDrop>,
}

impl Slurm {
    fn bin(&self, name: &str) -> &Path {
        let i = BINS
            .iter()
            .position(|b| *b == name)
            .expect("a known binary");
        &self.bins[i]
    }

    fn start(dir: &Path, bins: Vec<PathBuf>) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::remove_dir_all(dir);
        for d in ["munge", "state", "spool", "dev", "jobs-empty"] {
            std::fs::create_dir_all(dir.join(d)).expect("mkdir");
        }
        // munged refuses a key or socket directory others can write.
        let munge = dir.join("munge");
        std::fs::set_permissions(&munge, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut key = vec![0u8; 1024];
        let mut f = std::fs::File::open("/dev/urandom").expect("urandom");
        std::io::Read::read_exact(&mut f, &mut key).expect("key");
        std::fs::write(munge.join("munge.key"), key).expect("key");
        std::fs::set_permissions(
            munge.join("munge.key"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("chmod");
        // Two GPUs for gres/gpu: character devices of NVIDIA's major, which
        // nothing opens (task/none constrains no device).
        for i in 0..2u32 {
            let p = dir.join(format!("dev/nvidia{i}"));
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
            // SAFETY: mknod(2) with a valid NUL-terminated path.
            let rc =
                unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(195, i)) };
            assert_eq!(
                rc,
                0,
                "mknod {}: {}",
                p.display(),
                std::io::Error::last_os_error()
            );
        }
        let d = dir.display();
        // The hooks as Slurm runs them, with the test's directories; a
        // `fail-prolog` file makes the prolog fail (the control).
        let env = format!(
            "FAULTLINE_JOB_DIR={d}/jobs DCGM_HPC_JOB_MAPPING_DIR={d}/map \
             FAULTLINE_SLURM_DEFAULTS=/nonexistent FAULTLINE_SYSFS={d}/no-sysfs"
        );
        write(
            &dir.join("prolog"),
            &format!(
                "#!/bin/sh\n[ -e {d}/fail-prolog ] && exit 1\n{env} exec /bin/sh {} 2>>{d}/prolog.err\n",
                hook("prolog.sh").display()
            ),
            0o755,
        );
        write(
            &dir.join("epilog"),
            &format!(
                "#!/bin/sh\n{env} exec /bin/sh {} 2>>{d}/epilog.err\n",
                hook("epilog.sh").display()
            ),
            0o755,
        );
        // Never more CPUs than slurmd finds (a node with fewer is drained);
        // the two-task job overcommits where there is one.
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let conf = format!(
            "ClusterName=faultline\nSlurmctldHost=localhost\n\
             SlurmctldPort={}\nSlurmdPort={}\nSlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={d}/munge/munge.sock\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\nMpiDefault=none\nMailProg=/bin/true\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nGresTypes=gpu\n\
             ReturnToService=2\nSchedulerType=sched/builtin\n\
             Prolog={d}/prolog\nEpilog={d}/epilog\n\
             NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:2 State=UNKNOWN\n\
             PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            free_port(),
            free_port(),
        );
        write(&dir.join("slurm.conf"), &conf, 0o644);
        write(
            &dir.join("gres.conf"),
            &format!("Name=gpu File={d}/dev/nvidia[0-1]\n"),
            0o644,
        );

        let spawn = |bin: &Path, args: &[String], log: &str| {
            let log = std::fs::File::create(dir.join(log)).expect("log file");
            KillOnDrop(
                Command::new(bin)
                    .args(args)
                    .env("SLURM_CONF", dir.join("slurm.conf"))
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().expect("log"))
                    .stderr(log)
                    .spawn()
                    .unwrap_or_else(|e| panic!("start {}: {e}", bin.display())),
            )
        };
        let mut s = Self {
            dir: dir.to_path_buf(),
            bins,
            _daemons: Vec::new(),
        };
        let m = munge.display();
        let munged = spawn(
            s.bin("munged"),
            &[
                "-F".into(),
                "-f".into(),
                format!("--key-file={m}/munge.key"),
                format!("--socket={m}/munge.sock"),
                format!("--pid-file={m}/munged.pid"),
                format!("--seed-file={m}/seed"),
                format!("--log-file={m}/munged.log"),
            ],
            "munged.out",
        );
        s._daemons.push(munged);
        s.wait_for(Duration::from_secs(10), "munged's socket", || {
            seen(munge.join("munge.sock").exists(), "no socket")
        });
        let conf = format!("{d}/slurm.conf");
        let ctld = spawn(
            s.bin("slurmctld"),
            &["-D".into(), "-i".into(), "-f".into(), conf.clone()],
            "slurmctld.log",
        );
        s._daemons.push(ctld);
        let slurmd = spawn(
            s.bin("slurmd"),
            &[
                "-D".into(),
                "-N".into(),
                "localhost".into(),
                "-f".into(),
                conf,
            ],
            "slurmd.log",
        );
        s._daemons.push(slurmd);
        s.wait_for(Duration::from_secs(20), "the node idle", || {
            let st = s.node_state();
            seen(st == "idle", st)
        });
        s
    }

    /// A Slurm client command's output (SLURM_CONF set).
    fn run(&self, bin: &str, args: &[&str]) -> Output {
        Command::new(self.bin(bin))
            .args(args)
            .env("SLURM_CONF", self.dir.join("slurm.conf"))
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("{bin}: {e}"))
    }

    fn stdout(&self, bin: &str, args: &[&str]) -> String {
        let out = self.run(bin, args);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `sinfo -h -o %T`: idle, allocated, drained, draining, …
    fn node_state(&self) -> String {
        self.stdout("sinfo", &["-h", "-o", "%T"])
    }

    /// `State=` of `scontrol show node localhost`.
    fn scontrol_state(&self) -> String {
        let text = self.stdout("scontrol", &["show", "node", "localhost"]);
        text.split_whitespace()
            .find_map(|w| w.strip_prefix("State="))
            .unwrap_or_default()
            .to_string()
    }

    fn sbatch(&self, args: &[&str]) -> String {
        let out = self.run("sbatch", &[&["--parsable"], args].concat());
        assert!(out.status.success(), "sbatch: {out:?}\n{}", self.logs());
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// Whether `job` has left the queue.
    fn done(&self, job: &str) -> bool {
        self.stdout("squeue", &["-h", "-j", job, "-o", "%i"])
            .is_empty()
    }

    /// The daemons' and hooks' logs' tails, for a failure message.
    fn logs(&self) -> String {
        let mut out = String::new();
        for l in [
            "slurmctld.log",
            "slurmd.log",
            "munged.out",
            "prolog.err",
            "epilog.err",
        ] {
            let text = std::fs::read_to_string(self.dir.join(l)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            out.push_str(&format!("--- {l}\n{}\n", tail.join("\n")));
        }
        out
    }

    /// Polls `f` until it is `Ok`; past `limit`, panics with what `f` saw
    /// last (its `Err`), the node's state and the logs.
    fn wait_for<T>(
        &self,
        limit: Duration,
        what: &str,
        mut f: impl FnMut() -> Result<T, String>,
    ) -> T {
        let end = Instant::now() + limit;
        loop {
            let seen = match f() {
                Ok(v) => return v,
                Err(seen) => seen,
            };
            assert!(
                Instant::now() < end,
                "no {what} within {limit:?}: {seen}; node {} ({})\n{}",
                self.node_state(),
                self.scontrol_state(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `Ok` when `done`, else what was seen instead.
fn seen(done: bool, what: impl std::fmt::Debug) -> Result<(), String> {
    if done {
        Ok(())
    } else {
        Err(format!("{what:?}"))
    }
}

impl Drop for Slurm {
    /// Cancels what is left (a failed test's job waits for its `go` file)
    /// and waits, bounded, for the queue to empty, so no slurmstepd outlives
    /// the daemons; then the daemons are killed.
    fn drop(&mut self) {
        if self._daemons.len() < 3 {
            return;
        }
        let _ = self.run("scancel", &["--partition=test"]);
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end && !self.stdout("squeue", &["-h", "-o", "%i"]).is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The files of a directory by name with their text (`None`: no directory).
fn files(dir: &Path) -> Option<Vec<(String, String)>> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    v.sort();
    Some(v)
}

/// The collector on the CUDA and NVML stand-ins (two GPUs), reading the
/// job mapping directory only (an empty job file directory), so the GPUs'
/// `hpc_job` can only come from dcgm-exporter's format.
fn collector(dir: &Path) -> (KillOnDrop, String) {
    // A copy of the CUDA stand-in of its own: uprobes follow the file, so
    // the CUDA workloads of tests running beside this one stay out.
    std::fs::copy(tests::fake_libcuda(), dir.join("libcuda.so.1")).expect("copy libcuda");
    let scenario = dir.join("nvml.txt");
    std::fs::write(&scenario, "0 gpu=0 temp=40\n0 gpu=1 temp=41\n").expect("scenario");
    let mut child = KillOnDrop(
        Command::new(tests::bin("faultline-collector"))
            .args([
                "--window",
                "0.5",
                "--metrics-addr",
                "127.0.0.1:0",
                "--no-verbs",
                "--no-block",
                "--no-nccl",
                "--no-otlp",
            ])
            .arg("--cuda-library")
            .arg(dir.join("libcuda.so.1"))
            .arg("--nvml-library")
            .arg(tests::fake_nvml())
            .arg("--job-dir")
            .arg(dir.join("jobs-empty"))
            .arg("--hpc-job-mapping-dir")
            .arg(dir.join("map"))
            .env("FAKE_NVML_SCENARIO", &scenario)
            .env("FAKE_NVML_GPUS", "2")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the collector"),
    );
    let lines = tests::lines_of(&mut child.0);
    let end = Instant::now() + Duration::from_secs(30);
    let (mut addr, mut attached) = (None, false);
    while addr.is_none() || !attached {
        let left = end.saturating_duration_since(Instant::now());
        let l = lines
            .recv_timeout(left)
            .unwrap_or_else(|e| panic!("collector: no metrics address and CUDA attach: {e}"));
        if let Some(a) = l.strip_prefix("metrics on http://") {
            addr = Some(a.trim_end_matches("/metrics").to_string());
        }
        attached |= l == "probe cuLaunchKernel: attached";
    }
    // Keep reading its stdout so it never blocks on a full pipe.
    std::thread::spawn(move || while lines.recv().is_ok() {});
    (child, addr.expect("address"))
}

/// The `hpc_job` (and `rank`) of GPU `gpu`'s `faultline_gpu_*` series.
fn gpu_jobs(text: &str, gpu: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = metrics::samples(text)
        .filter(|s| s.name.starts_with("faultline_gpu_"))
        .filter(|s| s.labels.iter().any(|(k, v)| *k == "gpu" && v == gpu))
        .map(|s| {
            let l = |n: &str| {
                s.labels
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            (l("hpc_job"), l("rank"))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn a_real_slurm_job_is_labelled_by_the_hooks_and_a_failing_prolog_never_drains() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    let Some(bins) = prerequisites() else {
        return;
    };
    let t0 = Instant::now();
    // Short: munged's and the daemons' socket paths must fit sun_path.
    let dir = std::env::temp_dir().join(format!("faultline-slurm-{}", std::process::id()));
    let slurm = Slurm::start(&dir, bins);
    let started = t0.elapsed();
    let (mut col, addr) = collector(&dir);
    let scrape = || metrics::scrape(&addr).unwrap_or_else(|e| panic!("scrape: {e}"));

    // Two ranks, each launching on the GPU of its rank (10 + rank kernels)
    // and then sleeping in a stream sync so the collector sees it alive.
    // The script waits for the test's `go` file (bounded), so the test sees
    // the prolog's files and the mapping-only labels first.
    let d = dir.display();
    write(
        &dir.join("job.sh"),
        &format!(
            "#!/bin/sh\ni=0\nwhile [ ! -e {d}/go ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n\
             echo \"job $SLURM_JOB_ID gpus $SLURM_JOB_GPUS\"\n\
             FAKE_CUDA_SYNC_US=4000000 srun -n2 sh -c 'exec {} {} device:$SLURM_PROCID \
             func:slurm_rank$SLURM_PROCID launch:$((10 + SLURM_PROCID)):1,1,1:32,1,1:0 streamsync:1'\n",
            tests::cuda_workload().display(),
            dir.join("libcuda.so.1").display()
        ),
        0o755,
    );
    let job = slurm.sbatch(&[
        "-n2",
        "--overcommit",
        "--gres=gpu:2",
        "-o",
        &format!("{d}/job.out"),
        &format!("{d}/job.sh"),
    ]);
    let map = dir.join("map");
    let line = format!("{job}\n");
    let want_map = vec![("0".to_string(), line.clone()), ("1".to_string(), line)];
    slurm.wait_for(Duration::from_secs(15), "mapping files", || {
        let f = files(&map);
        seen(f == Some(want_map.clone()), f)
    });
    let job_file = std::fs::read_to_string(dir.join("jobs").join(&job)).expect("the job file");
    assert_eq!(job_file, format!("job={job}\nuser=root\ngpus=0,1\nhcas=\n"));
    // From the mapping files alone: the job on both GPUs, no rank yet.
    slurm.wait_for(Duration::from_secs(10), "GPU series with the job", || {
        let m = scrape();
        let want = vec![(job.clone(), String::new())];
        let got = [gpu_jobs(&m, "0"), gpu_jobs(&m, "1")];
        seen(got == [want.clone(), want], got)
    });
    std::fs::write(dir.join("go"), "").expect("go");

    // Each rank's launches under its job and rank, on its GPU.
    slurm.wait_for(Duration::from_secs(15), "the ranks' CUDA series", || {
        let m = scrape();
        let launches = |rank: &str, gpu: &str| {
            metrics::value(
                &m,
                "faultline_cuda_kernel_launches_total",
                &[("hpc_job", job.as_str()), ("rank", rank), ("gpu", gpu)],
            )
        };
        let got = [launches("0", "0"), launches("1", "1")];
        let cuda: Vec<&str> = m
            .lines()
            .filter(|l| l.starts_with("faultline_cuda_kernel_launches_total"))
            .collect();
        seen(got == [Some(10.0), Some(11.0)], (got, cuda))
    });
    // While the ranks live, each GPU's series name its rank too.
    slurm.wait_for(Duration::from_secs(10), "GPU series with the ranks", || {
        let m = scrape();
        let got = [gpu_jobs(&m, "0"), gpu_jobs(&m, "1")];
        let want = |r: &str| vec![(job.clone(), r.to_string())];
        seen(got == [want("0"), want("1")], got)
    });
    slurm.wait_for(Duration::from_secs(20), "the job's end", || {
        seen(slurm.done(&job), "still queued")
    });
    let out = std::fs::read_to_string(dir.join("job.out")).unwrap_or_default();
    assert!(out.contains(&format!("job {job} gpus 0,1")), "{out}");
    // The epilog runs as the job completes; squeue may drop it first.
    slurm.wait_for(Duration::from_secs(10), "the epilog's cleanup", || {
        let got = (files(&map), files(&dir.join("jobs")));
        seen(got == (Some(vec![]), Some(vec![])), got)
    });
    slurm.wait_for(
        Duration::from_secs(10),
        "GPU series without the job",
        || {
            let m = scrape();
            let none = vec![(String::new(), String::new())];
            let got = [gpu_jobs(&m, "0"), gpu_jobs(&m, "1")];
            seen(got == [none.clone(), none], got)
        },
    );
    assert_eq!(slurm.node_state(), "idle");

    // The prolog's directories cannot be created (a file where each
    // belongs): it logs, exits 0, the job runs, the node stays IDLE.
    std::fs::remove_dir_all(&map).expect("rm map");
    std::fs::remove_dir_all(dir.join("jobs")).expect("rm jobs");
    std::fs::write(&map, "not a directory\n").expect("file");
    std::fs::write(dir.join("jobs"), "not a directory\n").expect("file");
    let job2 = slurm.sbatch(&[
        "-n1",
        "--gres=gpu:1",
        "-o",
        &format!("{d}/job2.out"),
        "--wrap",
        "echo ran $SLURM_JOB_ID",
    ]);
    slurm.wait_for(Duration::from_secs(20), "job 2's end", || {
        seen(slurm.done(&job2), "still queued")
    });
    let out = std::fs::read_to_string(dir.join("job2.out")).unwrap_or_default();
    assert_eq!(out.trim(), format!("ran {job2}"), "{}", slurm.logs());
    assert_eq!(slurm.node_state(), "idle", "{}", slurm.logs());
    assert_eq!(slurm.scontrol_state(), "IDLE", "{}", slurm.logs());
    let err = std::fs::read_to_string(dir.join("prolog.err")).unwrap_or_default();
    for want in [
        format!("cannot create job directory {d}/jobs"),
        format!("cannot create dcgm-exporter job mapping directory {d}/map"),
    ] {
        assert!(err.contains(&want), "{want}: {err}");
    }

    // The control: a prolog that exits 1 drains the node, and the checks
    // above see it.
    std::fs::write(dir.join("fail-prolog"), "").expect("fail");
    let job3 = slurm.sbatch(&["-n1", "--wrap", "true"]);
    let state = slurm.wait_for(Duration::from_secs(20), "a drained node", || {
        let s = slurm.node_state();
        if s.starts_with("drain") {
            Ok(s)
        } else {
            Err(s)
        }
    });
    assert!(slurm.scontrol_state().contains("DRAIN"), "{state}");
    let _ = slurm.run("scancel", &[&job3]);
    slurm.wait_for(Duration::from_secs(10), "job 3 cancelled", || {
        seen(slurm.done(&job3), "still queued")
    });
    // The collector is killed and reaped on a thread: the kernel takes
    // seconds to tear down its probes, and the test need not wait for that
    // (init reaps it if this process exits first).
    let _ = col.0.kill();
    std::thread::spawn(move || drop(col));
    drop(slurm);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "slurm_real: daemons up in {started:?}, all done in {:?}",
        t0.elapsed()
    );
}
