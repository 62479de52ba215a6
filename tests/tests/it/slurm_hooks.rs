//! `deploy/slurm/prolog.sh` and `epilog.sh` run as Slurm runs them (root,
//! `SLURM_JOB_*` in the environment) against a fake sysfs: the prolog writes
//! the job file the collector reads (`collector::jobmap`, the GPU series'
//! `hpc_job`, `faultline_job_hca_info`), with the HCAs on the NUMA nodes of
//! the job's GPUs, and adds the job to dcgm-exporter's per-GPU mapping files
//! (`--hpc-job-mapping-dir`); the epilog removes both.
//! tests/tests/it/deploy_prometheus.rs shows a running collector labelling GPU
//! series from such a file, tests/tests/it/slurm_real.rs the scripts under a
//! real slurmctld and slurmd.
//!
//! Slurm drains a node whose prolog or epilog exits non-zero, so neither
//! script may fail for a reason of its own: an unwritable job directory, a
//! missing sysfs or a missing job id is logged (`logger`, else stderr only)
//! and the script exits 0.
use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use collector::jobmap::JobMap;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .join("deploy/slurm")
        .join(name)
}

fn write(p: &Path, v: &str) {
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, v).expect("write");
}

/// Two GPUs (NUMA 0 and 1) and three HCAs (NUMA 0, 1, 1), plus a non-GPU
/// NVIDIA function (an audio device) that must not count as a GPU.
fn fake_sysfs(root: &Path) {
    let pci = root.join("bus/pci/devices");
    for (addr, class, numa) in [
        ("0000:18:00.0", "0x030200", "0"),
        ("0000:18:00.1", "0x040300", "0"),
        ("0000:9a:00.0", "0x030200", "1"),
    ] {
        write(&pci.join(addr).join("vendor"), "0x10de\n");
        write(&pci.join(addr).join("class"), &format!("{class}\n"));
        write(&pci.join(addr).join("numa_node"), &format!("{numa}\n"));
    }
    for (hca, numa) in [("mlx5_0", "0"), ("mlx5_1", "1"), ("mlx5_2", "1")] {
        write(
            &root
                .join("class/infiniband")
                .join(hca)
                .join("device/numa_node"),
            &format!("{numa}\n"),
        );
    }
}

fn run(name: &str, env: &[(&str, &str)], dir: &Path, sysfs: &Path) {
    let out = run_with_path(name, env, dir, sysfs, "/usr/bin:/bin");
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_with_path(name: &str, env: &[(&str, &str)], dir: &Path, sysfs: &Path, path: &str) -> Output {
    // /bin/sh by path: the child's PATH would be searched for "sh".
    Command::new("/bin/sh")
        .arg(script(name))
        .env_clear()
        .env("PATH", path)
        .env("FAULTLINE_JOB_DIR", dir)
        .env("DCGM_HPC_JOB_MAPPING_DIR", mapping_dir(dir))
        .env("FAULTLINE_SLURM_DEFAULTS", "/nonexistent")
        .env("FAULTLINE_SYSFS", sysfs)
        .envs(env.iter().copied())
        .output()
        .expect("run the script")
}

/// dcgm-exporter's mapping directory beside a job directory.
fn mapping_dir(job_dir: &Path) -> PathBuf {
    job_dir.with_file_name("hpc-job-mapping")
}

/// The files of a directory, by name, with their text (dot files too).
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), text)
        })
        .collect();
    v.sort();
    v
}

