//! `deploy/slurm/prolog.sh` and `epilog.sh` run as Slurm runs them (root,
//! `SLURM_JOB_*` in the environment) against a fake sysfs: the prolog writes
//! the job file the collector reads (`collector::jobmap`, the GPU series'
//! `hpc_job`, `faultline_job_hca_info`), with the HCAs on the NUMA nodes of
//! the job's GPUs; the epilog removes it. tests/tests/deploy_prometheus.rs
//! shows a running collector labelling GPU series from such a file.
use std::{
    path::{Path, PathBuf},
    process::Command,
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
    let out = Command::new("sh")
        .arg(script(name))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("FAULTLINE_JOB_DIR", dir)
        .env("FAULTLINE_SYSFS", sysfs)
        .envs(env.iter().copied())
        .output()
        .expect("run the script");
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn prolog_writes_the_job_file_the_collector_reads_and_epilog_removes_it() {
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

    // Outside Slurm the prolog refuses (no job id), and writes nothing.
    let out = Command::new("sh")
        .arg(script("prolog.sh"))
        .env_clear()
        .env("FAULTLINE_JOB_DIR", &dir)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert_eq!(JobMap::read(&dir).jobs.len(), 1);
}
