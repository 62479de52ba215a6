//! NCCL and CUDA probes where real jobs run: ranks whose `libnccl.so.2`
//! and `libcuda.so.1` (the stand-ins) exist only inside their own mount
//! namespace, at a path the host does not have.
//!
//! * podman (runc), an image imported from a root filesystem: a
//!   communicator whose containers were started (libraries mapped) before
//!   the probes loaded, one started after from the same image (one layer:
//!   one file, attached once), and one from an image whose new layer
//!   replaces the library (a new inode: attached as a second library); once
//!   the first image's containers exit, its library is detached.
//! * `unshare --mount` with a private tmpfs per rank (as Enroot/Pyxis runs a
//!   Slurm task): the same checks without a container runtime.
//!
//! Counts and bytes per op are exact, every rank computes one communicator
//! id, and each rank's GPU is the device its thread made current through
//! the CUDA stand-in inside the namespace (so the CUDA probes fire there).
use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc::Receiver,
    time::Duration,
};

use collector::{
    nccl, nccl_lib,
    probes::{ProbeOptions, Probes},
};

/// Where the image keeps its libraries (no such directory on the host).
const IN_IMAGE: &str = "/opt/faultline-job-image/lib";
const ITERS: u64 = 4;

fn opts() -> ProbeOptions {
    ProbeOptions {
        exec: false,
        block: false,
        verbs: false,
        cuda: true,
        cuda_search: collector::cuda_lib::Search {
            configured: None,
            ld_cache: false,
            proc_root: Some(PathBuf::from("/proc")),
            usual: vec![],
        },
        nccl: true,
        nccl_search: search(),
        ..ProbeOptions::default()
    }
}

fn search() -> nccl_lib::Search {
    nccl_lib::Search {
        configured: vec![],
        ld_cache: false,
        proc_root: Some(PathBuf::from("/proc")),
    }
}