/// A directory for the front of `PATH` with a `logger` that appends its
/// arguments, one call per line, to `log`.
fn fake_logger(bin: &Path, log: &Path) {
    std::fs::create_dir_all(bin).expect("bin dir");
    let l = bin.join("logger");
    std::fs::write(
        &l,
        format!("#!/bin/sh\nprintf '%s\\n' \"$*\" >>'{}'\n", log.display()),
    )
    .expect("fake logger");
    std::fs::set_permissions(&l, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A `PATH` directory with the tools the scripts use and no `logger`.
fn tools_without_logger(bin: &Path) -> String {
    std::fs::create_dir_all(bin).expect("bin dir");
    for tool in [
        "cat", "tr", "basename", "mkdir", "chmod", "mv", "rm", "uname", "grep",
    ] {
        let src = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} not in /usr/bin or /bin"));
        let dst = bin.join(tool);
        let _ = std::fs::remove_file(&dst);
        std::os::unix::fs::symlink(src, dst).expect("symlink");
    }
    bin.display().to_string()
}

#[test]
fn prolog_writes_the_job_file_the_collector_reads_and_epilog_removes_it() {
    let _turn = tests::one_file_at_a_time(file!());
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("slurm-hooks");
    let _ = std::fs::remove_dir_all(&base);
    let sysfs = base.join("sys");
    fake_sysfs(&sysfs);
    let dir = base.join("run/faultline/jobs");

    // Job 4711 on GPU 1 (NUMA 1): HCAs mlx5_1 and mlx5_2.
    run(
        "prolog.sh",
        &[
            ("SLURM_JOB_ID", "4711"),
            ("SLURM_JOB_USER", "alice"),
            ("SLURM_JOB_GPUS", "1"),
        ],
        &dir,
        &sysfs,
    );
    // Job 4712 on GPU 0, HCAs named by the site.
    run(
        "prolog.sh",
        &[
            ("SLURM_JOB_ID", "4712"),
            ("SLURM_JOB_USER", "bob"),
            ("SLURM_JOB_GPUS", "0"),
            ("FAULTLINE_JOB_HCAS", "mlx5_0"),
        ],
        &dir,
        &sysfs,
    );
    let m = JobMap::read(&dir);
    assert_eq!(m.jobs.len(), 2, "{m:?}");
    assert_eq!(m.unreadable, 0);
    let j = m.job_of_gpu(1).expect("GPU 1's job");
    assert_eq!(
        (j.job.as_str(), j.user.as_str(), j.gpus.as_slice()),
        ("4711", "alice", &[1][..])
    );
    assert_eq!(j.hcas, ["mlx5_1", "mlx5_2"]);
    assert_eq!(m.job_of_gpu(0).map(|j| j.user.as_str()), Some("bob"));
    assert_eq!(m.job_of_hca("mlx5_0").map(|j| j.job.as_str()), Some("4712"));
    assert_eq!(m.job_of_hca("mlx5_2").map(|j| j.job.as_str()), Some("4711"));
    assert!(
        std::fs::read_dir(&dir)
            .expect("dir")
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().starts_with('.')),
        "no temporary file left"
    );

    run("epilog.sh", &[("SLURM_JOB_ID", "4711")], &dir, &sysfs);
    let m = JobMap::read(&dir);
    assert_eq!(m.jobs.len(), 1);
    assert_eq!(m.job_of_gpu(1), None, "job 4711 released GPU 1");

    // Outside Slurm (no job id) both scripts write and remove nothing, say
    // why, and succeed.
    for name in ["prolog.sh", "epilog.sh"] {
        let out = run_with_path(name, &[], &dir, &sysfs, "/nonexistent");
        assert!(out.status.success(), "{name}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("SLURM_JOB_ID not set"), "{name}: {err}");
        assert_eq!(JobMap::read(&dir).jobs.len(), 1, "{name}");
    }
}

/// A job directory that cannot be created (a path through a regular file:
/// root writes any mode, but no one makes a directory under a file) must not
/// fail the prolog, so Slurm does not drain the node; the failure goes to
/// syslog through `logger` and to stderr. The pre-fix script (`set -e`)
/// exited 1 here.
#[test]
fn prolog_with_an_unwritable_job_directory_logs_and_exits_0() {
    let _turn = tests::one_file_at_a_time(file!());
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("slurm-hooks-unwritable");
    let _ = std::fs::remove_dir_all(&base);
    let sysfs = base.join("sys");
    fake_sysfs(&sysfs);
    write(
        &base.join("run/faultline"),
        "a file where the job directory's parent belongs\n",
    );
    let dir = base.join("run/faultline/jobs");
    let log = base.join("syslog");
    fake_logger(&base.join("bin"), &log);
    let env = [
        ("SLURM_JOB_ID", "4713"),
        ("SLURM_JOB_USER", "carol"),
        ("SLURM_JOB_GPUS", "0"),
    ];

    let path = format!("{}:/usr/bin:/bin", base.join("bin").display());
    let out = run_with_path("prolog.sh", &env, &dir, &sysfs, &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let logged = std::fs::read_to_string(&log).expect("the prolog called logger");
    let lines: Vec<&str> = logged.lines().collect();
    assert_eq!(lines.len(), 2, "one log line for each output: {logged}");
    let want = format!("cannot create job directory {}", dir.display());
    assert!(
        lines[0].starts_with("-t faultline-prolog -p daemon.warning ")
            && lines[0].contains(&want)
            && lines[0].contains("job 4713 runs without faultline's job labels"),
        "{logged}"
    );
    let want_map = format!(
        "cannot create dcgm-exporter job mapping directory {}",
        mapping_dir(&dir).display()
    );
    assert!(
        lines[1].starts_with("-t faultline-prolog -p daemon.warning ")
            && lines[1].contains(&want_map)
            && lines[1].contains("job 4713's GPUs carry no hpc_job in dcgm-exporter"),
        "{logged}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&want) && err.contains(&want_map), "{out:?}");
    assert!(!dir.exists());

    // The epilog of that job: nothing to remove, nothing fails.
    let out = run_with_path("epilog.sh", &env[..1], &dir, &sysfs, &path);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // No logger on the node: stderr only, still 0.
    let _ = std::fs::remove_file(&log);
    let tools = tools_without_logger(&base.join("tools"));
    let out = run_with_path("prolog.sh", &env, &dir, &sysfs, &tools);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("faultline-prolog: ") && err.contains(&want),
        "{err}"
    );
    assert!(!log.exists());
}

/// No sysfs at all (a container, a wrong FAULTLINE_SYSFS) and GPU ids that
/// are UUIDs: the job file is still written, with no HCAs, and a newline in
/// a value cannot add a key to it.
#[test]
fn prolog_without_sysfs_writes_the_job_without_hcas() {
    let _turn = tests::one_file_at_a_time(file!());
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("slurm-hooks-nosysfs");
    let _ = std::fs::remove_dir_all(&base);
    let dir = base.join("jobs");
    run(
        "prolog.sh",
        &[
            ("SLURM_JOB_ID", "4714"),
            ("SLURM_JOB_USER", "dave\ngpus=7"),
            ("CUDA_VISIBLE_DEVICES", "GPU-0a1b,2"),
        ],
        &dir,
        &base.join("no-sys"),
    );
    let text = std::fs::read_to_string(dir.join("4714")).expect("job file");
    assert_eq!(text, "job=4714\nuser=davegpus=7\ngpus=GPU-0a1b,2\nhcas=\n");
    let m = JobMap::read(&dir);
    let j = m.job_of_gpu(2).expect("GPU 2's job");
    assert_eq!((j.job.as_str(), j.hcas.len()), ("4714", 0));
    assert_eq!(m.job_of_gpu(7), None);
}

/// dcgm-exporter's `--hpc-job-mapping-dir` (NVIDIA/dcgm-exporter,
/// `internal/pkg/transformation/hpc.go`): one file per GPU index, the ids
/// of the jobs on it one per line. The prolog adds its job to its GPUs'
/// files, keeping another job's line on a shared GPU and dropping the `0`
/// placeholder other mapping tools leave; the epilog takes its line out and
/// removes a file left without a job. The collector reads the result
/// (`JobMap::read_hpc_job_mapping`). A site's defaults file names the
/// directory where the environment does not.
#[test]
fn prolog_and_epilog_keep_dcgm_exporters_job_mapping_files() {
    let _turn = tests::one_file_at_a_time(file!());
    let base = Path::new(env!("CARGO_TARGET_TMPDIR")).join("slurm-hooks-dcgm");
    let _ = std::fs::remove_dir_all(&base);
    let sysfs = base.join("sys");
    fake_sysfs(&sysfs);
    let dir = base.join("jobs");
    let map = mapping_dir(&dir);
    write(&map.join("1"), "0\n");
    write(&map.join("2"), "900\n");
    run(
        "prolog.sh",
        &[("SLURM_JOB_ID", "4711"), ("SLURM_JOB_GPUS", "1,2")],
        &dir,
        &sysfs,
    );
    // UUIDs have no file in dcgm-exporter's scheme: only index 3 is mapped,
    // and the UUID is logged.
    let out = run_with_path(
        "prolog.sh",
        &[
            ("SLURM_JOB_ID", "4712"),
            ("CUDA_VISIBLE_DEVICES", "GPU-0a1b,3"),
        ],
        &dir,
        &sysfs,
        "/usr/bin:/bin",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("GPU 'GPU-0a1b' of job 4712 is not an index"),
        "{out:?}"
    );
    // Run twice, as a requeued job's prolog is: still one line.
    run(
        "prolog.sh",
        &[("SLURM_JOB_ID", "4711"), ("SLURM_JOB_GPUS", "1,2")],
        &dir,
        &sysfs,
    );
    let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_string(), (*b).to_string()))
            .collect()
    };
    assert_eq!(
        files(&map),
        s(&[
            (".lock", ""),
            ("1", "4711\n"),
            ("2", "900\n4711\n"),
            ("3", "4712\n")
        ])
    );
    let mut m = JobMap::default();
    m.read_hpc_job_mapping(&map);
    let job = |m: &JobMap, g| m.job_of_gpu(g).map(|j| j.job.clone());
    assert_eq!(
        [job(&m, 0), job(&m, 1), job(&m, 2), job(&m, 3)],
        [None, Some("4711".into()), Some("4711".into()), Some("4712".into())],
        "a shared GPU's series name one job: the first in reading order (GPU 1's file made 4711 first)"
    );
    assert!(
        m.jobs.iter().any(|j| j.job == "900" && j.gpus == [2]),
        "{m:?}"
    );

    run("epilog.sh", &[("SLURM_JOB_ID", "4711")], &dir, &sysfs);
    assert_eq!(
        files(&map),
        s(&[(".lock", ""), ("2", "900\n"), ("3", "4712\n")])
    );
    run("epilog.sh", &[("SLURM_JOB_ID", "4712")], &dir, &sysfs);
    assert_eq!(files(&map), s(&[(".lock", ""), ("2", "900\n")]));
    assert!(files(&dir).is_empty(), "{:?}", files(&dir));

    // The directory from /etc/default/faultline-slurm (here another file),
    // never sourced: a line that is not KEY=value is ignored; the last line
    // counts without a newline.
    let other = base.join("site-mapping");
    let defaults = base.join("faultline-slurm");
    write(
        &defaults,
        &format!(
            "# site defaults\n$(touch {}/pwned)\nDCGM_HPC_JOB_MAPPING_DIR=\"{}\"",
            base.display(),
            other.display()
        ),
    );
    let out = Command::new("/bin/sh")
        .arg(script("prolog.sh"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("FAULTLINE_JOB_DIR", &dir)
        .env("FAULTLINE_SLURM_DEFAULTS", &defaults)
        .env("FAULTLINE_SYSFS", &sysfs)
        .env("SLURM_JOB_ID", "4715")
        .env("SLURM_JOB_GPUS", "0")
        .output()
        .expect("prolog");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(other.join("0")).ok().as_deref(),
        Some("4715\n")
    );
    assert!(!base.join("pwned").exists());
}
