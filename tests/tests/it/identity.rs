//! Attribution from a fake /proc + cgroup tree: Slurm and Kubernetes layouts,
//! environment variables, host identity, and the bounded cache.
use std::fs;

use collector::identity::{classify_cgroup, HostIdentity, IdentityCache, Workload};

struct FakeProc(std::path::PathBuf);

impl FakeProc {
    fn new(tag: &str) -> Self {
        let d = tests::scratch_dir(&format!("fakeproc-{tag}"));
        fs::create_dir_all(d.join("proc/sys/kernel/random")).expect("fake proc");
        fs::create_dir_all(d.join("etc")).expect("fake proc");
        Self(d)
    }
    fn proc(&self) -> std::path::PathBuf {
        self.0.join("proc")
    }
    fn process(&self, pid: u32, cgroup: &str, env: &[(&str, &str)]) {
        let p = self.proc().join(pid.to_string());
        fs::create_dir_all(&p).expect("fake proc");
        fs::write(p.join("cgroup"), format!("0::{cgroup}\n")).expect("fake proc");
        let mut environ = b"PATH=/usr/bin\0HOME=/root\0".to_vec();
        for (k, v) in env {
            environ.extend_from_slice(format!("{k}={v}\0").as_bytes());
        }
        fs::write(p.join("environ"), environ).expect("fake proc");
    }
}

impl Drop for FakeProc {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn slurm_job_rank_and_hcas_from_cgroup_and_environment() {
    let _turn = tests::one_file_at_a_time(file!());
    let f = FakeProc::new("t1");
    f.process(
        4242,
        "/system.slice/slurmstepd.scope/job_918273/step_0/user/task_3",
        &[
            ("SLURM_PROCID", "19"),
            ("SLURM_LOCALID", "3"),
            ("CUDA_VISIBLE_DEVICES", "3"),
            ("NCCL_IB_HCA", "=mlx5_2:1,mlx5_3:1"),
        ],
    );
    let mut c = IdentityCache::new(f.proc(), 16);
    let id = c.get(4242).expect("identity").clone();
    assert_eq!(
        id.workload,
        Workload::Slurm {
            job: "918273".into(),
            step: Some("0".into())
        }
    );
    assert_eq!(id.job().as_deref(), Some("918273"));
    assert_eq!(id.rank(), Some(19));
    assert_eq!(id.local_rank(), Some(3));
    assert_eq!(id.hcas(), ["mlx5_2", "mlx5_3"]);
    assert_eq!(
        id.env.len(),
        4,
        "only the attribution keys are kept: {:?}",
        id.env
    );
    // cgroup v1 layout
    assert_eq!(
        classify_cgroup("/slurm/uid_1000/job_77/step_batch/task_0"),
        Workload::Slurm {
            job: "77".into(),
            step: Some("batch".into())
        }
    );
}

#[test]
fn kubernetes_pod_and_container_from_cgroup() {
    let _turn = tests::one_file_at_a_time(file!());
    let f = FakeProc::new("t2");
    f.process(
        5001,
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_4a7b_8c9d_0e1f2a3b4c5d.slice/cri-containerd-9f8e7d6c5b4a39281706f5e4d3c2b1a0.scope",
        &[("RANK", "5"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "64"), ("TORCHELASTIC_RUN_ID", "llm-pretrain-7")],
    );
    let mut c = IdentityCache::new(f.proc(), 16);
    let id = c.get(5001).expect("identity").clone();
    assert_eq!(
        id.workload,
        Workload::Kubernetes {
            pod_uid: "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d".into(),
            container: Some("9f8e7d6c5b4a39281706f5e4d3c2b1a0".into())
        }
    );
    assert_eq!(
        id.job().as_deref(),
        Some("llm-pretrain-7"),
        "torchelastic run id names the job"
    );
    assert_eq!((id.rank(), id.local_rank()), (Some(5), Some(1)));
    // cgroupfs driver layout
    assert_eq!(
        classify_cgroup(
            "/kubepods/burstable/pod1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d/0123456789abcdef0123"
        ),
        Workload::Kubernetes {
            pod_uid: "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d".into(),
            container: Some("0123456789abcdef0123".into())
        }
    );
    assert_eq!(
        classify_cgroup("/system.slice/nvidia-persistenced.service"),
        Workload::Systemd {
            unit: "nvidia-persistenced.service".into()
        }
    );
    assert_eq!(classify_cgroup("/"), Workload::Unknown);
}

#[test]
fn cache_is_bounded_refreshes_on_exec_and_forgets_gone_processes() {
    let _turn = tests::one_file_at_a_time(file!());
    let f = FakeProc::new("t3");
    for pid in 1..=5 {
        f.process(
            pid,
            &format!("/system.slice/slurmstepd.scope/job_{pid}/step_0"),
            &[],
        );
    }
    let mut c = IdentityCache::new(f.proc(), 3);
    for pid in 1..=5 {
        assert!(c.get(pid).is_some());
    }
    assert_eq!(c.len(), 3);
    assert_eq!(c.evictions, 2);
    // pid 5 execs into another job: stale until invalidated.
    f.process(
        5,
        "/system.slice/slurmstepd.scope/job_99/step_1",
        &[("SLURM_PROCID", "2")],
    );
    assert_eq!(c.get(5).unwrap().job().as_deref(), Some("5"));
    c.invalidate(5);
    let id = c.get(5).unwrap();
    assert_eq!((id.job().as_deref(), id.rank()), (Some("99"), Some(2)));
    assert!(c.get(12345).is_none(), "no such process");
}

#[test]
fn host_identity() {
    let _turn = tests::one_file_at_a_time(file!());
    let f = FakeProc::new("t4");
    fs::write(f.proc().join("sys/kernel/hostname"), "n017\n").unwrap();
    fs::write(f.proc().join("sys/kernel/random/boot_id"), "2f1c-boot\n").unwrap();
    fs::write(f.0.join("etc/machine-id"), "abcdef0123456789\n").unwrap();
    let h = HostIdentity::read(&f.proc(), &f.0.join("etc"));
    assert_eq!(
        h,
        HostIdentity {
            hostname: "n017".into(),
            machine_id: "abcdef0123456789".into(),
            boot_id: "2f1c-boot".into()
        }
    );
}