/// A root filesystem: the loader, libc, `nccl_workload`, and the stand-in
/// libraries under [`IN_IMAGE`].
fn rootfs(dir: &Path) -> PathBuf {
    let r = dir.join("rootfs");
    let copy = |from: &Path, to: &str| {
        let to = r.join(to.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
        std::fs::copy(from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    };
    copy(
        Path::new("/lib64/ld-linux-x86-64.so.2"),
        "/lib64/ld-linux-x86-64.so.2",
    );
    copy(
        Path::new("/lib/x86_64-linux-gnu/libc.so.6"),
        "/lib/x86_64-linux-gnu/libc.so.6",
    );
    copy(&tests::nccl_workload(), "/usr/bin/nccl_workload");
    copy(&tests::fake_nccl(), &format!("{IN_IMAGE}/libnccl.so.2"));
    copy(&tests::fake_libcuda(), &format!("{IN_IMAGE}/libcuda.so.1"));
    std::fs::create_dir_all(r.join("shm")).expect("mkdir");
    assert!(
        !Path::new(IN_IMAGE).join("libnccl.so.2").exists(),
        "{IN_IMAGE}/libnccl.so.2 must not exist on the host"
    );
    r
}

/// One rank: the process, its host pid, its stdout lines.
struct Rank {
    child: Child,
    pid: u32,
    rank: i32,
    device: i32,
    lines: Receiver<String>,
    /// `podman rm -f` on drop.
    container: Option<String>,
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(c) = &self.container {
            let _ = Command::new("podman")
                .args(["rm", "-f", "-t", "0", c])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn line(r: &Rank, what: &str) -> String {
    r.lines
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("rank {}: no {what} line: {e}", r.rank))
}

/// The workload's arguments for rank `r` of `tag` (paths as inside).
fn workload_args(shm: &str, tag: &str, nranks: i32, r: i32, device: i32) -> Vec<String> {
    vec![
        format!("{IN_IMAGE}/libnccl.so.2"),
        format!("{IN_IMAGE}/libcuda.so.1"),
        format!("{shm}/{tag}.id"),
        nranks.to_string(),
        r.to_string(),
        device.to_string(),
        ITERS.to_string(),
        "steps".into(),
    ]
}

/// Starts rank `r` of `tag` in a podman container of `image`; returns once
/// it has mapped its libraries (it waits for `go-<tag>` in the shared dir).
fn podman_rank(image: &str, shared: &Path, tag: &str, nranks: i32, r: i32, device: i32) -> Rank {
    let name = format!("faultline-nccl-{}-{tag}{r}", std::process::id());
    let mut child = Command::new("podman")
        .args(["--runtime", "runc", "run", "--rm", "-i", "--name", &name])
        .args(["--network=none", "--security-opt", "label=disable"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
        ])
        .arg("-v")
        .arg(format!("{}:/shm", shared.display()))
        .args(["-e", "FAKE_NCCL_SHM_DIR=/shm"])
        .args(["-e", &format!("NCCL_WORKLOAD_GO_FILE=/shm/go-{tag}")])
        // What Pyxis passes a Slurm task's container: its job and rank.
        .args([
            "-e",
            "SLURM_JOB_ID=4242",
            "-e",
            &format!("SLURM_PROCID={r}"),
        ])
        .arg(image)
        .arg("/usr/bin/nccl_workload")
        .args(workload_args("/shm", tag, nranks, r, device))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("podman run");
    let lines = tests::lines_of(&mut child);
    let mut rank = Rank {
        child,
        pid: 0,
        rank: r,
        device,
        lines,
        container: Some(name.clone()),
    };
    assert_eq!(line(&rank, "mapped"), "mapped");
    let o = Command::new("podman")
        .args(["inspect", "-f", "{{.State.Pid}}", &name])
        .output()
        .expect("podman inspect");
    rank.pid = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("container pid");
    rank
}

/// Starts rank `r` of `tag` under `unshare --mount` with a private tmpfs at
/// [`IN_IMAGE`] holding the libraries (copied in from `rootfs`).
fn unshare_rank(rootfs: &Path, shared: &Path, tag: &str, nranks: i32, r: i32, device: i32) -> Rank {
    let lib = rootfs.join(IN_IMAGE.trim_start_matches('/'));
    // The mount point exists on the host (empty); the tmpfs only inside.
    let script = format!(
        "mkdir -p {IN_IMAGE} && mount -t tmpfs -o size=16m faultline-job {IN_IMAGE} && \
         cp {lib}/libnccl.so.2 {lib}/libcuda.so.1 {IN_IMAGE}/ && exec {w} \"$@\"",
        lib = lib.display(),
        w = tests::nccl_workload().display()
    );
    let mut child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "rank",
        ])
        .args(workload_args(
            &shared.display().to_string(),
            tag,
            nranks,
            r,
            device,
        ))
        .env("FAKE_NCCL_SHM_DIR", shared)
        .env("NCCL_WORKLOAD_GO_FILE", shared.join(format!("go-{tag}")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let lines = tests::lines_of(&mut child);
    let rank = Rank {
        pid: child.id(),
        child,
        rank: r,
        device,
        lines,
        container: None,
    };
    assert_eq!(line(&rank, "mapped"), "mapped");
    rank
}

/// Lets `tag`'s ranks run their steps; waits for each to be ready.
fn go(shared: &Path, tag: &str, ranks: &[Rank]) {
    std::fs::write(shared.join(format!("go-{tag}")), b"").expect("go file");
    for r in ranks {
        let l = line(r, "ready");
        assert!(l.starts_with("ready pid="), "rank {}: {l}", r.rank);
    }
}

fn finish(ranks: Vec<Rank>) {
    let mut ranks = ranks;
    for r in &mut ranks {
        let _ = r.child.stdin.as_mut().expect("stdin").write_all(b"\n");
    }
    for r in &mut ranks {
        let st = r.child.wait().expect("wait");
        assert!(st.success(), "rank {} exited {st}", r.rank);
    }
}

/// Each rank's world communicator: counts per op exactly, one id, its GPU.
fn check_counts(probes: &Probes, ranks: &[Rank], tag: &str) -> String {
    let maps = probes.nccl_maps().expect("maps");
    let all = nccl::ranks(&maps, "host");
    let mut ids = Vec::new();
    for r in ranks {
        let mine: Vec<_> = all
            .values()
            .filter(|x| x.pid == r.pid && x.init.starts_with("ncclCommInitRank"))
            .collect();
        assert_eq!(mine.len(), 1, "{tag} rank {}: {all:?}", r.rank);
        let m = mine[0];
        assert_eq!(
            (m.nranks, m.rank, m.device),
            (ranks.len() as i32, r.rank, r.device),
            "{tag} rank {}: size, rank and the GPU its CUDA context names (the CUDA probes \
             saw cuCtxSetCurrent in the namespace's libcuda)",
            r.rank
        );
        let want: BTreeMap<&str, (u64, u64)> = [
            ("AllReduce", (ITERS, ITERS * 1024 * 4)),
            ("AllGather", (ITERS, ITERS * 256 * 2)),
            ("ReduceScatter", (ITERS, ITERS * 128 * 8)),
            ("Broadcast", (2 * ITERS, ITERS * (300 + 100 * 4))),
            ("Reduce", (ITERS, ITERS * 64 * 8)),
            ("AlltoAll", (ITERS, ITERS * 32 * 4)),
            ("Send", (ITERS, ITERS * 10 * 2)),
            ("Recv", (ITERS, ITERS * 10 * 2)),
        ]
        .into_iter()
        .collect();
        let got: BTreeMap<&str, (u64, u64)> = m
            .ops
            .iter()
            .filter(|(k, _)| want.contains_key(*k))
            .map(|(k, v)| (*k, *v))
            .collect();
        assert_eq!(got, want, "{tag} rank {}", r.rank);
        ids.push(m.comm.clone());
    }
    assert!(
        ids.iter().all(|i| i == &ids[0] && i.len() == 16),
        "{tag}: {ids:?}"
    );
    ids.swap_remove(0)
}

/// The attached NCCL libraries of this test's images (tests running beside
/// it may map the host's stand-in).
fn mine(probes: &Probes) -> Vec<String> {
    only_mine(&probes.nccl_libraries_shown())
}

fn only_mine(v: &[String]) -> Vec<String> {
    v.iter().filter(|s| s.contains(IN_IMAGE)).cloned().collect()
}

fn podman_works(image: &str) -> bool {
    Command::new("podman")
        .args(["--runtime", "runc", "run", "--rm", "--network=none"])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=4096:4096",
        ])
        .args([image, "/usr/bin/nccl_workload"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stderr).contains("usage"))
}

#[test]
fn ranks_in_podman_containers_are_counted_through_their_own_root() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_containers") {
        return;
    }
    let dir = tests::scratch_dir("nccl-podman");
    let shared = dir.join("shm");
    std::fs::create_dir_all(&shared).expect("shm");
    let root = rootfs(&dir);
    let image = format!("localhost/faultline-test/nccl-job:{}", std::process::id());
    let image2 = format!("{image}-relayered");
    let tar = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -cf - . | podman import - {image}",
            root.display()
        ))
        .output()
        .expect("podman import");
    if !tar.status.success() || !podman_works(&image) {
        assert!(
            !tests::in_ci(),
            "podman (runc) must run containers in CI: {}",
            String::from_utf8_lossy(&tar.stderr)
        );
        eprintln!("skipping: podman cannot run containers here");
        return;
    }
    // The second image: the first plus a layer that replaces the library.
    std::fs::write(
        dir.join("Containerfile"),
        format!("FROM {image}\nCOPY libnccl.so.2 {IN_IMAGE}/libnccl.so.2\n"),
    )
    .expect("Containerfile");
    std::fs::copy(tests::fake_nccl(), dir.join("libnccl.so.2")).expect("copy");
    let built = Command::new("podman")
        .args([
            "build",
            "--pull=never",
            "--runtime",
            "runc",
            "-q",
            "-t",
            &image2,
        ])
        .arg("-f")
        .arg(dir.join("Containerfile"))
        .arg(&dir)
        .output()
        .expect("podman build");
    assert!(
        built.status.success(),
        "podman build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    tests::runtime().block_on(async {
        // Started before the collector: its libraries are mapped.
        let a: Vec<Rank> = (0..2)
            .map(|r| podman_rank(&image, &shared, "a", 2, r, r))
            .collect();
        let mut probes = Probes::load(&opts()).expect("load probes");
        let shown = mine(&probes);
        assert_eq!(shown.len(), 1, "one image layer, one library: {shown:?}");
        assert!(
            shown[0].starts_with(&format!("{IN_IMAGE}/libnccl.so.2 in pid ")),
            "{shown:?}"
        );
        assert!(
            probes.cuda_library().is_some(),
            "the CUDA stand-in inside the container: {:?}",
            probes.status()
        );
        // The first window's scan (tests beside this one may map the host's
        // stand-in, which start-up may have picked first).
        let mut scan =
            collector::proc_libs::LibScan::new("/proc", vec![collector::cuda_lib::FAMILY]);
        probes.cuda_sync(&scan.scan()[0], Path::new("/proc"));
        go(&shared, "a", &a);
        let id_a = check_counts(&probes, &a, "a");
        // The job identity of a containerised rank: from its environment,
        // read through the host's /proc.
        let mut ids = collector::identity::IdentityCache::new("/proc", 64);
        for r in &a {
            let i = ids.get(r.pid).expect("identity");
            assert_eq!(
                (i.job(), i.rank()),
                (Some("4242".into()), Some(r.rank as u32))
            );
        }

        // Started after, from the same image: the same file, attached once.
        let b: Vec<Rank> = (0..2)
            .map(|r| podman_rank(&image, &shared, "b", 2, r, 2 + r))
            .collect();
        let s = probes.nccl_sync(&nccl_lib::discover(&search()).expect("found"));
        assert!(
            only_mine(&s.attached).is_empty() && only_mine(&s.detached).is_empty(),
            "{s:?}"
        );
        go(&shared, "b", &b);
        let id_b = check_counts(&probes, &b, "b");
        assert_ne!(id_a, id_b);

        // A new layer replaces the library: a new inode, a second library.
        let c: Vec<Rank> = (0..2)
            .map(|r| podman_rank(&image2, &shared, "c", 2, r, 4 + r))
            .collect();
        let s = probes.nccl_sync(&nccl_lib::discover(&search()).expect("found"));
        assert_eq!(only_mine(&s.attached).len(), 1, "{s:?}");
        assert_eq!(mine(&probes).len(), 2);
        go(&shared, "c", &c);
        check_counts(&probes, &c, "c");

        // The first image's containers exit: its library is detached.
        finish(a);
        finish(b);
        let s = probes.nccl_sync(&nccl_lib::discover(&search()).expect("found"));
        assert_eq!(only_mine(&s.detached).len(), 1, "{s:?}");
        assert_eq!(mine(&probes).len(), 1);
        finish(c);
    });
    for i in [&image2, &image] {
        let _ = Command::new("podman")
            .args(["rmi", "-f", i])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_in_private_mount_namespaces_are_counted_and_detached_after() {
    let _turn = tests::one_file_at_a_time(file!());
    let _k = tests::kernel_lock();
    if !tests::require_bpf("nccl_containers") {
        return;
    }
    let dir = tests::scratch_dir("nccl-unshare");
    let shared = dir.join("shm");
    std::fs::create_dir_all(&shared).expect("shm");
    let root = rootfs(&dir);
    tests::runtime().block_on(async {
        // Each rank in a mount namespace of its own (a task of an Enroot
        // job): each tmpfs is a file of its own.
        let a: Vec<Rank> = (0..2)
            .map(|r| unshare_rank(&root, &shared, "a", 2, r, r))
            .collect();
        let mut probes = Probes::load(&opts()).expect("load probes");
        assert_eq!(
            mine(&probes).len(),
            2,
            "{:?}",
            probes.nccl_libraries_shown()
        );
        assert!(probes.cuda_library().is_some(), "{:?}", probes.status());
        // The collector's first scan (its first window): the other
        // namespace's CUDA stand-in, a file of its own, gets the probes too.
        let mut scan = collector::proc_libs::LibScan::new(
            "/proc",
            vec![nccl_lib::FAMILY, collector::cuda_lib::FAMILY],
        );
        let c = probes.cuda_sync(&scan.scan()[1], Path::new("/proc"));
        assert_eq!(c.attached.len(), 1, "{c:?}");
        go(&shared, "a", &a);
        check_counts(&probes, &a, "a");
        // Started after the probes loaded: found by the rescan, and the
        // CUDA stand-in of its namespace gets the CUDA probes.
        let b: Vec<Rank> = (0..2)
            .map(|r| unshare_rank(&root, &shared, "b", 2, r, 2 + r))
            .collect();
        let found = scan.scan();
        let libs =
            nccl_lib::discover_with(&search(), Some(found[0].clone()), Some(Path::new("/proc")))
                .expect("found");
        let s = probes.nccl_sync(&libs);
        assert_eq!(only_mine(&s.attached).len(), 2, "{s:?}");
        let c = probes.cuda_sync(&found[1], Path::new("/proc"));
        assert_eq!(
            c.attached.len(),
            2,
            "the two new namespaces' CUDA stand-ins: {c:?}"
        );
        go(&shared, "b", &b);
        check_counts(&probes, &b, "b");
        finish(a);
        finish(b);
        let found = scan.scan();
        let libs =
            nccl_lib::discover_with(&search(), Some(found[0].clone()), Some(Path::new("/proc")))
                .unwrap_or_default();
        let s = probes.nccl_sync(&libs);
        assert_eq!(
            only_mine(&s.detached).len(),
            4,
            "no process maps them: {s:?}"
        );
        assert!(mine(&probes).is_empty());
        let c = probes.cuda_sync(&found[1], Path::new("/proc"));
        assert_eq!(c.detached.len(), 3, "all but the first library: {c:?}");
    });
    let _ = std::fs::remove_dir_all(&dir);
}
